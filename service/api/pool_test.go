package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/store"
)

// A top-up or plan the quota engine would refuse (the month's plan + top-ups
// over policy.MaxBytes) is a 422 naming the field and what is still allowed,
// and changes nothing: no SQL row, no audit entry, no Redis change — so the
// next rebuild of the family does not fail on it.
func TestPoolLimitRefusedBeforeWriting(t *testing.T) {
	f := newAPIFixture(t)
	ctx := context.Background()
	admin := f.token(adminID)
	room := policy.MaxBytes - 10*gib // the fixture's plan is 10 GiB
	// (an admin: owners are bounded far lower, see TestOwnerTopUps)
	f.call(http.MethodPost, "/families/100/topups", admin, map[string]any{"bytes": room - 5}, http.StatusCreated, nil)

	type state struct {
		Plan   int64
		TopUps []store.TopUp
		Audit  int
		Redis  quota.FamilyStatus
	}
	snapshot := func() state {
		t.Helper()
		fam, err := f.store.GetFamily(ctx, famA)
		if err != nil {
			t.Fatal(err)
		}
		tus, err := f.store.TopUps(ctx, famA, policy.MomentOf(f.clock(), f.engine.Location()).Month)
		if err != nil {
			t.Fatal(err)
		}
		audit, err := f.store.AuditLog(ctx, store.AuditFilter{FamilyID: famA})
		if err != nil {
			t.Fatal(err)
		}
		st, err := f.engine.Family(ctx, famA)
		if err != nil {
			t.Fatal(err)
		}
		return state{fam.PlanBytes, tus, len(audit), st}
	}
	before := snapshot()

	for _, tc := range []struct {
		name, method, path, token string
		body                      map[string]any
		loc, says                 string
	}{
		{"top-up over the maximum", http.MethodPost, "/families/100/topups", admin, map[string]any{"bytes": 6},
			"body.bytes", "at most 5 bytes can still be topped up"},
		{"plan over the maximum", http.MethodPut, "/admin/families/100/plan", admin, map[string]any{"planBytes": 10*gib + 6},
			"body.planBytes", fmt.Sprintf("the plan can be at most %d bytes", 10*gib+5)},
	} {
		p := f.problem(tc.method, tc.path, tc.token, tc.body, http.StatusUnprocessableEntity, tc.loc)
		said := false
		for _, e := range p.Errors {
			said = said || (e.Location == tc.loc && strings.Contains(e.Message, tc.says))
		}
		if !said {
			t.Errorf("%s: no error at %s saying %q: %+v", tc.name, tc.loc, tc.says, p)
		}
	}
	if diff := cmp.Diff(before, snapshot()); diff != "" {
		t.Errorf("refused changes changed the family (-before +after):\n%s", diff)
	}
	// What the answer said is allowed is accepted.
	var tu TopUpView
	f.call(http.MethodPost, "/families/100/topups", admin, map[string]any{"bytes": 5}, http.StatusCreated, &tu)
	if tu.TotalBytes != policy.MaxBytes {
		t.Errorf("pool total after topping up to the maximum = %d, want %d", tu.TotalBytes, policy.MaxBytes)
	}
}
