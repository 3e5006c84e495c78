package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service"
	"github.com/dabom/dpcs/service/store"
	"github.com/dabom/dpcs/writebehind"
)

// testRebuild drives a family through the API path (store + engine), judges
// events and persists them like the write-behind, loses Redis (FLUSHALL) and
// rebuilds it from SQL.
func testRebuild(t *testing.T, e *env) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	eng, err := quota.New(rdb, quota.WithClock(e.clk.Now), quota.WithLocation(seoul))
	if err != nil {
		t.Fatal(err)
	}
	ctx := e.ctx
	for _, fid := range []int64{1, 2} {
		e.family(t, fid)
		if _, err := eng.SetPlan(ctx, fid, 10<<20); err != nil {
			t.Fatal(err)
		}
		for _, cid := range []int64{fid*10 + 1, fid*10 + 2} {
			if err := eng.AddMember(ctx, fid, cid); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A third member, removed later: its usage still counts against the pool.
	if _, err := e.s.AddMember(ctx, store.NewMember{ID: 13, FamilyID: 1, Name: "gone", Role: policy.RoleMember}, owner); err != nil {
		t.Fatal(err)
	}
	if err := eng.AddMember(ctx, 1, 13); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.SetThresholds(ctx, 1, policy.Thresholds{80, 40}, owner); err != nil {
		t.Fatal(err)
	}
	if err := eng.SetThresholds(ctx, 1, policy.Thresholds{80, 40}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.AddTopUp(ctx, 1, 2<<20, owner); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.TopUp(ctx, 1, 2<<20); err != nil {
		t.Fatal(err)
	}
	up, err := e.s.UpdatePolicy(ctx, store.PolicyChange{FamilyID: 1, CustomerID: 12, Set: map[string]string{"LIMIT:DATA:MONTHLY": "3000000", "BLOCK:APP:yt": "1"}, By: owner})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.SetConstraints(ctx, 1, 12, up.Policy.Version, up.Policy.Rules); err != nil {
		t.Fatal(err)
	}

	w, err := writebehind.NewUsageWriter(e.db)
	if err != nil {
		t.Fatal(err)
	}
	seq := 0
	judge := func(fid, cid, n int64, app string, at time.Time) {
		t.Helper()
		seq++
		ev := quota.Event{ID: fmt.Sprint("evt_", seq), FamilyID: fid, CustomerID: cid, Bytes: n, AppID: app, At: at}
		r, err := eng.Apply(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(ctx, []writebehind.UsageRecord{{EventID: ev.ID, FamilyID: fid, CustomerID: cid, AppID: app, BytesUsed: n,
			ProcessResult: string(r.Decision), RemainingAfter: r.Remaining, Rule: r.Rule, EventTime: at}}); err != nil {
			t.Fatal(err)
		}
	}
	judge(1, 11, 5<<20, "web", start.AddDate(0, 0, -5))
	judge(1, 12, 2<<20, "web", start.Add(-time.Hour))
	judge(1, 12, 2<<20, "web", start.Add(-time.Minute)) // over the monthly limit: blocked
	judge(1, 12, 1, "yt", start.Add(-time.Minute))      // app blocked
	judge(1, 13, 1<<20, "web", start.Add(-2*time.Hour))
	judge(2, 21, 1<<20, "web", start.AddDate(0, -1, 0)) // last month: not in this month's pool
	judge(2, 22, 3<<20, "web", start)
	if err := e.s.RemoveMember(ctx, 1, 13, owner); err != nil {
		t.Fatal(err)
	}
	if err := eng.RemoveMember(ctx, 1, 13); err != nil {
		t.Fatal(err)
	}
	families := []int64{1, 2}
	before := map[int64]quota.FamilyStatus{}
	for _, fid := range families {
		if before[fid], err = eng.Family(ctx, fid); err != nil {
			t.Fatal(err)
		}
	}
	if len(before[1].Fired) == 0 {
		t.Fatalf("test setup: no threshold fired: %+v", before[1])
	}
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := store.Rebuild(ctx, e.db, eng); err != nil { // every family
		t.Fatal(err)
	}
	for _, fid := range families {
		after, err := eng.Family(ctx, fid)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(before[fid], after); diff != "" {
			t.Errorf("family %d after rebuild (-before +after):\n%s", fid, diff)
		}
	}
	// Family 2 has last month's history, which CheckInvariants (comparing
	// all of usage_record with this month's counters) does not model.
	if err := service.CheckInvariants(ctx, eng, e.db, []int64{1}); err != nil {
		t.Errorf("invariants after rebuild: %v", err)
	}
	// The next event is judged as before the loss: 1 MB more is over 12's limit.
	if r, err := eng.Apply(ctx, quota.Event{ID: "evt_next", FamilyID: 1, CustomerID: 12, Bytes: 1 << 20, AppID: "web", At: start}); err != nil ||
		r.Decision != policy.BlockedLimitMonthly {
		t.Errorf("next event of 12 = %+v, %v", r, err)
	}
	if err := store.Rebuild(ctx, e.db, eng, 2); err != nil { // one family, again
		t.Fatal(err)
	}
	if err := store.Rebuild(ctx, e.db, eng, 404); err == nil {
		t.Error("Rebuild(unknown family) succeeded")
	}
	if err := store.Rebuild(ctx, nil, eng); err == nil {
		t.Error("Rebuild(nil db) succeeded")
	}
}
