package simulate

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
)

// BenchmarkGenerate measures drawing one event from the default population.
func BenchmarkGenerate(b *testing.B) {
	g := mustGenerator(b, mustPopulation(b, 1))
	b.ReportAllocs()
	for b.Loop() {
		g.Next()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkGenerateEncode measures generating and encoding one event into
// its Kafka record.
func BenchmarkGenerateEncode(b *testing.B) {
	g := mustGenerator(b, mustPopulation(b, 1))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := kafkarecord.New(envelope.TopicUsageEvents, g.Next()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkProduceKfake measures generate + encode + produce into an
// in-process kfake cluster (10 partitions) with the seed's producer
// settings, acks=1, until every record is acknowledged.
func BenchmarkProduceKfake(b *testing.B) {
	c := newCluster(b, envelope.TopicUsageEvents)
	pub, err := NewPublisher(newProducer(b, c))
	if err != nil {
		b.Fatal(err)
	}
	g := mustGenerator(b, mustPopulation(b, 1))
	ctx := context.Background()
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		pub.Send(ctx, g.Next(), nil)
	}
	if err := pub.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if st := pub.Stats(); st.Errors > 0 {
		b.Fatalf("%d errors: %s", st.Errors, st.LastError)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkSimulatorKfake runs the whole pump (token bucket at MaxRate, so
// unthrottled) into kfake.
func BenchmarkSimulatorKfake(b *testing.B) {
	c := newCluster(b, envelope.TopicUsageEvents)
	pub, _ := NewPublisher(newProducer(b, c, kgo.MaxBufferedRecords(1<<20)))
	g := mustGenerator(b, mustPopulation(b, 1))
	sim := mustSimulator(b, g, pub, WithRate(0))
	start := time.Now()
	sim.Start()
	for n := int64(b.N); n > 0; n -= MaxBurst {
		sim.Burst(min(n, MaxBurst))
	}
	for sim.Stats().Sent < uint64(b.N) {
		time.Sleep(time.Millisecond)
	}
	stop(b, sim)
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}
