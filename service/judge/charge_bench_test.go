package judge

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv/pipetest"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// BenchmarkChargeVsDecide measures one grant step through Decisions.Charge
// beside one event through Decisions.Decide, alternating on one caller, so
// both see the same machine at the same moment: each is a whole group
// commit (the judgement, its records acknowledged by Kafka). The step is
// an update of the member's open grant (1 KiB used, 1 MiB asked for), the
// event 1 KiB of another member. Reported: ns per decision, ns per step
// and their ratio. On the embedded Redis (miniredis: Go's Lua) by default;
// on a real redis-server with DPCS_TEST_REDIS_ADDR set (doc/benchmarks.md,
// "Grants").
func BenchmarkChargeVsDecide(b *testing.B) {
	var p *pipetest.Pipeline
	if addr := os.Getenv("DPCS_TEST_REDIS_ADDR"); addr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		b.Cleanup(func() { rdb.Close() })
		p = pipetest.On(b, rdb)
	} else {
		p = pipetest.New(b)
	}
	const gen = "t:bench"
	if _, err := p.Engine.BeginRebuild(p.Ctx, gen); err != nil {
		b.Fatal(err)
	}
	if err := p.Engine.FinishRebuild(p.Ctx, gen, nil); err != nil {
		b.Fatal(err)
	}
	if err := p.Engine.Restore(p.Ctx, quota.FamilyState{FamilyID: 100, Provisioned: true, Plan: policy.MaxBytes / 2,
		Members: []quota.MemberState{{CustomerID: 1}, {CustomerID: 2}}, Generation: gen}); err != nil {
		b.Fatal(err)
	}
	dec, err := NewDecisions(mustState(b, p.Engine), p.KafkaOpts(), WithClock(p.Clock), WithGenerations(fixedGeneration(gen)),
		WithTimeout(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = dec.Close(p.Ctx) })
	step := func(i int) quota.GrantOp {
		return quota.GrantOp{ID: fmt.Sprintf("step-%d-%d", b.N, i), GrantID: "grant", FamilyID: 100, CustomerID: 2,
			AppID: "com.youtube.app", Used: 1 << 10, Requested: 1 << 20, At: p.Now}
	}
	if _, err := dec.Charge(p.Ctx, []quota.GrantOp{step(-1)}); err != nil { // the grant opens
		b.Fatal(err)
	}
	var decide, charge time.Duration
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		ev := envelope.New(fmt.Sprintf("evt-%d-%d", b.N, i), p.Now,
			envelope.UsagePayload{FamilyID: 100, CustomerID: 1, AppID: "com.youtube.app", BytesUsed: 1 << 10})
		res, err := dec.Decide(p.Ctx, []envelope.Envelope[envelope.UsagePayload]{ev})
		if err != nil || res[0].Decision != policy.Allowed {
			b.Fatalf("decide: %+v, %v", res, err)
		}
		t1 := time.Now()
		rs, err := dec.Charge(p.Ctx, []quota.GrantOp{step(i)})
		if err != nil || rs[0].Granted != 1<<20 {
			b.Fatalf("charge: %+v, %v", rs, err)
		}
		decide, charge = decide+t1.Sub(t0), charge+time.Since(t1)
	}
	b.ReportMetric(float64(decide.Nanoseconds())/float64(b.N), "ns/decision")
	b.ReportMetric(float64(charge.Nanoseconds())/float64(b.N), "ns/step")
	b.ReportMetric(float64(charge)/float64(decide), "step/decision")
}
