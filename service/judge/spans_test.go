package judge

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// discard is an exporter that drops what it is given.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkProcessorSpans measures what tracing adds to the processor per
// judged record: starting its span, recording the decision, producing its
// outputs in it and ending it. Off (the default, or a no-op provider) the
// processor skips all of it.
func BenchmarkProcessorSpans(b *testing.B) {
	const batch = 100
	in := make([]usageIn, batch)
	for i := range in {
		env := envelope.New(fmt.Sprintf("evt_%d", i), time.Now(), envelope.UsagePayload{FamilyID: 100, CustomerID: 1000, AppID: "a", BytesUsed: 1 << 20})
		r, err := kafkarecord.New(envelope.TopicUsageEvents, env)
		if err != nil {
			b.Fatal(err)
		}
		r.Context = context.Background()
		in[i] = usageIn{rec: r, env: env}
	}
	res := quota.Result{Decision: policy.Allowed, Remaining: 10 << 20}
	outs := make([]*kgo.Record, 2)
	for i := range outs {
		outs[i] = &kgo.Record{}
	}
	for _, tc := range []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"off", noop.NewTracerProvider()},
		{"sampled", sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))},
		{"not-sampled", sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0))))},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p, err := NewProcessor(mustState(b, &quota.Engine{}), []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, WithTracerProvider(tc.tp))
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(context.Background())
			recs := make([]*kgo.Record, batch)
			for i := range in {
				recs[i] = in[i].rec
			}
			b.ReportAllocs()
			for b.Loop() {
				for i := range recs {
					recs[i].Context = context.Background()
				}
				var err error
				if p.tracer != nil { // as process does for each group
					p.startSpans(recs)
				}
				for _, u := range in {
					if p.tracer != nil {
						judgedSpan(u, res, batch)
						causedBy(outs, u.rec)
					}
				}
				if p.tracer != nil {
					endSpans(recs, &err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/record")
		})
	}
}
