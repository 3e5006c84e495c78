package service

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/outbox"
	"github.com/dabom/dpcs/service/store"
	"github.com/dabom/dpcs/simulate"
)

// spans is what an in-memory exporter holds, with lookups for the
// assertions of the trace tests.
type spans tracetest.SpanStubs

// child returns the span named name whose parent is parent (same trace).
func (ss spans) child(parent tracetest.SpanStub, name string) (tracetest.SpanStub, bool) {
	for _, s := range ss {
		if s.Name == name && s.Parent.SpanID() == parent.SpanContext.SpanID() &&
			s.SpanContext.TraceID() == parent.SpanContext.TraceID() {
			return s, true
		}
	}
	return tracetest.SpanStub{}, false
}

// root returns the span named name that begins a trace.
func (ss spans) root(name string) (tracetest.SpanStub, bool) {
	for _, s := range ss {
		if s.Name == name && !s.Parent.IsValid() {
			return s, true
		}
	}
	return tracetest.SpanStub{}, false
}

// chain follows names from the root span named first, each span a child
// of the one before (of any of the same name: a record two consumer
// groups read has two receive spans); it returns the longest chain found
// and whether it is whole.
func (ss spans) chain(first string, names ...string) ([]tracetest.SpanStub, bool) {
	s, ok := ss.root(first)
	if !ok {
		return nil, false
	}
	return ss.follow([]tracetest.SpanStub{s}, names)
}

// follow extends out, whose last span is the parent, along names.
func (ss spans) follow(out []tracetest.SpanStub, names []string) ([]tracetest.SpanStub, bool) {
	if len(names) == 0 {
		return out, true
	}
	parent, best := out[len(out)-1], out
	for _, s := range ss {
		if s.Name != names[0] || s.Parent.SpanID() != parent.SpanContext.SpanID() ||
			s.SpanContext.TraceID() != parent.SpanContext.TraceID() {
			continue
		}
		found, ok := ss.follow(append(slices.Clone(out), s), names[1:])
		if ok {
			return found, true
		}
		if len(found) > len(best) {
			best = found
		}
	}
	return best, false
}

func (ss spans) String() string {
	var b strings.Builder
	for _, s := range ss {
		fmt.Fprintf(&b, "\n  %s trace=%s span=%s parent=%s", s.Name, s.SpanContext.TraceID(), s.SpanContext.SpanID(), s.Parent.SpanID())
	}
	return b.String()
}

// awaitChain waits (up to 20 s) until the exporter holds the chain.
func awaitChain(t *testing.T, exp *tracetest.InMemoryExporter, first string, names ...string) []tracetest.SpanStub {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ss := spans(exp.GetSpans())
		found, ok := ss.chain(first, names...)
		if ok {
			return found
		}
		if time.Now().After(deadline) {
			t.Fatalf("chain %s → %s: found %d of %d spans within 20 s; spans exported:%s",
				first, strings.Join(names, " → "), len(found), len(names)+1, ss)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// One usage event is one trace: the simulator's publish, the processor's
// receive and judgement, the usage-persist record it produces (standing
// for its QUOTA_UPDATED), the notifier's receive and handling and the
// hub's publish to the SSE subscribers are one chain of parents and
// children across the Kafka hops, and the write-behind's receive of that
// record is in it too. A policy change published by
// the outbox relay is one trace the same way, to the CUSTOMER_BLOCKED it
// causes.
func TestTraceFollowsAnEventAcrossKafka(t *testing.T) {
	testenv.AwayFromMidnight(t) // today's usage, then today's limit below it
	ctx := context.Background()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })

	cluster := testenv.Kafka(t)
	kopts := testenv.KafkaOpts(cluster)
	_, rdb := testenv.Redis(t)
	engine, err := quota.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	db, st := openStore(t)
	const fid, cid = 100, 1000
	if _, err := st.CreateFamily(ctx, store.NewFamily{ID: fid, Name: "traced", PlanBytes: 100 * mb}, store.System); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddMember(ctx, store.NewMember{ID: cid, FamilyID: fid, Name: "child", Role: policy.RoleMember}, store.System); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.SetPlan(ctx, fid, 100*mb); err != nil {
		t.Fatal(err)
	}
	if err := engine.AddMember(ctx, fid, cid); err != nil {
		t.Fatal(err)
	}

	w, err := NewWorkers(mustState(t, engine), db, kopts, WorkersConfig{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := w.Hub.Subscribe(fid, notify.Filter{Role: notify.RoleOwner})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("workers: %v", err)
		}
		if err := w.Close(context.Background()); err != nil {
			t.Errorf("close workers: %v", err)
		}
	})
	awaitLive := func(kind envelope.SubType) {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case m := <-sub.C:
				if m.Data.Kind == kind {
					return
				}
			case <-timeout:
				t.Fatalf("no live %s notification within 20 s", kind)
			}
		}
	}

	// The simulator's path: a traced producer client under a Publisher.
	simClient, err := kgo.NewClient(append(append(simulate.ProducerOptions(kgo.AllISRAcks()), kopts...), TracingKafkaOpts(tp)...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(simClient.Close)
	pub, err := simulate.NewPublisher(simClient)
	if err != nil {
		t.Fatal(err)
	}
	ev := envelope.New("evt_traced", time.Now(), envelope.UsagePayload{FamilyID: fid, CustomerID: cid, AppID: "com.youtube.app", BytesUsed: mb})
	if err := pub.Publish(ctx, ev); err != nil {
		t.Fatal(err)
	}
	awaitLive(envelope.SubQuotaUpdated)
	// The judgement's one record stands for its QUOTA_UPDATED, which the
	// notifier derives from it (doc/wire-format.md, "One record per
	// decision").
	usage := awaitChain(t, exp, "usage-events publish", "usage-events receive", "usage-events process",
		"usage-persist publish", "usage-persist receive", "usage-persist process", "notify.Hub publish")
	judged := usage[2]
	want := map[string]string{"dpcs.event_id": "evt_traced", "dpcs.decision": string(policy.Allowed), "dpcs.family_id": "100"}
	got := map[string]string{}
	for k := range want {
		got[k] = attr(judged, k)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("process span attributes (-want +got):\n%s", diff)
	}
	if judged.SpanKind != trace.SpanKindConsumer {
		t.Errorf("process span kind %v, want consumer", judged.SpanKind)
	}
	if got := attr(usage[6], "dpcs.notification.kind"); got != string(envelope.SubQuotaUpdated) {
		t.Errorf("hub publish kind %q", got)
	}
	// The usage-persist record is produced in the same judgement and read by
	// the write-behind within the same trace. Its publish span ends with
	// Kafka's acknowledgement, which can come after the notification's
	// record went round to the hub (CI, a busy machine): wait for it.
	deadline := time.Now().Add(20 * time.Second)
	var persist tracetest.SpanStub
	for {
		ss := spans(exp.GetSpans())
		var ok bool
		if persist, ok = ss.child(judged, "usage-persist publish"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no usage-persist publish under the judgement within 20 s:%s", ss)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for {
		if _, ok := spans(exp.GetSpans()).child(persist, "usage-persist receive"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the write-behind's usage-persist receive did not join the trace within 20 s:%s", spans(exp.GetSpans()))
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The API's path: a policy change in SQL, published by the outbox relay
	// through a traced producer, blocks the member (1 MB used, 1 KB daily
	// limit) and causes a CUSTOMER_BLOCKED in the same trace.
	relayClient, err := kgo.NewClient(append(append(judge.ProducerOpts(), kopts...), TracingKafkaOpts(tp)...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(relayClient.Close)
	relay, err := outbox.New(db, relayClient)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdatePolicy(ctx, store.PolicyChange{FamilyID: fid, CustomerID: cid,
		Set: map[string]string{policy.KeyLimitDaily: "1024"}, By: store.System}); err != nil {
		t.Fatal(err)
	}
	if res, err := relay.Poll(ctx); err != nil || res.Published != 1 {
		t.Fatalf("relay poll: %+v, %v", res, err)
	}
	awaitLive(envelope.SubCustomerBlocked)
	blocked := awaitChain(t, exp, "policy-updated publish", "policy-updated receive", "policy-updated process",
		"notification-events publish", "notification-events receive", "notification-events process", "notify.Hub publish")
	if got := attr(blocked[6], "dpcs.notification.kind"); got != string(envelope.SubCustomerBlocked) {
		t.Errorf("hub publish kind %q", got)
	}
	if blocked[0].SpanContext.TraceID() == usage[0].SpanContext.TraceID() {
		t.Error("the policy change joined the usage event's trace")
	}
}

// A dead-lettered usage event's span says why, and the dead letter is
// produced in its trace.
func TestTraceDeadLetter(t *testing.T) {
	h := newHarness(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	p, err := judge.NewProcessor(mustState(t, h.Engine), append(h.KafkaOpts(), TracingKafkaOpts(tp)...), judge.WithTracerProvider(tp),
		judge.WithClock(func() time.Time { return h.Now }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.Ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		p.Close(context.Background())
	})
	prod, err := kgo.NewClient(append(h.KafkaOpts(), TracingKafkaOpts(tp)...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	bad := &kgo.Record{Topic: envelope.TopicUsageEvents, Key: []byte("100"), Value: []byte(`{"eventId":`)}
	if err := prod.ProduceSync(h.Ctx, bad).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dlt := envelope.DLT(envelope.TopicUsageEvents)
	got := awaitChain(t, exp, "usage-events publish", "usage-events receive", "usage-events process", dlt+" publish")
	if st := got[2].Status; st.Code.String() != "Error" || !strings.Contains(st.Description, "dead-lettered") {
		t.Errorf("process span status %+v", st)
	}
}

// With tracing off nothing is added to the Kafka clients and the provider
// is a no-op one.
func TestTracingOff(t *testing.T) {
	tp, shutdown, err := Tracing(context.Background(), TracingConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tp.(noop.TracerProvider); !ok {
		t.Errorf("provider %T, want a no-op one", tp)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	for _, tp := range []trace.TracerProvider{nil, noop.NewTracerProvider(), tp} {
		if opts := TracingKafkaOpts(tp); len(opts) != 0 {
			t.Errorf("TracingKafkaOpts(%T) = %d options, want none", tp, len(opts))
		}
	}
}

// Tracing with an exporter records spans with the service name and flushes
// them on shutdown.
func TestTracingExportsOnShutdown(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp, shutdown, err := Tracing(context.Background(), TracingConfig{Exporter: keptOnShutdown{exp}, SampleRatio: 1, ServiceName: "dpcs-test"})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("test").Start(context.Background(), "work")
	span.End()
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans exported before the batch was flushed", n)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := exp.GetSpans()
	if len(got) != 1 || got[0].Name != "work" {
		t.Fatalf("exported %v", spans(got))
	}
	name, _ := got[0].Resource.Set().Value(attribute.Key("service.name"))
	if name.AsString() != "dpcs-test" {
		t.Errorf("service.name %q", name.AsString())
	}
}

// keptOnShutdown keeps the exported spans when the provider shuts the
// exporter down (the in-memory exporter forgets them).
type keptOnShutdown struct{ *tracetest.InMemoryExporter }

func (keptOnShutdown) Shutdown(context.Context) error { return nil }

func TestLoadTracingConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want TracingConfig
		err  string
	}{
		{name: "off by default", want: TracingConfig{SampleRatio: 1}},
		{name: "dpcs endpoint", env: map[string]string{"DPCS_OTLP_ENDPOINT": "http://collector:4318", "DPCS_TRACE_SAMPLE_RATIO": "0.25"},
			want: TracingConfig{Endpoint: "http://collector:4318", SampleRatio: 0.25}},
		{name: "standard variable", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
			want: TracingConfig{OTELEnv: true, SampleRatio: 1}},
		{name: "standard traces variable", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"},
			want: TracingConfig{OTELEnv: true, SampleRatio: 1}},
		{name: "sdk disabled", env: map[string]string{"DPCS_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"},
			want: TracingConfig{SampleRatio: 1}},
		{name: "bad endpoint", env: map[string]string{"DPCS_OTLP_ENDPOINT": "collector:4318"}, err: "DPCS_OTLP_ENDPOINT"},
		{name: "bad ratio", env: map[string]string{"DPCS_TRACE_SAMPLE_RATIO": "2"}, err: "DPCS_TRACE_SAMPLE_RATIO"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := LoadConfig(func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, cfg.Tracing); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if cfg.Tracing.Enabled() != (tc.want.Endpoint != "" || tc.want.OTELEnv) {
				t.Errorf("Enabled() = %v", cfg.Tracing.Enabled())
			}
		})
	}
}
