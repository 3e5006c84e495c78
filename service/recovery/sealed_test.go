package recovery_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/internal/testenv/storetest"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/recovery"
	"github.com/dabom/dpcs/service/store"
)

// faultyEngine is the quota engine with hooks before some of the door's
// calls and failures of others.
type faultyEngine struct {
	*quota.Engine
	mu sync.Mutex
	// beforeRestore runs once, before the first RestoreUnrestored or
	// RestoreUnrestoredBatch.
	beforeRestore func()
	// failClaim, failWrites: Claim, and Settle and the direct family
	// writes, fail as a Redis that cannot be reached does.
	failClaim, failWrites bool
}

var errRedisDown = errors.New("redis: connection refused")

func (f *faultyEngine) RestoreUnrestored(ctx context.Context, st quota.FamilyState, seen string) (bool, error) {
	f.hook()
	return f.Engine.RestoreUnrestored(ctx, st, seen)
}

func (f *faultyEngine) RestoreUnrestoredBatch(ctx context.Context, sts []quota.FamilyState, seen []string) ([]quota.RestoreOutcome, error) {
	f.hook()
	return f.Engine.RestoreUnrestoredBatch(ctx, sts, seen)
}

// hook runs beforeRestore the first time it is called.
func (f *faultyEngine) hook() {
	f.mu.Lock()
	hook := f.beforeRestore
	f.beforeRestore = nil
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
}

func (f *faultyEngine) Claim(ctx context.Context, fid int64) (string, string, error) {
	if f.failClaim {
		return "", "", errRedisDown
	}
	return f.Engine.Claim(ctx, fid)
}

func (f *faultyEngine) Settle(ctx context.Context, st quota.FamilyState, seen string, record func(map[string]map[int]int) error) (quota.Settled, error) {
	if f.failWrites {
		return quota.Settled{}, errRedisDown
	}
	return f.Engine.Settle(ctx, st, seen, record)
}

func (f *faultyEngine) RemoveMember(ctx context.Context, fid, cid int64) error {
	if f.failWrites {
		return errRedisDown
	}
	return f.Engine.RemoveMember(ctx, fid, cid)
}

// failingSource is a family source whose database times out.
type failingSource struct{}

var errSQLTimeout = errors.New("sql: i/o timeout")

func (failingSource) Families(context.Context, []int64) (map[int64]quota.FamilyState, map[int64]error, error) {
	return nil, nil, errSQLTimeout
}

func (failingSource) Configs(context.Context, []int64) (map[int64]quota.FamilyState, map[int64]error, error) {
	return nil, nil, errSQLTimeout
}

// sealedRig is a family (owner 11, child 12) in SQL and a Redis in a
// generation restored on touch that has not restored it yet.
type sealedRig struct {
	*env
	eng *quota.Engine
	gen string
	// door is a deployable's door: it restores and settles from SQL.
	door *judge.State
}

func newSealedRig(t *testing.T) *sealedRig {
	e := &env{storetest.New(t, testenv.SQLite(t))}
	eng, _ := e.engine(t)
	e.Family(t, 1)
	r := &sealedRig{env: e, eng: eng, gen: quota.NewOnTouchGeneration(start, "sealed")}
	if _, err := eng.BeginRebuild(e.Ctx, r.gen); err != nil {
		t.Fatal(err)
	}
	if err := eng.FinishRebuild(e.Ctx, r.gen, nil); err != nil {
		t.Fatal(err)
	}
	var err error
	if r.door, err = judge.NewState(eng, judge.WithFamilySource(recovery.NewFamilySource(e.S, eng))); err != nil {
		t.Fatal(err)
	}
	return r
}

// decide judges one event of customer cid as the door does (a family met
// unrestored or claimed is restored or settled from SQL first).
func (r *sealedRig) decide(t *testing.T, id string, cid int64) quota.Result {
	t.Helper()
	ev := []quota.Event{{ID: id, FamilyID: 1, CustomerID: cid, Bytes: 1000, AppID: "com.kakao.talk", At: start}}
	for range 3 {
		res, err := r.eng.ApplyMarked(r.Ctx, r.gen, nil, ev)
		var un *quota.UnrestoredError
		if errors.As(err, &un) {
			if err := r.door.RestoreOnTouch(r.Ctx, r.gen, un.Seen); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	t.Fatalf("event %s: its family stayed unrestored", id)
	return quota.Result{}
}

// The rule for a family change whose door step failed after SQL committed
// it (doc/architecture.md, "Writer by writer", family writes): the door
// claims the family before it reads it back, so no restore that read SQL
// before the change lands after it, and the family is not judged until it
// is settled from SQL. Each subtest failed before: the removed member
// kept spending until the next full rebuild.
func TestFailedFamilyWriteIsNeverSealed(t *testing.T) {
	t.Run("the sweep does not seal its older read", func(t *testing.T) {
		r := newSealedRig(t)
		// The sweep has read the family (the child a member) when the
		// owner removes the child: SQL commits, and the door's read of the
		// family to restore it fails (a SQL timeout, likely right after a
		// rebuild when every process touches families).
		broken, err := judge.NewState(r.eng, judge.WithFamilySource(failingSource{}))
		if err != nil {
			t.Fatal(err)
		}
		var apiErr error
		sweeper := &faultyEngine{Engine: r.eng, beforeRestore: func() {
			if err := r.S.RemoveMember(r.Ctx, 1, 12, owner); err != nil {
				t.Error(err)
			}
			apiErr = broken.RemoveMember(r.Ctx, 1, 12)
		}}
		rep, err := recovery.Rebuild(r.Ctx, r.S, mustState(t, sweeper), r.gen)
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(apiErr, judge.ErrUnsettled) || !errors.Is(apiErr, errSQLTimeout) {
			t.Errorf("the door's answer to the removal = %v, want ErrUnsettled wrapping the SQL timeout", apiErr)
		}
		t.Logf("sweep: %+v", rep)
		if got := r.decide(t, "evt_child", 12); got.Decision != policy.BlockedNotMember {
			t.Errorf("the removed child's next event: %s, want %s (the sweep sealed the family from its older read)",
				got.Decision, policy.BlockedNotMember)
		}
		if got := r.decide(t, "evt_owner", 11); got.Decision != policy.Allowed {
			t.Errorf("the owner's event: %s, want %s", got.Decision, policy.Allowed)
		}
	})

	t.Run("a restored family whose write failed is settled on touch", func(t *testing.T) {
		r := newSealedRig(t)
		if got := r.decide(t, "evt_first", 12); got.Decision != policy.Allowed {
			t.Fatalf("the child before its removal: %s", got.Decision)
		}
		// SQL commits the removal; Redis fails the door's write.
		if err := r.S.RemoveMember(r.Ctx, 1, 12, owner); err != nil {
			t.Fatal(err)
		}
		broken, err := judge.NewState(&faultyEngine{Engine: r.eng, failWrites: true},
			judge.WithFamilySource(recovery.NewFamilySource(r.S, r.eng)))
		if err != nil {
			t.Fatal(err)
		}
		if err := broken.RemoveMember(r.Ctx, 1, 12); !errors.Is(err, judge.ErrUnsettled) {
			t.Errorf("the door's answer to the removal = %v, want ErrUnsettled", err)
		}
		// The owner's retry finds the child gone (404): nothing reaches
		// the door, and the next touch settles the family all the same.
		if err := r.S.RemoveMember(r.Ctx, 1, 12, owner); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the retry: %v, want ErrNotFound", err)
		}
		if got := r.decide(t, "evt_child", 12); got.Decision != policy.BlockedNotMember {
			t.Errorf("the removed child's next event: %s, want %s", got.Decision, policy.BlockedNotMember)
		}
	})

	t.Run("a change the door cannot claim makes the state stale", func(t *testing.T) {
		r := newSealedRig(t)
		if got := r.decide(t, "evt_first", 12); got.Decision != policy.Allowed {
			t.Fatalf("the child before its removal: %s", got.Decision)
		}
		// SQL names the generation, as a rebuild records it.
		if ok, err := r.S.AcquireRebuild(r.Ctx, "test", "", time.Minute); err != nil || !ok {
			t.Fatalf("lease: %v, %v", ok, err)
		}
		if err := r.S.RebuildDone(r.Ctx, "test", r.gen, store.RedisState{}); err != nil {
			t.Fatal(err)
		}
		marks := recovery.NewGenerations(r.S)
		checked, err := judge.NewState(r.eng, judge.WithMarkStore(marks),
			judge.WithFamilySource(recovery.NewFamilySource(r.S, r.eng)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := checked.Status(r.Ctx, 1, 12); err != nil {
			t.Fatalf("a checked read before: %v", err)
		}
		if err := r.S.RemoveMember(r.Ctx, 1, 12, owner); err != nil {
			t.Fatal(err)
		}
		broken, err := judge.NewState(&faultyEngine{Engine: r.eng, failClaim: true, failWrites: true},
			judge.WithMarkStore(marks), judge.WithFamilySource(recovery.NewFamilySource(r.S, r.eng)))
		if err != nil {
			t.Fatal(err)
		}
		if err := broken.RemoveMember(r.Ctx, 1, 12); err != nil {
			t.Errorf("the door's answer to the removal = %v, want nil: the state is marked stale", err)
		}
		if _, err := checked.Status(r.Ctx, 1, 12); !errors.Is(err, quota.ErrStale) {
			t.Errorf("a checked read after the unclaimed change: %v, want ErrStale (Redis is rebuilt before the next decision)", err)
		}
	})
}

// Concurrent changes of a family's plan and thresholds reach the door in
// any order; the state ends as SQL committed them last: the door reads the
// family back under its claim (judge.State.Settle) instead of applying the
// value each caller gives. It failed before (issue #36, item 6: no version
// on SetPlan or SetThresholds): the plan and thresholds of the change
// whose door call came last won, whatever SQL held.
func TestConcurrentFamilyChangesLandInCommitOrder(t *testing.T) {
	r := newSealedRig(t)
	r.decide(t, "evt_restore", 11) // restored in the generation
	// Two owners change the plan and the alerts; SQL commits A then B.
	if _, err := r.S.SetPlan(r.Ctx, 1, 5<<20, owner); err != nil {
		t.Fatal(err)
	}
	if _, err := r.S.SetThresholds(r.Ctx, 1, policy.Thresholds{50}, owner); err != nil {
		t.Fatal(err)
	}
	if _, err := r.S.SetPlan(r.Ctx, 1, 8<<20, owner); err != nil {
		t.Fatal(err)
	}
	if _, err := r.S.SetThresholds(r.Ctx, 1, policy.Thresholds{30, 10}, owner); err != nil {
		t.Fatal(err)
	}
	// Their door calls land B first, then A.
	if _, err := r.door.SetPlan(r.Ctx, 1, 8<<20); err != nil {
		t.Fatal(err)
	}
	if err := r.door.SetThresholds(r.Ctx, 1, policy.Thresholds{30, 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.door.SetPlan(r.Ctx, 1, 5<<20); err != nil {
		t.Fatal(err)
	}
	if err := r.door.SetThresholds(r.Ctx, 1, policy.Thresholds{50}); err != nil {
		t.Fatal(err)
	}
	f, err := r.door.Family(r.Ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if f.Plan != 8<<20 || !slices.Equal(f.Thresholds, policy.Thresholds{30, 10}) {
		t.Errorf("Redis holds plan %d and thresholds %v; SQL committed %d and [30 10] last", f.Plan, f.Thresholds, 8<<20)
	}
}
