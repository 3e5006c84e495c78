package service

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/outbox"
	"github.com/dabom/dpcs/service/recovery"
	"github.com/dabom/dpcs/writebehind"
)

// gathered is a registry's metrics by family name.
type gathered map[string]*dto.MetricFamily

func gather(t *testing.T, g prometheus.Gatherer) gathered {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := gathered{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// series returns the series of family name whose labels include want.
func (g gathered) series(name string, want map[string]string) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range g[name].GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		ok := true
		for k, v := range want {
			ok = ok && have[k] == v
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}

// value sums the counters or gauges of name with labels want.
func (g gathered) value(name string, want map[string]string) float64 {
	var v float64
	for _, m := range g.series(name, want) {
		v += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
	}
	return v
}

// count sums the observations of histogram name with labels want.
func (g gathered) count(name string, want map[string]string) uint64 {
	var n uint64
	for _, m := range g.series(name, want) {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}

func TestMetricsMove(t *testing.T) {
	reg := NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Error("NewMetrics twice on one registry: no error")
	}
	ph := m.ProcessorHooks()
	ph.OnBatch(judge.BatchInfo{Records: 3, Usage: 2, Duplicates: 1, Crossings: 1, Lag: 42, Duration: 20 * time.Millisecond,
		Decisions: map[policy.Decision]int{policy.Allowed: 2, policy.BlockedTime: 1}})
	ph.OnApply(judge.ApplyInfo{Events: 2, Duration: 3 * time.Millisecond})
	decided := time.Now()
	produced := decided.Add(-250 * time.Millisecond)
	ph.OnDecided([]*kgo.Record{{Timestamp: produced}, {Timestamp: produced}}, decided)
	ph.OnRetry(judge.RetryInfo{What: "redis apply"})
	ph.OnStale(judge.StaleInfo{Stale: true, Reason: "no state marker"})
	m.OnRecovered(recovery.Info{Families: 7, Total: 2 * time.Second})
	wb := m.WriteBehindHooks()
	wb.OnFlush(writebehind.FlushInfo{Items: 100, Attempts: 1, Duration: 5 * time.Millisecond})
	wb.OnPause(writebehind.PauseInfo{})
	nh := m.NotifierHooks()
	nh.OnNotify(notify.NotifyInfo{Kind: "CUSTOMER_BLOCKED", Outcome: notify.Delivered})
	nh.OnSend(notify.SendInfo{Channel: "webhook", Duration: time.Millisecond})
	nh.OnSend(notify.SendInfo{Channel: "webhook", Duration: time.Second, Err: errors.New("503")})
	hh := m.HubHooks()
	hh.OnPublish(notify.PublishInfo{FamilyID: 1, Delivered: 3})
	hh.OnDrop(notify.DropInfo{Reason: notify.ErrSlowSubscriber})
	rh := m.RelayHooks()
	rh.OnPublished(outbox.PublishedInfo{Lag: 30 * time.Millisecond})
	rh.OnFailed(outbox.FailedInfo{Expired: true})

	g := gather(t, reg)
	values := map[string]float64{}
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"dpcs_decisions_total", map[string]string{"decision": "ALLOWED"}},
		{"dpcs_decisions_total", map[string]string{"decision": "BLOCKED_TIME"}},
		{"dpcs_decisions_total", map[string]string{"decision": "BLOCKED_APP"}},
		{"dpcs_processor_records_total", nil},
		{"dpcs_processor_duplicates_total", nil},
		{"dpcs_threshold_crossings_total", nil},
		{"dpcs_processor_retries_total", map[string]string{"what": "redis apply"}},
		{"dpcs_processor_lag", nil},
		{"dpcs_redis_state_stale", nil},
		{"dpcs_redis_stale_pauses_total", nil},
		{"dpcs_redis_rebuild_last_families", nil},
		{"dpcs_writebehind_rows_total", nil},
		{"dpcs_writebehind_paused", nil},
		{"dpcs_notifier_notifications_total", map[string]string{"kind": "CUSTOMER_BLOCKED", "outcome": "delivered"}},
		{"dpcs_sse_deliveries_total", nil},
		{"dpcs_sse_dropped_total", map[string]string{"reason": "slow"}},
		{"dpcs_relay_published_total", nil},
		{"dpcs_relay_failures_total", map[string]string{"outcome": "expired"}},
	} {
		key := c.name
		for _, k := range slices.Sorted(maps.Keys(c.labels)) {
			key += "{" + k + "=" + c.labels[k] + "}"
		}
		values[key] = g.value(c.name, c.labels)
	}
	want := map[string]float64{
		"dpcs_decisions_total{decision=ALLOWED}": 2, "dpcs_decisions_total{decision=BLOCKED_TIME}": 1,
		"dpcs_decisions_total{decision=BLOCKED_APP}": 0, // exported before it happens
		"dpcs_processor_records_total":               3, "dpcs_processor_duplicates_total": 1, "dpcs_threshold_crossings_total": 1,
		"dpcs_processor_retries_total{what=redis apply}": 1, "dpcs_processor_lag": 42,
		"dpcs_redis_state_stale": 1, "dpcs_redis_stale_pauses_total": 1, "dpcs_redis_rebuild_last_families": 7,
		"dpcs_writebehind_rows_total": 100, "dpcs_writebehind_paused": 1,
		"dpcs_notifier_notifications_total{kind=CUSTOMER_BLOCKED}{outcome=delivered}": 1,
		"dpcs_sse_deliveries_total": 3, "dpcs_sse_dropped_total{reason=slow}": 1,
		"dpcs_relay_published_total": 1, "dpcs_relay_failures_total{outcome=expired}": 1,
	}
	if diff := cmp.Diff(want, values); diff != "" {
		t.Errorf("metric values (-want +got):\n%s", diff)
	}
	counts := map[string]uint64{
		"dpcs_decision_latency_seconds":    g.count("dpcs_decision_latency_seconds", nil),
		"dpcs_script_seconds":              g.count("dpcs_script_seconds", nil),
		"dpcs_script_events":               g.count("dpcs_script_events", nil),
		"dpcs_processor_batch_records":     g.count("dpcs_processor_batch_records", nil),
		"dpcs_processor_batch_seconds":     g.count("dpcs_processor_batch_seconds", nil),
		"dpcs_redis_rebuild_seconds":       g.count("dpcs_redis_rebuild_seconds", nil),
		"dpcs_writebehind_flush_seconds":   g.count("dpcs_writebehind_flush_seconds", nil),
		"dpcs_writebehind_flush_rows":      g.count("dpcs_writebehind_flush_rows", nil),
		"dpcs_notifier_send_seconds{ok}":   g.count("dpcs_notifier_send_seconds", map[string]string{"channel": "webhook", "result": "ok"}),
		"dpcs_notifier_send_seconds{fail}": g.count("dpcs_notifier_send_seconds", map[string]string{"channel": "webhook", "result": "error"}),
		"dpcs_relay_lag_seconds":           g.count("dpcs_relay_lag_seconds", nil),
	}
	wantCounts := map[string]uint64{
		"dpcs_decision_latency_seconds": 2, "dpcs_script_seconds": 1, "dpcs_script_events": 1,
		"dpcs_processor_batch_records": 1, "dpcs_processor_batch_seconds": 1, "dpcs_redis_rebuild_seconds": 1,
		"dpcs_writebehind_flush_seconds": 1, "dpcs_writebehind_flush_rows": 1,
		"dpcs_notifier_send_seconds{ok}": 1, "dpcs_notifier_send_seconds{fail}": 1, "dpcs_relay_lag_seconds": 1,
	}
	if diff := cmp.Diff(wantCounts, counts); diff != "" {
		t.Errorf("histogram observations (-want +got):\n%s", diff)
	}
	// The produce→decision latency is measured from the record timestamp:
	// both 250 ms observations land above 0.128 s and at most 0.512 s.
	lat := g.series("dpcs_decision_latency_seconds", nil)[0].GetHistogram()
	for _, b := range lat.GetBucket() {
		switch ub := b.GetUpperBound(); {
		case ub < 0.25 && b.GetCumulativeCount() != 0, ub >= 0.512 && b.GetCumulativeCount() != 2:
			t.Errorf("latency bucket le=%g holds %d", ub, b.GetCumulativeCount())
		}
	}
	if got := m.Decisions(); got[policy.Allowed] != 2 || got[policy.BlockedTime] != 1 {
		t.Errorf("Decisions() = %v", got)
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if g[name] == nil {
			t.Errorf("runtime metric %s missing", name)
		}
	}
	ph.OnStale(judge.StaleInfo{Reason: "no state marker", Paused: time.Second})
	wb.OnResume(writebehind.PauseInfo{})
	g = gather(t, reg)
	if v, w := g.value("dpcs_redis_state_stale", nil), g.value("dpcs_writebehind_paused", nil); v != 0 || w != 0 {
		t.Errorf("after resuming: stale %g, write-behind paused %g", v, w)
	}
}

// Every Kafka client built with KafkaHooks is measured under its own client
// label; a second live client with the same name is left out instead of
// panicking inside kgo.NewClient.
func TestKafkaHooks(t *testing.T) {
	c := testenv.KafkaOf(t, kfake.SeedTopics(1, "t"))
	reg := NewRegistry()
	if KafkaHooks(nil, "x") != nil {
		t.Error("KafkaHooks(nil) returned options")
	}
	ctx := context.Background()
	var clients []*kgo.Client
	for _, name := range []string{"a", "b", "a"} {
		cl, err := kgo.NewClient(append(KafkaHooks(reg, name), kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("t"))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		clients = append(clients, cl)
	}
	for i, cl := range clients[:2] {
		for range i + 1 {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// kprom counts a batch in a hook that may run after ProduceSync returned:
	// wait for the counts (a deadline, not a guess), then compare.
	want := map[string]float64{"a": 1, "b": 2}
	var g gathered
	var got map[string]float64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		g = gather(t, reg)
		got = map[string]float64{
			"a": g.value("dpcs_kafka_produce_records_total", map[string]string{"client": "a"}),
			"b": g.value("dpcs_kafka_produce_records_total", map[string]string{"client": "b"}),
		}
		if cmp.Equal(want, got) || time.Now().After(deadline) {
			break
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records produced by client after 10 s (-want +got):\n%s", diff)
	}
	if g.count("dpcs_kafka_request_duration_e2e_seconds", map[string]string{"client": "a"}) == 0 {
		t.Error("no request latency observed for client a")
	}
}

func TestAdminHandler(t *testing.T) {
	reg := NewRegistry()
	if _, err := NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	var notReady error
	a, err := StartAdmin("127.0.0.1:0", AdminHandler(reg, func(context.Context) error { return notReady }), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + a.Addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("healthz: %d %q", code, body)
	}
	if code, body := get("/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("readyz: %d %q", code, body)
	}
	notReady = &NotReadyError{What: "redis unreachable", Err: errors.New("dial tcp 10.0.0.1:6379: connection refused")}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || body != "not ready: redis unreachable\n" {
		t.Errorf("readyz when not ready: %d %q", code, body)
	}
	code, body := get("/metrics")
	for _, want := range []string{"# TYPE dpcs_script_seconds histogram", "dpcs_script_seconds_bucket{le=", `dpcs_decisions_total{decision="ALLOWED"} 0`, "go_goroutines"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("metrics (%d) lack %q", code, want)
		}
	}
	if code, _ := get("/nothing"); code != http.StatusNotFound {
		t.Errorf("/nothing: %d", code)
	}
}

// httptestWebhook counts webhook deliveries.
func httptestWebhook(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(srv.Close)
	return srv.URL
}
