package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/dabom/dpcs/service/store"
)

// TestFamilySize: adding members stops at the family's maximum
// (store.DefaultMaxFamilyMembers) with 409 at path.familyId saying why, for
// owners and admins alike; a removal makes room again.
func TestFamilySize(t *testing.T) {
	f := newAPIFixture(t)
	owner, admin := f.token(ownerA), f.token(adminID)
	var list MemberList
	f.call(http.MethodGet, "/families/100/members", owner, nil, http.StatusOK, &list)
	for i := len(list.Members); i < store.DefaultMaxFamilyMembers; i++ {
		f.call(http.MethodPost, "/families/100/members", owner, map[string]any{"name": fmt.Sprint("kid ", i)}, http.StatusCreated, nil)
	}
	for _, tok := range []string{owner, admin} {
		p := f.problem(http.MethodPost, "/families/100/members", tok, map[string]any{"name": "one too many"}, http.StatusConflict, "path.familyId")
		if !strings.Contains(p.Detail, fmt.Sprintf("%d members", store.DefaultMaxFamilyMembers)) {
			t.Errorf("the refusal does not say the maximum: %+v", p)
		}
	}
	f.call(http.MethodDelete, "/families/100/members/1003", owner, nil, http.StatusNoContent, nil)
	f.call(http.MethodPost, "/families/100/members", owner, map[string]any{"name": "in its place"}, http.StatusCreated, nil)
}
