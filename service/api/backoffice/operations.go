package backoffice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MetricsScraper is a prometheus.Gatherer reading another process's metrics
// over HTTP: a processor's admin /metrics, for the operations view of a
// server deployed apart from its processors.
type MetricsScraper struct {
	URL    string
	client *http.Client
}

var _ prometheus.Gatherer = (*MetricsScraper)(nil)

// maxScrape bounds a scraped metrics page.
const maxScrape = 8 << 20

// NewMetricsScraper returns a Gatherer of the Prometheus text page at url.
// client nil: a client with a 5 s timeout.
func NewMetricsScraper(url string, client *http.Client) *MetricsScraper {
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	return &MetricsScraper{URL: url, client: client}
}

// Gather implements prometheus.Gatherer.
func (m *MetricsScraper) Gather() ([]*dto.MetricFamily, error) {
	return m.GatherContext(context.Background())
}

// GatherContext is Gather bound to ctx.
func (m *MetricsScraper) GatherContext(ctx context.Context) ([]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("api: scrape %s: %w", m.URL, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := m.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("api: scrape %s: %w", m.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, &scrapeStatusError{status: resp.StatusCode}
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, maxScrape))
	if err != nil {
		return nil, fmt.Errorf("api: scrape %s: %w", m.URL, err)
	}
	out := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		out = append(out, f)
	}
	return out, nil
}

type scrapeStatusError struct{ status int }

func (e *scrapeStatusError) Error() string { return fmt.Sprintf("service: scrape: HTTP %d", e.status) }

// opsFigures are the metrics the operations view reads, summed over its
// sources.
type opsFigures struct {
	decisions   map[string]float64 // dpcs_decisions_total by decision
	deadLetters float64            // processor + notifier dead letters + write-behind rejects
	records     float64            // dpcs_processor_records_total
	lag         float64            // dpcs_processor_lag
	lagSeen     bool
	stale       float64 // max dpcs_redis_state_stale
	staleSeen   bool
}

func (f *opsFigures) add(fams []*dto.MetricFamily) {
	for _, fam := range fams {
		for _, m := range fam.GetMetric() {
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
			switch fam.GetName() {
			case "dpcs_decisions_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == "decision" {
						f.decisions[l.GetValue()] += v
					}
				}
			case "dpcs_processor_dead_letters_total", "dpcs_notifier_dead_letters_total", "dpcs_writebehind_rejected_total":
				f.deadLetters += v
			case "dpcs_processor_records_total":
				f.records += v
			case "dpcs_processor_lag":
				f.lag, f.lagSeen = f.lag+v, true
			case "dpcs_redis_state_stale":
				f.stale, f.staleSeen = max(f.stale, v), true
			}
		}
	}
}

type opsSample struct {
	at time.Time
	f  opsFigures
}

// opsSampler keeps the recent samples of the operations view's counters,
// so that rates are the difference of two samples over their interval.
// Each request adds one; samples older than opsKeep are dropped.
type opsSampler struct {
	mu      sync.Mutex
	samples []opsSample
}

const (
	// opsWindow is the interval rates are computed over: the sample whose
	// age is closest to it (and at least opsMinWindow) is the older one.
	opsWindow    = time.Minute
	opsMinWindow = time.Second
	opsKeep      = 2 * time.Minute
	opsMaxKept   = 256
)

// add records s and returns the sample to compute rates from (ok false when
// no earlier sample is old enough).
func (o *opsSampler) add(s opsSample) (base opsSample, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	kept := o.samples[:0]
	for _, x := range o.samples {
		if age := s.at.Sub(x.at); age <= opsKeep && age >= 0 {
			kept = append(kept, x)
		}
	}
	o.samples = kept
	best := time.Duration(-1)
	for _, x := range o.samples {
		age := s.at.Sub(x.at)
		if age < opsMinWindow {
			continue
		}
		if best < 0 || absDur(age-opsWindow) < absDur(best-opsWindow) {
			base, best, ok = x, age, true
		}
	}
	// Keep at most one sample per second: a console polling fast does not
	// crowd the older ones out.
	if n := len(o.samples); n == 0 || s.at.Sub(o.samples[n-1].at) >= opsMinWindow {
		o.samples = append(o.samples, s)
		if len(o.samples) > opsMaxKept {
			o.samples = o.samples[len(o.samples)-opsMaxKept:]
		}
	}
	return base, ok
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// increase is a counter's increase from a to b; a restarted process (b < a)
// counts from 0.
func increase(a, b float64) float64 {
	if b < a {
		return b
	}
	return b - a
}

// gatherSource reads one source, bounded by ctx when it can be.
func gatherSource(ctx context.Context, g prometheus.Gatherer) ([]*dto.MetricFamily, error) {
	if s, ok := g.(*MetricsScraper); ok {
		return s.GatherContext(ctx)
	}
	return g.Gather()
}

// sourceError is the text an operations view shows for a failed source:
// never the error's own text (addresses, dial errors).
func sourceError(err error) string {
	var se *scrapeStatusError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("answered HTTP %d", se.status)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "did not answer in time"
	}
	return "unreachable or not a metrics page"
}
