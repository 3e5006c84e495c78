package api

import (
	"context"
	"fmt"
	"net/http"
	"testing"
)

// TestSubscriberIMSI: the back office provisions the IMSI an SMF names a
// member by; the charging interface then finds the member by it. Another
// member's IMSI is 409 naming the field, what is not an IMSI 422, "" takes
// it away, and a member who is not in the family is 404.
func TestSubscriberIMSI(t *testing.T) {
	f := newAPIFixture(t)
	admin := f.token(adminID)
	path := func(fid, cid int64) string { return fmt.Sprintf("/admin/families/%d/members/%d/imsi", fid, cid) }
	var s Subscriber
	f.call(http.MethodGet, path(famA, childA), admin, nil, http.StatusOK, &s)
	if s.IMSI != "" || s.CustomerID != childA {
		t.Fatalf("before: %+v", s)
	}
	f.call(http.MethodPut, path(famA, childA), admin, SubscriberChange{IMSI: "450051234567890"}, http.StatusOK, &s)
	f.call(http.MethodGet, path(famA, childA), admin, nil, http.StatusOK, &s)
	if s.IMSI != "450051234567890" {
		t.Fatalf("after: %+v", s)
	}
	m, err := f.store.MemberByIMSI(context.Background(), "450051234567890")
	if err != nil || m.ID != childA {
		t.Fatalf("the member charging finds: %+v %v", m, err)
	}
	f.problem(http.MethodPut, path(famA, ownerA), admin, SubscriberChange{IMSI: "450051234567890"}, http.StatusConflict, "body.imsi")
	f.problem(http.MethodPut, path(famA, ownerA), admin, SubscriberChange{IMSI: "45005x"}, http.StatusUnprocessableEntity, "body.imsi")
	f.problem(http.MethodPut, path(famA, childB), admin, SubscriberChange{IMSI: "450059999999"}, http.StatusNotFound, "")
	f.problem(http.MethodGet, path(famA, childB), admin, nil, http.StatusNotFound, "")
	f.call(http.MethodPut, path(famA, childA), admin, SubscriberChange{IMSI: ""}, http.StatusOK, &s)
	if _, err := f.store.MemberByIMSI(context.Background(), "450051234567890"); err == nil {
		t.Error("the IMSI taken away still names the member")
	}
	f.problem(http.MethodPut, path(famA, childA), f.token(ownerA), SubscriberChange{IMSI: "450051234567890"}, http.StatusForbidden, "")
}
