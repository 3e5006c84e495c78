package quota

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
)

// A threshold re-armed by a top-up and then reached again by a pool change
// (here a plan cut), with no event since, is armed: the next event
// announces it again. A rebuild from SQL in between must keep it armed, or
// that alert is lost (issue #23, "a threshold re-armed by a top-up comes back
// fired after a rebuild"). Without FamilyState.Rearmed the restore took it
// as fired: the next event announced nothing.
func TestRestoreKeepsRearmedThreshold(t *testing.T) { eachBackend(t, restoreKeepsRearmedThreshold) }

func restoreKeepsRearmedThreshold(t *testing.T, rdb redis.UniversalClient) {
	now := kst(t, "2026-02-06 12:00")
	month := "202602"
	// Two engines on the same keys' shapes: live runs the sequence through;
	// rebuilt is restored from what SQL holds at the same point.
	live := newFixture(t, rdb, now)
	live.family(100, 100*mb, 1)
	if err := live.e.SetThresholds(live.ctx, 100, policy.Thresholds{50}); err != nil {
		t.Fatal(err)
	}
	if r := live.use(100, 1, 60*mb, "x", now); !cmp.Equal(r.Crossed, []int{50}) {
		t.Fatalf("60 of 100 MB: crossed %v, want [50]", r.Crossed)
	}
	// A top-up to 150 MB leaves 90 (60 %): 50 is re-armed after its first
	// arm, which the caller records in SQL.
	ps, err := live.e.TopUp(live.ctx, 100, 50*mb)
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(ps.Rearmed, map[int]int{50: 1}) || ps.Month != month {
		t.Fatalf("top-up: re-armed %v in %q, want 50 after arm 1 in %s", ps.Rearmed, ps.Month, month)
	}
	// The plan cut to 60 MB leaves 50 of 110 (45 %): reached again, to be
	// announced by the next event. It re-arms nothing.
	cut, err := live.e.SetPlan(live.ctx, 100, 60*mb)
	if err != nil || len(cut.Rearmed) != 0 {
		t.Fatalf("plan cut: %+v, %v", cut, err)
	}
	fs, err := live.e.Family(live.ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs.Fired) != 0 {
		t.Fatalf("after the re-arm and the cut, fired %v: the live engine holds 50 armed", fs.Fired)
	}

	// What SQL holds: the plan, the top-up, the usage, the one crossing.
	rebuilt := newFixture(t, rdb, now)
	st := FamilyState{FamilyID: 100, Provisioned: true, Plan: 60 * mb, Thresholds: policy.Thresholds{50},
		TopUps: map[string]int64{month: 50 * mb}, Members: []MemberState{{CustomerID: 1}},
		Usage:   []Usage{{CustomerID: 1, At: now, Bytes: 60 * mb}},
		Arms:    map[string]map[int]int{month: {50: 1}},
		Rearmed: map[string]map[int]int{month: ps.Rearmed}}
	if err := rebuilt.e.Restore(rebuilt.ctx, st); err != nil {
		t.Fatal(err)
	}

	want := live.use(100, 1, mb, "x", now)
	got := rebuilt.use(100, 1, mb, "x", now)
	if !cmp.Equal(want.Crossed, []int{50}) || !cmp.Equal(want.Arms, []int{2}) {
		t.Fatalf("live: crossed %v arms %v, want [50] on its second arm", want.Crossed, want.Arms)
	}
	if !cmp.Equal(got.Crossed, want.Crossed) || !cmp.Equal(got.Arms, want.Arms) {
		t.Errorf("after the rebuild: crossed %v arms %v, the live engine %v arms %v: the alert is lost",
			got.Crossed, got.Arms, want.Crossed, want.Arms)
	}
}
