package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/charging/smfsim"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/recovery"
	"github.com/dabom/dpcs/service/store"
	"github.com/dabom/dpcs/simulate"
)

// The all-in-one's charging interface charges through the door
// (judge.Decisions.Charge; doc/architecture.md, "Grants"). Simulated SMFs
// (smfsim) run several PDU sessions of the demo family's four members at
// once, sharing its pool: at no sampled instant do the family's used and
// reserved bytes exceed the pool. Two grants are held across a Redis
// loss: once the door has restored the family from SQL they hold what
// they held, and the sessions that follow are judged beside them. A
// retried step is answered as first and charges nothing more; a release
// of a grant never opened succeeds and charges what it reports. In the
// end SQL holds exactly what the SMFs were told was charged, and agrees
// with Redis (recovery.CheckInvariants).
func TestSystemChargesThroughTheDoor(t *testing.T) {
	testenv.SkipShort(t, "the all-in-one with simulated SMFs, a Redis loss, then the invariants")
	testenv.AwayFromMidnight(t) // the checks compare this month's counters
	ctx := context.Background()
	cfg := testSystemConfig(t)
	cfg.Charging.Addr = "127.0.0.1:0"
	cfg.SimulatorSessions = 0 // the test runs its own SMFs, on one family
	s, err := StartSystem(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if s.Charging == nil {
		t.Fatal("the charging interface did not start with the door's decisions")
	}
	const fid = DemoFamilyID
	if _, err := s.Family.SetPlan(ctx, fid, 24<<20, store.System); err != nil {
		t.Fatal(err)
	}
	var subs []string
	for i := range 4 {
		subs = append(subs, fmt.Sprintf("msisdn-82100000010%d", i)) // the demo family's phones, 010-0000-010i
	}

	// The sampler: used + reserved never above the pool.
	var mu sync.Mutex
	var broke []string
	samples := 0
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			st, err := s.Engine.Family(ctx, fid)
			if err != nil || !st.Provisioned {
				continue // Redis lost, not restored yet
			}
			mu.Lock()
			samples++
			if st.Used+st.Reserved > st.Total {
				broke = append(broke, fmt.Sprintf("used %d + reserved %d > total %d (grants %+v)", st.Used, st.Reserved, st.Total, st.Grants))
			}
			mu.Unlock()
		}
	}()
	var charged int64 // what the SMFs were told was charged
	runSMFs := func(seed uint64) {
		t.Helper()
		sim, err := smfsim.New(smfsim.Config{URL: "http://" + s.Charging.Addr, Token: s.Charging.Token, Subscribers: subs,
			Sessions: 6, Seed: seed, Rate: [2]int64{2 << 20, 8 << 20}, Lifetime: [2]time.Duration{300 * time.Millisecond, 1500 * time.Millisecond},
			RatingGroups: []uint32{10, 50}})
		if err != nil {
			t.Fatal(err)
		}
		if err := sim.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(90 * time.Second); sim.Stats().Updates+sim.Stats().Releases < 30; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("simulated SMFs: %+v", sim.Stats())
			}
		}
		if err := sim.Close(ctx); err != nil {
			t.Fatal(err)
		}
		st := sim.Stats()
		if st.Creates == 0 || st.GrantedBytes == 0 || st.UsedBytes == 0 {
			t.Errorf("simulated SMFs (seed %d): %+v", seed, st)
		}
		charged += int64(st.UsedBytes)
		t.Logf("simulated SMFs (seed %d): %+v", seed, st)
	}
	family := func() quota.FamilyStatus {
		t.Helper()
		st, err := s.Engine.Family(ctx, fid)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	charge := func(op quota.GrantOp) (quota.GrantResult, error) {
		op.FamilyID, op.At = fid, time.Now()
		rs, err := s.Decisions.Charge(ctx, []quota.GrantOp{op})
		if err != nil {
			return quota.GrantResult{}, err
		}
		return rs[0], nil
	}
	// retryable: a 503 that charged nothing — stale until rebuilt, or
	// unavailable while a slow restore (-race on a loaded machine)
	// outlasts the decisions' timeout. The retry takes the same step id.
	retryable := func(err error) bool {
		return errors.Is(err, quota.ErrStale) || errors.Is(err, judge.ErrUnavailable)
	}
	mustCharge := func(what string, op quota.GrantOp) quota.GrantResult {
		t.Helper()
		r, err := charge(op)
		for deadline := time.Now().Add(60 * time.Second); err != nil && retryable(err) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			r, err = charge(op)
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		charged += r.Charged
		return r
	}

	runSMFs(1)
	if st := family(); st.Reserved != 0 || len(st.Grants) != 0 {
		t.Fatalf("the SMFs released every session, yet the family holds %d: %+v", st.Reserved, st.Grants)
	}

	// The owner buys room (the SMFs took the pool to its end), and two
	// sessions are held across the loss.
	if _, err := s.Family.SetPlan(ctx, fid, family().Used+16<<20, store.System); err != nil {
		t.Fatal(err)
	}
	ha := quota.GrantOp{ID: "held-a/1", GrantID: "held-a", CustomerID: simulate.CustomerID(fid, 2), AppID: "com.youtube.app", Requested: 2 << 20}
	hb := quota.GrantOp{ID: "held-b/1", GrantID: "held-b", CustomerID: simulate.CustomerID(fid, 3), Requested: 3 << 20}
	ra, rb := mustCharge("held-a", ha), mustCharge("held-b", hb)
	if ra.Granted != 2<<20 || rb.Granted != 3<<20 {
		t.Fatalf("held grants: %+v, %+v", ra, rb)
	}
	before := family()
	if before.Reserved != 5<<20 || len(before.Grants) != 2 {
		t.Fatalf("before the loss: reserved %d, grants %+v", before.Reserved, before.Grants)
	}

	// A retry of a step is answered as first and charges nothing more.
	hb2 := quota.GrantOp{ID: "held-b/2", GrantID: "held-b", CustomerID: hb.CustomerID, Used: 1 << 20, Requested: 3 << 20}
	first := mustCharge("held-b update", hb2)
	again, err := charge(hb2)
	if err != nil || !again.Duplicate || again.Charged != first.Charged || again.Granted != first.Granted || again.Remaining != first.Remaining {
		t.Fatalf("held-b's update retried: %+v, %v; first %+v", again, err, first)
	}
	if st := family(); st.Used != before.Used+1<<20 {
		t.Fatalf("used %d after an update and its retry, want %d", st.Used, before.Used+1<<20)
	}
	// A release of a grant never opened succeeds: charged, nothing granted.
	rel := mustCharge("release of an unknown grant", quota.GrantOp{ID: "never/9", GrantID: "never", CustomerID: simulate.CustomerID(fid, 1),
		Used: 512 << 10, Release: true})
	if rel.Charged != 512<<10 || rel.Granted != 0 {
		t.Fatalf("release of an unknown grant: %+v", rel)
	}
	before = family()

	// Redis lost: the door finds the state stale, the guard rebuilds it
	// from SQL, and the held reservations are back before anything more
	// is granted.
	s.redisSrv.FlushAll()
	deadline := time.Now().Add(60 * time.Second)
	var retried quota.GrantResult
	for {
		r, err := charge(hb2)
		if err == nil {
			retried = r
			break
		}
		if time.Now().After(deadline) || !retryable(err) {
			t.Fatalf("held-b's update retried after the loss: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !retried.Duplicate || retried.Charged != first.Charged || retried.Granted != first.Granted {
		t.Errorf("held-b's update retried after the loss: %+v; first %+v", retried, first)
	}
	after := family()
	if after.Used != before.Used || after.Reserved != before.Reserved || len(after.Grants) != len(before.Grants) {
		t.Fatalf("after the loss: used %d reserved %d grants %+v; before: used %d reserved %d grants %+v",
			after.Used, after.Reserved, after.Grants, before.Used, before.Reserved, before.Grants)
	}
	for i, g := range after.Grants {
		if b := before.Grants[i]; g.GrantID != b.GrantID || g.Reserved != b.Reserved || g.Step != b.Step {
			t.Errorf("grant %d after the loss %+v, before %+v", i, g, b)
		}
	}

	// More sessions beside the restored reservations, then the held ones end.
	runSMFs(2)
	mustCharge("held-a release", quota.GrantOp{ID: "held-a/2", GrantID: "held-a", CustomerID: ha.CustomerID, Used: 2 << 20, Release: true})
	mustCharge("held-b release", quota.GrantOp{ID: "held-b/3", GrantID: "held-b", CustomerID: hb.CustomerID, Used: 1 << 20, Release: true})
	close(stop)
	<-stopped
	mu.Lock()
	if len(broke) > 0 || samples < 20 {
		t.Fatalf("%d of %d samples overspent; first: %v", len(broke), samples, broke)
	}
	mu.Unlock()
	if st := family(); st.Reserved != 0 || len(st.Grants) != 0 {
		t.Errorf("every session ended, yet the family holds %d: %+v", st.Reserved, st.Grants)
	}

	// SQL holds what the SMFs were told, and agrees with Redis.
	var inSQL int64
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := s.DB.QueryRowContext(ctx, `SELECT COALESCE(SUM(bytes_used), 0) FROM usage_record WHERE family_id = ? AND grant_id <> ''`, fid).Scan(&inSQL); err != nil {
			t.Fatal(err)
		}
		if inSQL == charged && recovery.CheckInvariants(ctx, s.State, s.DB, []int64{fid}) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SQL charges %d, the SMFs were charged %d; invariants: %v", inSQL, charged,
				recovery.CheckInvariants(ctx, s.State, s.DB, []int64{fid}))
		}
	}
}
