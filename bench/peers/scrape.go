package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// samples is one scrape of a Prometheus text endpoint: every sample's
// value by its series (name{labels} as written).
type samples map[string]float64

// scrape reads the /metrics endpoint of the admin address admin.
func scrape(ctx context.Context, admin string) (samples, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: %s", admin, resp.Status)
	}
	return parseSamples(resp.Body)
}

// parseSamples reads the Prometheus text format: comments are skipped, a
// sample is its series, a space and its value.
func parseSamples(r io.Reader) (samples, error) {
	s := samples{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("metrics: no value in %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: %q: %w", line, err)
		}
		s[line[:i]] = v
	}
	return s, sc.Err()
}

// sum is the sum of the series named name (any labels) whose labels
// contain every one of with (e.g. `client="processor"`).
func (s samples) sum(name string, with ...string) float64 {
	var t float64
	for k, v := range s {
		n, labels, _ := strings.Cut(k, "{")
		if n != name {
			continue
		}
		ok := true
		for _, w := range with {
			ok = ok && strings.Contains(labels, w)
		}
		if ok {
			t += v
		}
	}
	return t
}

// quantile is the q-quantile of the histogram name over the window from
// s0 to s (bucket counts' differences), the upper bound of the bucket it
// falls in; NaN with no observations.
func (s samples) quantile(s0 samples, name string, q float64) float64 {
	type bucket struct{ le, n float64 }
	var bs []bucket
	for k, v := range s {
		n, labels, _ := strings.Cut(k, "{")
		if n != name+"_bucket" {
			continue
		}
		_, le, ok := strings.Cut(labels, `le="`)
		if !ok {
			continue
		}
		le, _, _ = strings.Cut(le, `"`)
		b, err := strconv.ParseFloat(le, 64)
		if err != nil {
			continue
		}
		bs = append(bs, bucket{b, v - s0[k]})
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	if len(bs) == 0 || bs[len(bs)-1].n == 0 {
		return math.NaN()
	}
	total := bs[len(bs)-1].n
	for _, b := range bs {
		if b.n >= q*total {
			return b.le
		}
	}
	return math.Inf(1)
}

// pipelineText says what the processor did over the window from s0 to s1
// of elapsed seconds: polls and records per poll, the write-behind's flushes
// and rows per flush, Kafka requests per second of each client, and the
// produce-to-decision p50 and p99 (the upper bounds of their histogram
// buckets).
func pipelineText(s0, s1 samples, elapsed float64) string {
	d := func(name string, with ...string) float64 { return s1.sum(name, with...) - s0.sum(name, with...) }
	polls, recs := d("dpcs_processor_batches_total"), d("dpcs_processor_records_total")
	flushes, rows := d("dpcs_writebehind_flush_rows_count"), d("dpcs_writebehind_flush_rows_sum")
	per := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	var reqs []string
	for _, c := range []string{"processor", "write-behind", "notifier"} {
		n := d("dpcs_kafka_request_duration_e2e_seconds_count", `client="`+c+`"`)
		reqs = append(reqs, fmt.Sprintf("%s %.0f", c, n/elapsed))
	}
	return fmt.Sprintf("polls %.0f/s, %.1f records each; write-behind flushes %.0f/s, %.1f rows each; Kafka requests/s: %s; produce→decision p50 ≤ %s, p99 ≤ %s",
		polls/elapsed, per(recs, polls), flushes/elapsed, per(rows, flushes), strings.Join(reqs, ", "),
		seconds(s1.quantile(s0, "dpcs_decision_latency_seconds", 0.5)), seconds(s1.quantile(s0, "dpcs_decision_latency_seconds", 0.99)))
}

// seconds writes a bucket bound in ms.
func seconds(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return strconv.FormatFloat(v*1000, 'f', 1, 64) + " ms"
}
