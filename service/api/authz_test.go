package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/limit"
	"github.com/dabom/dpcs/service/store"
)

// TestAuthorizationMatrix: MEMBER / OWNER / ADMIN / AGENT × own / other
// family × every secured route; a care agent (AGENT) reads what an ADMIN
// reads and is refused every change (403). Another family's routes answer 404 exactly like a
// family that does not exist; 403 only inside one's own family or on /admin.
// {f} is the target family, {c} its child member (the MEMBER caller itself
// in its own family), {v} a fresh member, {t} a fresh template, {n} a fresh
// notification, {r} a fresh data request of {c}, {p} a fresh top-up of
// {f}, {u} a unique suffix.
func TestAuthorizationMatrix(t *testing.T) {
	f := newAPIFixture(t)
	type cols [8]int                                                                // MEMBER own, MEMBER other, OWNER own, OWNER other, ADMIN own, ADMIN other, AGENT own, AGENT other
	fam := func(ok int) cols { return cols{ok, 404, ok, 404, ok, ok, ok, ok} }      // a read
	famw := func(ok int) cols { return cols{ok, 404, ok, 404, ok, ok, 403, 403} }   // a member's change
	own := func(ok int) cols { return cols{403, 404, ok, 404, ok, ok, 403, 403} }   // an owner's change
	adm := func(ok int) cols { return cols{403, 403, 403, 403, ok, ok, ok, ok} }    // a back-office read
	admw := func(ok int) cols { return cols{403, 403, 403, 403, ok, ok, 403, 403} } // a back-office change
	push := func(ok int) cols { return cols{ok, 404, ok, 404, 403, 403, 403, 403} } // the caller's own; the back office has none
	pushKeys := testPushKeys(t)
	routes := []struct {
		method, path, body string
		want               cols
	}{
		{"GET", "/families/{f}", "", fam(200)},
		{"GET", "/families/{f}/members", "", fam(200)},
		{"GET", "/families/{f}/members/{c}/usage", "", fam(200)},
		{"GET", "/families/{f}/members/{c}/policies", "", fam(200)},
		{"PATCH", "/families/{f}/members/{c}/policies", `{"set":{"THROTTLE:SPEED":"1000"}}`, own(200)},
		{"PATCH", "/families/policies", `{"familyId":{f},"customerId":{c},"set":{"BLOCK:APP:com.game":"1"}}`, own(200)},
		// A gift to oneself: 422 after the caller was let in.
		{"POST", "/families/{f}/gifts", `{"fromCustomerId":{c},"toCustomerId":{c},"amountBytes":1}`, cols{422, 404, 422, 404, 422, 422, 403, 403}},
		{"POST", "/families/{f}/members/{c}/exceptions", `{"kind":"APP","appId":"com.game","minutes":30}`, own(200)}, // after the block above
		{"PUT", "/families/{f}/alerts", `{"thresholds":[50,20]}`, own(200)},
		{"POST", "/families/{f}/topups", `{"offerId":"100MB"}`, own(201)},
		{"POST", "/families/{f}/members", `{"name":"new {u}"}`, own(201)},
		{"DELETE", "/families/{f}/members/{v}", "", own(204)},
		{"PUT", "/families/{f}/members/{c}/role", `{"role":"MEMBER"}`, own(200)},
		{"POST", "/families/{f}/data-requests", `{"amountBytes":1048576,"message":"{u}"}`, cols{201, 404, 201, 404, 403, 403, 403, 403}},
		{"GET", "/families/{f}/data-requests", "", fam(200)},
		{"GET", "/families/{f}/data-requests/{r}", "", fam(200)},
		{"POST", "/families/{f}/data-requests/{r}/approve", `{"grant":"TOPUP","offerId":"100MB"}`, own(200)},
		{"GET", "/families/{f}/topups/{p}", "", cols{403, 404, 200, 404, 200, 200, 200, 200}}, // a receipt: owners and the back office
		{"GET", "/families/{f}/history", "", fam(200)},
		{"PUT", "/families/{f}/members/{c}/minor", `{"minor":true}`, own(200)},
		{"POST", "/families/{f}/data-requests/{r}/decline", `{"reason":"not now"}`, own(200)},
		{"GET", "/families/{f}/notifications", "", fam(200)},
		{"POST", "/families/{f}/notifications/{n}/read", "", famw(204)},
		{"GET", "/families/{f}/notifications/stream", "", fam(200)},
		{"POST", "/families/{f}/push-subscriptions", `{"endpoint":"https://push.example/{u}","expirationTime":null,"keys":` + pushKeys + `}`, push(201)},
		{"GET", "/families/{f}/push-subscriptions", "", push(200)},
		{"DELETE", "/families/{f}/push-subscriptions?endpoint=https%3A%2F%2Fpush.example%2F{s}", "", push(204)},
		{"GET", "/admin/policy-templates", "", adm(200)},
		{"POST", "/admin/policy-templates", `{"name":"t{u}","type":"LIMIT","defaultRules":{"LIMIT:DATA:DAILY":"1000"},"active":true}`, admw(201)},
		{"GET", "/admin/policy-templates/{t}", "", adm(200)},
		{"PUT", "/admin/policy-templates/{t}", `{"name":"t{u}","type":"LIMIT","defaultRules":{},"active":true}`, admw(200)},
		{"DELETE", "/admin/policy-templates/{t}", "", admw(204)},
		{"POST", "/admin/policy-templates/{t}/apply", `{"familyId":{f},"customerId":{c}}`, admw(200)},
		{"GET", "/admin/families?q=family", "", adm(200)},
		{"POST", "/admin/families", `{"name":"f{u}","planBytes":1000}`, admw(201)},
		{"PUT", "/admin/families/{f}/plan", `{"planBytes":10737418240}`, admw(200)},
		{"GET", "/admin/families/{f}/usage", "", adm(200)},
		{"GET", "/admin/audit-log", "", adm(200)},
		// A gateway credential's route: family and admin tokens are refused.
		{"POST", "/decisions", `{"events":[{"eventId":"m{u}","timestamp":"2026-02-10T12:00:00Z","familyId":{f},"customerId":{c},"appId":"a","bytesUsed":1}]}`,
			cols{401, 401, 401, 401, 401, 401, 401, 401}},
		{"GET", "/admin/policy-templates/{t}/drift", "", adm(200)},
		{"POST", "/admin/policy-templates/{t}/reapply", `{"all":true}`, admw(200)},
		{"GET", "/admin/operations", "", adm(200)},
		{"PUT", "/admin/catalog/apps/app.n{u}", `{"category":"GAME","name":"게임 {u}"}`, admw(200)},
		{"GET", "/admin/catalog/unknown-apps", "", adm(200)},
		{"GET", "/admin/families/{f}/logins", "", adm(200)},
		{"PUT", "/admin/families/{f}/members/{c}/imsi", `{"imsi":"45005000{u}"}`, admw(200)},
		{"GET", "/admin/families/{f}/members/{c}/imsi", "", adm(200)},
		{"DELETE", "/admin/catalog/apps/com.tiktok.app", "", cols{403, 403, 403, 403, 204, 404, 403, 403}}, // removed by the first call
		// Notes: the one write a care agent makes.
		{"GET", "/admin/families/{f}/notes", "", adm(200)},
		{"POST", "/admin/families/{f}/notes", `{"body":"call {u}"}`, cols{403, 403, 403, 403, 201, 201, 201, 201}},
		// No Kafka client in this fixture: authorization is checked first,
		// then admins learn the browser is unavailable.
		{"GET", "/admin/dead-letters", "", adm(503)},
		{"POST", "/admin/dead-letters/replay", `{"records":[{"topic":"usage-events.DLT","partition":0,"offset":0}]}`, admw(503)},
	}
	callers := []struct {
		name   string
		id     int64
		family [2]int64 // own, other
	}{{"MEMBER", childA, [2]int64{famA, famB}}, {"OWNER", ownerA, [2]int64{famA, famB}}, {"ADMIN", adminID, [2]int64{famA, famB}},
		{"AGENT", agentID, [2]int64{famA, famB}}}
	ctx := context.Background()
	vid := int64(5000)
	for _, r := range routes {
		for ci, c := range callers {
			for ti, target := range c.family {
				want := r.want[ci*2+ti]
				child := map[int64]int64{famA: childA, famB: childB}[target]
				vid++
				expand := func(s string) string {
					s = strings.ReplaceAll(s, "{f}", fmt.Sprint(target))
					s = strings.ReplaceAll(s, "{c}", fmt.Sprint(child))
					s = strings.ReplaceAll(s, "{u}", fmt.Sprint(vid))
					if strings.Contains(s, "{v}") {
						f.addMember(target, vid, policy.RoleMember)
						s = strings.ReplaceAll(s, "{v}", fmt.Sprint(vid))
					}
					if strings.Contains(s, "{p}") {
						tu, err := f.store.AddTopUp(ctx, target, 1, store.System)
						if err != nil {
							t.Fatal(err)
						}
						s = strings.ReplaceAll(s, "{p}", fmt.Sprint(tu.ID))
					}
					if strings.Contains(s, "{t}") {
						tpl, err := f.store.CreateTemplate(ctx, policy.Template{Name: fmt.Sprint("tpl", vid), Type: "LIMIT", RequireRole: policy.RoleMember,
							DefaultRules: map[string]string{"THROTTLE:SPEED": "500"}, Active: true}, store.System)
						if err != nil {
							t.Fatal(err)
						}
						s = strings.ReplaceAll(s, "{t}", fmt.Sprint(tpl.ID))
					}
					if strings.Contains(s, "{s}") { // the caller's subscription, where it may have one
						if c.name != "ADMIN" && c.name != "AGENT" && target == c.family[0] {
							if _, err := f.store.SavePushSubscription(ctx, target, c.id, testPushSubscription(t, fmt.Sprint("https://push.example/s", vid)), store.PushRules{Max: 1 << 20}); err != nil {
								t.Fatal(err)
							}
						}
						s = strings.ReplaceAll(s, "{s}", fmt.Sprint("s", vid))
					}
					if strings.Contains(s, "{r}") {
						r, _, err := f.store.CreateDataRequest(ctx, store.NewDataRequest{FamilyID: target, CustomerID: child,
							AmountBytes: 1 << 20, MaxAmount: 1 << 30, MaxPending: 1 << 20})
						if err != nil {
							t.Fatal(err)
						}
						s = strings.ReplaceAll(s, "{r}", fmt.Sprint(r.ID))
					}
					if strings.Contains(s, "{n}") {
						s = strings.ReplaceAll(s, "{n}", fmt.Sprint(f.notification(target, 0, envelope.SubThresholdAlert).ID))
					}
					return s
				}
				path := expand(r.path)
				name := fmt.Sprintf("%s %s as %s of family %d", r.method, r.path, c.name, target)
				var body any
				if r.body != "" {
					body = expand(r.body)
				}
				if strings.HasSuffix(r.path, "/stream") && want == 200 {
					s := f.openStream(path, f.token(c.id), "")
					s.next(t, "ping")
					s.close()
					continue
				}
				resp, data := f.do(r.method, path, f.token(c.id), body)
				if resp.StatusCode != want {
					t.Errorf("%s: status %d, want %d: %s", name, resp.StatusCode, want, data)
				}
				if want == 404 && strings.Contains(string(data), fmt.Sprint(famB)) && !strings.Contains(string(data), "family 200 not found") {
					t.Errorf("%s: 404 leaks: %s", name, data)
				}
			}
		}
		// no token: 401 everywhere
		resp, _ := f.do(r.method, strings.NewReplacer("{f}", "100", "{c}", "1002", "{v}", "1003", "{t}", "1", "{n}", "1", "{s}", "s1", "{r}", "1").Replace(r.path), "", nil)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s without a token: %d", r.method, r.path, resp.StatusCode)
		}
	}
	// A stream opened before its access changed ends with it; the ADMIN's and
	// the owner's streams of the family go on.
	adminStream := f.openStream("/families/100/notifications/stream", f.token(adminID), "")
	defer adminStream.close()
	ownerStream := f.openStream("/families/100/notifications/stream", f.token(ownerA), "")
	defer ownerStream.close()
	for _, c := range []struct {
		name         string
		role         policy.Role
		method, path string
		body         any
	}{
		{"MEMBER removed", policy.RoleMember, http.MethodDelete, "/families/100/members/{v}", nil},
		{"OWNER demoted", policy.RoleOwner, http.MethodPut, "/families/100/members/{v}/role", map[string]string{"role": "MEMBER"}},
		{"MEMBER promoted", policy.RoleMember, http.MethodPut, "/families/100/members/{v}/role", map[string]string{"role": "OWNER"}},
	} {
		vid++
		f.addMember(famA, vid, c.role)
		s := f.openStream("/families/100/notifications/stream", f.token(vid), "")
		resp, data := f.do(c.method, strings.ReplaceAll(c.path, "{v}", fmt.Sprint(vid)), f.token(ownerA), c.body)
		if resp.StatusCode >= 300 {
			t.Fatalf("%s: %d %s", c.name, resp.StatusCode, data)
		}
		s.ended(t, "stream of a "+c.name, streamDeadline)
		s.close()
	}
	f.alive(t, "ADMIN's stream", adminStream)
	f.alive(t, "OWNER's stream", ownerStream)

	// a family that does not exist answers as another family does
	f.problem(http.MethodGet, "/families/999", f.token(ownerA), nil, http.StatusNotFound, "")
	f.problem(http.MethodGet, "/families/999", f.token(adminID), nil, http.StatusNotFound, "")
	f.problem(http.MethodGet, "/families/999/notifications/stream", f.token(adminID), nil, http.StatusNotFound, "")
	// a MEMBER reading a sibling: 403 (same family, no leak)
	f.problem(http.MethodGet, "/families/100/members/1001/usage", f.token(childA), nil, http.StatusForbidden, "")
	// an OWNER naming a member of another family inside its own: 404
	f.problem(http.MethodGet, "/families/100/members/2002/policies", f.token(ownerA), nil, http.StatusNotFound, "")
	f.problem(http.MethodPatch, "/families/100/members/2002/policies", f.token(ownerA), map[string]any{"set": map[string]string{"BLOCK:ACCESS": "1"}}, http.StatusNotFound, "")
}

// TestAuthorizationMatrixLimits: the brute-force limits in the matrix. Only
// POST /auth/token and /auth/refresh are limited, each on its own budget per
// client address; a locked login is refused from every address, with the
// right password too, while its sessions and every other caller go on.
func TestAuthorizationMatrixLimits(t *testing.T) {
	f := newAPIFixtureWith(t, func(c *Config) {
		c.Limits = AuthLimits{LoginPerAddress: limit.Rate{N: 3, Per: time.Minute}, LoginPerLogin: limit.Rate{N: 1000, Per: time.Minute},
			RefreshPerAddress: limit.Rate{N: 3, Per: time.Minute}, LockoutAfter: 3, LockoutFor: 15 * time.Minute}
		c.TrustedProxies = loopbackProxy
	})
	var child Tokens // 1002's session from before its lockout
	f.call(http.MethodPost, "/auth/token", "", map[string]string{"login": "1002", "password": testPassword}, http.StatusOK, &child)
	owner := f.token(ownerA)
	// Address 192.0.2.1 spends its logins; login 1002 is locked from 192.0.2.2.
	for range 3 {
		if got := f.tryLogin("2002", testPassword, forwardedFrom("192.0.2.1")...); got.Status != http.StatusOK {
			t.Fatalf("setup login: %+v", got)
		}
	}
	for range 3 {
		f.tryLogin("1002", "wrong", forwardedFrom("192.0.2.2")...)
	}
	var seq int
	refreshBody := func() any {
		var tok Tokens
		seq++
		resp, data := f.do(http.MethodPost, "/auth/token", "", map[string]string{"login": "1001", "password": testPassword},
			forwardedFrom(fmt.Sprint("198.51.100.", seq))...)
		if err := json.Unmarshal(data, &tok); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("login for a refresh token: %d %s", resp.StatusCode, data)
		}
		return map[string]string{"refreshToken": tok.RefreshToken}
	}
	login := func(login, pw string) func() any {
		return func() any { return map[string]string{"login": login, "password": pw} }
	}
	rows := []struct {
		name, method, path, token, from string
		body                            func() any
		want                            []int // one per request, in order
	}{
		{"login from the spent address", "POST", "/auth/token", "", "192.0.2.1", login("1001", testPassword), []int{429}},
		{"login from another address", "POST", "/auth/token", "", "192.0.2.3", login("1001", testPassword), []int{200}},
		{"locked login, right password, another address", "POST", "/auth/token", "", "192.0.2.4", login("1002", testPassword), []int{429}},
		{"unknown login locks as a member's", "POST", "/auth/token", "", "192.0.2.5", login("777", "x"), []int{401, 401, 401}},
		{"unknown login locked", "POST", "/auth/token", "", "192.0.2.6", login("777", "x"), []int{429}},
		{"refresh from the spent login address", "POST", "/auth/refresh", "", "192.0.2.1", refreshBody, []int{200, 200, 200, 429}},
		{"logout is not limited", "POST", "/auth/logout", "", "192.0.2.1", func() any { return map[string]string{"refreshToken": "x"} },
			[]int{204, 204, 204, 204, 204}},
		{"the locked member's session goes on", "GET", "/families/100", child.AccessToken, "192.0.2.2", nil, []int{200, 200, 200, 200}},
		{"secured routes are not limited", "GET", "/families/100", owner, "192.0.2.1", nil, []int{200, 200, 200, 200, 200}},
	}
	for _, r := range rows {
		for i, want := range r.want {
			var body any
			if r.body != nil {
				body = r.body()
			}
			resp, data := f.do(r.method, r.path, r.token, body, forwardedFrom(r.from)...)
			if resp.StatusCode != want {
				t.Errorf("%s: request %d: status %d, want %d: %s", r.name, i+1, resp.StatusCode, want, data)
			}
			if want == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
				t.Errorf("%s: 429 without Retry-After", r.name)
			}
		}
	}
}
