package api

import (
	"net/http"
	"testing"

	"github.com/dabom/dpcs/policy"
)

// TestGifts: "데이터 선물하기" over the API — a child gives part of what it
// has left this month to a sibling; the engine judges both at once (the
// giver blocked past its lowered limit, the receiver allowed past its old
// one); more than what is left is 422, another member's data 403.
func TestGifts(t *testing.T) {
	f := newAPIFixture(t)
	owner, child := f.token(ownerA), f.token(childA)
	const sibling = 1008
	f.addMember(famA, sibling, policy.RoleMember)
	for id, limit := range map[int64]string{childA: "1000", sibling: "500"} {
		f.call(http.MethodPatch, "/families/100/members/"+itoa(id)+"/policies", owner,
			map[string]any{"set": map[string]string{policy.KeyLimitMonthly: limit}}, http.StatusOK, nil)
	}
	if r := f.use(famA, childA, 600); r.Decision != policy.Allowed {
		t.Fatalf("child's use: %+v", r)
	}
	var g GiftView
	f.call(http.MethodPost, "/families/100/gifts", child, map[string]any{"toCustomerId": sibling, "amountBytes": 300}, http.StatusCreated, &g)
	if g.FromCustomerID != childA || g.GiverLeftBytes != 100 || g.Month != "202602" ||
		g.From.Rules["LIMIT:DATA:GIFT:202602"] != "-300" || g.To.Rules["LIMIT:DATA:GIFT:202602"] != "300" ||
		g.From.Standing == nil || g.From.Standing.Status != "ALLOWED" {
		t.Fatalf("gift: %+v", g)
	}
	if r := f.use(famA, childA, 101); r.Decision != policy.BlockedLimitMonthly {
		t.Errorf("the giver past its lowered limit: %+v", r)
	}
	if r := f.use(famA, sibling, 700); r.Decision != policy.Allowed {
		t.Errorf("the receiver within its raised limit: %+v", r)
	}
	f.problem(http.MethodPost, "/families/100/gifts", child, map[string]any{"toCustomerId": sibling, "amountBytes": 200}, http.StatusUnprocessableEntity, "body.amountBytes")
	f.problem(http.MethodPost, "/families/100/gifts", child, map[string]any{"fromCustomerId": sibling, "toCustomerId": childA, "amountBytes": 1}, http.StatusForbidden, "")
	f.problem(http.MethodPost, "/families/100/gifts", child, map[string]any{"toCustomerId": childA, "amountBytes": 1}, http.StatusUnprocessableEntity, "body.toCustomerId")
	// An owner gives the sibling's data back.
	f.call(http.MethodPost, "/families/100/gifts", owner, map[string]any{"fromCustomerId": sibling, "toCustomerId": childA, "amountBytes": 100}, http.StatusCreated, &g)
	if r := f.use(famA, childA, 100); r.Decision != policy.Allowed {
		t.Errorf("the child after the owner gave 100 back: %+v", r)
	}
	f.problem(http.MethodPost, "/families/100/gifts", f.token(adminID), map[string]any{"toCustomerId": childA, "amountBytes": 1}, http.StatusUnprocessableEntity, "body.fromCustomerId")
}
