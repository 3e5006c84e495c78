package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/limit"
	"github.com/dabom/dpcs/service/store"
)

// TestLoginBruteForce: 50 wrong passwords then the right one, all from one
// address with the default limits: the right one is refused too, 429 as a
// problem with Retry-After in seconds.
func TestLoginBruteForce(t *testing.T) {
	f := newAPIFixture(t)
	login := func(pw string) (*http.Response, []byte) {
		return f.do(http.MethodPost, "/auth/token", "", map[string]string{"login": "1001", "password": pw})
	}
	refused := 0
	for i := range 50 {
		resp, body := login("wrong " + strconv.Itoa(i))
		switch resp.StatusCode {
		case http.StatusUnauthorized:
		case http.StatusTooManyRequests:
			refused++
		default:
			t.Fatalf("attempt %d: status %d: %s", i, resp.StatusCode, body)
		}
	}
	if refused == 0 {
		t.Errorf("50 wrong passwords: none refused with 429")
	}
	resp, body := login(testPassword)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("right password after 50 wrong ones: status %d, want 429: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("content type %q", ct)
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("Retry-After %q: want whole seconds ≥ 1", resp.Header.Get("Retry-After"))
	}
	if !strings.Contains(string(body), `"status":429`) {
		t.Errorf("problem body %s", body)
	}
}

// advance moves the fixture's clock (and so its default limiter's) by d.
func (f *apiFixture) advance(d time.Duration) {
	t := f.clock().Add(d)
	f.now.Store(&t)
}

// attempt is what a client sees of one answer.
type attempt struct {
	Status     int
	RetryAfter string
	Body       string
}

func (f *apiFixture) tryLogin(login, password string, hdr ...string) attempt {
	f.t.Helper()
	resp, body := f.do(http.MethodPost, "/auth/token", "", map[string]string{"login": login, "password": password}, hdr...)
	a := attempt{Status: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After")}
	if a.Status != http.StatusOK {
		a.Body = string(body)
	}
	return a
}

// forwardedFrom makes a request come from addr through the fixture's
// (trusted) loopback proxy.
func forwardedFrom(addr string) []string { return []string{"X-Forwarded-For", addr} }

var loopbackProxy = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// TestLoginLockout: the LockoutAfter-th consecutive failure locks the login
// for LockoutFor, even for the right password, and audits auth.lockout with
// the member's id and no password; the lock ends on time; a success resets
// the count.
func TestLoginLockout(t *testing.T) {
	f := newAPIFixtureWith(t, func(c *Config) {
		c.Limits = AuthLimits{LoginPerLogin: limit.Rate{N: 1000, Per: time.Minute}, LockoutAfter: 5, LockoutFor: 15 * time.Minute}
	})
	for i := range 4 {
		if got := f.tryLogin("1001", "wrong"); got.Status != http.StatusUnauthorized {
			t.Fatalf("failure %d: %+v", i+1, got)
		}
	}
	if got := f.tryLogin("1001", testPassword); got.Status != http.StatusOK {
		t.Fatalf("right password after 4 failures: %+v", got)
	}
	for i := range 4 { // the success reset the count
		if got := f.tryLogin("1001", "wrong"); got.Status != http.StatusUnauthorized {
			t.Fatalf("failure %d after a success: %+v", i+1, got)
		}
	}
	if rows, _ := f.store.AuditLog(context.Background(), store.AuditFilter{Action: store.ActionLockout}); len(rows) != 0 {
		t.Fatalf("audited a lockout before one: %+v", rows)
	}
	if got := f.tryLogin("1001", "wrong"); got.Status != http.StatusUnauthorized {
		t.Fatalf("5th failure: %+v", got)
	}
	got := f.tryLogin("1001", testPassword)
	if got.Status != http.StatusTooManyRequests || got.RetryAfter != "900" {
		t.Fatalf("right password while locked: %+v, want 429 with Retry-After 900", got)
	}
	f.problem(http.MethodPost, "/auth/token", "", map[string]string{"login": "010-1001", "password": "x"}, http.StatusUnauthorized, "")

	rows, err := f.store.AuditLog(context.Background(), store.AuditFilter{Action: store.ActionLockout})
	if err != nil || len(rows) != 1 {
		t.Fatalf("lockout audit rows %+v, %v", rows, err)
	}
	if r := rows[0]; r.Target != "member:1001" || r.FamilyID != famA || r.Actor != store.System {
		t.Errorf("audit row %+v", r)
	}
	var after store.Lockout
	if err := json.Unmarshal(rows[0].After, &after); err != nil {
		t.Fatal(err)
	}
	want := store.Lockout{Login: "1001", Kind: "id", Failures: 5, Until: f.clock().Add(15 * time.Minute), Address: "127.0.0.1"}
	if diff := cmp.Diff(want, after, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("audit after (-want +got):\n%s", diff)
	}
	if strings.Contains(string(rows[0].After), testPassword) || strings.Contains(string(rows[0].After), "wrong") {
		t.Errorf("audit row holds a password: %s", rows[0].After)
	}

	f.advance(15*time.Minute - time.Second)
	if got := f.tryLogin("+01001", testPassword); got.Status != http.StatusTooManyRequests || got.RetryAfter != "1" {
		t.Fatalf("another spelling of the login, 1 s before the end: %+v", got)
	}
	f.advance(time.Second)
	if got := f.tryLogin("1001", testPassword); got.Status != http.StatusOK {
		t.Fatalf("after the lockout: %+v", got)
	}
}

// TestLoginUnknownAnswersAsWrongPassword: a login naming nobody is answered
// exactly as a member's login with a wrong password, attempt after attempt,
// through its lockout (status, Retry-After, body).
func TestLoginUnknownAnswersAsWrongPassword(t *testing.T) {
	f := newAPIFixtureWith(t, func(c *Config) {
		c.Limits = AuthLimits{LoginPerLogin: limit.Rate{N: 1000, Per: time.Minute}, LockoutAfter: 3, LockoutFor: time.Minute}
	})
	answers := func(login, password string) []attempt {
		var out []attempt
		for range 5 {
			out = append(out, f.tryLogin(login, password))
		}
		return out
	}
	member := answers("1001", "wrong")
	if member[0].Status != http.StatusUnauthorized || member[4].Status != http.StatusTooManyRequests {
		t.Fatalf("member with a wrong password: %+v", member)
	}
	for _, unknown := range []string{"777777", "010-0000-0000"} {
		if diff := cmp.Diff(member, answers(unknown, "wrong")); diff != "" {
			t.Errorf("%s (nobody) answers differently from a wrong password (-member +unknown):\n%s", unknown, diff)
		}
	}
	rows, err := f.store.AuditLog(context.Background(), store.AuditFilter{Action: store.ActionLockout})
	if err != nil || len(rows) != 3 || rows[0].Target != "login" || rows[2].Target != "member:1001" {
		t.Errorf("lockout audit rows %+v, %v", rows, err)
	}
}

// TestLoginLimitsIndependent: an address over its rate does not hold back
// another address, and a locked login does not hold back another login; the
// lock holds from every address. X-Forwarded-For counts only from a trusted
// proxy.
func TestLoginLimitsIndependent(t *testing.T) {
	for _, trusted := range []bool{true, false} {
		t.Run(fmt.Sprint("trusted=", trusted), func(t *testing.T) {
			f := newAPIFixtureWith(t, func(c *Config) {
				c.Limits = AuthLimits{LoginPerAddress: limit.Rate{N: 3, Per: time.Minute}, LoginPerLogin: limit.Rate{N: 1000, Per: time.Minute}, LockoutAfter: 2}
				if trusted {
					c.TrustedProxies = loopbackProxy
				}
			})
			a, b := forwardedFrom("198.51.100.1"), forwardedFrom("2001:db8:1:2::7")
			b2 := forwardedFrom("2001:db8:1:2::8") // the same /64
			for i := range 3 {
				if got := f.tryLogin("1002", testPassword, a...); got.Status != http.StatusOK {
					t.Fatalf("login %d from a: %+v", i+1, got)
				}
			}
			got := f.tryLogin("1002", testPassword, a...)
			if got.Status != http.StatusTooManyRequests || got.RetryAfter != "20" || !strings.Contains(got.Body, "address") {
				t.Fatalf("4th login from a: %+v, want 429 after 20 s", got)
			}
			wantB := http.StatusOK
			if !trusted { // every request is the proxy's: b is a
				wantB = http.StatusTooManyRequests
			}
			if got := f.tryLogin("1002", testPassword, b...); got.Status != wantB {
				t.Fatalf("login from b: %+v, want %d", got, wantB)
			}
			if !trusted {
				return
			}
			c := forwardedFrom("192.0.2.50")
			f.tryLogin("1003", "wrong", c...)
			f.tryLogin("1003", "wrong", c...)
			if got := f.tryLogin("1003", testPassword, b...); got.Status != http.StatusTooManyRequests || strings.Contains(got.Body, "address") {
				t.Fatalf("locked login from b: %+v", got)
			}
			if got := f.tryLogin("1001", testPassword, b...); got.Status != http.StatusOK {
				t.Fatalf("another login from b: %+v", got)
			}
			// b2 is b's /64: b has used its 3 logins.
			if got := f.tryLogin("1001", testPassword, b2...); got.Status != http.StatusTooManyRequests {
				t.Fatalf("4th login from b's /64: %+v", got)
			}
		})
	}
}

// TestRefreshLimited: refreshes are limited per client address.
func TestRefreshLimited(t *testing.T) {
	f := newAPIFixtureWith(t, func(c *Config) {
		c.Limits = AuthLimits{RefreshPerAddress: limit.Rate{N: 2, Per: time.Minute}}
		c.TrustedProxies = loopbackProxy
	})
	var tok Tokens
	f.call(http.MethodPost, "/auth/token", "", map[string]string{"login": "1001", "password": testPassword}, http.StatusOK, &tok)
	refresh := func(hdr ...string) *http.Response {
		var next Tokens
		resp, body := f.do(http.MethodPost, "/auth/refresh", "", map[string]string{"refreshToken": tok.RefreshToken}, hdr...)
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(body, &next); err != nil {
				t.Fatal(err)
			}
			tok = next
		}
		return resp
	}
	a := forwardedFrom("203.0.113.9")
	for i := range 2 {
		if resp := refresh(a...); resp.StatusCode != http.StatusOK {
			t.Fatalf("refresh %d: %d", i+1, resp.StatusCode)
		}
	}
	resp := refresh(a...)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "30" {
		t.Fatalf("3rd refresh: %d, Retry-After %q; want 429 after 30 s", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if resp := refresh(forwardedFrom("203.0.113.10")...); resp.StatusCode != http.StatusOK {
		t.Fatalf("refresh from another address: %d", resp.StatusCode)
	}
	f.advance(30 * time.Second)
	if resp := refresh(a...); resp.StatusCode != http.StatusOK {
		t.Fatalf("refresh 30 s later: %d", resp.StatusCode)
	}
}

// TestLoginLimitsOnRedis: the API on a RedisLimiter (miniredis) refuses a
// brute force as it does in memory.
func TestLoginLimitsOnRedis(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	f := newAPIFixtureWith(t, func(c *Config) {
		var err error
		if c.Limiter, err = limit.NewRedisLimiter(rdb); err != nil {
			t.Fatal(err)
		}
		c.Limits = AuthLimits{LoginPerLogin: limit.Rate{N: 1000, Per: time.Minute}, LockoutAfter: 3, LockoutFor: time.Minute}
	})
	for range 3 {
		f.tryLogin("1001", "wrong")
	}
	if got := f.tryLogin("1001", testPassword); got.Status != http.StatusTooManyRequests || got.RetryAfter != "60" {
		t.Fatalf("right password while locked: %+v", got)
	}
	if got := f.tryLogin("1002", testPassword); got.Status != http.StatusOK {
		t.Fatalf("another login: %+v", got)
	}
	for _, k := range mr.Keys() {
		if strings.Contains(k, "1001") || strings.Contains(k, "127.0.0.1") {
			t.Errorf("Redis key %q names a login or an address", k)
		}
	}
	mr.FastForward(time.Minute)
	if got := f.tryLogin("1001", testPassword); got.Status != http.StatusOK {
		t.Fatalf("after the lockout: %+v", got)
	}
}

// TestLimitsInOpenAPI: the limited operations declare their 429.
func TestLimitsInOpenAPI(t *testing.T) {
	f := newAPIFixture(t)
	_, data := f.do(http.MethodGet, "/openapi.json", "", nil)
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]any `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/auth/token", "/auth/refresh"} {
		if doc.Paths[p]["post"].Responses["429"] == nil {
			t.Errorf("POST %s: no 429 in %v", p, doc.Paths[p]["post"].Responses)
		}
	}
}

// TestLockoutPerMember: a member's id and its phone are two names of one
// login: failures through either count toward one lockout (3 by id and 2
// by phone lock it after 5), the lock holds for both names, and a success
// through either resets the count for both.
func TestLockoutPerMember(t *testing.T) {
	f := newAPIFixtureWith(t, func(c *Config) {
		c.Limits = AuthLimits{LoginPerLogin: limit.Rate{N: 1000, Per: time.Minute}, LockoutAfter: 5, LockoutFor: 15 * time.Minute}
	})
	const id, phone = "1009", "010-1009-0000"
	if _, err := f.store.AddMember(context.Background(), store.NewMember{ID: 1009, FamilyID: famA, Name: "m1009", Phone: phone,
		Role: policy.RoleMember, Password: testPassword}, store.System); err != nil {
		t.Fatal(err)
	}
	fail := func(login string, want int) {
		t.Helper()
		if got := f.tryLogin(login, "wrong"); got.Status != want {
			t.Fatalf("wrong password by %s: %+v, want %d", login, got, want)
		}
	}
	// A success by phone resets what failures by id counted, and back.
	for range 4 {
		fail(id, http.StatusUnauthorized)
	}
	if got := f.tryLogin(phone, testPassword); got.Status != http.StatusOK {
		t.Fatalf("right password by phone: %+v", got)
	}
	for range 4 {
		fail(phone, http.StatusUnauthorized)
	}
	if got := f.tryLogin(id, testPassword); got.Status != http.StatusOK {
		t.Fatalf("right password by id: %+v", got)
	}
	// 3 by id and 2 by phone: locked, under both names.
	for range 3 {
		fail(id, http.StatusUnauthorized)
	}
	fail(phone, http.StatusUnauthorized)
	var p LoginProblem
	if resp, body := f.do(http.MethodPost, "/auth/token", "", map[string]string{"login": phone, "password": "wrong"}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("5th failure: %d %s", resp.StatusCode, body)
	} else if err := json.Unmarshal(body, &p); err != nil || p.AttemptsLeft != 0 {
		t.Fatalf("5th failure: %s (%v), want attemptsLeft 0", body, err)
	}
	for _, login := range []string{id, phone} {
		if got := f.tryLogin(login, testPassword); got.Status != http.StatusTooManyRequests {
			t.Errorf("right password by %s while locked: %+v, want 429", login, got)
		}
	}
}
