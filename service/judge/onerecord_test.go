package judge

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// decisionsOn returns Decisions on h's Redis and Kafka under a restored
// generation (the deployables' path: every batch carries its marks), the
// family 100 restored with members 1 and 2 and a pool of plan bytes.
func decisionsOn(t *testing.T, h *harness, plan int64) *Decisions {
	t.Helper()
	const gen = "t:records"
	if _, err := h.Engine.BeginRebuild(h.Ctx, gen); err != nil {
		t.Fatal(err)
	}
	if err := h.Engine.FinishRebuild(h.Ctx, gen, nil); err != nil {
		t.Fatal(err)
	}
	if err := h.Engine.Restore(h.Ctx, quota.FamilyState{FamilyID: 100, Provisioned: true, Plan: plan,
		Members: []quota.MemberState{{CustomerID: 1}, {CustomerID: 2}}, Generation: gen}); err != nil {
		t.Fatal(err)
	}
	dec, err := NewDecisions(mustState(t, h.Engine), h.KafkaOpts(), WithClock(h.Clock), WithGenerations(fixedGeneration(gen)),
		WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dec.Close(h.Ctx) })
	return dec
}

// One Kafka record per decision on the synchronous paths (issue #40):
// an allowed event, a blocked one and each grant step are one usage-persist
// record each — the record stands for its QUOTA_UPDATED or
// CUSTOMER_BLOCKED (doc/wire-format.md, "One record per decision") — and
// nothing is produced to notification-events while no threshold is
// crossed. The processor's path is counted by TestProcessorLast10MB.
func TestOneRecordPerDecision(t *testing.T) {
	t.Run("decide", func(t *testing.T) {
		h := newHarness(t)
		dec := decisionsOn(t, h, 100*mb)
		before := h.produced(envelope.TopicUsagePersist, envelope.TopicNotificationEvents)
		var decided []policy.Decision
		for i, b := range []int64{mb, 2 * mb, 200 * mb} {
			res, err := dec.Decide(h.Ctx, []envelope.Envelope[envelope.UsagePayload]{envelope.New(fmt.Sprintf("evt_%d", i), h.Now,
				envelope.UsagePayload{FamilyID: 100, CustomerID: 1, AppID: "com.kakao.talk", BytesUsed: b})})
			if err != nil {
				t.Fatal(err)
			}
			decided = append(decided, res[0].Decision)
		}
		if decided[0] != policy.Allowed || decided[1] != policy.Allowed || !decided[2].Blocked() {
			t.Fatalf("decisions %v, want two allowed and one blocked", decided)
		}
		if n := h.produced(envelope.TopicUsagePersist, envelope.TopicNotificationEvents) - before; n != 3 {
			t.Errorf("%d records for 3 decisions, want 3", n)
		}
		if n := h.produced(envelope.TopicNotificationEvents); n != 0 {
			t.Errorf("%d notification records, want none (each decision's record stands for its notification)", n)
		}
	})
	t.Run("charge", func(t *testing.T) {
		h := newHarness(t)
		dec := decisionsOn(t, h, 100*mb)
		before := h.produced(envelope.TopicUsagePersist, envelope.TopicNotificationEvents)
		step := func(id string, used, asked int64, release bool) quota.GrantResult {
			t.Helper()
			rs, err := dec.Charge(h.Ctx, []quota.GrantOp{{ID: id, GrantID: "grant", FamilyID: 100, CustomerID: 2,
				AppID: "com.youtube.app", Used: used, Requested: asked, Release: release, At: h.Now}})
			if err != nil {
				t.Fatal(err)
			}
			return rs[0]
		}
		if r := step("step-1", 0, mb, false); r.Granted != mb {
			t.Fatalf("create: %+v", r)
		}
		if r := step("step-2", mb, mb, false); r.Charged != mb || r.Granted != mb {
			t.Fatalf("update: %+v", r)
		}
		if r := step("step-3", mb/2, 0, true); r.Charged != mb/2 {
			t.Fatalf("release: %+v", r)
		}
		if n := h.produced(envelope.TopicUsagePersist, envelope.TopicNotificationEvents) - before; n != 3 {
			t.Errorf("%d records for 3 grant steps, want 3", n)
		}
		if n := h.produced(envelope.TopicNotificationEvents); n != 0 {
			t.Errorf("%d notification records, want none", n)
		}
	})
}

// redisTrips counts the round trips a client makes (a command, or a
// pipeline, each one) and the commands they carry.
type redisTrips struct {
	mu           sync.Mutex
	trips, calls int
}

func (r *redisTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *redisTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.add(1)
		return next(ctx, cmd)
	}
}

func (r *redisTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.add(len(cmds))
		return next(ctx, cmds)
	}
}

func (r *redisTrips) add(calls int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trips++
	r.calls += calls
}

func (r *redisTrips) count() (trips, calls int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	trips, calls = r.trips, r.calls
	r.trips, r.calls = 0, 0
	return trips, calls
}

// One Redis round trip per group commit (issue #40): a batch of the
// synchronous decisions — events or grant steps, under the state guard
// with the slots' marks — is one pipeline on a single Redis, carrying one
// script call per judgement and one call of the state script that checks
// the marker and advances the marks (state.lua's guard; it was a check
// before the judgements and an advance after them, two calls). Counted by
// a go-redis hook.
func TestOneRedisRoundTripPerBatch(t *testing.T) {
	h := newHarness(t)
	dec := decisionsOn(t, h, 100*mb)
	decide := func(ids ...string) {
		t.Helper()
		var envs []envelope.Envelope[envelope.UsagePayload]
		for _, id := range ids {
			envs = append(envs, envelope.New(id, h.Now, envelope.UsagePayload{FamilyID: 100, CustomerID: 1,
				AppID: "com.kakao.talk", BytesUsed: 1}))
		}
		if _, err := dec.Decide(h.Ctx, envs); err != nil {
			t.Fatal(err)
		}
	}
	decide("evt_warm") // the scripts loaded
	rt := &redisTrips{}
	h.Redis.AddHook(rt)
	for _, tc := range []struct {
		name string
		do   func()
		n    int // judgements in the batch
	}{
		{"one event", func() { decide("evt_1") }, 1},
		{"three events", func() { decide("evt_2", "evt_3", "evt_4") }, 3},
		{"a retry", func() { decide("evt_1") }, 1},
		{"a grant step", func() {
			if _, err := dec.Charge(h.Ctx, []quota.GrantOp{{ID: "step-1", GrantID: "grant", FamilyID: 100, CustomerID: 2,
				AppID: "com.youtube.app", Requested: mb, At: h.Now}}); err != nil {
				t.Fatal(err)
			}
		}, 1},
	} {
		tc.do()
		if trips, calls := rt.count(); trips != 1 || calls != tc.n+1 {
			t.Errorf("%s: %d round trips carrying %d calls, want 1 carrying %d (a script per judgement, one guard)",
				tc.name, trips, calls, tc.n+1)
		}
	}
}

// The processor's batches under the state guard are one round trip each
// too: a script per event and one guard call.
func TestOneRedisRoundTripPerProcessorBatch(t *testing.T) {
	h := newHarness(t)
	const gen = "t:processor"
	if _, err := h.Engine.BeginRebuild(h.Ctx, gen); err != nil {
		t.Fatal(err)
	}
	if err := h.Engine.FinishRebuild(h.Ctx, gen, nil); err != nil {
		t.Fatal(err)
	}
	if err := h.Engine.Restore(h.Ctx, quota.FamilyState{FamilyID: 100, Provisioned: true, Plan: 100 * mb,
		Members: []quota.MemberState{{CustomerID: 1}}, Generation: gen}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	batches, events := 0, 0
	guard := &fixedGuard{gen: gen}
	h.start(h.Engine, WithStateGuard(guard), WithProcessorHooks(ProcessorHooks{OnBatch: func(b BatchInfo) {
		mu.Lock()
		defer mu.Unlock()
		if b.Usage > 0 {
			batches++
			events += b.Usage
		}
	}}))
	h.Produce(h.Usage("evt_warm", 100, 1, 1, "com.kakao.talk", h.Now))
	h.Settled(ProcessorGroup, envelope.TopicUsageEvents)
	rt := &redisTrips{}
	h.Redis.AddHook(rt)
	mu.Lock()
	batches, events = 0, 0
	mu.Unlock()
	h.Produce(h.Usage("evt_1", 100, 1, 1, "com.kakao.talk", h.Now), h.Usage("evt_2", 100, 1, 1, "com.kakao.talk", h.Now),
		h.Usage("evt_3", 100, 1, 1, "com.kakao.talk", h.Now))
	h.Settled(ProcessorGroup, envelope.TopicUsageEvents)
	mu.Lock()
	defer mu.Unlock()
	trips, calls := rt.count()
	if events != 3 || trips != batches || calls != events+batches || guard.recovered.Load() != 0 {
		t.Errorf("%d events in %d batches: %d round trips carrying %d calls, want %d carrying %d (recoveries: %d)",
			events, batches, trips, calls, batches, events+batches, guard.recovered.Load())
	}
}
