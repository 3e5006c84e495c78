package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/service/api/backoffice"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/kafkaops"
	"github.com/dabom/dpcs/service/store"
)

// dltKafka is an in-process Kafka with the DPCS topics (2 partitions each)
// and a client on it.
type dltKafka struct {
	c    *kfake.Cluster
	cl   *kgo.Client
	opts []kgo.Opt
	bo   *kafkaops.BackOffice
}

func newDLTKafka(t *testing.T) *dltKafka {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, envelope.Topics()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	cl, err := kgo.NewClient(append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	bo, err := kafkaops.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bo.Close)
	return &dltKafka{c: c, cl: cl, opts: opts, bo: bo}
}

// deadLetter produces a dead letter of a record read at origin/p/off.
func (k *dltKafka) deadLetter(t *testing.T, origin string, p int32, off int64, at time.Time, value []byte, reason string, extra ...kgo.RecordHeader) backoffice.DeadLetterRecord {
	t.Helper()
	src := &kgo.Record{Topic: origin, Partition: p, Offset: off, Key: []byte(fmt.Sprint("key-", off)), Value: value,
		Headers: []kgo.RecordHeader{{Key: kafkarecord.HeaderEventType, Value: []byte("DATA_USAGE")}}}
	r := kafkarecord.DeadLetter(src, envelope.DLT(origin), reason, extra...)
	r.Partition, r.Timestamp = p, at
	res, err := k.cl.ProduceSync(context.Background(), r).First()
	if err != nil {
		t.Fatal(err)
	}
	return backoffice.DeadLetterRecord{Topic: res.Topic, Partition: res.Partition, Offset: res.Offset}
}

// TestDeadLetterRoutes: the dead-letter browser lists DLT records newest
// first with their origin, reason and payload, pages through them, and
// replays selected ones to their origin topic exactly once.
func TestDeadLetterRoutes(t *testing.T) {
	k := newDLTKafka(t)
	f := newAPIFixture(t, func(c *Config) { c.DeadLetters = k.bo })
	admin := f.token(adminID)
	ctx := context.Background()

	t0 := time.Date(2026, 2, 10, 3, 0, 0, 0, time.UTC)
	usage := envelope.TopicUsageEvents
	var recs []backoffice.DeadLetterRecord // oldest first
	for i := range 5 {
		recs = append(recs, k.deadLetter(t, usage, int32(i%2), int64(100+i), t0.Add(time.Duration(i)*time.Minute),
			fmt.Appendf(nil, `{"eventId":"e%d"}`, i), fmt.Sprint("bad event ", i)))
	}
	big := bytes.Repeat([]byte("x"), backoffice.MaxDeadLetterPayload+10)
	recs = append(recs, k.deadLetter(t, envelope.TopicNotificationEvents, 1, 7, t0.Add(10*time.Minute), []byte{0xff, 0xfe}, "channel webhook: 5 attempts failed",
		kgo.RecordHeader{Key: notify.HeaderDLTChannel, Value: []byte("webhook")}))
	recs = append(recs, k.deadLetter(t, usage, 0, 300, t0.Add(11*time.Minute), big, "too big"))

	var all backoffice.DeadLetterList
	f.call(http.MethodGet, "/admin/dead-letters", admin, nil, http.StatusOK, &all)
	if len(all.Records) != 7 || all.NextBefore != "" {
		t.Fatalf("all dead letters: %d records, next %q", len(all.Records), all.NextBefore)
	}
	if got := all.Records[0]; got.Offset != recs[6].Offset || !got.Truncated || got.PayloadBytes != len(big) || got.PayloadEncoding != "text" ||
		len(got.Payload) != backoffice.MaxDeadLetterPayload {
		t.Errorf("the big record: %+v", got)
	}
	if got := all.Records[1]; got.Topic != "notification-events.DLT" || got.Channel != "webhook" || got.PayloadEncoding != "base64" || got.Payload != "//4=" {
		t.Errorf("the notification record: %+v", got)
	}
	want := backoffice.DeadLetterView{Topic: "usage-events.DLT", Partition: 0, Offset: recs[4].Offset, Time: t0.Add(4 * time.Minute), Reason: "bad event 4",
		OriginTopic: usage, OriginPartition: 0, OriginOffset: 104, EventType: "DATA_USAGE", Key: "key-104",
		Payload: `{"eventId":"e4"}`, PayloadEncoding: "json", PayloadBytes: 16}
	if d := cmp.Diff(want, all.Records[2]); d != "" {
		t.Errorf("newest usage dead letter (-want +got):\n%s", d)
	}

	// Pages of two of one topic: every record once, newest first.
	var offsets []string
	for before := ""; ; {
		var p backoffice.DeadLetterList
		f.call(http.MethodGet, "/admin/dead-letters?topic=usage-events.DLT&limit=2&before="+before, admin, nil, http.StatusOK, &p)
		for _, r := range p.Records {
			offsets = append(offsets, fmt.Sprintf("%d/%d", r.Partition, r.Offset))
		}
		if p.NextBefore == "" {
			break
		}
		if len(p.Records) != 2 || len(offsets) > 6 {
			t.Fatalf("page %+v after %v", p, offsets)
		}
		before = p.NextBefore
	}
	var wantOffsets []string
	for _, i := range []int{6, 4, 3, 2, 1, 0} {
		wantOffsets = append(wantOffsets, fmt.Sprintf("%d/%d", recs[i].Partition, recs[i].Offset))
	}
	if d := cmp.Diff(wantOffsets, offsets); d != "" {
		t.Errorf("paged usage-events.DLT (-want +got):\n%s", d)
	}

	// Replay two records (one twice in the same call), an unknown one.
	var rep backoffice.DeadLetterReplayReport
	f.call(http.MethodPost, "/admin/dead-letters/replay", admin, map[string]any{"records": []backoffice.DeadLetterRecord{
		recs[4], recs[1], recs[4], {Topic: "usage-events.DLT", Partition: 1, Offset: 999},
	}}, http.StatusOK, &rep)
	if rep.Replayed != 2 || rep.AlreadyReplayed != 1 || rep.Failed != 1 {
		t.Fatalf("replay report %+v", rep)
	}
	statuses := []string{}
	for _, r := range rep.Results {
		statuses = append(statuses, r.Status)
	}
	if d := cmp.Diff([]string{"replayed", "replayed", "already-replayed", "not-found"}, statuses); d != "" {
		t.Errorf("statuses (-want +got):\n%s", d)
	}
	if r := rep.Results[0]; r.OriginTopic != usage || r.Replayed == nil || r.Replayed.By != adminID {
		t.Errorf("first result %+v", r)
	}
	// Again in another call: nothing produced.
	f.call(http.MethodPost, "/admin/dead-letters/replay", admin, map[string]any{"records": []backoffice.DeadLetterRecord{recs[1]}}, http.StatusOK, &rep)
	if rep.AlreadyReplayed != 1 || rep.Results[0].Status != "already-replayed" || rep.Results[0].Replayed == nil {
		t.Errorf("second replay %+v", rep)
	}
	got := readTopic(t, k, usage, 2)
	slices.SortFunc(got, func(a, b *kgo.Record) int { return strings.Compare(string(a.Key), string(b.Key)) })
	for i, src := range []int{1, 4} {
		r := got[i]
		if string(r.Key) != fmt.Sprint("key-", 100+src) || string(r.Value) != fmt.Sprintf(`{"eventId":"e%d"}`, src) || r.Partition != int32(src%2) {
			t.Errorf("replayed record %d: %s = %s on partition %d", i, r.Key, r.Value, r.Partition)
		}
		var hs []string
		for _, h := range r.Headers {
			hs = append(hs, h.Key+"="+string(h.Value))
		}
		wantHs := []string{"eventType=DATA_USAGE", fmt.Sprintf("replayed-from=usage-events.DLT/%d/%d", recs[src].Partition, recs[src].Offset)}
		if d := cmp.Diff(wantHs, hs); d != "" {
			t.Errorf("headers of replayed record %d (-want +got):\n%s", i, d)
		}
	}
	es, err := f.store.AuditLog(ctx, store.AuditFilter{Action: "deadletter.replay", Limit: 10})
	if err != nil || len(es) != 2 {
		t.Errorf("audit: %d entries, %v; want 2", len(es), err)
	}
	f.call(http.MethodGet, "/admin/dead-letters?topic=usage-events.DLT", admin, nil, http.StatusOK, &all)
	replayed := 0
	for _, r := range all.Records {
		if r.Replayed != nil {
			replayed++
		}
	}
	if replayed != 2 {
		t.Errorf("%d records shown replayed, want 2", replayed)
	}

	// A record whose origin header names another topic is refused.
	odd := k.deadLetter(t, envelope.TopicPolicyUpdated, 0, 1, t0, []byte(`{}`), "x")
	k.cl.ProduceSync(ctx, &kgo.Record{Topic: "usage-events.DLT", Partition: 1, Value: []byte("{}"),
		Headers: []kgo.RecordHeader{{Key: kafkarecord.HeaderDLTTopic, Value: []byte("policy-updated")}}})
	f.call(http.MethodPost, "/admin/dead-letters/replay", admin, map[string]any{"records": []backoffice.DeadLetterRecord{
		{Topic: "usage-events.DLT", Partition: 1, Offset: recs[3].Offset + 1}, odd}}, http.StatusOK, &rep)
	if rep.Results[0].Status != "failed" || rep.Results[1].Status != "replayed" {
		t.Errorf("origin mismatch, then a policy-updated record: %+v", rep)
	}

	f.problem(http.MethodGet, "/admin/dead-letters?before=nope", admin, nil, http.StatusUnprocessableEntity, "query.before")
	f.problem(http.MethodGet, "/admin/dead-letters?topic=usage-events", admin, nil, http.StatusUnprocessableEntity, "")
	f.problem(http.MethodPost, "/admin/dead-letters/replay", admin, map[string]any{"records": []any{}}, http.StatusUnprocessableEntity, "")

	// Without a Kafka client: 503 with a clear text.
	g := newAPIFixture(t)
	p := g.problem(http.MethodGet, "/admin/dead-letters", g.token(adminID), nil, http.StatusServiceUnavailable, "")
	if !strings.Contains(p.Detail, "without a Kafka client") {
		t.Errorf("503 text %q", p.Detail)
	}
	g.problem(http.MethodPost, "/admin/dead-letters/replay", g.token(adminID), map[string]any{"records": []backoffice.DeadLetterRecord{recs[0]}}, http.StatusServiceUnavailable, "")
}

// readTopic reads every record of topic, failing unless there are n.
func readTopic(t *testing.T, k *dltKafka, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(append(k.opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("waited 10 s for %d records on %s, saw %d", n, topic, len(out))
		}
		out = append(out, fs.Records()...)
	}
	end, err := kadm.NewClient(k.cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	end.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != int64(n) {
		t.Errorf("%s holds %d records, want %d", topic, total, n)
	}
	return out
}

// TestOperationsView: rates by decision code over the window between two
// samples, from this process's registry and a scraped processor page; lag
// and DLT counts from Kafka; a failing source is named, not fatal.
func TestOperationsView(t *testing.T) {
	k := newDLTKafka(t)
	local, remote := prometheus.NewRegistry(), prometheus.NewRegistry()
	decisions := func(reg *prometheus.Registry) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dpcs_decisions_total", Help: "h"}, []string{"decision"})
		reg.MustRegister(c)
		return c
	}
	dl, dr := decisions(local), decisions(remote)
	lag := prometheus.NewGauge(prometheus.GaugeOpts{Name: "dpcs_processor_lag", Help: "h"})
	stale := prometheus.NewGauge(prometheus.GaugeOpts{Name: "dpcs_redis_state_stale", Help: "h"})
	dead := prometheus.NewCounter(prometheus.CounterOpts{Name: "dpcs_processor_dead_letters_total", Help: "h"})
	remote.MustRegister(lag, stale, dead)
	srv := httptest.NewServer(promhttp.HandlerFor(remote, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	t.Cleanup(srv.Close)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()

	f := newAPIFixture(t, func(c *Config) {
		c.KafkaStats = k.bo
		c.OperationsMetrics = []prometheus.Gatherer{local, backoffice.NewMetricsScraper(srv.URL+"/metrics", nil), backoffice.NewMetricsScraper(gone.URL, nil)}
	})
	admin := f.token(adminID)
	dl.WithLabelValues("ALLOWED").Add(1000)
	dr.WithLabelValues("ALLOWED").Add(500)
	lag.Set(7)

	var v backoffice.OperationsView
	f.call(http.MethodGet, "/admin/operations", admin, nil, http.StatusOK, &v)
	if v.WindowSeconds != 0 || len(v.DecisionsPerSecond) != 0 || v.ReportedLag == nil || *v.ReportedLag != 7 ||
		v.RedisStale == nil || *v.RedisStale || v.Kafka != "ok" {
		t.Fatalf("first view %+v", v)
	}
	wantSources := []backoffice.MetricsSource{{Source: "process 1", OK: true}, {Source: srv.URL + "/metrics", OK: true},
		{Source: gone.URL, Error: "unreachable or not a metrics page"}}
	if d := cmp.Diff(wantSources, v.Sources); d != "" {
		t.Errorf("sources (-want +got):\n%s", d)
	}

	// A minute later: 180 ALLOWED (120 here, 60 there) and 30 BLOCKED.
	dl.WithLabelValues("ALLOWED").Add(120)
	dr.WithLabelValues("ALLOWED").Add(60)
	dr.WithLabelValues("BLOCKED_DAILY_LIMIT").Add(30)
	dead.Add(6)
	stale.Set(1)
	next := f.clock().Add(time.Minute)
	f.now.Store(&next)
	f.call(http.MethodGet, "/admin/operations", admin, nil, http.StatusOK, &v)
	if v.WindowSeconds != 60 || v.TotalPerSecond != 3.5 || v.DeadLettersPerSecond != 0.1 || v.RedisStale == nil || !*v.RedisStale {
		t.Errorf("view a minute later %+v", v)
	}
	if d := cmp.Diff(map[string]float64{"ALLOWED": 3, "BLOCKED_DAILY_LIMIT": 0.5}, v.DecisionsPerSecond); d != "" {
		t.Errorf("decisions per second (-want +got):\n%s", d)
	}

	// Kafka: 5 usage events (3 on partition 0, 2 on 1); the processor group
	// committed 2 on partition 0 and nothing on 1 (all of it is lag); 3
	// dead letters.
	ctx := context.Background()
	for i := range 5 {
		k.cl.ProduceSync(ctx, &kgo.Record{Topic: envelope.TopicUsageEvents, Partition: int32(i % 2), Value: []byte("{}")})
	}
	for range 3 {
		k.deadLetter(t, envelope.TopicUsageEvents, 0, 1, time.Now(), []byte("{}"), "x")
	}
	var commit kadm.Offsets
	commit.Add(kadm.Offset{Topic: envelope.TopicUsageEvents, Partition: 0, At: 2})
	if _, err := kadm.NewClient(k.cl).CommitOffsets(ctx, judge.ProcessorGroup, commit); err != nil {
		t.Fatal(err)
	}
	f.call(http.MethodGet, "/admin/operations", admin, nil, http.StatusOK, &v)
	if v.Kafka != "ok" || v.ProcessorLag[envelope.TopicUsageEvents] != 3 || v.DeadLetters["usage-events.DLT"] != 3 ||
		v.DeadLetters["notification-events.DLT"] != 0 {
		t.Errorf("kafka figures: kafka %s, processor lag %v, dead letters %v", v.Kafka, v.ProcessorLag, v.DeadLetters)
	}
	b, _ := json.Marshal(v)
	if strings.Contains(string(b), "refused") || strings.Contains(string(b), "127.0.0.1:"+strings.Split(gone.URL, ":")[2]+" ") {
		t.Errorf("view leaks a dial error: %s", b)
	}
}
