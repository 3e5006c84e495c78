package quota

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
)

// Every admin method refuses a family id ≤ 0 before contacting Redis.
func TestAdminRejectsBadFamily(t *testing.T) {
	e, err := New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}))
	if err != nil {
		t.Fatal(err)
	}
	defer e.rdb.Close()
	ctx := context.Background()
	for name, op := range map[string]func(fid int64) error{
		"SetPlan":        func(fid int64) error { _, err := e.SetPlan(ctx, fid, 1); return err },
		"TopUp":          func(fid int64) error { _, err := e.TopUp(ctx, fid, 1); return err },
		"SetTopUps":      func(fid int64) error { _, err := e.SetTopUps(ctx, fid, "202602", 1); return err },
		"SetThresholds":  func(fid int64) error { return e.SetThresholds(ctx, fid, policy.Thresholds{50}) },
		"SetConstraints": func(fid int64) error { _, err := e.SetConstraints(ctx, fid, 1, 1, nil); return err },
		"Enforce":        func(fid int64) error { _, err := e.Enforce(ctx, fid, 1, 1, policy.Constraints{}); return err },
		"AddMember":      func(fid int64) error { return e.AddMember(ctx, fid, 1) },
		"RemoveMember":   func(fid int64) error { return e.RemoveMember(ctx, fid, 1) },
		"Status":         func(fid int64) error { _, err := e.Status(ctx, fid, 1); return err },
		"Family":         func(fid int64) error { _, err := e.Family(ctx, fid); return err },
		"Restore":        func(fid int64) error { return e.Restore(ctx, FamilyState{FamilyID: fid}) },
	} {
		for _, fid := range []int64{0, -1} {
			err := op(fid)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "familyId must be > 0") {
				t.Errorf("%s(%d): %v, want ErrInvalid about the family", name, fid, err)
			}
		}
	}
	if _, err := e.TopUp(ctx, 1, policy.MaxBytes+1); !errors.Is(err, ErrInvalid) {
		t.Errorf("TopUp past MaxBytes: %v", err)
	}
}

// Family reads the pool and the members in one transaction and reads again
// while the membership changes in between; a membership that keeps
// changing fails the snapshot instead of returning a torn one.
func TestFamilyWhileMembershipChanges(t *testing.T) {
	now := kst(t, "2026-02-06 14:30")
	for _, tt := range []struct {
		name    string
		changes int // reads during which a member joins
		wantErr bool
	}{
		{"stable", 0, false},
		{"one change", 1, false},
		{"four changes", 4, false},
		{"never settles", 1000, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, rdb, e := provisioned(t, now)
			next := int64(2)
			rdb.AddHook(&faultHook{before: func(cmds []redis.Cmder) error {
				if slices.Contains(names(cmds), "multi") && next-2 < int64(tt.changes) {
					m.HSet(e.k.family(1), memberField(next), "1") // joins as the read is sent
					next++
				}
				return nil
			}})
			f, err := e.Family(context.Background(), 1)
			if tt.wantErr {
				if err == nil || err.Error() != "quota: family 1: membership kept changing during the snapshot" {
					t.Fatalf("Family = %+v, %v; want the snapshot to give up", f, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []int64
			for _, s := range f.Members {
				ids = append(ids, s.CustomerID)
			}
			want := []int64{1}
			for c := int64(2); c < next; c++ {
				want = append(want, c)
			}
			if diff := cmp.Diff(want, ids); diff != "" {
				t.Errorf("members (-want +got):\n%s", diff)
			}
		})
	}
}

// Constraints stored in Redis that are not valid (written by hand or by
// another program) are reported, not judged from: Status, Family and
// Enforce fail naming the customer.
func TestInvalidStoredConstraints(t *testing.T) {
	now := kst(t, "2026-02-06 14:30")
	m, _, e := provisioned(t, now)
	ctx := context.Background()
	if _, err := e.SetConstraints(ctx, 1, 1, 1, map[string]string{policy.KeyLimitDaily: "10"}); err != nil {
		t.Fatal(err)
	}
	m.HSet(e.k.constraints(1, 1), policy.KeyLimitDaily, "-5")
	const want = "quota: stored constraints of customer 1 are invalid"
	if _, err := e.Status(ctx, 1, 1); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Status: %v, want %q", err, want)
	}
	if _, err := e.Family(ctx, 1); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Family: %v, want %q", err, want)
	}
	// A stale update is not written, so the stored ones stay and fail the status.
	enf, err := e.Enforce(ctx, 1, 1, 1, rules(t, map[string]string{policy.KeyLimitDaily: "20"}))
	if err == nil || !strings.HasPrefix(err.Error(), want) || enf.Applied {
		t.Errorf("Enforce with a stale version: %+v, %v; want %q", enf, err, want)
	}
	// A newer one replaces them.
	enf, err = e.Enforce(ctx, 1, 1, 2, rules(t, map[string]string{policy.KeyLimitDaily: "20"}))
	if err != nil || !enf.Applied || enf.Status.Constraints[policy.KeyLimitDaily] != "20" || enf.Status.Version != 2 {
		t.Errorf("Enforce with a newer version: %+v, %v", enf, err)
	}
	if _, err := e.Enforce(ctx, 1, 1, 3, policy.Constraints{DailyLimit: policy.Limit(-1)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Enforce with invalid (hand-built) constraints: %v, want ErrInvalid", err)
	}
}
