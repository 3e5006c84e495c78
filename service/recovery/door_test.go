package recovery_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/recovery"
)

// The deployables' door (recovery.NewDoor) restores a family on its first
// touch after a rebuild, calls the touch hook it was given, and marks its
// family writes in SQL.
func TestNewDoor(t *testing.T) {
	r := newGuardRig(t)
	if _, err := recovery.NewDoor(r.eng, nil); err == nil {
		t.Error("a door without a store accepted")
	}
	var mu sync.Mutex
	var touched []judge.TouchInfo
	door, err := recovery.NewDoor(r.eng, r.e.S, judge.WithTouchHook(func(i judge.TouchInfo) {
		mu.Lock()
		touched = append(touched, i)
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !door.RestoresOnTouch() {
		t.Fatal("the door does not restore on touch")
	}
	// A rebuild whose sweep restores nothing: each family waits for its
	// first touch.
	r.qs = door
	g := r.guard("a", false, func(context.Context, string) (recovery.Report, error) { return recovery.Report{}, nil })
	t.Cleanup(g.Close)
	info, err := g.Bootstrap(r.e.Ctx, "test")
	if err != nil || !info.OnTouch {
		t.Fatalf("Bootstrap = %+v, %v; want a generation restored on touch", info, err)
	}
	fam, err := door.Family(r.e.Ctx, 1)
	if err != nil || len(fam.Members) != 2 {
		t.Fatalf("family 1 read through the door: %+v, %v; want it restored with its 2 members", fam, err)
	}
	mu.Lock()
	if len(touched) != 1 || touched[0].Restored != 1 || touched[0].Generation != info.Generation {
		t.Errorf("touch hook calls %+v, want one restoring family 1 in %s", touched, info.Generation)
	}
	mu.Unlock()
	if _, err := door.SetPlan(r.e.Ctx, 1, 20<<20); err != nil {
		t.Fatal(err)
	}
	marks, err := r.e.S.RedisMarks(r.e.Ctx, info.Generation)
	if err != nil {
		t.Fatal(err)
	}
	if len(marks) != 1 || !strings.HasPrefix(marks[0].Stream, judge.FamilyWriteStream) || marks[0].N != 1 {
		t.Errorf("marks recorded in SQL after a plan change: %+v, want one family-write mark at 1", marks)
	}
}
