// Package pipetest is a judging pipeline for tests: an embedded Kafka with
// DPCS's topics, a Redis, a quota engine on it and a producer.
package pipetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/quota"
)

// Pipeline is what a test of the judging pipeline runs against: an embedded
// Kafka with DPCS's topics, a Redis (embedded, or the one given to
// PipelineOn), a quota engine on it whose keys are prefixed per test and
// whose clock is Now, and a producer.
type Pipeline struct {
	T      testing.TB
	Ctx    context.Context
	Kafka  *kfake.Cluster
	Redis  redis.UniversalClient
	Mini   *miniredis.Miniredis // nil on a real Redis
	Engine *quota.Engine
	Prod   *kgo.Client
	// Now is the engine's clock (and, through Clock, the judges'):
	// 2026-02-06 14:30 in Seoul.
	Now time.Time
}

// New is a Pipeline on an embedded Redis.
func New(tb testing.TB) *Pipeline {
	tb.Helper()
	mr, rdb := testenv.Redis(tb)
	p := On(tb, rdb)
	p.Mini = mr
	return p
}

// On is a Pipeline on rdb (any Redis: keys are prefixed per test).
func On(tb testing.TB, rdb redis.UniversalClient) *Pipeline {
	tb.Helper()
	p := &Pipeline{T: tb, Ctx: context.Background(), Kafka: testenv.Kafka(tb), Redis: rdb,
		Now: time.Date(2026, 2, 6, 5, 30, 0, 0, time.UTC)}
	var err error
	p.Engine, err = quota.New(rdb, quota.WithClock(p.Clock),
		quota.WithKeyPrefix(fmt.Sprintf("%s:%d:", tb.Name(), time.Now().UnixNano())))
	if err != nil {
		tb.Fatal(err)
	}
	p.Prod = testenv.Client(tb, p.Kafka)
	return p
}

// Clock returns Now.
func (p *Pipeline) Clock() time.Time { return p.Now }

// KafkaOpts are a client's options for the pipeline's Kafka.
func (p *Pipeline) KafkaOpts() []kgo.Opt { return testenv.KafkaOpts(p.Kafka) }

// Usage is a usage-events record.
func (p *Pipeline) Usage(id string, fid, cid, bytes int64, app string, at time.Time) *kgo.Record {
	p.T.Helper()
	r, err := kafkarecord.New(envelope.TopicUsageEvents, envelope.New(id, at,
		envelope.UsagePayload{FamilyID: fid, CustomerID: cid, AppID: app, BytesUsed: bytes}))
	if err != nil {
		p.T.Fatal(err)
	}
	return r
}

// Produce produces recs and waits for Kafka's acknowledgements.
func (p *Pipeline) Produce(recs ...*kgo.Record) {
	p.T.Helper()
	if err := p.Prod.ProduceSync(p.Ctx, recs...).FirstErr(); err != nil {
		p.T.Fatal(err)
	}
}

// Collect reads topic from its start until n records arrived (see Collect).
func (p *Pipeline) Collect(topic string, n int) []*kgo.Record {
	p.T.Helper()
	return testenv.Collect(p.T, p.Kafka, topic, n)
}

// Settled waits (20 s at most) until group committed every record of the
// topics.
func (p *Pipeline) Settled(group string, topics ...string) {
	p.T.Helper()
	adm := kadm.NewClient(p.Prod)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ends, err := adm.ListEndOffsets(p.Ctx, topics...)
		if err != nil {
			p.T.Fatal(err)
		}
		committed, err := adm.FetchOffsets(p.Ctx, group)
		if err == nil {
			done := true
			ends.Each(func(o kadm.ListedOffset) {
				c, ok := committed.Lookup(o.Topic, o.Partition)
				if o.Offset > 0 && (!ok || c.At < o.Offset) {
					done = false
				}
			})
			if done {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.T.Fatal("offsets not committed in time")
}

// Family provisions family fid in Redis with a plan and members.
func (p *Pipeline) Family(fid, plan int64, members ...int64) {
	p.T.Helper()
	if _, err := p.Engine.SetPlan(p.Ctx, fid, plan); err != nil {
		p.T.Fatal(err)
	}
	for _, c := range members {
		if err := p.Engine.AddMember(p.Ctx, fid, c); err != nil {
			p.T.Fatal(err)
		}
	}
}

// Decode decodes the records' envelopes as T.
func Decode[T envelope.Payload](tb testing.TB, recs []*kgo.Record) []envelope.Envelope[T] {
	tb.Helper()
	var out []envelope.Envelope[T]
	for _, r := range recs {
		e, err := envelope.DecodeAs[T](r.Value)
		if err != nil {
			tb.Fatalf("%s: %v", r.Value, err)
		}
		out = append(out, e)
	}
	return out
}
