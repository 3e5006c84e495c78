package judge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"pgregory.net/rapid"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/internal/testenv/pipetest"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

const mb = 1 << 20

// harness is a pipeline (internal/testenv) for running processors.
type harness struct {
	*pipetest.Pipeline
	t *testing.T
}

func newHarness(t *testing.T) *harness { return &harness{pipetest.New(t), t} }

// produced counts the records the topics hold (their end offsets).
func (h *harness) produced(topics ...string) int64 {
	h.t.Helper()
	ends, err := kadm.NewClient(h.Prod).ListEndOffsets(h.Ctx, topics...)
	if err != nil {
		h.t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// newHarnessOn builds a harness on any Redis (keys prefixed per test).
func newHarnessOn(t *testing.T, rdb redis.UniversalClient) *harness {
	return &harness{pipetest.On(t, rdb), t}
}

// start runs a processor until the test ends (or stop is called).
func (h *harness) start(eng Engine, opts ...ProcessorOpt) (stop func()) {
	h.t.Helper()
	opts = append([]ProcessorOpt{WithClock(func() time.Time { return h.Now }),
		WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond)}, opts...)
	p, err := NewProcessor(mustState(h.t, eng), h.KafkaOpts(), opts...)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.Ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				h.t.Errorf("processor: %v", err)
			}
			p.Close(context.Background())
		})
	}
	h.t.Cleanup(stop)
	return stop
}

// Story 1 through Kafka: decisions, persist records, notifications, commits.
func TestProcessorLast10MB(t *testing.T) { storyLast10MB(newHarness(t)) }

func storyLast10MB(h *harness) {
	t := h.t
	h.Family(100, 10*mb, 1, 2, 3, 4)
	var mu sync.Mutex
	decisions := map[policy.Decision]int{}
	h.start(h.Engine, WithProcessorHooks(ProcessorHooks{OnBatch: func(b BatchInfo) {
		mu.Lock()
		defer mu.Unlock()
		for d, n := range b.Decisions {
			decisions[d] += n
		}
		if b.Lag < 0 || b.Records < b.Usage {
			t.Errorf("batch info %+v", b)
		}
	}}))
	h.Produce(
		h.Usage("evt_dad", 100, 1, 5*mb, "com.naver.news", h.Now),
		h.Usage("evt_mom", 100, 2, 3*mb, "com.kakao.talk", h.Now),
		h.Usage("evt_child1", 100, 3, 8*mb, "com.youtube.app", h.Now),
		h.Usage("evt_child2", 100, 4, 4*mb, "com.roblox.client", h.Now),
	)
	persist := pipetest.Decode[envelope.UsagePersistPayload](t, h.Collect(envelope.TopicUsagePersist, 4))
	got := map[string]string{}
	for _, p := range persist {
		got[p.Payload.OriginEventID] = fmt.Sprintf("%s %d", p.Payload.ProcessResult, p.Payload.RemainingAfter/mb)
		if p.EventID != envelope.DerivedID(envelope.PrefixPersist, p.Payload.OriginEventID, "persist") {
			t.Errorf("persist id %s not derived from %s", p.EventID, p.Payload.OriginEventID)
		}
	}
	want := map[string]string{"evt_dad": "ALLOWED 5", "evt_mom": "ALLOWED 2", "evt_child1": "BLOCKED_FAMILY_QUOTA 2", "evt_child2": "BLOCKED_FAMILY_QUOTA 2"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	// Each record carries the engine's whole result: the pool, the member's
	// day and month after the event, and the thresholds it crossed with
	// their arms (dad leaves 50 % of the pool, mom 20 %).
	wantPersist := map[string]envelope.UsagePersistPayload{
		"evt_dad": {OriginEventID: "evt_dad", CustomerID: 1, BytesUsed: 5 * mb, AppID: "com.naver.news", ProcessResult: "ALLOWED",
			RemainingAfter: 5 * mb, DailyUsedBytes: 5 * mb, MonthlyUsedBytes: 5 * mb, Crossed: []envelope.Crossing{{Percent: 50, Arm: 1}},
			Notifies: []string{"QUOTA_UPDATED"}},
		"evt_mom": {OriginEventID: "evt_mom", CustomerID: 2, BytesUsed: 3 * mb, AppID: "com.kakao.talk", ProcessResult: "ALLOWED",
			RemainingAfter: 2 * mb, DailyUsedBytes: 3 * mb, MonthlyUsedBytes: 3 * mb, Crossed: []envelope.Crossing{{Percent: 30, Arm: 1}},
			Notifies: []string{"QUOTA_UPDATED"}},
		"evt_child1": {OriginEventID: "evt_child1", CustomerID: 3, BytesUsed: 8 * mb, AppID: "com.youtube.app",
			ProcessResult: "BLOCKED_FAMILY_QUOTA", RemainingAfter: 2 * mb, Rule: policy.RulePool, Notifies: []string{"CUSTOMER_BLOCKED"}},
		"evt_child2": {OriginEventID: "evt_child2", CustomerID: 4, BytesUsed: 4 * mb, AppID: "com.roblox.client",
			ProcessResult: "BLOCKED_FAMILY_QUOTA", RemainingAfter: 2 * mb, Rule: policy.RulePool, Notifies: []string{"CUSTOMER_BLOCKED"}},
	}
	for _, p := range persist {
		w := wantPersist[p.Payload.OriginEventID]
		w.FamilyID, w.TotalBytes, w.EventTime = 100, 10*mb, h.Now
		if diff := cmp.Diff(w, p.Payload); diff != "" {
			t.Errorf("usage-persist of %s (-want +got):\n%s", p.Payload.OriginEventID, diff)
		}
	}
	// THRESHOLD_ALERT 50 and 30 as records; 2 QUOTA_UPDATED and 2
	// CUSTOMER_BLOCKED derived from the persist records, which stand for
	// them (doc/wire-format.md, "One record per decision").
	notes, err := decodeAll(h.Collect(envelope.TopicNotificationEvents, 2))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range persist {
		derived, err := envelope.PersistNotifications(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range derived {
			notes = append(notes, envelope.Event{EventID: d.EventID, EventType: d.EventType, SubType: d.SubType,
				Timestamp: d.Timestamp, Payload: d.Payload})
		}
	}
	counts := map[envelope.SubType]int{}
	var blocked []int64
	var alerts []int
	for _, n := range notes {
		counts[n.SubType]++
		switch p := n.Payload.(type) {
		case envelope.CustomerBlocked:
			blocked = append(blocked, p.CustomerID)
			if p.BlockReason != policy.RulePool || p.Decision != string(policy.BlockedFamilyQuota) {
				t.Errorf("blocked payload %+v", p)
			}
		case envelope.ThresholdAlert:
			alerts = append(alerts, p.ThresholdPercent)
			if p.Period != "2026-02" || !strings.Contains(p.Message, fmt.Sprintf("%d%%", p.ThresholdPercent)) {
				t.Errorf("alert payload %+v", p)
			}
		}
	}
	if counts[envelope.SubQuotaUpdated] != 2 || counts[envelope.SubCustomerBlocked] != 2 || counts[envelope.SubThresholdAlert] != 2 {
		t.Errorf("notification counts %v", counts)
	}
	if len(blocked) != 2 || blocked[0]+blocked[1] != 7 {
		t.Errorf("blocked members %v, want 3 and 4", blocked)
	}
	h.Settled(ProcessorGroup, envelope.TopicUsageEvents)
	// One record per decision, the crossings' alerts aside: 4 persist
	// records and the 2 alerts, nothing else.
	if n := h.produced(envelope.TopicUsagePersist, envelope.TopicNotificationEvents); n != 4+2 {
		t.Errorf("%d records produced for 4 decisions crossing 2 thresholds, want 6", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if decisions[policy.Allowed] != 2 || decisions[policy.BlockedFamilyQuota] != 2 {
		t.Errorf("hook decisions %v", decisions)
	}
}

func decodeAll(recs []*kgo.Record) ([]envelope.Event, error) {
	var out []envelope.Event
	for _, r := range recs {
		e, err := kafkarecord.Decode(r)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Story 5: the same event 3 times is deducted once; every delivery re-emits
// byte-identical downstream records (the write-behind and notifier dedupe).
func TestProcessorDuplicates(t *testing.T) { storyDuplicates(newHarness(t)) }

func storyDuplicates(h *harness) {
	t := h.t
	h.Family(100, 10*mb, 1)
	h.start(h.Engine)
	r := h.Usage("evt_550e8400-e29b-41d4-a716-446655440000", 100, 1, 3*mb, "com.youtube.app", h.Now)
	h.Produce(r, h.Usage("evt_550e8400-e29b-41d4-a716-446655440000", 100, 1, 3*mb, "com.youtube.app", h.Now))
	h.Produce(h.Usage("evt_550e8400-e29b-41d4-a716-446655440000", 100, 1, 3*mb, "com.youtube.app", h.Now))
	persist := h.Collect(envelope.TopicUsagePersist, 3)
	for _, p := range persist[1:] {
		if string(p.Value) != string(persist[0].Value) || string(p.Key) != string(persist[0].Key) {
			t.Errorf("replay emitted a different record:\n%s\n%s", p.Value, persist[0].Value)
		}
	}
	fs, err := h.Engine.Family(h.Ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if fs.Used != 3*mb {
		t.Errorf("used %d, want 3 MB once", fs.Used)
	}
}

// Bad input goes to usage-events.DLT with the reason; the partition keeps flowing.
func TestProcessorDeadLetters(t *testing.T) {
	h := newHarness(t)
	h.Family(100, 10*mb, 1)
	var dlt atomic.Int64
	h.start(h.Engine, WithProcessorHooks(ProcessorHooks{OnDeadLetter: func(string, string) { dlt.Add(1) }}))
	key := []byte("100")
	pol, _ := kafkarecord.New(envelope.TopicUsageEvents, envelope.New("pol_1", h.Now,
		envelope.PolicyUpdatedPayload{FamilyID: 100, TargetCustomerID: 1, Version: 1, Constraints: map[string]string{}}))
	h.Produce(
		&kgo.Record{Topic: envelope.TopicUsageEvents, Key: key, Value: []byte(`{not json`)},
		&kgo.Record{Topic: envelope.TopicUsageEvents, Key: key, Value: []byte(`{"eventId":"e1","eventType":"DATA_USAGE","timestamp":"2026-02-06T05:30:00Z","payload":{"familyId":100,"customerId":1,"appId":"a","bytesUsed":-5}}`)},
		h.Usage("evt_old", 100, 1, mb, "a", h.Now.Add(-24*time.Hour)),
		h.Usage("evt_future", 100, 1, mb, "a", h.Now.Add(time.Hour)),
		h.Usage("evt_huge", 100, 1, policy.MaxBytes+1, "a", h.Now),
		pol,
		h.Usage("evt_ok", 100, 1, mb, "a", h.Now),
	)
	dead := h.Collect(envelope.DLT(envelope.TopicUsageEvents), 6)
	reasons := []string{"malformed", "payload.bytesUsed", "older than the dedupe window", "in the future", "payload.bytesUsed: must be 0 to", "POLICY_UPDATED event on topic usage-events"}
	for i, r := range dead {
		reason := testenv.Header(r, HeaderDLTReason)
		if !strings.Contains(reason, reasons[i]) {
			t.Errorf("DLT record %d reason %q, want it to mention %q", i, reason, reasons[i])
		}
		if testenv.Header(r, HeaderDLTTopic) != envelope.TopicUsageEvents || testenv.Header(r, HeaderDLTOffset) == "" || string(r.Key) != "100" {
			t.Errorf("DLT record %d headers %v key %q", i, r.Headers, r.Key)
		}
	}
	persist := pipetest.Decode[envelope.UsagePersistPayload](t, h.Collect(envelope.TopicUsagePersist, 1))
	if persist[0].Payload.OriginEventID != "evt_ok" {
		t.Errorf("persisted %+v", persist[0].Payload)
	}
	if dlt.Load() != 6 {
		t.Errorf("OnDeadLetter fired %d times", dlt.Load())
	}
	h.Settled(ProcessorGroup, envelope.TopicUsageEvents)
}

// Story 2 through Kafka: a policy-updated event cutting the limit below usage
// announces CUSTOMER_BLOCKED at once; a stale one is ignored but re-announces.
func TestProcessorPolicyUpdated(t *testing.T) { storyPolicyUpdated(newHarness(t)) }

func storyPolicyUpdated(h *harness) {
	t := h.t
	h.Family(100, 100*(1<<30), 3)
	if _, err := h.Engine.Apply(h.Ctx, quota.Event{ID: "evt_prev", FamilyID: 100, CustomerID: 3, Bytes: 1200 * mb, At: h.Now}); err != nil {
		t.Fatal(err)
	}
	h.start(h.Engine)
	newV := "524288000"
	rec, err := kafkarecord.New(envelope.TopicPolicyUpdated, envelope.New("pol_cut", h.Now,
		envelope.PolicyUpdatedPayload{FamilyID: 100, TargetCustomerID: 3, PolicyKey: policy.KeyLimitMonthly, NewValue: &newV,
			ChangedBy: 1, Version: 2, Constraints: map[string]string{policy.KeyLimitMonthly: newV}}))
	if err != nil {
		t.Fatal(err)
	}
	bad, _ := kafkarecord.New(envelope.TopicPolicyUpdated, envelope.New("pol_bad", h.Now,
		envelope.PolicyUpdatedPayload{FamilyID: 100, TargetCustomerID: 3, Version: 3, Constraints: map[string]string{"NOPE": "1"}}))
	h.Produce(rec, bad)
	notes := pipetest.Decode[envelope.CustomerBlocked](t, h.Collect(envelope.TopicNotificationEvents, 1))
	p := notes[0].Payload
	if p.CustomerID != 3 || p.BlockReason != policy.KeyLimitMonthly || p.Decision != string(policy.BlockedLimitMonthly) {
		t.Errorf("CUSTOMER_BLOCKED %+v", p)
	}
	dead := h.Collect(envelope.DLT(envelope.TopicPolicyUpdated), 1)
	if !strings.Contains(testenv.Header(dead[0], HeaderDLTReason), "NOPE") {
		t.Errorf("bad policy reason %q", testenv.Header(dead[0], HeaderDLTReason))
	}
	h.Produce(h.Usage("evt_next", 100, 3, 1, "a", h.Now))
	persist := pipetest.Decode[envelope.UsagePersistPayload](t, h.Collect(envelope.TopicUsagePersist, 1))
	if persist[0].Payload.ProcessResult != string(policy.BlockedLimitMonthly) {
		t.Errorf("next event %+v", persist[0].Payload)
	}
}

// flaky fails the first n calls like an unreachable Redis.
type flaky struct {
	Engine
	n     atomic.Int64
	calls atomic.Int64
}

func (f *flaky) ApplyBatch(ctx context.Context, evs []quota.Event) ([]quota.Result, error) {
	f.calls.Add(1)
	if f.n.Add(-1) >= 0 {
		return nil, errors.New("dial tcp: connection refused")
	}
	return f.Engine.ApplyBatch(ctx, evs)
}

// Redis down: the processor pauses and retries behind the breaker, never
// judges without Redis, never drops.
func TestProcessorRedisOutage(t *testing.T) {
	h := newHarness(t)
	h.Family(100, 10*mb, 1)
	dec := &flaky{Engine: h.Engine}
	dec.n.Store(6)
	var retries atomic.Int64
	h.start(dec, WithProcessorHooks(ProcessorHooks{OnRetry: func(RetryInfo) { retries.Add(1) }}))
	h.Produce(h.Usage("evt_a", 100, 1, mb, "a", h.Now), h.Usage("evt_b", 100, 1, mb, "a", h.Now))
	persist := pipetest.Decode[envelope.UsagePersistPayload](t, h.Collect(envelope.TopicUsagePersist, 2))
	for _, p := range persist {
		if p.Payload.ProcessResult != "ALLOWED" {
			t.Errorf("%+v", p.Payload)
		}
	}
	if retries.Load() < 6 {
		t.Errorf("retries %d, want ≥ 6", retries.Load())
	}
	h.Settled(ProcessorGroup, envelope.TopicUsageEvents)
}

// crashing applies to Redis, then kills its processor before anything is
// emitted or committed: the worst moment for a crash.
type crashing struct {
	Engine
	crash func()
	once  sync.Once
}

func (c *crashing) ApplyBatch(ctx context.Context, evs []quota.Event) ([]quota.Result, error) {
	if _, err := c.Engine.ApplyBatch(ctx, evs); err != nil {
		return nil, err
	}
	c.once.Do(c.crash)
	return nil, errors.New("crashed after applying")
}

// Story 6: a processor killed after Redis judged a batch but before emitting
// and committing; its successor judges every event exactly once in effect
// and emits every record.
func TestProcessorCrashRestart(t *testing.T) { storyCrashRestart(newHarness(t)) }

func storyCrashRestart(h *harness) {
	t := h.t
	h.Family(100, 1000*mb, 1, 2)
	var recs []*kgo.Record
	for i := range 40 {
		recs = append(recs, h.Usage(fmt.Sprintf("evt_%02d", i), 100, int64(i%2+1), mb, "a", h.Now))
	}
	c := &crashing{Engine: h.Engine}
	stop := h.start(c)
	c.crash = func() { go stop() }
	h.Produce(recs...)
	// Wait until the first processor judged something and died.
	for deadline := time.Now().Add(10 * time.Second); ; {
		fs, _ := h.Engine.Family(h.Ctx, 100)
		if fs.Used > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("first processor judged nothing")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	h.start(h.Engine)
	persist := pipetest.Decode[envelope.UsagePersistPayload](t, h.Collect(envelope.TopicUsagePersist, 40))
	seen := map[string]bool{}
	for _, p := range persist {
		seen[p.Payload.OriginEventID] = true
	}
	fs, err := h.Engine.Family(h.Ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 40 || fs.Used != 40*mb {
		t.Errorf("persisted %d distinct events, used %d MB; want 40 and 40", len(seen), fs.Used/mb)
	}
	h.Settled(ProcessorGroup, envelope.TopicUsageEvents)
}

// Every option is checked by the constructor of the component it configures.
func TestOptions(t *testing.T) {
	shared := []Opt{WithMaxEventAge(0), WithMaxClockSkew(-1), WithLocation(nil), WithLogger(nil), WithClock(nil),
		WithStateGuard(nil), WithAlertText(nil), WithApps(nil)}
	proc := []ProcessorOpt{WithMaxPollRecords(0), WithRetryBackoff(0, 1), WithRetryBackoff(2, 1),
		WithApplyConcurrency(0), WithTracerProvider(nil), WithMinGroupEvents(0), WithFetchWait(time.Millisecond, 1),
		WithFetchWait(time.Second, 0)}
	dec := []DecisionsOpt{WithGenerations(nil), WithLinger(-1), WithLinger(time.Second), WithMaxBatch(0),
		WithConcurrency(0), WithTimeout(0), WithSpool(nil)}
	for _, o := range shared {
		proc, dec = append(proc, o), append(dec, o)
	}
	for i, o := range proc {
		if _, err := NewProcessor(mustState(t, &quota.Engine{}), nil, o); err == nil {
			t.Errorf("processor option %d accepted", i)
		}
	}
	for i, o := range dec {
		if _, err := NewDecisions(mustState(t, &quota.Engine{}), nil, o); err == nil {
			t.Errorf("decisions option %d accepted", i)
		}
	}
	if _, err := NewProcessor(nil, nil); err == nil {
		t.Error("nil decider accepted")
	}
	if _, err := NewDecisions(nil, nil); err == nil {
		t.Error("nil decider accepted")
	}
}

// The defaults are those the options' comments state.
func TestOptionDefaults(t *testing.T) {
	p, err := newProcessorConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := newDecisionsConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []common{p.common, d.common} {
		if c.loc.String() != "Asia/Seoul" || c.maxAge != 23*time.Hour || c.maxSkew != 5*time.Minute ||
			c.guard != nil || c.alertText(10) != policy.ThresholdAlertText(10) || c.apps.Category("com.youtube.app") == "" {
			t.Errorf("common defaults: %+v", c)
		}
	}
	if p.tracer != nil || p.maxPoll != 2000 || p.groups != 4 || p.minGroup != 64 || p.backoffMin != 100*time.Millisecond || p.backoffMax != 5*time.Second {
		t.Errorf("processor defaults: %+v", p)
	}
	if d.gens != nil || d.spool != nil || d.linger != 200*time.Microsecond || d.maxBatch != 256 || d.slots != 4 || d.timeout != 2*time.Second {
		t.Errorf("decisions defaults: %+v", d)
	}
}

// A threshold re-armed by a top-up and crossed again is a new period arm, so
// the notifier (which announces each family/threshold/period once) announces it.
func TestThresholdPeriodCarriesTheArm(t *testing.T) {
	loc, _ := policy.LoadZone("")
	at := time.Date(2026, 2, 6, 5, 30, 0, 0, time.UTC)
	in := envelope.New("evt_x", at, envelope.UsagePayload{FamilyID: 1, CustomerID: 2, AppID: "a", BytesUsed: 1})
	recs, err := usageOutputs(in, 1, quota.Result{Decision: policy.Allowed, Remaining: 1, Total: 10,
		Crossed: []int{30, 10}, Arms: []int{1, 2}}, "", loc, policy.ThresholdAlertText)
	if err != nil {
		t.Fatal(err)
	}
	var periods []string
	for _, a := range pipetest.Decode[envelope.ThresholdAlert](t, recs[1:]) {
		periods = append(periods, a.Payload.Period)
	}
	if d := cmp.Diff([]string{"2026-02", "2026-02#2"}, periods); d != "" {
		t.Error(d)
	}
}

// A threshold alert's message is the caller's text (WithAlertText), by
// default the Korean one (policy.ThresholdAlertText).
func TestThresholdAlertText(t *testing.T) {
	loc, _ := policy.LoadZone("")
	at := time.Date(2026, 2, 6, 5, 30, 0, 0, time.UTC)
	in := envelope.New("evt_x", at, envelope.UsagePayload{FamilyID: 1, CustomerID: 2, AppID: "a", BytesUsed: 1})
	res := quota.Result{Decision: policy.Allowed, Remaining: 1, Total: 10, Crossed: []int{10}}
	for _, tt := range []struct {
		opts []ProcessorOpt
		want string
	}{
		{nil, "가족 데이터가 10% 미만입니다! 데이터를 충전해주세요."},
		{[]ProcessorOpt{WithAlertText(func(pct int) string { return fmt.Sprintf("below %d%%", pct) })}, "below 10%"},
	} {
		s, err := newProcessorConfig(tt.opts)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := usageOutputs(in, in.Payload.BytesUsed, res, "", loc, s.alertText)
		if err != nil {
			t.Fatal(err)
		}
		if got := pipetest.Decode[envelope.ThresholdAlert](t, recs[1:])[0].Payload.Message; got != tt.want {
			t.Errorf("message %q, want %q", got, tt.want)
		}
	}
}

// The usage-persist record carries the whole quota.Result, so a rebuild from
// usage_record can restore the event's dedupe record and the thresholds'
// arms; an arm the engine did not report counts as the first.
func TestUsagePersistCarriesTheResult(t *testing.T) {
	loc, _ := policy.LoadZone("")
	at := time.Date(2026, 2, 6, 5, 30, 0, 0, time.UTC)
	in := envelope.New("evt_x", at, envelope.UsagePayload{FamilyID: 1, CustomerID: 2, AppID: "a", BytesUsed: 7})
	for _, tt := range []struct {
		name string
		res  quota.Result
		want envelope.UsagePersistPayload
	}{
		{"allowed, throttled, two crossings",
			quota.Result{Decision: policy.Allowed, Remaining: 1, Total: 10, DailyUsed: 7, MonthlyUsed: 9, ThrottleKbps: 512,
				Crossed: []int{30, 10}, Arms: []int{1, 3}},
			envelope.UsagePersistPayload{ProcessResult: "ALLOWED", RemainingAfter: 1, TotalBytes: 10, DailyUsedBytes: 7,
				MonthlyUsedBytes: 9, ThrottleKbps: 512, Crossed: []envelope.Crossing{{Percent: 30, Arm: 1}, {Percent: 10, Arm: 3}},
				Notifies: []string{"QUOTA_UPDATED"}}},
		{"arms missing",
			quota.Result{Decision: policy.Allowed, Remaining: 1, Total: 10, DailyUsed: 7, MonthlyUsed: 7, Crossed: []int{50}},
			envelope.UsagePersistPayload{ProcessResult: "ALLOWED", RemainingAfter: 1, TotalBytes: 10, DailyUsedBytes: 7,
				MonthlyUsedBytes: 7, Crossed: []envelope.Crossing{{Percent: 50, Arm: 1}}, Notifies: []string{"QUOTA_UPDATED"}}},
		{"blocked",
			quota.Result{Decision: policy.BlockedLimitDaily, Rule: "LIMIT:DATA:DAILY", Remaining: 4, Total: 10, DailyUsed: 3, MonthlyUsed: 5},
			envelope.UsagePersistPayload{ProcessResult: "BLOCKED_LIMIT_DAILY", Rule: "LIMIT:DATA:DAILY", RemainingAfter: 4,
				TotalBytes: 10, DailyUsedBytes: 3, MonthlyUsedBytes: 5, Notifies: []string{"CUSTOMER_BLOCKED"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := usageOutputs(in, in.Payload.BytesUsed, tt.res, "", loc, policy.ThresholdAlertText)
			if err != nil {
				t.Fatal(err)
			}
			persist := pipetest.Decode[envelope.UsagePersistPayload](t, recs[:1])[0]
			want := tt.want
			want.OriginEventID, want.FamilyID, want.CustomerID, want.BytesUsed, want.AppID, want.EventTime = "evt_x", 1, 2, 7, "a", at
			if diff := cmp.Diff(want, persist.Payload); diff != "" {
				t.Errorf("usage-persist (-want +got):\n%s", diff)
			}
			again, err := usageOutputs(in, in.Payload.BytesUsed, tt.res, "", loc, policy.ThresholdAlertText)
			if err != nil {
				t.Fatal(err)
			}
			if string(again[0].Value) != string(recs[0].Value) {
				t.Errorf("the same result gave different records:\n%s\n%s", recs[0].Value, again[0].Value)
			}
		})
	}
}

// split keeps every partition whole and in poll order, balances groups by
// events, and never makes more groups than asked, than partitions, or than
// it has the minimum events per group for.
func TestSplitKeepsPartitionsWholeAndOrdered(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 6).Draw(rt, "groups")
		minGroup := rapid.IntRange(1, 100).Draw(rt, "min group")
		p := &Processor{processorConfig: processorConfig{groups: n, minGroup: minGroup}}
		parts := rapid.SliceOfN(rapid.Int32Range(0, 9), 0, 300).Draw(rt, "partitions")
		var usage []*kgo.Record
		for i, part := range parts {
			usage = append(usage, &kgo.Record{Topic: envelope.TopicUsageEvents, Partition: part, Offset: int64(i)})
		}
		groups := p.split(usage)
		distinct := map[int32]bool{}
		for _, part := range parts {
			distinct[part] = true
		}
		if len(groups) > n || (len(usage) > 0 && len(groups) > len(distinct)) || (len(usage) == 0 && groups != nil) ||
			len(groups) > max(1, len(usage)/minGroup) {
			rt.Fatalf("%d groups for %d asked, %d partitions, %d events at %d a group", len(groups), n, len(distinct), len(usage), minGroup)
		}
		owner := map[int32]int{}
		total := 0
		for g, grp := range groups {
			last := int64(-1)
			for _, r := range grp {
				if o, ok := owner[r.Partition]; ok && o != g {
					rt.Fatalf("partition %d split across groups %d and %d", r.Partition, o, g)
				}
				owner[r.Partition] = g
				if r.Offset <= last {
					rt.Fatalf("group %d out of poll order", g)
				}
				last = r.Offset
				total++
			}
		}
		if total != len(usage) {
			rt.Fatalf("%d events in groups, %d polled", total, len(usage))
		}
	})
}

// mustState is the door to eng's state.
func mustState(t testing.TB, eng Engine) *State {
	t.Helper()
	qs, err := NewState(eng)
	if err != nil {
		t.Fatal(err)
	}
	return qs
}

// fixedGuard is a StateGuard naming one generation; Recover counts calls.
type fixedGuard struct {
	gen       string
	recovered atomic.Int64
}

func (g *fixedGuard) Generation(context.Context) (string, error) { return g.gen, nil }
func (g *fixedGuard) Recover(context.Context, string, error) (string, error) {
	g.recovered.Add(1)
	return g.gen, nil
}

// A partition the group never committed, whose first record is past
// offset 0 (retention deleted the ones before), is judged: the state owes
// nothing of it yet, so its missing watermark is no loss and nothing is
// rebuilt (a mark from the first record's offset would be refused forever,
// a rebuild writing no watermark for a partition nobody committed).
func TestProcessorNeverCommittedPartitionPastZero(t *testing.T) {
	h := newHarness(t)
	h.Family(100, 10*mb, 1)
	if _, err := h.Engine.BeginRebuild(h.Ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	if err := h.Engine.FinishRebuild(h.Ctx, "g1", nil); err != nil {
		t.Fatal(err)
	}
	// Three records, then the log's start moved past them.
	var part int32
	for i := range 3 {
		r := h.Usage(fmt.Sprintf("evt_old_%d", i), 100, 1, 1, "a", h.Now)
		h.Produce(r)
		part = r.Partition
	}
	adm := kadm.NewClient(h.Prod)
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: envelope.TopicUsageEvents, Partition: part, At: 3})
	if res, err := adm.DeleteRecords(h.Ctx, offs); err != nil || res.Error() != nil {
		t.Fatalf("delete records: %v %v", err, res.Error())
	}
	guard := &fixedGuard{gen: "g1"}
	h.start(h.Engine, WithStateGuard(guard))
	h.Produce(h.Usage("evt_new", 100, 1, mb, "a", h.Now))
	persist := pipetest.Decode[envelope.UsagePersistPayload](t, h.Collect(envelope.TopicUsagePersist, 1))
	if persist[0].Payload.OriginEventID != "evt_new" || persist[0].Payload.ProcessResult != string(policy.Allowed) {
		t.Errorf("judged %+v", persist[0].Payload)
	}
	if n := guard.recovered.Load(); n != 0 {
		t.Errorf("%d recoveries for a partition nobody committed", n)
	}
}

// blockingGuard names generation g1 until Recover is released, then
// rebuilds family 100 as generation g2 (the state's watermarks: none).
type blockingGuard struct {
	h       *harness
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	gen     string
}

func (g *blockingGuard) Generation(context.Context) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gen, nil
}

func (g *blockingGuard) Recover(ctx context.Context, _ string, _ error) (string, error) {
	select {
	case <-g.release:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	var err error
	g.once.Do(func() {
		e := g.h.Engine
		if _, err = e.BeginRebuild(ctx, "g2"); err != nil {
			return
		}
		if err = e.Restore(ctx, quota.FamilyState{FamilyID: 100, Provisioned: true, Plan: 10 * mb,
			Members: []quota.MemberState{{CustomerID: 1}}, Generation: "g2"}); err != nil {
			return
		}
		// As a rebuild does: the group's committed offsets are the watermarks.
		wm := map[string]int64{}
		offs, ferr := kadm.NewClient(g.h.Prod).FetchOffsets(ctx, ProcessorGroup)
		if ferr != nil {
			err = ferr
			return
		}
		offs.Each(func(o kadm.OffsetResponse) {
			if o.At >= 0 {
				wm[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.At
			}
		})
		err = e.FinishRebuild(ctx, "g2", wm)
		g.mu.Lock()
		g.gen = "g2"
		g.mu.Unlock()
	})
	return "g2", err
}

// A processor waiting for Redis to be rebuilt keeps polling, so the group
// rebalances meanwhile: a second processor joining gets its partitions
// before the rebuild ends. (The waiting processor used to hold every
// rebalance off for the whole rebuild.) Afterwards every event is judged.
func TestRebalanceWhileRebuilding(t *testing.T) {
	h := newHarness(t)
	h.Family(100, 10*mb, 1)
	if _, err := h.Engine.BeginRebuild(h.Ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	if err := h.Engine.FinishRebuild(h.Ctx, "g1", nil); err != nil {
		t.Fatal(err)
	}
	guard := &blockingGuard{h: h, release: make(chan struct{}), gen: "g1"}
	var stale atomic.Int64
	h.start(h.Engine, WithStateGuard(guard), WithProcessorHooks(ProcessorHooks{OnStale: func(s StaleInfo) {
		if s.Stale {
			stale.Add(1)
		}
	}}))
	h.Produce(h.Usage("evt_1", 100, 1, mb, "a", h.Now))
	h.Collect(envelope.TopicUsagePersist, 1)
	h.Redis.FlushAll(h.Ctx) // Redis lost its state
	h.Produce(h.Usage("evt_2", 100, 1, mb, "a", h.Now))
	for deadline := time.Now().Add(20 * time.Second); stale.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the lost state was not detected")
		}
	}
	h.start(h.Engine, WithStateGuard(guard)) // a second processor joins
	adm := kadm.NewClient(h.Prod)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		groups, err := adm.DescribeGroups(h.Ctx, ProcessorGroup)
		if err == nil {
			g := groups[ProcessorGroup]
			assigned := 0
			for _, m := range g.Members {
				if ma, ok := m.Assigned.AsConsumer(); ok && len(ma.Topics) > 0 {
					assigned++
				}
			}
			if g.State == "Stable" && assigned == 2 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the group did not rebalance to the second processor while Redis was rebuilt")
		}
	}
	close(guard.release)
	persist := pipetest.Decode[envelope.UsagePersistPayload](t, h.Collect(envelope.TopicUsagePersist, 2))
	if persist[1].Payload.OriginEventID != "evt_2" || persist[1].Payload.ProcessResult != string(policy.Allowed) {
		t.Errorf("after the rebuild: %+v", persist[1].Payload)
	}
}

// The processor's consumer fetches with the fetch wait of WithFetchWait,
// by default 10 ms or 64 KiB.
func TestProcessorFetchWait(t *testing.T) {
	for _, tt := range []struct {
		opts  []ProcessorOpt
		wait  time.Duration
		bytes int32
	}{
		{nil, 10 * time.Millisecond, 64 << 10},
		{[]ProcessorOpt{WithFetchWait(250*time.Millisecond, 1)}, 250 * time.Millisecond, 1},
	} {
		p, err := NewProcessor(mustState(t, &quota.Engine{}), []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, tt.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if w, b := p.Client().OptValue(kgo.FetchMaxWait), p.Client().OptValue(kgo.FetchMinBytes); w != tt.wait || b != tt.bytes {
			t.Errorf("fetch wait %v, min bytes %v; want %v, %v", w, b, tt.wait, tt.bytes)
		}
		p.Close(context.Background())
	}
}
