package quota

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
)

// Every method that talks to Redis returns Redis's error, wrapped with what
// it was doing, never as a bad argument or a stale state; and nothing of
// the family changed.
func TestRedisErrors(t *testing.T) {
	now := kst(t, "2026-02-06 14:30")
	m, _, e := provisioned(t, now)
	ctx := context.Background()
	if err := e.FinishRebuild(ctx, "g1", nil); err != nil {
		t.Fatal(err)
	}
	before, err := e.Family(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	ev := Event{ID: "a", FamilyID: 1, CustomerID: 1, Bytes: 1, At: now}
	marks := []Mark{{Stream: "usage/0", From: 0, To: 1}}
	ops := []struct {
		name, prefix string
		op           func() error
	}{
		{"SetPlan", "quota: pool plan: ", func() error { _, err := e.SetPlan(ctx, 1, 5); return err }},
		{"TopUp", "quota: pool topup: ", func() error { _, err := e.TopUp(ctx, 1, 5); return err }},
		{"SetTopUps", "quota: pool topups: ", func() error { _, err := e.SetTopUps(ctx, 1, "202602", 5); return err }},
		{"SetThresholds", "quota: pool thr: ", func() error { return e.SetThresholds(ctx, 1, policy.Thresholds{20}) }},
		{"SetConstraints", "quota: set constraints: ", func() error {
			_, err := e.SetConstraints(ctx, 1, 1, 1, map[string]string{policy.KeyLimitDaily: "1"})
			return err
		}},
		{"Enforce", "quota: set constraints: ", func() error { _, err := e.Enforce(ctx, 1, 1, 1, policy.Constraints{}); return err }},
		{"AddMember", "quota: add member: ", func() error { return e.AddMember(ctx, 1, 2) }},
		{"RemoveMember", "quota: remove member: ", func() error { return e.RemoveMember(ctx, 1, 1) }},
		{"Status", "quota: status: ", func() error { _, err := e.Status(ctx, 1, 1); return err }},
		{"Family", "quota: family: ", func() error { _, err := e.Family(ctx, 1); return err }},
		{"Restore", "quota: restore family 1: ", func() error { return e.Restore(ctx, FamilyState{FamilyID: 1}) }},
		{"Load", "quota: load script: ", func() error { return e.Load(ctx) }},
		{"Apply", "quota: apply: ", func() error { _, err := e.Apply(ctx, ev); return err }},
		{"ApplyMarked", "quota: apply: ", func() error { _, err := e.ApplyMarked(ctx, "g1", marks, []Event{ev}); return err }},
		{"CheckState", "quota: apply: ", func() error { return e.CheckState(ctx, "g1", marks) }},
		{"Advance", "quota: apply: ", func() error { return e.Advance(ctx, "g1", marks) }},
		{"State", "quota: state get: ", func() error { _, err := e.State(ctx); return err }},
		{"BeginRebuild", "quota: state begin: ", func() error { _, err := e.BeginRebuild(ctx, "g2"); return err }},
		{"FinishRebuild", "quota: state finish: ", func() error { return e.FinishRebuild(ctx, "g2", nil) }},
	}
	m.SetError("ERR down")
	for _, tt := range ops {
		err := tt.op()
		if err == nil || !strings.HasPrefix(err.Error(), tt.prefix) || !strings.HasSuffix(err.Error(), "ERR down") {
			t.Errorf("%s: %v, want %q…ERR down", tt.name, err, tt.prefix)
		}
		if errors.Is(err, ErrInvalid) || errors.Is(err, ErrStale) {
			t.Errorf("%s: %v reported as a bad argument or stale state", tt.name, err)
		}
	}
	m.SetError("")
	after, err := e.Family(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if after.Plan != before.Plan || after.Used != before.Used || len(after.Members) != len(before.Members) {
		t.Errorf("family changed by failed calls: %+v, was %+v", after, before)
	}
	if st, err := e.State(ctx); err != nil || st[0].Generation != "g1" || len(st[0].Watermarks) != 0 {
		t.Errorf("state marker changed by failed calls: %+v, %v", st, err)
	}
}

// A cancelled context fails the call with context.Canceled and judges nothing.
func TestCancelledContext(t *testing.T) {
	now := kst(t, "2026-02-06 14:30")
	_, _, e := provisioned(t, now)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ev := Event{ID: "a", FamilyID: 1, CustomerID: 1, Bytes: 1, At: now}
	if _, err := e.Apply(ctx, ev); !errors.Is(err, context.Canceled) {
		t.Errorf("Apply: %v, want context.Canceled", err)
	}
	if _, err := e.Family(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Family: %v, want context.Canceled", err)
	}
	r, err := e.Apply(context.Background(), ev)
	if err != nil || r.Duplicate {
		t.Errorf("Apply after the cancelled one = %+v, %v; want it judged now", r, err)
	}
}

// Restore writes in one script call (restore.lua): when it fails, the
// family is as it was.
func TestRestoreTransactionFails(t *testing.T) {
	now := kst(t, "2026-02-06 14:30")
	_, rdb, e := provisioned(t, now)
	ctx := context.Background()
	if _, err := e.Apply(ctx, Event{ID: "a", FamilyID: 1, CustomerID: 1, Bytes: 7, At: now}); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(&faultHook{before: func(cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "evalsha" && c.Args()[1] == restoreScript.Hash() {
				return injected
			}
		}
		return nil
	}})
	err := e.Restore(ctx, FamilyState{FamilyID: 1, Provisioned: true, Plan: 500, Members: []MemberState{{CustomerID: 2}}})
	if err == nil || err.Error() != "quota: restore family 1: ERR injected" {
		t.Fatalf("Restore = %v", err)
	}
	f, err := e.Family(ctx, 1)
	if err != nil || f.Plan != 100 || f.Used != 7 || len(f.Members) != 1 || f.Members[0].CustomerID != 1 {
		t.Errorf("family after a failed restore = %+v, %v; want it unchanged", f, err)
	}
	// The dedupe records survived too.
	r, err := e.Apply(ctx, Event{ID: "a", FamilyID: 1, CustomerID: 1, Bytes: 7, At: now.Add(time.Minute)})
	if err != nil || !r.Duplicate || r.Remaining != 93 {
		t.Errorf("replay after a failed restore = %+v, %v; want the original result", r, err)
	}
}
