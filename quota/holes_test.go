package quota

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dabom/dpcs/policy"
)

// The integrity holes a review found (issue #12): each failed before its fix.

func holeEngine(t *testing.T, now *time.Time) *Engine {
	t.Helper()
	seoul, _ := policy.LoadZone(policy.DefaultZone)
	e, err := New(newMiniredis(t), WithLocation(seoul), WithClock(func() time.Time { return *now }))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// The same event id with a timestamp on the other side of midnight was
// charged twice: dedupe was keyed by the event's own day.
func TestReplayAcrossMidnightIsDuplicate(t *testing.T) {
	ctx := context.Background()
	seoul, _ := policy.LoadZone(policy.DefaultZone)
	now := time.Date(2026, 3, 10, 23, 59, 0, 0, seoul)
	e := holeEngine(t, &now)
	if _, err := e.SetPlan(ctx, 1, 100*mb); err != nil {
		t.Fatal(err)
	}
	if err := e.AddMember(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	ev := Event{ID: "evt_midnight", FamilyID: 1, CustomerID: 1, Bytes: mb, At: now}
	first, err := e.Apply(ctx, ev)
	if err != nil || first.Duplicate || first.Decision != policy.Allowed {
		t.Fatalf("first = %+v, %v", first, err)
	}
	now = now.Add(2 * time.Minute) // the next day, and the replay says so
	ev.At = now
	again, err := e.Apply(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Duplicate || again.Remaining != first.Remaining {
		t.Errorf("replay across midnight = %+v, want the first result as a duplicate (%+v)", again, first)
	}
	f, _ := e.Family(ctx, 1)
	if f.Used != mb {
		t.Errorf("used = %d, want %d (charged once)", f.Used, mb)
	}
	// Still found at the end of the window, whatever the bucket boundaries.
	now = now.Add(24*time.Hour - 3*time.Minute)
	if r, err := e.Apply(ctx, ev); err != nil || !r.Duplicate {
		t.Errorf("replay just inside the window = %+v, %v; want duplicate", r, err)
	}
}

// A pool total at or above 1e14 was stored as "1.4073748835533e+14" by
// Lua's %.14g, and every later apply of the family failed to parse.
func TestHugeTotalsStayIntegers(t *testing.T) {
	ctx := context.Background()
	seoul, _ := policy.LoadZone(policy.DefaultZone)
	now := time.Date(2026, 3, 31, 23, 0, 0, 0, seoul)
	e := holeEngine(t, &now)
	if err := e.AddMember(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.SetPlan(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	// March: the largest top-up; April: the largest plan. A late March event
	// then sees plan + March's top-ups = 2^47.
	if _, err := e.TopUp(ctx, 1, policy.MaxBytes); err != nil {
		t.Fatal(err)
	}
	late := now
	now = time.Date(2026, 4, 1, 0, 30, 0, 0, seoul)
	if _, err := e.SetPlan(ctx, 1, policy.MaxBytes); err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"evt_a", "evt_b"} {
		r, err := e.Apply(ctx, Event{ID: id, FamilyID: 1, CustomerID: 1, Bytes: mb, At: late})
		if err != nil {
			t.Fatalf("apply %d of the late March event: %v", i, err)
		}
		if r.Total != policy.MaxBytes || r.Remaining != policy.MaxBytes-int64(i+1)*mb {
			t.Errorf("apply %d = total %d remaining %d, want the total bounded at %d", i, r.Total, r.Remaining, policy.MaxBytes)
		}
	}
}

// A plan cut that left the pool under a threshold was never announced while
// every request was bigger than what was left: crossings were only checked
// on allowed events.
func TestPlanCutCrossingAnnouncedByBlockedEvent(t *testing.T) {
	ctx := context.Background()
	seoul, _ := policy.LoadZone(policy.DefaultZone)
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, seoul)
	e := holeEngine(t, &now)
	if _, err := e.SetPlan(ctx, 1, 100*mb); err != nil {
		t.Fatal(err)
	}
	if err := e.AddMember(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	if r, err := e.Apply(ctx, Event{ID: "e1", FamilyID: 1, CustomerID: 1, Bytes: 40 * mb, At: now}); err != nil || len(r.Crossed) != 0 {
		t.Fatalf("40 of 100 MB: %+v, %v", r, err)
	}
	// 60 MB left of 100; the plan is cut to 45 MB: 5 MB left (11 %).
	if _, err := e.SetPlan(ctx, 1, 45*mb); err != nil {
		t.Fatal(err)
	}
	r, err := e.Apply(ctx, Event{ID: "e2", FamilyID: 1, CustomerID: 1, Bytes: 6 * mb, At: now})
	if err != nil {
		t.Fatal(err)
	}
	if r.Decision != policy.BlockedFamilyQuota || len(r.Crossed) != 2 || r.Crossed[0] != 50 || r.Crossed[1] != 30 {
		t.Errorf("blocked event after the cut = %+v, want BLOCKED_FAMILY_QUOTA announcing 50 and 30", r)
	}
	r, _ = e.Apply(ctx, Event{ID: "e3", FamilyID: 1, CustomerID: 1, Bytes: 6 * mb, At: now})
	if len(r.Crossed) != 0 {
		t.Errorf("next blocked event crossed %v again", r.Crossed)
	}
	// Not announced for someone who is not a member.
	if r, _ := e.Apply(ctx, Event{ID: "e4", FamilyID: 2, CustomerID: 9, Bytes: 1, At: now}); len(r.Crossed) != 0 {
		t.Errorf("not a member crossed %v", r.Crossed)
	}
}

// Restore rebuilt only the current month: after a loss at 00:30 on the 1st, a
// late event of the previous month met a fresh pool. It also reset the arm
// counters and forgot the dedupe records.
func TestRestoreAcceptedMonthsArmsAndDedupe(t *testing.T) {
	ctx := context.Background()
	seoul, _ := policy.LoadZone(policy.DefaultZone)
	now := time.Date(2026, 4, 1, 0, 30, 0, 0, seoul)
	e := holeEngine(t, &now)
	march := time.Date(2026, 3, 31, 23, 0, 0, 0, seoul)
	months, from, to := e.AcceptedMonths()
	if strings.Join(months, ",") != "202603,202604" || !from.Equal(time.Date(2026, 3, 1, 0, 0, 0, 0, seoul)) ||
		!to.Equal(time.Date(2026, 5, 1, 0, 0, 0, 0, seoul)) {
		t.Fatalf("AcceptedMonths = %v %v %v", months, from, to)
	}
	judged := Result{Decision: policy.Allowed, Remaining: 5 * mb, Total: 100 * mb, DailyUsed: 95 * mb, MonthlyUsed: 95 * mb,
		Crossed: []int{10}, Arms: []int{2}}
	st := FamilyState{
		FamilyID: 1, Provisioned: true, Plan: 100 * mb, Generation: "g1",
		Members: []MemberState{{CustomerID: 1}},
		Usage:   []Usage{{CustomerID: 1, At: march, Bytes: 95 * mb}, {CustomerID: 1, At: now, Bytes: mb}},
		Arms:    map[string]map[int]int{"202603": {50: 1, 30: 1, 10: 2}},
		Judged:  []JudgedEvent{{ID: "evt_late", Result: judged}},
	}
	if err := e.Restore(ctx, st); err != nil {
		t.Fatal(err)
	}
	// A late March event meets March's pool: 5 MB left.
	r, err := e.Apply(ctx, Event{ID: "evt_march", FamilyID: 1, CustomerID: 1, Bytes: 6 * mb, At: march})
	if err != nil || r.Decision != policy.BlockedFamilyQuota || r.Remaining != 5*mb || len(r.Crossed) != 0 {
		t.Errorf("late March event after restore = %+v, %v; want blocked by March's pool, nothing announced again", r, err)
	}
	// A top-up re-arms 10 % of April; falling under it again is its first arm in April.
	// In March the arm counter continues: 10 % fired twice, so its next arm is 3.
	if _, err := e.TopUp(ctx, 1, mb); err != nil {
		t.Fatal(err)
	}
	// The judged event's replay gets its original result.
	if r, err := e.Apply(ctx, Event{ID: "evt_late", FamilyID: 1, CustomerID: 1, Bytes: 95 * mb, At: march}); err != nil ||
		!r.Duplicate || r.Remaining != 5*mb || len(r.Arms) != 1 || r.Arms[0] != 2 {
		t.Errorf("replay of a judged event = %+v, %v; want its original result", r, err)
	}
	// April's pool counts April's usage only.
	f, _ := e.Family(ctx, 1)
	if f.Month != "202604" || f.Used != mb {
		t.Errorf("April after restore: month %s used %d, want 202604 and %d", f.Month, f.Used, mb)
	}
}

func TestRestoreContinuesArms(t *testing.T) {
	ctx := context.Background()
	seoul, _ := policy.LoadZone(policy.DefaultZone)
	now := time.Date(2026, 4, 10, 12, 0, 0, 0, seoul)
	e := holeEngine(t, &now)
	// 50 % fired twice before the loss (a top-up re-armed it); it is armed
	// again now (the pool is above it).
	st := FamilyState{FamilyID: 1, Provisioned: true, Plan: 100 * mb, Members: []MemberState{{CustomerID: 1}},
		Usage: []Usage{{CustomerID: 1, At: now, Bytes: 40 * mb}}, Arms: map[string]map[int]int{"202604": {50: 2}}}
	if err := e.Restore(ctx, st); err != nil {
		t.Fatal(err)
	}
	r, err := e.Apply(ctx, Event{ID: "e", FamilyID: 1, CustomerID: 1, Bytes: 11 * mb, At: now})
	if err != nil || len(r.Crossed) != 1 || r.Crossed[0] != 50 || r.Arms[0] != 3 {
		t.Errorf("crossing after restore = %+v, %v; want 50 %% on its third arm", r, err)
	}
}

// A top-up or plan taking the month's pool past policy.MaxBytes was refused
// with a bare Redis error reply, not ErrInvalid: a caller could not tell a
// bad argument from a Redis failure (the API answered 500, a retry loop
// retried it). Found by TestRecoveryMatchesModel.
func TestPoolPastTheBoundIsInvalid(t *testing.T) {
	ctx := context.Background()
	seoul, _ := policy.LoadZone(policy.DefaultZone)
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, seoul)
	e := holeEngine(t, &now)
	if _, err := e.SetPlan(ctx, 1, policy.MaxBytes-2); err != nil {
		t.Fatal(err)
	}
	if _, err := e.TopUp(ctx, 1, 2); err != nil {
		t.Fatalf("top-up to the bound: %v", err)
	}
	if _, err := e.TopUp(ctx, 1, 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("top-up past the bound: %v, want ErrInvalid", err)
	}
	if _, err := e.SetPlan(ctx, 1, policy.MaxBytes-1); !errors.Is(err, ErrInvalid) {
		t.Errorf("plan past the bound beside this month's top-ups: %v, want ErrInvalid", err)
	}
	f, err := e.Family(ctx, 1)
	if err != nil || f.Plan != policy.MaxBytes-2 || f.TopUps != 2 {
		t.Errorf("after the refusals: plan %d top-ups %d (%v), want both unchanged", f.Plan, f.TopUps, err)
	}
}

// Restore wrote the arm counters and fired marks only for the family's
// current thresholds: one that fired before the family turned it off came
// back unfired and at arm 0, so turning it on again announced the same
// (family, month, threshold, arm 1) a second time. Found by
// TestRecoveryMatchesModel.
func TestRestoreKeepsArmsOfThresholdsTurnedOff(t *testing.T) {
	ctx := context.Background()
	seoul, _ := policy.LoadZone(policy.DefaultZone)
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, seoul)
	e := holeEngine(t, &now)
	if _, err := e.SetPlan(ctx, 1, 100*mb); err != nil {
		t.Fatal(err)
	}
	if err := e.AddMember(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	first, err := e.Apply(ctx, Event{ID: "e1", FamilyID: 1, CustomerID: 1, Bytes: 60 * mb, At: now})
	if err != nil || len(first.Crossed) != 1 || first.Crossed[0] != 50 || first.Arms[0] != 1 {
		t.Fatalf("60 of 100 MB = %+v, %v; want 50 %% on arm 1", first, err)
	}
	if err := e.SetThresholds(ctx, 1, policy.Thresholds{30}); err != nil {
		t.Fatal(err)
	}
	// Redis is lost and rebuilt from SQL, which has the crossing.
	st := FamilyState{FamilyID: 1, Provisioned: true, Plan: 100 * mb, Thresholds: policy.Thresholds{30},
		Members: []MemberState{{CustomerID: 1}}, Usage: []Usage{{CustomerID: 1, At: now, Bytes: 60 * mb}},
		Arms: map[string]map[int]int{"202603": {50: 1}}, Judged: []JudgedEvent{{ID: "e1", Result: first}}}
	if err := e.Restore(ctx, st); err != nil {
		t.Fatal(err)
	}
	if err := e.SetThresholds(ctx, 1, policy.Thresholds{50, 30}); err != nil {
		t.Fatal(err)
	}
	r, err := e.Apply(ctx, Event{ID: "e2", FamilyID: 1, CustomerID: 1, Bytes: mb, At: now})
	if err != nil || len(r.Crossed) != 0 {
		t.Errorf("next event = %+v, %v; want nothing announced (50 %% was announced on arm 1 already)", r, err)
	}
	if f, _ := e.Family(ctx, 1); !slices.Equal(f.Fired, []int{50}) {
		t.Errorf("fired after the rebuild = %v, want [50]", f.Fired)
	}
}

// A rebuild minutes before a month's end restored only the months the dedupe
// window reaches back into: the next month's pool, already charged by events
// stamped a little ahead of the clock (a consumer takes them within its clock
// skew), was dropped or left as a stale state held it, and the family could
// spend its new month twice. Found by TestRecoveryMatchesModel.
func TestRestoreKeepsEventsStampedInTheNextMonth(t *testing.T) {
	ctx := context.Background()
	seoul, _ := policy.LoadZone(policy.DefaultZone)
	now := time.Date(2026, 3, 31, 23, 58, 0, 0, seoul)
	e := holeEngine(t, &now)
	if _, err := e.SetPlan(ctx, 1, 100*mb); err != nil {
		t.Fatal(err)
	}
	if err := e.AddMember(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	april := now.Add(4 * time.Minute)
	first, err := e.Apply(ctx, Event{ID: "e1", FamilyID: 1, CustomerID: 1, Bytes: 60 * mb, At: april})
	if err != nil || first.Decision != policy.Allowed {
		t.Fatalf("an April event at 23:58 = %+v, %v", first, err)
	}
	months, _, to := e.AcceptedMonths()
	if !slices.Contains(months, "202604") || !to.Equal(time.Date(2026, 5, 1, 0, 0, 0, 0, seoul)) {
		t.Errorf("AcceptedMonths at 23:58 on March 31 = %v up to %v, want April in them", months, to)
	}
	st := FamilyState{FamilyID: 1, Provisioned: true, Plan: 100 * mb, Members: []MemberState{{CustomerID: 1}},
		Usage: []Usage{{CustomerID: 1, At: april, Bytes: 60 * mb}}, Judged: []JudgedEvent{{ID: "e1", Result: first}}}
	if err := e.rdb.FlushAll(ctx).Err(); err != nil { // Redis came back empty
		t.Fatal(err)
	}
	if err := e.Restore(ctx, st); err != nil {
		t.Fatal(err)
	}
	r, err := e.Apply(ctx, Event{ID: "e2", FamilyID: 1, CustomerID: 1, Bytes: 50 * mb, At: april})
	if err != nil || r.Decision != policy.BlockedFamilyQuota || r.Remaining != 40*mb {
		t.Errorf("50 MB more in April after the rebuild = %+v, %v; want blocked with 40 MB left", r, err)
	}
	now = april
	if f, _ := e.Family(ctx, 1); f.Used != 60*mb {
		t.Errorf("April's pool after the rebuild: used %d, want %d", f.Used, 60*mb)
	}
}

// Restore replaced the usage counters of the family's members and of the
// customers with usage in SQL only: a customer a stale state still held as a
// member (removed since, in SQL) kept what a batch judged on that state
// charged it — a batch whose results were never used — against ApplyMarked's
// promise that the rebuild replaces every key such a batch touched; its next
// events reported that phantom usage (and the records kept it). Found by
// TestRecoveryMatchesModel.
func TestRestoreClearsCountersOfFormerMembers(t *testing.T) {
	ctx := context.Background()
	seoul, _ := policy.LoadZone(policy.DefaultZone)
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, seoul)
	e := holeEngine(t, &now)
	if _, err := e.SetPlan(ctx, 1, 100*mb); err != nil {
		t.Fatal(err)
	}
	for _, c := range []int64{1, 2} {
		if err := e.AddMember(ctx, 1, c); err != nil {
			t.Fatal(err)
		}
	}
	// Redis is a snapshot from before customer 2 was removed; a batch
	// judged on it charges customer 2 before the stale state is noticed.
	if r, err := e.Apply(ctx, Event{ID: "stale", FamilyID: 1, CustomerID: 2, Bytes: mb, At: now}); err != nil || r.Decision != policy.Allowed {
		t.Fatalf("event on the stale state = %+v, %v", r, err)
	}
	st := FamilyState{FamilyID: 1, Provisioned: true, Plan: 100 * mb, Members: []MemberState{{CustomerID: 1}}}
	if err := e.Restore(ctx, st); err != nil {
		t.Fatal(err)
	}
	r, err := e.Apply(ctx, Event{ID: "stale", FamilyID: 1, CustomerID: 2, Bytes: mb, At: now})
	if err != nil || r.Decision != policy.BlockedNotMember || r.DailyUsed != 0 || r.MonthlyUsed != 0 || r.Remaining != 100*mb {
		t.Errorf("the event judged again after the rebuild = %+v, %v; want BLOCKED_NOT_MEMBER with no usage", r, err)
	}
}
