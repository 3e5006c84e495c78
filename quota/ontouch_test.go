package quota

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
)

func TestOnTouch(t *testing.T) {
	for _, tt := range []struct {
		gen  string
		want bool
	}{
		{NewOnTouchGeneration(time.Now(), "ab12"), true},
		{"t:x", true},
		{"gmf3k-ab12", false}, // an earlier release's
		{"g1", false},
		{"", false},
		{"rebuilding:t:x", false},
	} {
		if got := OnTouch(tt.gen); got != tt.want {
			t.Errorf("OnTouch(%q) = %v, want %v", tt.gen, got, tt.want)
		}
	}
}

// In a generation restored on touch a family is judged only once a restore
// named the generation on it: others' events come back pending, uncharged,
// while the rest of the batch is judged and the watermarks advance.
func checkRestoreOnTouch(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	e, err := New(rdb, WithKeyPrefix(uniquePrefix()))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ev := func(id string, fid int64) Event {
		return Event{ID: id, FamilyID: fid, CustomerID: fid*10 + 1, Bytes: 10, At: now}
	}
	family := func(fid, plan int64, gen string) FamilyState {
		return FamilyState{FamilyID: fid, Provisioned: true, Plan: plan, Members: []MemberState{{CustomerID: fid*10 + 1}}, Generation: gen}
	}
	// The state an old generation left: family 1 charged 10, an event of
	// family 2 judged (its dedupe record stays in Redis).
	old := "gold-1"
	if err := e.FinishRebuild(ctx, old, nil); err != nil {
		t.Fatal(err)
	}
	for _, fid := range []int64{1, 2} {
		if err := e.Restore(ctx, family(fid, 100, old)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.ApplyMarked(ctx, old, nil, []Event{ev("a", 1), ev("stale", 2)}); err != nil {
		t.Fatal(err)
	}

	// A rebuild names a generation restored on touch; only family 1 is
	// restored (as SQL knows it: plan 50, event a charged).
	gen := NewOnTouchGeneration(now, "x")
	if _, err := e.BeginRebuild(ctx, gen); err != nil {
		t.Fatal(err)
	}
	if err := e.FinishRebuild(ctx, gen, map[string]int64{"usage/0": 4}); err != nil {
		t.Fatal(err)
	}
	one := family(1, 50, gen)
	one.Usage = []Usage{{CustomerID: 11, At: now, Bytes: 10}}
	one.Judged = []JudgedEvent{{ID: "a", Result: Result{Decision: policy.Allowed, Remaining: 90, Total: 100}}}
	if ok, err := e.RestoreUnrestored(ctx, one, old); err != nil || !ok {
		t.Fatalf("RestoreUnrestored(family 1) = %v, %v", ok, err)
	}
	for fid, want := range map[int64]Need{1: NeedNothing, 2: NeedRestore, 3: NeedRestore} {
		g, token, err := e.FamilyToken(ctx, fid)
		if err != nil || FamilyNeeds(g, token) != want || g != gen {
			t.Errorf("FamilyToken(family %d) = %s, %q, %v; want %s, needing %v", fid, g, token, err, gen, want)
		}
	}
	// Family 2 (an old generation's), 3 (no hash: Redis lost it) and 4
	// (a hash without g) are pending; family 1 is judged.
	if err := rdb.HSet(ctx, e.k.family(4), memberField(41), "1", fieldPlan, 100).Err(); err != nil {
		t.Fatal(err)
	}
	marks := []Mark{{Stream: "usage/0", From: 4, To: 9}}
	batch := []Event{ev("b", 2), ev("c", 1), ev("stale", 2), ev("d", 3), ev("e", 4), ev("f", 1)}
	_, err = e.ApplyMarked(ctx, gen, marks, batch)
	var un *UnrestoredError
	if !errors.As(err, &un) || !errors.Is(err, ErrStale) {
		t.Fatalf("ApplyMarked = %v, want an *UnrestoredError", err)
	}
	if !slices.Equal(un.Families, []int64{2, 3, 4}) || !slices.Equal(un.Pending, []int{0, 2, 3, 4}) || un.Generation != gen {
		t.Errorf("unrestored = families %v, pending %v, gen %s", un.Families, un.Pending, un.Generation)
	}
	if want := map[int64]string{2: old, 3: "", 4: ""}; !maps.Equal(un.Seen, want) {
		t.Errorf("unrestored families' tokens %v, want %v", un.Seen, want)
	}
	if r := un.Results[1]; r.Decision != policy.Allowed || r.Remaining != 30 || r.Total != 50 {
		t.Errorf("family 1's event = %+v, want allowed with 30 of 50 left", r)
	}
	if r := un.Results[5]; r.Remaining != 20 {
		t.Errorf("family 1's second event = %+v, want 20 left", r)
	}
	for _, fid := range []int64{2, 4} {
		f, err := e.Family(ctx, fid)
		if err != nil || f.Used != 10*b2i(fid == 2) {
			t.Errorf("family %d: used %d (%v): a pending event was charged", fid, f.Used, err)
		}
	}
	st, err := e.State(ctx)
	if err != nil || st[0].Watermarks["usage/0"] != 9 {
		t.Errorf("watermarks after the batch = %+v, %v, want usage/0 at 9", st, err)
	}

	// Restored, the pending events are judged with the same marks; the
	// stale state's dedupe record of family 2 is gone.
	for _, fid := range []int64{2, 3, 4} {
		ok, err := e.RestoreUnrestored(ctx, family(fid, 100, gen), un.Seen[fid])
		if err != nil || !ok {
			t.Fatalf("RestoreUnrestored(family %d) = %v, %v", fid, ok, err)
		}
	}
	pending := make([]Event, len(un.Pending))
	for i, at := range un.Pending {
		pending[i] = batch[at]
	}
	rs, err := e.ApplyMarked(ctx, gen, marks, pending)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Decision != policy.Allowed || r.Duplicate {
			t.Errorf("pending event %s = %+v, want allowed, judged anew", pending[i].ID, r)
		}
	}
	if rs[1].Remaining != 80 {
		t.Errorf("family 2's second event: %d left, want 80", rs[1].Remaining)
	}

	// A second restore of the generation never overwrites what was judged.
	if ok, err := e.RestoreUnrestored(ctx, family(1, 50, gen), old); err != nil || ok {
		t.Errorf("restoring family 1 again = %v, %v, want skipped", ok, err)
	}
	if f, _ := e.Family(ctx, 1); f.Used != 30 {
		t.Errorf("family 1 used %d after a second restore, want 30", f.Used)
	}
	// A restore for a generation the marker does not name is refused.
	var se *StaleError
	if _, err := e.RestoreUnrestored(ctx, family(5, 100, "t:older"), ""); !errors.As(err, &se) {
		t.Errorf("restore for another generation = %v, want stale", err)
	}
	if _, err := e.RestoreUnrestored(ctx, family(5, 100, ""), ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("restore without a generation = %v, want ErrInvalid", err)
	}
	if _, err := e.BeginRebuild(ctx, "t:next"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.RestoreUnrestored(ctx, family(5, 100, gen), ""); !errors.As(err, &se) {
		t.Errorf("restore while a rebuild runs = %v, want stale", err)
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func TestRestoreOnTouch(t *testing.T) { eachBackend(t, checkRestoreOnTouch) }

// An earlier release's generation (not restored on touch) judges a family
// without g as provisioned since its rebuild.
func TestEarlierGenerationJudgesUnmarkedFamilies(t *testing.T) {
	ctx := context.Background()
	e, err := New(newMiniredis(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.FinishRebuild(ctx, "gold-1", nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Restore(ctx, FamilyState{FamilyID: 1, Provisioned: true, Plan: 100, Members: []MemberState{{CustomerID: 1}}}); err != nil {
		t.Fatal(err)
	}
	rs, err := e.ApplyMarked(ctx, "gold-1", nil, []Event{{ID: "a", FamilyID: 1, CustomerID: 1, Bytes: 10, At: time.Now()}})
	if err != nil || rs[0].Decision != policy.Allowed {
		t.Fatalf("= %+v, %v", rs, err)
	}
	if g, token, err := e.FamilyToken(ctx, 1); FamilyNeeds(g, token) != NeedNothing || err != nil {
		t.Errorf("FamilyToken in an earlier generation = %s, %q, %v: needs %v", g, token, err, FamilyNeeds(g, token))
	}
}

// Restores racing for one family: exactly one writes.
func TestRestoreUnrestoredRace(t *testing.T) {
	ctx := context.Background()
	e, err := New(newMiniredis(t))
	if err != nil {
		t.Fatal(err)
	}
	gen := "t:race"
	if err := e.FinishRebuild(ctx, gen, nil); err != nil {
		t.Fatal(err)
	}
	const n = 8
	oks := make(chan bool, n)
	for range n {
		go func() {
			ok, err := e.RestoreUnrestored(ctx, FamilyState{FamilyID: 7, Provisioned: true, Plan: 100, Members: []MemberState{{CustomerID: 70}}, Generation: gen}, "")
			if err != nil {
				t.Error(err)
			}
			oks <- ok
		}()
	}
	won := 0
	for range n {
		if <-oks {
			won++
		}
	}
	if won != 1 {
		t.Errorf("%d restores wrote, want 1", won)
	}
}
