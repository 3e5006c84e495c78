package quota

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A batch restore decides each family on its own: restored, restored first
// by the generation, a token that moved, a state refused, and a family
// whose members changed between the batch's read and its write (read and
// written again: the member that appeared meanwhile is a former member and
// its keys go).
func TestRestoreUnrestoredBatch(t *testing.T) { eachBackend(t, checkRestoreUnrestoredBatch) }

func checkRestoreUnrestoredBatch(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	e, err := New(rdb, WithKeyPrefix(uniquePrefix())) // real servers outlive a run
	if err != nil {
		t.Fatal(err)
	}
	gen := "t:batch"
	if _, err := e.BeginRebuild(ctx, gen); err != nil {
		t.Fatal(err)
	}
	if err := e.FinishRebuild(ctx, gen, nil); err != nil {
		t.Fatal(err)
	}
	family := func(fid int64) FamilyState {
		return FamilyState{FamilyID: fid, Provisioned: true, Plan: 100 * fid, Members: []MemberState{{CustomerID: 10 * fid}}, Generation: gen}
	}
	if ok, err := e.RestoreUnrestored(ctx, family(2), ""); !ok || err != nil {
		t.Fatalf("restore of family 2 = %v, %v", ok, err)
	}
	// Family 5's hash gains a member after the batch read it, once.
	var once sync.Once
	rdb.AddHook(&faultHook{after: func(cmds []redis.Cmder) {
		if slices.Contains(names(cmds), "hkeys") {
			once.Do(func() {
				if err := rdb.HSet(ctx, e.k.family(5), memberField(55), "1").Err(); err != nil {
					t.Error(err)
				}
				if err := rdb.HSet(ctx, e.k.constraints(5, 55), "x", "1").Err(); err != nil {
					t.Error(err)
				}
			})
		}
	}})
	bad := family(4)
	bad.Plan = -1
	sts := []FamilyState{family(1), family(2), family(3), bad, family(5)}
	out, err := e.RestoreUnrestoredBatch(ctx, sts, []string{"", "", "t:old", "", ""})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		restored bool
		err      error
	}{{true, nil}, {false, nil}, {false, ErrMoved}, {false, ErrInvalid}, {true, nil}}
	for i, w := range want {
		o := out[i]
		if o.Restored != w.restored || (w.err == nil) != (o.Err == nil) || w.err != nil && !errors.Is(o.Err, w.err) {
			t.Errorf("family %d: %+v, want restored %v, error %v", sts[i].FamilyID, o, w.restored, w.err)
		}
	}
	for _, fid := range []int64{1, 2, 5} {
		f, err := e.Family(ctx, fid)
		if err != nil || f.Plan != 100*fid || len(f.Members) != 1 || f.Members[0].CustomerID != 10*fid {
			t.Errorf("family %d = %+v, %v; want its restored state", fid, f, err)
		}
	}
	if n, err := rdb.Exists(ctx, e.k.constraints(5, 55)).Result(); err != nil || n != 0 {
		t.Errorf("the constraints of family 5's former member: %d, %v; want them gone", n, err)
	}
	for _, fid := range []int64{3, 4} {
		if n, err := rdb.Exists(ctx, e.k.family(fid)).Result(); err != nil || n != 0 {
			t.Errorf("family %d: %d, %v; want it not restored", fid, n, err)
		}
	}
	// A marker that names another generation: the family is stale.
	old := family(7)
	old.Generation = "t:older"
	out, err = e.RestoreUnrestoredBatch(ctx, []FamilyState{old}, []string{""})
	if err != nil || !errors.Is(out[0].Err, ErrStale) || out[0].Restored {
		t.Errorf("a restore for another generation = %+v, %v; want a stale error", out, err)
	}
}

// Batches racing over the same families (two sweeps, touches): every
// family is restored exactly once.
func TestRestoreUnrestoredBatchRace(t *testing.T) {
	ctx := context.Background()
	e, err := New(newMiniredis(t))
	if err != nil {
		t.Fatal(err)
	}
	gen := "t:race"
	if err := e.FinishRebuild(ctx, gen, nil); err != nil {
		t.Fatal(err)
	}
	const families, racers = 50, 4
	sts := make([]FamilyState, families)
	seen := make([]string, families)
	for i := range sts {
		fid := int64(i + 1)
		sts[i] = FamilyState{FamilyID: fid, Provisioned: true, Plan: 100, Members: []MemberState{{CustomerID: fid * 10}}, Generation: gen}
	}
	wrote := make([][]bool, racers)
	var wg sync.WaitGroup
	for r := range racers {
		wg.Go(func() {
			// Each racer in another order.
			order := slices.Clone(sts)
			if r%2 == 1 {
				slices.Reverse(order)
			}
			out, err := e.RestoreUnrestoredBatch(ctx, order, seen)
			if err != nil {
				t.Error(err)
				return
			}
			wrote[r] = make([]bool, families)
			for i, o := range out {
				if o.Err != nil {
					t.Error(o.Err)
				}
				wrote[r][order[i].FamilyID-1] = o.Restored
			}
		})
	}
	wg.Wait()
	for i := range families {
		n := 0
		for r := range racers {
			if wrote[r] != nil && wrote[r][i] {
				n++
			}
		}
		if n != 1 {
			t.Errorf("family %d restored %d times, want once", i+1, n)
		}
	}
}
