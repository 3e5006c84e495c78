package api

import (
	"fmt"
	"net/http"
	"testing"
)

// A care agent sees each member's logins: how many failed attempts are
// left, and a locked one (#38).
func TestFamilyLogins(t *testing.T) {
	f := newAPIFixture(t)
	admin := f.token(adminID)
	logins := func() map[int64]MemberLogin {
		t.Helper()
		var out FamilyLogins
		f.call(http.MethodGet, "/admin/families/100/logins", admin, nil, http.StatusOK, &out)
		m := map[int64]MemberLogin{}
		for _, x := range out.Members {
			m[x.CustomerID] = x
		}
		if out.LockoutAfter != 10 {
			t.Errorf("lockoutAfter %d, want the default 10", out.LockoutAfter)
		}
		return m
	}
	if c := logins()[childA]; c.ByID.AttemptsLeft != 10 || c.ByID.LockedSeconds != 0 || c.Name == "" {
		t.Errorf("before any failure: %+v", c)
	}
	fail := func(n int) {
		for range n {
			f.do(http.MethodPost, "/auth/token", "", map[string]string{"login": fmt.Sprint(childA), "password": "not it"})
		}
	}
	fail(3)
	if c := logins()[childA]; c.ByID.AttemptsLeft != 7 || c.ByID.LockedSeconds != 0 {
		t.Errorf("after 3 failures: %+v", c.ByID)
	}
	fail(7)
	if c := logins()[childA]; c.ByID.AttemptsLeft != 0 || c.ByID.LockedSeconds <= 0 {
		t.Errorf("after 10 failures: %+v, want locked", c.ByID)
	}
	if o := logins()[ownerA]; o.ByID.AttemptsLeft != 10 {
		t.Errorf("another member: %+v", o)
	}
	f.problem(http.MethodGet, "/admin/families/100/logins", f.token(ownerA), nil, http.StatusForbidden, "")
	f.problem(http.MethodGet, "/admin/families/999/logins", admin, nil, http.StatusNotFound, "")
}
