package notify

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv"
)

func traced(t *testing.T) (*tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return exp, tp
}

// childOf returns the span named name whose parent is parent.
func childOf(ss tracetest.SpanStubs, parent tracetest.SpanStub, name string) (tracetest.SpanStub, bool) {
	for _, s := range ss {
		if s.Name == name && s.Parent.SpanID() == parent.SpanContext.SpanID() && s.SpanContext.TraceID() == parent.SpanContext.TraceID() {
			return s, true
		}
	}
	return tracetest.SpanStub{}, false
}

func named(ss tracetest.SpanStubs, name string) (tracetest.SpanStub, bool) {
	for _, s := range ss {
		if s.Name == name {
			return s, true
		}
	}
	return tracetest.SpanStub{}, false
}

func spanNames(ss tracetest.SpanStubs) string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name+"("+s.SpanContext.SpanID().String()+"←"+s.Parent.SpanID().String()+")")
	}
	return strings.Join(out, ", ")
}

func TestHubPublishSpanIsAChildOfTheCaller(t *testing.T) {
	exp, tp := traced(t)
	hub, err := NewHub(WithHubTracerProvider(tp), WithBuffer(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hub.Subscribe(100, Filter{Role: RoleOwner}); err != nil {
		t.Fatal(err)
	}
	ctx, parent := tp.Tracer("test").Start(context.Background(), "caller")
	hub.PublishContext(ctx, note(1, 100, 2))
	hub.PublishContext(ctx, note(2, 100, 2)) // the buffer of 1 is full: dropped
	parent.End()
	hub.Publish(note(3, 100, 2)) // no caller span: a root
	ss := exp.GetSpans()
	caller, _ := named(ss, "caller")
	var got []string
	for _, s := range ss {
		if s.Name != "notify.Hub publish" {
			continue
		}
		under := s.Parent.SpanID() == caller.SpanContext.SpanID()
		got = append(got, strings.Join([]string{attrOf(s, "dpcs.event_id"), attrOf(s, "dpcs.hub.delivered"), attrOf(s, "dpcs.hub.dropped"),
			map[bool]string{true: "child", false: "root"}[under]}, " "))
	}
	want := []string{"ntf_1 1 0 child", "ntf_2 0 1 child", "ntf_3 0 0 root"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("publish spans %q, want %q", got, want)
	}
}

func attrOf(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// The notifier continues the trace a record carries: its process span is a
// child of the record's receive span, the hub publish and each channel
// attempt children of it.
func TestNotifierContinuesTheRecordsTrace(t *testing.T) {
	exp, tp := traced(t)
	hooks := kgo.WithHooks(kotel.NewKotel(kotel.WithTracer(kotel.NewTracer(kotel.TracerProvider(tp),
		kotel.TracerPropagator(propagation.TraceContext{})))).Hooks()...)
	c := newFake(t)
	inbox := newInbox(t, openSQLite(t))
	hub, err := NewHub(WithHubTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan string, 1)
	ch := ChannelFunc(func(ctx context.Context, n Notification) error { sent <- n.EventID; return nil })
	n, err := New(inbox, hub, append(testenv.ConsumerOpts(c), hooks), WithTracerProvider(tp), WithChannel("hook", ch))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- n.Run(context.Background()) }()
	defer stopNotifier(t, n, errc)

	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), hooks)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, origin := tp.Tracer("test").Start(context.Background(), "origin")
	if err := prod.ProduceSync(ctx, blockedRec(t, "ntf_traced", 100, 2)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	origin.End()
	select {
	case <-sent:
	case <-time.After(20 * time.Second):
		t.Fatal("channel not called within 20 s")
	}
	topic := envelope.TopicNotificationEvents
	chain := []string{topic + " publish", topic + " receive", topic + " process"}
	linked := func(ss tracetest.SpanStubs) bool {
		s, ok := named(ss, "origin")
		for _, name := range chain {
			if s, ok = childOf(ss, s, name); !ok {
				return false
			}
		}
		_, hubOK := childOf(ss, s, "notify.Hub publish")
		_, chOK := childOf(ss, s, "notify channel send")
		return hubOK && chOK
	}
	deadline := time.Now().Add(20 * time.Second)
	for !linked(exp.GetSpans()) {
		if time.Now().After(deadline) {
			t.Fatalf("origin → %s → {hub publish, channel send} not linked within 20 s; spans: %s",
				strings.Join(chain, " → "), spanNames(exp.GetSpans()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	ss := exp.GetSpans()
	process, _ := named(ss, topic+" process")
	if got := attrOf(process, "dpcs.outcome"); got != string(Delivered) {
		t.Errorf("process outcome %q; spans: %s", got, spanNames(ss))
	}
}

func TestTracerProviderOptionsRefuseNil(t *testing.T) {
	if _, err := NewHub(WithHubTracerProvider(nil)); err == nil {
		t.Error("hub: nil provider accepted")
	}
	var c config
	if err := WithTracerProvider(nil)(&c); err == nil {
		t.Error("notifier: nil provider accepted")
	}
}
