package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/bcrypt"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/limit"
	"github.com/dabom/dpcs/service/store"
)

// TestLoginAttemptsLeft: a failed login says how many attempts are left
// before the login is locked — the same for a login that names nobody — and
// the failure that locks it says 0 with Retry-After; then 429.
func TestLoginAttemptsLeft(t *testing.T) {
	f := newAPIFixtureWith(t, func(c *Config) {
		c.Limits = AuthLimits{LoginPerLogin: limit.Rate{N: 1000, Per: time.Minute}, LockoutAfter: 3, LockoutFor: 15 * time.Minute}
	})
	type answer struct {
		Status       int
		AttemptsLeft *int `json:"attemptsLeft"`
		RetryAfter   string
	}
	for _, login := range []string{"1001", "777777", "010-0000-0000"} {
		var got []answer
		for range 4 {
			resp, body := f.do(http.MethodPost, "/auth/token", "", map[string]string{"login": login, "password": "wrong guess"})
			var a answer
			if err := json.Unmarshal(body, &a); err != nil {
				t.Fatal(err)
			}
			a.RetryAfter = resp.Header.Get("Retry-After")
			got = append(got, a)
		}
		n := func(i int) *int { return &i }
		want := []answer{{401, n(2), ""}, {401, n(1), ""}, {401, n(0), "900"}, {429, nil, "900"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("login %s: answers (-want +got):\n%s", login, diff)
		}
	}
}

// TestLoginFlagsWeakPassword: a password set before the password rules (or
// that later joined the common list) still logs in, and the answer asks
// for a change.
func TestLoginFlagsWeakPassword(t *testing.T) {
	f := newAPIFixture(t)
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.AddMember(context.Background(), store.NewMember{ID: 1009, FamilyID: famA, Name: "old", Role: policy.RoleMember,
		PasswordHash: string(hash)}, store.System); err != nil {
		t.Fatal(err)
	}
	var weak, strong Tokens
	f.call(http.MethodPost, "/auth/token", "", map[string]string{"login": "1009", "password": "pw"}, http.StatusOK, &weak)
	f.call(http.MethodPost, "/auth/token", "", map[string]string{"login": "1002", "password": testPassword}, http.StatusOK, &strong)
	if !weak.PasswordWeak || strong.PasswordWeak {
		t.Errorf("passwordWeak: %v for \"pw\", %v for %q; want true, false", weak.PasswordWeak, strong.PasswordWeak, testPassword)
	}
}

// TestChangeOwnPassword: POST /me/password with the current password sets
// a new one that passes the rules; the caller's session goes on, its other
// sessions end (tokens refused, streams closed); a wrong current password
// counts toward the login's lockout.
func TestChangeOwnPassword(t *testing.T) {
	f := newAPIFixture(t, withPing(time.Hour), func(c *Config) {
		c.Limits = AuthLimits{LoginPerLogin: limit.Rate{N: 1000, Per: time.Minute}, LockoutAfter: 3, LockoutFor: 15 * time.Minute}
	})
	const next = "a brand new secret"
	here, there := f.login(childA), f.login(childA)
	kept := f.openStream(streamPath, here.AccessToken, "")
	defer kept.close()
	gone := f.openStream(streamPath, there.AccessToken, "")
	defer gone.close()

	p := f.problem(http.MethodPost, "/me/password", here.AccessToken, map[string]string{"currentPassword": "wrong guess", "newPassword": next},
		http.StatusUnprocessableEntity, "body.currentPassword")
	if p.Errors[0].Message != "is not your current password (2 attempts left before your login is locked)" {
		t.Errorf("wrong current password: %+v", p)
	}
	p = f.problem(http.MethodPost, "/me/password", here.AccessToken, map[string]string{"currentPassword": testPassword, "newPassword": "iloveyou1"},
		http.StatusUnprocessableEntity, "body.newPassword")
	if p.Errors[0].Message != "is too common or easily guessed: choose another, e.g. a few unrelated words" {
		t.Errorf("common new password: %+v", p)
	}
	f.problem(http.MethodPost, "/me/password", "", map[string]string{"currentPassword": testPassword, "newPassword": next}, http.StatusUnauthorized, "")
	f.call(http.MethodPost, "/me/password", here.AccessToken, map[string]string{"currentPassword": testPassword, "newPassword": next}, http.StatusNoContent, nil)

	gone.ended(t, "the member's other session's stream", streamDeadline)
	f.alive(t, "the changing session's stream", kept)
	f.problem(http.MethodGet, "/families/100", there.AccessToken, nil, http.StatusUnauthorized, "")
	f.problem(http.MethodPost, "/auth/refresh", "", map[string]string{"refreshToken": there.RefreshToken}, http.StatusUnauthorized, "")
	f.call(http.MethodGet, "/families/100", here.AccessToken, nil, http.StatusOK, nil)
	f.call(http.MethodPost, "/auth/refresh", "", map[string]string{"refreshToken": here.RefreshToken}, http.StatusOK, nil)
	f.problem(http.MethodPost, "/auth/token", "", map[string]string{"login": "1002", "password": testPassword}, http.StatusUnauthorized, "")
	f.call(http.MethodPost, "/auth/token", "", map[string]string{"login": "1002", "password": next}, http.StatusOK, nil)
	rows, err := f.store.AuditLog(context.Background(), store.AuditFilter{Action: store.ActionPassword})
	if err != nil || len(rows) != 1 || rows[0].Actor.ID != childA || rows[0].Target != "member:1002" {
		t.Errorf("audit rows %+v, %v", rows, err)
	}

	// Guessing the current password with a stolen access token locks the
	// login: the third wrong one, and then even the right one, and logins.
	for i := range 3 {
		f.problem(http.MethodPost, "/me/password", here.AccessToken, map[string]string{"currentPassword": fmt.Sprint("guess ", i), "newPassword": "another new one"},
			http.StatusUnprocessableEntity, "body.currentPassword")
	}
	f.problem(http.MethodPost, "/me/password", here.AccessToken, map[string]string{"currentPassword": next, "newPassword": "another new one"}, http.StatusTooManyRequests, "")
	f.problem(http.MethodPost, "/auth/token", "", map[string]string{"login": "1002", "password": next}, http.StatusTooManyRequests, "")
}

// TestResetPassword: an owner resets a member's password, an admin an
// owner's; every session of the member ends at once (tokens refused,
// streams closed). Owners reset neither another owner's nor their own;
// members reset nobody's; another family's member is not found.
func TestResetPassword(t *testing.T) {
	f := newAPIFixture(t, withPing(time.Hour))
	const owner2 = int64(1004)
	f.addMember(famA, owner2, policy.RoleOwner)
	owner, admin, child := f.token(ownerA), f.token(adminID), f.token(childA)
	s1 := f.login(childA)
	st := f.openStream(streamPath, s1.AccessToken, "")
	defer st.close()
	reset := func(id int64) string { return fmt.Sprintf("/families/100/members/%d/password", id) }
	const next = "summer camp 2026"

	for _, c := range []struct {
		name, path, token string
		want              int
	}{
		{"owner resets another owner", reset(owner2), owner, http.StatusForbidden},
		{"owner resets itself", reset(ownerA), owner, http.StatusForbidden},
		{"member resets a sibling", reset(victimA), child, http.StatusForbidden},
		{"owner of another family", reset(childA), f.token(ownerB), http.StatusNotFound},
		{"unknown member", reset(777), owner, http.StatusNotFound},
		{"another family's member", reset(childB), owner, http.StatusNotFound},
	} {
		if resp, body := f.do(http.MethodPost, c.path, c.token, map[string]string{"password": next}); resp.StatusCode != c.want {
			t.Errorf("%s: status %d, want %d: %s", c.name, resp.StatusCode, c.want, body)
		}
	}
	p := f.problem(http.MethodPost, reset(childA), owner, map[string]string{"password": "m1002"}, http.StatusUnprocessableEntity, "body.password")
	if p.Errors[0].Message != "must be at least 8 characters" {
		t.Errorf("short password: %+v", p)
	}
	f.call(http.MethodPost, reset(childA), owner, map[string]string{"password": next}, http.StatusNoContent, nil)
	st.ended(t, "the reset member's stream", streamDeadline)
	f.problem(http.MethodGet, "/families/100", child, nil, http.StatusUnauthorized, "")
	f.problem(http.MethodPost, "/auth/refresh", "", map[string]string{"refreshToken": s1.RefreshToken}, http.StatusUnauthorized, "")
	f.call(http.MethodPost, "/auth/token", "", map[string]string{"login": "1002", "password": next}, http.StatusOK, nil)

	// An admin resets an owner's.
	f.call(http.MethodPost, reset(ownerA), admin, map[string]string{"password": next}, http.StatusNoContent, nil)
	f.problem(http.MethodGet, "/families/100", owner, nil, http.StatusUnauthorized, "")
	f.call(http.MethodPost, "/auth/token", "", map[string]string{"login": "1001", "password": next}, http.StatusOK, nil)

	rows, err := f.store.AuditLog(context.Background(), store.AuditFilter{Action: store.ActionPassword})
	if err != nil || len(rows) != 2 || rows[0].Actor.ID != adminID || rows[1].Actor.ID != ownerA || rows[1].Target != "member:1002" {
		t.Errorf("audit rows %+v, %v", rows, err)
	}
}

// TestCoOwnerTakeoverRefused is the story of a co-owner's takeover: owner
// 1001 demotes co-owner 1004 (200), tries to reset its password (an owner
// resets only the password of a member who was never an owner: 403), and
// promotes it back (200); 1004 still logs in with its own password and the
// owner's choice is refused. The refusal is audited beside the role
// changes, and the back office still resets 1004's password.
func TestCoOwnerTakeoverRefused(t *testing.T) {
	f := newAPIFixture(t)
	const coOwner = int64(1004)
	f.addMember(famA, coOwner, policy.RoleOwner)
	owner, admin := f.token(ownerA), f.token(adminID)
	const chosen = "owner chose this 1"
	role := func(r string) {
		t.Helper()
		f.call(http.MethodPut, fmt.Sprintf("/families/100/members/%d/role", coOwner), owner, map[string]string{"role": r}, http.StatusOK, nil)
	}
	reset := fmt.Sprintf("/families/100/members/%d/password", coOwner)

	role("MEMBER")
	f.problem(http.MethodPost, reset, owner, map[string]string{"password": chosen}, http.StatusForbidden, "")
	role("OWNER")
	f.problem(http.MethodPost, "/auth/token", "", map[string]string{"login": fmt.Sprint(coOwner), "password": chosen}, http.StatusUnauthorized, "")
	var tok Tokens
	f.call(http.MethodPost, "/auth/token", "", map[string]string{"login": fmt.Sprint(coOwner), "password": testPassword}, http.StatusOK, &tok)
	if tok.Role != policy.RoleOwner {
		t.Errorf("the co-owner logs in as %s, want OWNER", tok.Role)
	}

	// A member who was once an owner stays the back office's to reset, also
	// while it is a member; a child who never was is the owners'.
	role("MEMBER")
	f.problem(http.MethodPost, reset, owner, map[string]string{"password": chosen}, http.StatusForbidden, "")
	f.call(http.MethodPost, fmt.Sprintf("/families/100/members/%d/password", childA), owner, map[string]string{"password": chosen}, http.StatusNoContent, nil)
	f.call(http.MethodPost, reset, admin, map[string]string{"password": chosen}, http.StatusNoContent, nil)

	rows, err := f.store.AuditLog(context.Background(), store.AuditFilter{Target: fmt.Sprintf("member:%d", coOwner)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%s by %d", r.Action, r.Actor.ID))
	}
	// Newest first.
	want := []string{store.ActionPassword + " by 9001", store.ActionPasswordRefused + " by 1001", "member.role by 1001",
		"member.role by 1001", store.ActionPasswordRefused + " by 1001", "member.role by 1001", "member.add by 0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the co-owner's audit (-want +got):\n%s", diff)
	}
}
