package api

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/dabom/dpcs/service/api/backoffice"
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

// TestChosenIDs: an admin chooses family and member ids only up to
// store.MaxFamilyID and store.MaxMemberID (422 naming the field beyond, as
// the OpenAPI document says); ids at the bound leave later families and
// members, whose ids are generated, room: 201, never 500.
func TestChosenIDs(t *testing.T) {
	f := newAPIFixture(t)
	admin := f.token(adminID)
	for _, id := range []int64{store.MaxFamilyID + 1, math.MaxInt64} {
		f.problem(http.MethodPost, "/admin/families", admin, map[string]any{"id": id, "name": "far", "planBytes": 1}, http.StatusUnprocessableEntity, "body.id")
	}
	f.call(http.MethodPost, "/admin/families", admin, map[string]any{"id": store.MaxFamilyID, "name": "last", "planBytes": 1}, http.StatusCreated, nil)
	var next backoffice.FamilyView
	f.call(http.MethodPost, "/admin/families", admin, map[string]any{"name": "generated", "planBytes": 1}, http.StatusCreated, &next)
	members := fmt.Sprintf("/families/%d/members", next.ID)
	for _, id := range []int64{store.MaxMemberID + 1, math.MaxInt64} {
		f.problem(http.MethodPost, members, admin, map[string]any{"customerId": id, "name": "far"}, http.StatusUnprocessableEntity, "body.customerId")
	}
	f.call(http.MethodPost, members, admin, map[string]any{"customerId": store.MaxMemberID, "name": "last", "role": "OWNER"}, http.StatusCreated, nil)
	f.call(http.MethodPost, members, admin, map[string]any{"name": "generated"}, http.StatusCreated, nil)
	f.call(http.MethodPost, "/families/100/members", f.token(ownerA), map[string]any{"name": "generated too"}, http.StatusCreated, nil)

	doc := f.api.OpenAPI().Components.Schemas.Map()
	for _, c := range []struct {
		schema, field string
		max           int64
	}{{"NewFamily", "id", store.MaxFamilyID}, {"NewMember", "customerId", store.MaxMemberID}} {
		s := doc[c.schema].Properties[c.field]
		if s == nil || s.Maximum == nil || int64(*s.Maximum) != c.max {
			t.Errorf("OpenAPI %s.%s: no maximum %d", c.schema, c.field, c.max)
		}
	}
}
