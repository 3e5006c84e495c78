package store_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/service/store"
)

// testLockoutAudit: a lockout is audited as the member's when the login
// names one (by id or phone), as "login" otherwise, with the lockout's facts
// and never a password.
func testLockoutAudit(t *testing.T, e *env) {
	e.family(t, 1)
	until := start.Add(15 * time.Minute)
	for _, c := range []struct {
		login, target string
		family        int64
	}{{"11", "member:11", 1}, {"010-12", "member:12", 1}, {"404", "login", 0}, {"nobody", "login", 0}} {
		l := store.Lockout{Login: c.login, Failures: 10, Until: until, Address: "192.0.2.7"}
		if err := e.s.AuditLockout(e.ctx, l); err != nil {
			t.Fatal(err)
		}
		rows, err := e.s.AuditLog(e.ctx, store.AuditFilter{Action: store.ActionLockout, Limit: 1})
		if err != nil || len(rows) != 1 {
			t.Fatalf("%s: audit rows %+v, %v", c.login, rows, err)
		}
		got := rows[0]
		if got.Target != c.target || got.FamilyID != c.family || got.Actor != store.System || got.Before != nil {
			t.Errorf("%s: audit row %+v", c.login, got)
		}
		var after store.Lockout
		if err := json.Unmarshal(got.After, &after); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(l, after, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
			t.Errorf("%s: after JSON (-want +got):\n%s", c.login, diff)
		}
		if strings.Contains(strings.ToLower(string(got.After)), "password") {
			t.Errorf("%s: after JSON names a password: %s", c.login, got.After)
		}
	}
}
