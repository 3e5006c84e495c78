package judge

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/google/go-cmp/cmp"
)

// memRearms is a RearmStore in memory.
type memRearms struct {
	err  error
	rows map[int64]map[string]map[int]int
}

func (m *memRearms) RecordRearms(_ context.Context, fid int64, month string, rearmed map[int]int) error {
	if m.err != nil {
		return m.err
	}
	if m.rows == nil {
		m.rows = map[int64]map[string]map[int]int{}
	}
	if m.rows[fid] == nil {
		m.rows[fid] = map[string]map[int]int{}
	}
	if m.rows[fid][month] == nil {
		m.rows[fid][month] = map[int]int{}
	}
	for p, a := range rearmed {
		m.rows[fid][month][p] = max(m.rows[fid][month][p], a)
	}
	return nil
}

// The door records the thresholds a pool change re-armed (a top-up, a
// larger plan) before it marks the write; a plan cut re-arms nothing; a
// failure to record wraps ErrNotMarked, the change standing.
func TestPoolWritesRecordRearms(t *testing.T) {
	ctx := context.Background()
	_, rdb := testenv.Redis(t)
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	eng, err := quota.New(rdb, quota.WithLocation(time.UTC), quota.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	rs := &memRearms{}
	qs, err := NewState(eng, WithRearmStore(rs))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewState(eng, WithRearmStore(nil)); err == nil {
		t.Error("NewState took a nil re-arm store")
	}
	if _, err := qs.SetPlan(ctx, 1, 100); err != nil {
		t.Fatal(err)
	}
	if err := qs.AddMember(ctx, 1, 11); err != nil {
		t.Fatal(err)
	}
	if err := qs.SetThresholds(ctx, 1, policy.Thresholds{50}); err != nil {
		t.Fatal(err)
	}
	rs2, err := eng.Apply(ctx, quota.Event{ID: "e1", FamilyID: 1, CustomerID: 11, Bytes: 60, At: now})
	if err != nil || !cmp.Equal(rs2.Crossed, []int{50}) {
		t.Fatalf("60 of 100: %+v %v, want 50 crossed", rs2, err)
	}
	if _, err := qs.SetPlan(ctx, 1, 90); err != nil || rs.rows != nil {
		t.Fatalf("a plan cut recorded re-arms: %v %v", rs.rows, err)
	}
	ps, err := qs.SetTopUps(ctx, 1, "202611", 60) // 90 of 150 left: 50 re-armed
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]map[string]map[int]int{1: {"202611": {50: 1}}}
	if !cmp.Equal(rs.rows, want) || !cmp.Equal(ps.Rearmed, map[int]int{50: 1}) {
		t.Errorf("recorded %v (pool state %+v), want %v", rs.rows, ps, want)
	}
	// Fired again, re-armed again by a larger plan: its second arm.
	if _, err := eng.Apply(ctx, quota.Event{ID: "e2", FamilyID: 1, CustomerID: 11, Bytes: 20, At: now}); err != nil {
		t.Fatal(err)
	}
	rs.err = errors.New("sql down")
	ps, err = qs.SetPlan(ctx, 1, 200)
	if !errors.Is(err, ErrNotMarked) || !cmp.Equal(ps.Rearmed, map[int]int{50: 2}) {
		t.Fatalf("plan raise with the store down: %+v, %v; want 50 re-armed after arm 2 and ErrNotMarked", ps, err)
	}
	rs.err = nil
	if _, err := qs.SetPlan(ctx, 1, 200); err != nil || rs.rows[1]["202611"][50] != 1 {
		t.Fatalf("the same plan again re-arms nothing new: %v %v", rs.rows, err)
	}
}

// A rebuild that restores a fired threshold armed (the pool is above it:
// a plan raise the rebuilt state never saw) records that re-arm as a pool
// change would: a plan cut reaching it again and a second rebuild keep it
// armed, and the next event announces its second arm. Without the record
// the second rebuild restored it fired and announced nothing.
func TestRestoreRecordsItsRearms(t *testing.T) {
	for _, record := range []bool{true, false} {
		ctx := context.Background()
		_, rdb := testenv.Redis(t)
		now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
		eng, err := quota.New(rdb, quota.WithLocation(time.UTC), quota.WithClock(func() time.Time { return now }))
		if err != nil {
			t.Fatal(err)
		}
		rs := &memRearms{}
		var opts []StateOption
		if record {
			opts = append(opts, WithRearmStore(rs))
		}
		qs, err := NewState(eng, opts...)
		if err != nil {
			t.Fatal(err)
		}
		// SQL: 60 of a 200-byte plan used, 50 fired once (at a smaller plan).
		sql := quota.FamilyState{FamilyID: 1, Provisioned: true, Plan: 200, Thresholds: policy.Thresholds{50},
			TopUps: map[string]int64{"202611": 0}, Members: []quota.MemberState{{CustomerID: 11}},
			Usage: []quota.Usage{{CustomerID: 11, At: now, Bytes: 60}},
			Arms:  map[string]map[int]int{"202611": {50: 1}}}
		if err := qs.Restore(ctx, sql); err != nil {
			t.Fatal(err)
		}
		if want := map[int64]map[string]map[int]int{1: {"202611": {50: 1}}}; record && !cmp.Equal(rs.rows, want) {
			t.Fatalf("the restore recorded %v, want %v", rs.rows, want)
		}
		// A plan cut to 100: 40 left, 50 reached again, no event since.
		if _, err := qs.SetPlan(ctx, 1, 100); err != nil {
			t.Fatal(err)
		}
		sql.Plan, sql.Rearmed = 100, rs.rows[1]
		if err := qs.Restore(ctx, sql); err != nil {
			t.Fatal(err)
		}
		r, err := eng.Apply(ctx, quota.Event{ID: "e", FamilyID: 1, CustomerID: 11, Bytes: 1, At: now})
		if err != nil {
			t.Fatal(err)
		}
		announced := cmp.Equal(r.Crossed, []int{50}) && cmp.Equal(r.Arms, []int{2})
		if announced != record {
			t.Errorf("recording the restore's re-arms %v: crossed %v arms %v", record, r.Crossed, r.Arms)
		}
		rdb.Close()
	}
}

// flakyRearms is a RearmStore whose first fail records fail.
type flakyRearms struct {
	memRearms
	fail int
}

func (f *flakyRearms) RecordRearms(ctx context.Context, fid int64, month string, rearmed map[int]int) error {
	if f.fail > 0 {
		f.fail--
		return errors.New("sql: connection refused")
	}
	return f.memRearms.RecordRearms(ctx, fid, month, rearmed)
}

// staticSource is a FamilySource holding families in memory.
type staticSource map[int64]quota.FamilyState

func (s staticSource) Families(_ context.Context, ids []int64) (map[int64]quota.FamilyState, map[int64]error, error) {
	out := map[int64]quota.FamilyState{}
	for _, id := range ids {
		if st, ok := s[id]; ok {
			out[id] = st
		}
	}
	return out, nil, nil
}

func (s staticSource) Configs(ctx context.Context, ids []int64) (map[int64]quota.FamilyState, map[int64]error, error) {
	return s.Families(ctx, ids)
}

// A restore (on touch) or a settle whose re-arms could not be recorded
// does not land: the next touch records them and lands, so a re-arm is
// never left unwritten. Suspected in issue #36 (item 6) and confirmed:
// before, the restore landed, its recording failed, and no later touch
// restored the family again to record it (a later rebuild restored the
// threshold fired, its next alert lost).
func TestRearmsRecordedBeforeTheirRestore(t *testing.T) {
	ctx := context.Background()
	_, rdb := testenv.Redis(t)
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	eng, err := quota.New(rdb, quota.WithLocation(time.UTC), quota.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	// SQL: 60 of a 200-byte plan used, 50 fired once (at a smaller plan):
	// a restore re-arms it.
	src := staticSource{1: {FamilyID: 1, Provisioned: true, Plan: 200, Thresholds: policy.Thresholds{50},
		TopUps: map[string]int64{"202611": 0}, Members: []quota.MemberState{{CustomerID: 11}},
		Usage: []quota.Usage{{CustomerID: 11, At: now, Bytes: 60}},
		Arms:  map[string]map[int]int{"202611": {50: 1}}}}
	rs := &flakyRearms{fail: 1}
	qs, err := NewState(eng, WithRearmStore(rs), WithFamilySource(src))
	if err != nil {
		t.Fatal(err)
	}
	const gen = "t:rearms"
	if _, err := eng.BeginRebuild(ctx, gen); err != nil {
		t.Fatal(err)
	}
	if err := eng.FinishRebuild(ctx, gen, nil); err != nil {
		t.Fatal(err)
	}
	ev := []quota.Event{{ID: "e1", FamilyID: 1, CustomerID: 11, Bytes: 1, At: now}}
	if _, err := qs.applyMarked(ctx, gen, nil, ev); err == nil {
		t.Fatal("judged although the restore's re-arm could not be recorded")
	}
	if _, err := qs.applyMarked(ctx, gen, nil, ev); err != nil {
		t.Fatalf("the next touch: %v", err)
	}
	if want := map[int64]map[string]map[int]int{1: {"202611": {50: 1}}}; !cmp.Equal(rs.rows, want) {
		t.Errorf("recorded re-arms %v, want %v: the restore's re-arm was never written", rs.rows, want)
	}

	// The same for a settle: 50 fires again (its second arm), SQL raises
	// the plan (the pool above 50 again), the door's settle cannot record
	// the re-arm: the family stays claimed, and the next touch settles it
	// and records it.
	ev = []quota.Event{{ID: "e2", FamilyID: 1, CustomerID: 11, Bytes: 50, At: now}}
	res, err := qs.applyMarked(ctx, gen, nil, ev)
	if err != nil || !cmp.Equal(res[0].Crossed, []int{50}) || !cmp.Equal(res[0].Arms, []int{2}) {
		t.Fatalf("50's second arm: %+v, %v", res, err)
	}
	raised := src[1]
	raised.Plan = 1000
	src[1] = raised
	rs.fail = 1
	if _, err := qs.SetPlan(ctx, 1, 1000); !errors.Is(err, ErrUnsettled) {
		t.Fatalf("the plan raise whose re-arm could not be recorded: %v, want ErrUnsettled", err)
	}
	ev = []quota.Event{{ID: "e3", FamilyID: 1, CustomerID: 11, Bytes: 1, At: now}}
	if _, err := qs.applyMarked(ctx, gen, nil, ev); err != nil {
		t.Fatalf("the next touch: %v", err)
	}
	if want := map[int64]map[string]map[int]int{1: {"202611": {50: 2}}}; !cmp.Equal(rs.rows, want) {
		t.Errorf("recorded re-arms %v, want %v: the settle's re-arm was never written", rs.rows, want)
	}
}
