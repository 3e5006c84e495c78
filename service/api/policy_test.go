package api

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/dabom/dpcs/service/store"
)

// TestPatchPolicyNoOp: a PATCH that changes nothing answers 200 with the
// current version and standing, and writes nothing: no new version, no
// audit row, no policy-updated event (no event id, the relay not woken).
func TestPatchPolicyNoOp(t *testing.T) {
	f := newAPIFixture(t)
	owner := f.token(ownerA)
	path := fmt.Sprintf("/families/%d/members/%d/policies", famA, childA)
	limit := map[string]string{"LIMIT:DATA:MONTHLY": fmt.Sprint(2 * gib)}
	var first PolicyView
	f.call(http.MethodPatch, path, owner, map[string]any{"set": limit}, http.StatusOK, &first)
	if first.Version != 1 || first.EventID == "" {
		t.Fatalf("first PATCH: %+v", first)
	}
	audits := func() int {
		as, err := f.store.AuditLog(context.Background(), store.AuditFilter{FamilyID: famA, Action: "policy.update"})
		if err != nil {
			t.Fatal(err)
		}
		return len(as)
	}
	wakes, audited := f.wakes.Load(), audits()
	for _, body := range []map[string]any{
		{"set": limit},
		{"set": limit, "expectedVersion": 1},
		{"remove": []string{"BLOCK:ACCESS"}},
		{"replace": limit},
	} {
		var pv PolicyView
		f.call(http.MethodPatch, path, owner, body, http.StatusOK, &pv)
		if pv.Version != 1 || pv.EventID != "" || pv.Rules["LIMIT:DATA:MONTHLY"] != fmt.Sprint(2*gib) || len(pv.Rules) != 1 {
			t.Errorf("no-op PATCH %v: %+v, want version 1, no event id", body, pv)
		}
		if pv.Standing == nil || pv.Standing.Status != "ALLOWED" {
			t.Errorf("no-op PATCH %v: standing %+v", body, pv.Standing)
		}
	}
	if got := f.wakes.Load(); got != wakes {
		t.Errorf("relay woken %d times by no-op PATCHes", got-wakes)
	}
	if got := audits(); got != audited {
		t.Errorf("audit rows %d → %d after no-op PATCHes", audited, got)
	}
	var pv PolicyView
	f.call(http.MethodGet, path, owner, nil, http.StatusOK, &pv)
	if pv.Version != 1 {
		t.Errorf("GET after no-ops: version %d, want 1", pv.Version)
	}
	// A member nobody set a policy for: removing an absent key is a no-op at
	// version 0, with the standing.
	var none PolicyView
	f.call(http.MethodPatch, fmt.Sprintf("/families/%d/members/%d/policies", famA, victimA), owner,
		map[string]any{"remove": []string{"BLOCK:ACCESS"}}, http.StatusOK, &none)
	if none.Version != 0 || none.EventID != "" || len(none.Rules) != 0 || none.Standing == nil || none.Standing.Status != "ALLOWED" {
		t.Errorf("no-op PATCH of a member without a policy: %+v (standing %+v)", none, none.Standing)
	}
	// A stale expectedVersion is still a conflict, even for a no-op.
	f.problem(http.MethodPatch, path, owner, map[string]any{"set": limit, "expectedVersion": 7}, http.StatusConflict, "body.expectedVersion")
}
