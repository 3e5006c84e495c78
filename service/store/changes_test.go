package store_test

import (
	"testing"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// testFamilyChanges: every write that changes what a family's Redis state
// is rebuilt from counts as a change of that family (FamilyChanges), in its
// own transaction — a rebuild relies on it to restore again a family
// changed while it was read (service/recovery). Writes about another
// family do not count for this one.
func testFamilyChanges(t *testing.T, e *env) {
	e.Family(t, 1)
	e.Family(t, 2)
	count := func() int64 {
		t.Helper()
		c, err := e.S.FamilyChanges(e.Ctx, []int64{1, 2}, true)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := e.S.FamilyChanges(e.Ctx, []int64{1}, false); err != nil || n[1] != c[1] {
			t.Fatalf("by name %v, %v; by range %v", n, err, c)
		}
		return c[1]
	}
	own := store.Actor{ID: 11, Role: policy.RoleOwner}
	for _, w := range []struct {
		name  string
		write func() error
	}{
		{"plan", func() error { _, err := e.S.SetPlan(e.Ctx, 1, 20<<20, own); return err }},
		{"thresholds", func() error { _, err := e.S.SetThresholds(e.Ctx, 1, policy.Thresholds{40}, own); return err }},
		{"top-up", func() error { _, err := e.S.AddTopUp(e.Ctx, 1, 1<<20, own); return err }},
		{"member added", func() error {
			_, err := e.S.AddMember(e.Ctx, store.NewMember{FamilyID: 1, Name: "new", Role: policy.RoleMember, Password: "pw-pw-pw-pw"}, own)
			return err
		}},
		{"policy", func() error {
			_, err := e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 1, CustomerID: 12,
				Set: map[string]string{policy.KeyLimitDaily: "1000"}, By: own})
			return err
		}},
		{"data request approved", func() error {
			r, _, err := e.S.CreateDataRequest(e.Ctx, store.NewDataRequest{FamilyID: 1, CustomerID: 12, AmountBytes: 10,
				MaxAmount: 1 << 20, MaxPending: 5})
			if err != nil {
				return err
			}
			_, err = e.S.AnswerDataRequest(e.Ctx, store.DataRequestAnswer{FamilyID: 1, RequestID: r.ID, Approve: true,
				Grant: envelope.GrantDay, By: own})
			return err
		}},
		{"member removed", func() error { return e.S.RemoveMember(e.Ctx, 1, 12, own) }},
	} {
		before := count()
		if err := w.write(); err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		if after := count(); after <= before {
			t.Errorf("%s: family 1's changes %d → %d, want more", w.name, before, after)
		}
	}
	before := count()
	if _, err := e.S.SetPlan(e.Ctx, 2, 1<<20, own); err != nil {
		t.Fatal(err)
	}
	if after := count(); after != before {
		t.Errorf("a change of family 2 counted for family 1: %d → %d", before, after)
	}
}
