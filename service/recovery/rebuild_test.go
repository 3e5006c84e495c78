package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/recovery"
	"github.com/dabom/dpcs/service/store"
)

// testRebuild drives a family through the API path (store + engine), judges
// events and persists them like the write-behind, loses Redis (FLUSHALL) and
// rebuilds it from SQL.
func testRebuild(t *testing.T, e *env) {
	eng, rdb := e.engine(t)
	ctx := e.Ctx
	for _, fid := range []int64{1, 2} {
		e.Family(t, fid)
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
	if _, err := e.S.AddMember(ctx, store.NewMember{ID: 13, FamilyID: 1, Name: "gone", Role: policy.RoleMember}, owner); err != nil {
		t.Fatal(err)
	}
	if err := eng.AddMember(ctx, 1, 13); err != nil {
		t.Fatal(err)
	}
	if _, err := e.S.SetThresholds(ctx, 1, policy.Thresholds{80, 40}, owner); err != nil {
		t.Fatal(err)
	}
	if err := eng.SetThresholds(ctx, 1, policy.Thresholds{80, 40}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.S.AddTopUp(ctx, 1, 2<<20, owner); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.TopUp(ctx, 1, 2<<20); err != nil {
		t.Fatal(err)
	}
	up, err := e.S.UpdatePolicy(ctx, store.PolicyChange{FamilyID: 1, CustomerID: 12, Set: map[string]string{"LIMIT:DATA:MONTHLY": "3000000", "BLOCK:APP:yt": "1"}, By: owner})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.SetConstraints(ctx, 1, 12, up.Policy.Version, up.Policy.Rules); err != nil {
		t.Fatal(err)
	}

	w, err := store.NewUsageWriter(e.DB)
	if err != nil {
		t.Fatal(err)
	}
	seq := 0
	type judgedEvent struct {
		ev quota.Event
		r  quota.Result
	}
	var judged []judgedEvent
	judge := func(fid, cid, n int64, app string, at time.Time) {
		t.Helper()
		seq++
		ev := quota.Event{ID: fmt.Sprint("evt_", seq), FamilyID: fid, CustomerID: cid, Bytes: n, AppID: app, At: at}
		r, err := eng.Apply(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		judged = append(judged, judgedEvent{ev, r})
		var cs []envelope.Crossing
		for i, p := range r.Crossed {
			cs = append(cs, envelope.Crossing{Percent: p, Arm: r.Arms[i]})
		}
		if err := w.Write(ctx, []store.UsageRecord{{EventID: ev.ID, FamilyID: fid, CustomerID: cid, AppID: app, BytesUsed: n,
			ProcessResult: string(r.Decision), RemainingAfter: r.Remaining, Rule: r.Rule, EventTime: at,
			TotalBytes: r.Total, DailyUsed: r.DailyUsed, MonthlyUsed: r.MonthlyUsed, ThrottleKbps: r.ThrottleKbps, Crossed: cs}}); err != nil {
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
	if err := e.S.RemoveMember(ctx, 1, 13, owner); err != nil {
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
	if rep, err := recovery.Rebuild(ctx, e.S, mustState(t, eng), ""); err != nil || rep.Rebuilt != 2 || len(rep.Failed) != 0 { // every family
		t.Fatalf("Rebuild = %+v, %v; want 2 families rebuilt", rep, err)
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
	// Every judged event's replay gets its original result, crossings and
	// arms included (the dedupe records came back from usage_record) —
	// every event a consumer may take again: none older than the dedupe
	// window (quota's contract; a rebuild reads no row of an earlier
	// month older than twice the window).
	for _, j := range judged {
		if j.ev.At.Before(start.Add(-24 * time.Hour)) {
			continue
		}
		r, err := eng.Apply(ctx, j.ev)
		want := j.r
		want.Duplicate = true
		if err != nil || !cmp.Equal(want, r, cmpopts.EquateEmpty()) {
			t.Errorf("replay of %s after rebuild = %+v, %v; want %+v", j.ev.ID, r, err, want)
		}
	}
	// Family 2 has last month's history, which CheckInvariants (comparing
	// all of usage_record with this month's counters) does not model.
	if err := recovery.CheckInvariants(ctx, eng, e.DB, []int64{1}); err != nil {
		t.Errorf("invariants after rebuild: %v", err)
	}
	// The next event is judged as before the loss: 1 MB more is over 12's limit.
	if r, err := eng.Apply(ctx, quota.Event{ID: "evt_next", FamilyID: 1, CustomerID: 12, Bytes: 1 << 20, AppID: "web", At: start}); err != nil ||
		r.Decision != policy.BlockedLimitMonthly {
		t.Errorf("next event of 12 = %+v, %v", r, err)
	}
	if _, err := recovery.Rebuild(ctx, e.S, mustState(t, eng), "", 2); err != nil { // one family, again
		t.Fatal(err)
	}
	if _, err := recovery.Rebuild(ctx, e.S, mustState(t, eng), "", 404); err == nil {
		t.Error("Rebuild(unknown family) succeeded")
	}
	if _, err := recovery.Rebuild(ctx, nil, mustState(t, eng), ""); err == nil {
		t.Error("Rebuild(nil store) succeeded")
	}
}

// testRebuildReport: a family the engine refuses to restore (SQL written by
// code that did not check the pool's maximum) does not stop the rebuild of
// the others; it is reported with its id and reason. Failing to list the
// families and a cancelled context stop the rebuild.
func testRebuildReport(t *testing.T, e *env) {
	eng, rdb := e.engine(t)
	ctx := e.Ctx
	for _, fid := range []int64{1, 2, 3} {
		e.Family(t, fid)
	}
	// Family 2: plan 10 MiB + a top-up of the maximum, as the API wrote it
	// before top-ups were checked in SQL.
	if _, err := e.DB.ExecContext(ctx, `INSERT INTO topups (family_id, bytes, month, created_by, created_at)
		VALUES (2, ?, '202602', 1, '2026-02-10 03:00:00')`, policy.MaxBytes); err != nil {
		t.Fatal(err)
	}

	type failure struct {
		FamilyID int64
		Invalid  bool // the engine refused the state
		NotFound bool
	}
	failures := func(r recovery.Report) []failure {
		var out []failure
		for _, f := range r.Failed {
			out = append(out, failure{f.FamilyID, errors.Is(f, quota.ErrInvalid), errors.Is(f, store.ErrNotFound)})
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		families []int64
		rebuilt  int
		failed   []failure
	}{
		{"every family", nil, 2, []failure{{FamilyID: 2, Invalid: true}}},
		{"named families", []int64{404, 2, 3}, 1, []failure{{FamilyID: 404, NotFound: true}, {FamilyID: 2, Invalid: true}}},
	} {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		rep, err := recovery.Rebuild(ctx, e.S, mustState(t, eng), "", tc.families...)
		if !errors.Is(err, recovery.ErrIncomplete) {
			t.Errorf("%s: err = %v, want ErrRebuildIncomplete", tc.name, err)
		}
		if err != nil && !strings.Contains(err.Error(), "family 2") {
			t.Errorf("%s: err %q does not name family 2", tc.name, err)
		}
		if rep.Rebuilt != tc.rebuilt {
			t.Errorf("%s: Rebuilt = %d, want %d", tc.name, rep.Rebuilt, tc.rebuilt)
		}
		if diff := cmp.Diff(tc.failed, failures(rep)); diff != "" {
			t.Errorf("%s: failures (-want +got):\n%s", tc.name, diff)
		}
		// Family 3 comes after the failing one and is rebuilt all the same.
		if st, err := eng.Family(ctx, 3); err != nil || !st.Provisioned || st.Total != 10<<20 || len(st.Members) != 2 {
			t.Errorf("%s: family 3 after the rebuild: %+v, %v", tc.name, st, err)
		}
	}

	// In a generation rebuild a family that fails is left empty in the new
	// generation: its events are refused as not a member, never as a state
	// of another generation (which made every recovery rebuild again).
	if err := eng.Restore(ctx, quota.FamilyState{FamilyID: 2, Provisioned: true, Plan: 1 << 20,
		Members: []quota.MemberState{{CustomerID: 21}}, Generation: "g1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.BeginRebuild(ctx, "g2"); err != nil {
		t.Fatal(err)
	}
	if rep, err := recovery.Rebuild(ctx, e.S, mustState(t, eng), "g2"); !errors.Is(err, recovery.ErrIncomplete) || len(rep.Failed) != 1 {
		t.Fatalf("RebuildGeneration = %+v, %v; want family 2 failed", rep, err)
	}
	if err := eng.FinishRebuild(ctx, "g2", nil); err != nil {
		t.Fatal(err)
	}
	rs, err := eng.ApplyMarked(ctx, "g2", []quota.Mark{{Stream: "usage-events/0", From: 0, To: 1}},
		[]quota.Event{{ID: "evt_g2", FamilyID: 2, CustomerID: 21, Bytes: 1, At: e.Clock.Now()}})
	if err != nil || rs[0].Decision != policy.BlockedNotMember {
		t.Errorf("event of the family that failed to rebuild = %v, %v; want BLOCKED_NOT_MEMBER", rs, err)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	rep, err := recovery.Rebuild(cancelled, e.S, mustState(t, eng), "", 1, 3)
	if !errors.Is(err, context.Canceled) || errors.Is(err, recovery.ErrIncomplete) || len(rep.Failed) != 0 {
		t.Errorf("cancelled: %+v, %v; want context.Canceled and no family blamed", rep, err)
	}
	e.DB.Close()
	rep, err = recovery.Rebuild(ctx, e.S, mustState(t, eng), "")
	if err == nil || errors.Is(err, recovery.ErrIncomplete) || rep.Rebuilt != 0 || len(rep.Failed) != 0 {
		t.Errorf("unreadable family list: %+v, %v; want a hard error", rep, err)
	}
}

// testRebuildPages: more families than one page of the batched reader, with
// bad rows scattered over the pages — a top-up over the pool's maximum, a
// thresholds value and a policy that do not parse, a crossing that does not
// parse. Exactly those families fail, in id order, each with its reason;
// every other family is restored, also across the page boundaries.
func testRebuildPages(t *testing.T, e *env) {
	eng, _ := e.engine(t)
	ctx := e.Ctx
	const families = 2005
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := e.DB.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for lo := 1; lo <= families; lo += 500 {
		var fam, mem []string
		for f := lo; f < min(lo+500, families+1); f++ {
			fam = append(fam, fmt.Sprintf("(%d, 'f%d', %d, '2026-02-01 00:00:00.000', '2026-02-01 00:00:00.000')", f, f, 10<<20))
			mem = append(mem, fmt.Sprintf("(%d, %d, 'm', 'MEMBER', '2026-02-01 00:00:00.000', '2026-02-01 00:00:00.000')", f*10+1, f))
		}
		exec(`INSERT INTO families (id, name, plan_bytes, created_at, updated_at) VALUES ` + strings.Join(fam, ","))
		exec(`INSERT INTO members (id, family_id, name, role, created_at, updated_at) VALUES ` + strings.Join(mem, ","))
	}
	exec(`INSERT INTO topups (family_id, bytes, month, created_by, created_at) VALUES (3, ?, '202602', 1, '2026-02-10 03:00:00.000')`, policy.MaxBytes)
	exec(`UPDATE families SET thresholds = 'x' WHERE id = 1000`)
	exec(`INSERT INTO policy_assignment (customer_id, family_id, rules, version, updated_by, updated_at)
		VALUES (10011, 1001, '{"LIMIT:DATA:MONTHLY":"5"}', 2, 1, '2026-02-10 03:00:00.000'),
		       (15001, 1500, '[1]', 1, 1, '2026-02-10 03:00:00.000')`)
	exec(`INSERT INTO usage_record (event_id, family_id, customer_id, bytes_used, process_result, remaining_after, event_time, created_at, crossed)
		VALUES ('e1', 1999, 19991, 1000, 'ALLOWED', 0, '2026-02-10 02:00:00.000', '2026-02-10 02:00:01.000', ''),
		       ('e2', 2004, 20041, 1000, 'ALLOWED', 0, '2026-02-10 02:00:00.000', '2026-02-10 02:00:01.000', '50:x')`)

	rep, err := recovery.Rebuild(ctx, e.S, mustState(t, eng), "g1")
	if !errors.Is(err, recovery.ErrIncomplete) || !errors.Is(err, quota.ErrInvalid) {
		t.Errorf("err = %v, want ErrRebuildIncomplete wrapping quota.ErrInvalid", err)
	}
	var failed []int64
	for _, f := range rep.Failed {
		failed = append(failed, f.FamilyID)
	}
	if diff := cmp.Diff([]int64{3, 1000, 1500, 2004}, failed); diff != "" {
		t.Errorf("failed families (-want +got):\n%s", diff)
	}
	if rep.Rebuilt != families-4 {
		t.Errorf("Rebuilt = %d, want %d", rep.Rebuilt, families-4)
	}
	for _, f := range rep.Failed {
		if !strings.Contains(f.Error(), fmt.Sprintf("family %d", f.FamilyID)) {
			t.Errorf("failure %q does not name its family", f.Error())
		}
	}
	for _, f := range []int64{1, 999, 1001, 1002, 1999, 2000, 2001, 2005} {
		st, err := eng.Family(ctx, f)
		if err != nil || !st.Provisioned || st.Total != 10<<20 || len(st.Members) != 1 {
			t.Errorf("family %d after the rebuild: %+v, %v", f, st, err)
		}
	}
	if st, err := eng.Status(ctx, 1999, 19991); err != nil || st.MonthlyUsed != 1000 {
		t.Errorf("family 1999's usage after the rebuild: %+v, %v", st, err)
	}
	if st, err := eng.Status(ctx, 1001, 10011); err != nil || st.Version != 2 || st.Constraints["LIMIT:DATA:MONTHLY"] != "5" {
		t.Errorf("family 1001's policy after the rebuild: %+v, %v", st, err)
	}
	if st, err := eng.Family(ctx, 1000); err != nil || st.Provisioned {
		t.Errorf("family 1000 (unreadable thresholds) was restored: %+v, %v", st, err)
	}
}

// testRebuildTransientSQL: a query that fails while families are read (a
// connection refused, a table briefly unreadable) is not a family's fault.
// The rebuild stops with an error that is not ErrIncomplete, blames no
// family, and leaves every family's Redis state as it was, so the caller
// (Guard) publishes no generation and tries again; once SQL answers, the
// same rebuild restores every family. (It used to charge the failure to
// every family read meanwhile: each was emptied in the new generation and
// its members judged BLOCKED_NOT_MEMBER until a rebuild by hand.)
func testRebuildTransientSQL(t *testing.T, e *env) {
	eng, _ := e.engine(t)
	ctx := e.Ctx
	for _, fid := range []int64{1, 2, 3} {
		e.Family(t, fid)
	}
	qs := mustState(t, eng)
	if rep, err := recovery.Rebuild(ctx, e.S, qs, "g1"); err != nil || rep.Rebuilt != 3 {
		t.Fatalf("first rebuild: %+v, %v", rep, err)
	}
	before, err := eng.Family(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	// The members table cannot be read while the next rebuild reads.
	if _, err := e.DB.ExecContext(ctx, `ALTER TABLE members RENAME TO members_away`); err != nil {
		t.Fatal(err)
	}
	for _, fams := range [][]int64{nil, {1, 2, 3}} {
		rep, err := recovery.Rebuild(ctx, e.S, qs, "g2", fams...)
		if err == nil || errors.Is(err, recovery.ErrIncomplete) || len(rep.Failed) != 0 {
			t.Errorf("rebuild %v with SQL failing: %+v, %v; want a plain error and no family blamed", fams, rep, err)
		}
	}
	after, err := eng.Family(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("family 2 changed by a rebuild that could not read SQL (-before +after):\n%s", diff)
	}
	if _, err := e.DB.ExecContext(ctx, `ALTER TABLE members_away RENAME TO members`); err != nil {
		t.Fatal(err)
	}
	if rep, err := recovery.Rebuild(ctx, e.S, qs, "g2"); err != nil || rep.Rebuilt != 3 || len(rep.Failed) != 0 {
		t.Errorf("rebuild once SQL answers: %+v, %v; want every family", rep, err)
	}
}

// racingEngine runs, once, an API write (committed in SQL, then written to
// Redis through the door) right before the rebuild restores family 1: the
// write lands between the rebuild's read of the family and its restore.
type racingEngine struct {
	judge.Engine
	once  sync.Once
	write func()
}

func (r *racingEngine) RestoreBatch(ctx context.Context, sts []quota.FamilyState) ([]quota.RestoreOutcome, error) {
	for _, st := range sts {
		if st.FamilyID == 1 {
			r.once.Do(r.write)
		}
	}
	return r.Engine.RestoreBatch(ctx, sts)
}

// testRebuildRacingWrite: an API write landing between a rebuild's read of
// a family and its restore is not overwritten by the older state read —
// a member removed meanwhile stays removed, a plan cut stays cut. (The
// restore used to win until the next rebuild: the removed member was
// ALLOWED again.)
func testRebuildRacingWrite(t *testing.T, e *env) {
	eng, _ := e.engine(t)
	ctx := e.Ctx
	for _, fid := range []int64{1, 2} {
		e.Family(t, fid)
	}
	if _, err := e.S.AddMember(ctx, store.NewMember{ID: 13, FamilyID: 1, Name: "m13", Role: policy.RoleMember, Password: "pw-pw-pw-pw"}, owner); err != nil {
		t.Fatal(err)
	}
	var victim int64
	racer := &racingEngine{Engine: eng}
	qs := mustState(t, racer)
	racer.write = func() {
		// The API's removal of a member and plan cut: SQL, then Redis.
		if err := e.S.RemoveMember(ctx, 1, victim, owner); err != nil {
			t.Error(err)
		}
		if err := qs.RemoveMember(ctx, 1, victim); err != nil {
			t.Error(err)
		}
		if _, err := e.S.SetPlan(ctx, 1, 1<<20, owner); err != nil {
			t.Error(err)
		}
		if _, err := qs.SetPlan(ctx, 1, 1<<20); err != nil {
			t.Error(err)
		}
	}
	for i, fams := range [][]int64{nil, {1, 2}} {
		racer.once, victim = sync.Once{}, int64(12+i)
		// The plan as it was before the write.
		if _, err := e.S.SetPlan(ctx, 1, 10<<20, owner); err != nil {
			t.Fatal(err)
		}
		rep, err := recovery.Rebuild(ctx, e.S, qs, "g1", fams...)
		if err != nil || rep.Rebuilt != 2 {
			t.Fatalf("rebuild %v: %+v, %v", fams, rep, err)
		}
		fs, err := eng.Family(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, ms := range fs.Members {
			if ms.CustomerID == victim {
				t.Errorf("rebuild %v: member %d, removed while the family was rebuilt, is back", fams, victim)
			}
		}
		if fs.Total != 1<<20 {
			t.Errorf("rebuild %v: pool %d, want the plan cut to %d while the family was rebuilt", fams, fs.Total, 1<<20)
		}
	}
}

// countingEngine counts the restores that wrote, by family, and calls
// during each batch restore of a sweep.
type countingEngine struct {
	judge.Engine
	mu       sync.Mutex
	restored map[int64]int
	calls    int
	// during, when set, runs before each batch restore, one at a time
	// (dmu held).
	during func()
	dmu    sync.Mutex
}

func (c *countingEngine) RestoreUnrestoredBatch(ctx context.Context, sts []quota.FamilyState, seen []string) ([]quota.RestoreOutcome, error) {
	c.mu.Lock()
	c.calls++
	during := c.during
	c.mu.Unlock()
	if during != nil {
		c.dmu.Lock()
		during()
		c.dmu.Unlock()
	}
	out, err := c.Engine.RestoreUnrestoredBatch(ctx, sts, seen)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, o := range out {
		if o.Restored {
			c.restored[sts[i].FamilyID]++
		}
	}
	return out, err
}

func (c *countingEngine) RestoreUnrestored(ctx context.Context, st quota.FamilyState, seen string) (bool, error) {
	ok, err := c.Engine.RestoreUnrestored(ctx, st, seen)
	if ok {
		c.mu.Lock()
		c.restored[st.FamilyID]++
		c.mu.Unlock()
	}
	return ok, err
}

// testRebuildSweepOnce: the sweep of a generation restored on touch,
// several batches restored at once over pages of families while
// judgements restore families on touch, restores every family exactly once
// (never one a touch restored first), and a sweep whose context ends stops
// its workers before it returns.
func testRebuildSweepOnce(t *testing.T, e *env) {
	eng, _ := e.engine(t)
	ctx := e.Ctx
	const families = 1234
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := e.DB.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for lo := 1; lo <= families; lo += 500 {
		var fam, mem []string
		for f := lo; f < min(lo+500, families+1); f++ {
			fam = append(fam, fmt.Sprintf("(%d, 'f%d', %d, '2026-02-01 00:00:00.000', '2026-02-01 00:00:00.000')", f, f, 10<<20))
			mem = append(mem, fmt.Sprintf("(%d, %d, 'm', 'MEMBER', '2026-02-01 00:00:00.000', '2026-02-01 00:00:00.000')", f*10+1, f))
		}
		exec(`INSERT INTO families (id, name, plan_bytes, created_at, updated_at) VALUES ` + strings.Join(fam, ","))
		exec(`INSERT INTO members (id, family_id, name, role, created_at, updated_at) VALUES ` + strings.Join(mem, ","))
	}
	name := func(gen string) {
		t.Helper()
		if _, err := eng.BeginRebuild(ctx, gen); err != nil {
			t.Fatal(err)
		}
		if err := eng.FinishRebuild(ctx, gen, nil); err != nil {
			t.Fatal(err)
		}
	}
	counter := &countingEngine{Engine: eng, restored: map[int64]int{}}
	qs, err := judge.NewState(counter, judge.WithFamilySource(recovery.NewFamilySource(e.S, eng)))
	if err != nil {
		t.Fatal(err)
	}

	// Judgements meet families (every 7th, from the last) while the sweep
	// runs: each restores its family on touch first.
	gen := quota.NewOnTouchGeneration(start, "once")
	name(gen)
	touch, touched := families, 0
	counter.during = func() {
		if touch < 1 {
			return
		}
		fid := int64(touch)
		touch -= 7
		_, err := eng.ApplyMarked(ctx, gen, nil, []quota.Event{{ID: fmt.Sprint("e", fid), FamilyID: fid, CustomerID: fid*10 + 1, Bytes: 1, At: start}})
		var un *quota.UnrestoredError
		if !errors.As(err, &un) {
			return // the sweep restored it first
		}
		if err := qs.RestoreOnTouch(ctx, gen, un.Seen); err != nil {
			t.Error(err)
		}
		touched++
	}
	rep, err := recovery.Rebuild(ctx, e.S, qs, gen)
	if err != nil || len(rep.Failed) != 0 || rep.Rebuilt != families {
		t.Fatalf("sweep: %+v, %v; want every family", rep, err)
	}
	for f := int64(1); f <= families; f++ {
		if n := counter.restored[f]; n != 1 {
			t.Errorf("family %d restored %d times, want once", f, n)
		}
	}
	if touched == 0 {
		t.Error("no family was restored on touch during the sweep")
	}

	// A sweep cancelled during its first batch stops: its workers are done
	// when it returns, and it restored less than a page.
	gen2 := quota.NewOnTouchGeneration(start.Add(time.Second), "cancelled")
	name(gen2)
	sctx, cancel := context.WithCancel(ctx)
	returned := false
	counter.mu.Lock()
	counter.calls, counter.during = 0, func() {
		cancel()
		if returned {
			t.Error("a batch restore began after the sweep returned")
		}
	}
	counter.mu.Unlock()
	rep, err = recovery.Rebuild(sctx, e.S, qs, gen2)
	counter.dmu.Lock()
	returned = true
	counter.dmu.Unlock()
	counter.mu.Lock()
	calls := counter.calls
	counter.mu.Unlock()
	if !errors.Is(err, context.Canceled) || errors.Is(err, recovery.ErrIncomplete) || len(rep.Failed) != 0 || rep.Rebuilt >= families {
		t.Errorf("cancelled sweep: %+v, %v; want context.Canceled, no family blamed, not every family restored", rep, err)
	}
	if calls >= (families+99)/100 {
		t.Errorf("%d batch restores after the sweep was cancelled in its first, want it stopped", calls)
	}
}
