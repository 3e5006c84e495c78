package store_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// testLockoutAudit: a lockout is audited by the system actor (never an
// ADMIN's role) as the member's when the login names one (by id or phone),
// as "login" otherwise, with the lockout's facts. Of the login only what
// reads as a member id or a phone is kept: free text (a password typed in
// the login field, control characters, a long string) is not written.
func testLockoutAudit(t *testing.T, e *env) {
	e.Family(t, 1)
	until := start.Add(15 * time.Minute)
	hostile := "hunter2-my-password\x00\n\u202e<script>" + strings.Repeat("x", 500)
	for _, c := range []struct {
		login, target string
		family        int64
		kept          store.Lockout
	}{
		{"11", "member:11", 1, store.Lockout{Login: "11", Kind: "id"}},
		{"010-12", "member:12", 1, store.Lockout{Login: "010-12", Kind: "phone"}},
		{"404", "login", 0, store.Lockout{Login: "404", Kind: "id"}},
		{"nobody", "login", 0, store.Lockout{Kind: "other"}},
		{hostile, "login", 0, store.Lockout{Kind: "other"}},
		{"0" + strings.Repeat("1", 40), "login", 0, store.Lockout{Kind: "other"}},
	} {
		l := store.Lockout{Login: c.login, Failures: 10, Until: until, Address: "192.0.2.7"}
		if err := e.S.AuditLockout(e.Ctx, l); err != nil {
			t.Fatal(err)
		}
		rows, err := e.S.AuditLog(e.Ctx, store.AuditFilter{Action: store.ActionLockout, Limit: 1})
		if err != nil || len(rows) != 1 {
			t.Fatalf("%q: audit rows %+v, %v", c.login, rows, err)
		}
		got := rows[0]
		if got.Target != c.target || got.FamilyID != c.family || got.Actor != store.System || got.Before != nil {
			t.Errorf("%q: audit row %+v", c.login, got)
		}
		if got.Actor.Role == policy.RoleAdmin || got.Actor.Role != store.RoleSystem {
			t.Errorf("%q: actor %+v, want the system actor (role %s)", c.login, got.Actor, store.RoleSystem)
		}
		var after store.Lockout
		if err := json.Unmarshal(got.After, &after); err != nil {
			t.Fatal(err)
		}
		want := c.kept
		want.Failures, want.Until, want.Address = 10, until, "192.0.2.7"
		if diff := cmp.Diff(want, after, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
			t.Errorf("%q: after JSON (-want +got):\n%s", c.login, diff)
		}
		if s := strings.ToLower(string(got.After)); strings.Contains(s, "password") || strings.Contains(s, "hunter2") || strings.Contains(s, "script") {
			t.Errorf("%q: after JSON keeps free text: %s", c.login, got.After)
		}
	}
}
