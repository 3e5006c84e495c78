package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/store"
)

// internalWords are texts no error answer may carry: they come from err.Error()
// of a wrapped internal error reaching the caller instead of a message written
// for it.
//
//   - Package prefixes ("store: …", "quota: …"): every internal error of the
//     module starts with its package's name, so any of them in an answer means
//     an error's own text passed through. ("policy:" too: the policy package's
//     field errors print as "KEY: message", its sentinels as "policy: …".)
//   - Database texts: the drivers' and database/sql's ("sql: no rows", SQLite's
//     "UNIQUE constraint failed: members.phone (2067)", MySQL's "Error 1062
//     (23000): Duplicate entry … for key …", "syntax error", "deadlock").
//     "sql" also catches "sqlite", "mysql" and table/column dumps.
//   - Infrastructure: Redis ("redis", "NOSCRIPT", "WRONGTYPE"), network
//     ("dial tcp", "connection refused", "i/o timeout") and Go runtime texts
//     (stack traces name ".go:" and "goroutine", "panic", "nil pointer").
//
// Matched case-insensitively, except the few written in capitals by the
// servers themselves. Words of the domain that overlap ("constraint key" in
// policy messages) are not listed; "constraint failed" is.
var internalWords = []string{
	"store:", "quota:", "policy:", "notify:", "service:", "writebehind:", "idempotency:", "envelope:", "sqldialect",
	"sql", "database", "driver", "constraint failed", "duplicate entry", "duplicate key", "error 1", "syntax error",
	"no rows", "deadlock", "foreign key", "for key",
	"redis", "noscript", "wrongtype", "dial tcp", "connection refused", "i/o timeout", "broken pipe",
	"goroutine", ".go:", "panic", "nil pointer", "runtime error",
	// encoding/json's texts: they name Go types and echo what was sent.
	"json:", "go value", "go struct", "unmarshal", "invalid character", "unexpected end of json",
}

var internalWordsExact = []string{"UNIQUE", "PRIMARY"}

// internalText returns the first internal word in an error answer's body, or "".
func internalText(body []byte) string {
	low := strings.ToLower(string(body))
	for _, w := range internalWords {
		if strings.Contains(low, w) {
			return w
		}
	}
	for _, w := range internalWordsExact {
		if strings.Contains(string(body), w) {
			return w
		}
	}
	return ""
}

func TestInternalText(t *testing.T) {
	for body, want := range map[string]string{
		`{"detail":"store: add member: store: conflict: constraint failed: UNIQUE constraint failed: members.phone (2067)"}`: "store:",
		`{"detail":"Error 1062 (23000): Duplicate entry '010' for key 'uk_members_phone'"}`:                                  "duplicate entry",
		`{"detail":"quota: invalid argument: top-up must be 1..70368744177664 bytes"}`:                                       "quota:",
		`{"detail":"dial tcp 127.0.0.1:6379: connect: connection refused"}`:                                                  "dial tcp",
		`{"errors":[{"message":"unknown constraint key (want BLOCK:ACCESS, …)","location":"body.set.X"}]}`:                   "",
		`{"detail":"the phone number cannot be used for a new member"}`:                                                      "",
		`{"errors":[{"message":"json: cannot unmarshal number 1e400 into Go value of type float64","location":"body"}]}`:     "json:",
	} {
		if got := internalText([]byte(body)); got != want {
			t.Errorf("internalText(%s) = %q, want %q", body, got, want)
		}
	}
}

// TestErrorsCarryNoInternals runs bad requests against every route — bad
// bodies, unknown ids, conflicts with rows of this and of another family,
// stale versions, limits — and checks each answer's status; every error body
// of every test of this package is also scanned for internal texts by
// apiFixture.do. A conflict must not tell an owner anything about another
// family: a phone or id of another family's member answers exactly as one
// that is free would be refused.
func TestErrorsCarryNoInternals(t *testing.T) {
	f := newAPIFixture(t)
	ctx := context.Background()
	owner, child, admin, ownerBTok := f.token(ownerA), f.token(childA), f.token(adminID), f.token(ownerB)
	if _, err := f.store.AddMember(ctx, store.NewMember{ID: 2003, FamilyID: famB, Name: "b phone", Phone: "010-2003", Role: policy.RoleMember}, store.System); err != nil {
		t.Fatal(err)
	}
	tpl, err := f.store.CreateTemplate(ctx, policy.Template{Name: "taken", Type: "LIMIT", RequireRole: policy.RoleOwner,
		DefaultRules: map[string]string{"THROTTLE:SPEED": "500"}, Active: true}, store.System)
	if err != nil {
		t.Fatal(err)
	}
	off, err := f.store.CreateTemplate(ctx, policy.Template{Name: "off", Type: "LIMIT", RequireRole: policy.RoleMember,
		DefaultRules: map[string]string{}, Active: false}, store.System)
	if err != nil {
		t.Fatal(err)
	}
	n := f.notification(famA, 0, envelope.SubThresholdAlert)
	pushKeys := map[string]string{}
	if err := json.Unmarshal([]byte(testPushKeys(t)), &pushKeys); err != nil {
		t.Fatal(err)
	}
	dr, _, err := f.store.CreateDataRequest(ctx, store.NewDataRequest{FamilyID: famA, CustomerID: childA, AmountBytes: 1 << 20,
		MaxAmount: 1 << 30, MaxPending: 10})
	if err != nil {
		t.Fatal(err)
	}
	drPath := fmt.Sprintf("/families/100/data-requests/%d", dr.ID)
	f.call(http.MethodPatch, "/families/100/members/1002/policies", owner, map[string]any{"set": map[string]string{"THROTTLE:SPEED": "100"}}, http.StatusOK, nil)

	for _, c := range []struct {
		name, method, path, token string
		body                      any
		want                      int
	}{
		// auth
		{"login unknown", "POST", "/auth/token", "", map[string]string{"login": "424242", "password": "x"}, 401},
		{"login wrong password", "POST", "/auth/token", "", map[string]string{"login": "1001", "password": "x"}, 401},
		{"login bad phone", "POST", "/auth/token", "", map[string]string{"login": "010-nope'--", "password": "x"}, 401},
		{"login bad json", "POST", "/auth/token", "", "{", 400},
		// secrets and numbers no Go type holds: never echoed, never Go's texts
		{"login password too long", "POST", "/auth/token", "", map[string]string{"login": "1001", "password": "p" + strings.Repeat("secret-", 20)}, 422},
		{"login password cut short", "POST", "/auth/token", "", `{"login":"1001","password":"sekrit-pass`, 400},
		{"login password not a string", "POST", "/auth/token", "", `{"login":"1001","password":12345678}`, 422},
		{"login bad json after the password", "POST", "/auth/token", "", `{"password":"sekrit-pass","login":}`, 400},
		{"refresh token too long", "POST", "/auth/refresh", "", map[string]string{"refreshToken": strings.Repeat("r", 300)}, 422},
		{"logout bad json", "POST", "/auth/logout", "", `{"refreshToken":"sekrit-token"`, 400},
		{"topup 1e400", "POST", "/families/100/topups", admin, `{"bytes":1e400}`, 400},
		{"alerts 1e400", "PUT", "/families/100/alerts", owner, `{"thresholds":[50,1e400]}`, 400},
		{"policy alias id past int64", "PATCH", "/families/policies", owner, `{"customerId":1e19,"set":{"BLOCK:ACCESS":"1"}}`, 422},
		{"add member password too long", "POST", "/families/100/members", owner, map[string]any{"name": "x", "password": strings.Repeat("secret-", 20)}, 422},
		{"add member name not a string", "POST", "/families/100/members", owner, `{"name":{"a":1},"password":"sekrit-pass"}`, 422},
		{"refresh unknown", "POST", "/auth/refresh", "", map[string]string{"refreshToken": "nope"}, 401},
		{"logout empty", "POST", "/auth/logout", "", map[string]string{"refreshToken": ""}, 422},
		// family routes
		{"dashboard other family", "GET", "/families/200", owner, nil, 404},
		{"dashboard bad id", "GET", "/families/x", owner, nil, 422},
		{"members unknown family", "GET", "/families/999/members", admin, nil, 404},
		{"usage unknown member", "GET", "/families/100/members/777/usage", owner, nil, 404},
		{"usage bad period", "GET", "/families/100/members/1002/usage?from=2026-02-02T00:00:00Z&to=2026-02-01T00:00:00Z", owner, nil, 422},
		{"usage too long", "GET", "/families/100/members/1002/usage?from=2020-01-01T00:00:00Z&to=2026-02-01T00:00:00Z", owner, nil, 422},
		{"policies of another family's member", "GET", "/families/100/members/2002/policies", owner, nil, 404},
		{"patch bad key", "PATCH", "/families/100/members/1002/policies", owner, map[string]any{"set": map[string]string{"NOPE": "1"}}, 422},
		{"patch stale version", "PATCH", "/families/100/members/1002/policies", owner, map[string]any{"remove": []string{"THROTTLE:SPEED"}, "expectedVersion": 7}, 409},
		{"patch as member", "PATCH", "/families/100/members/1002/policies", child, map[string]any{"set": map[string]string{"BLOCK:ACCESS": "1"}}, 403},
		{"alias unknown member", "PATCH", "/families/policies", owner, map[string]any{"customerId": 777, "set": map[string]string{"BLOCK:ACCESS": "1"}}, 404},
		{"alerts bad", "PUT", "/families/100/alerts", owner, map[string]any{"thresholds": []int{50, 50}}, 422},
		{"topup too big", "POST", "/families/100/topups", admin, map[string]any{"bytes": policy.MaxBytes}, 422},
		{"topup unknown family", "POST", "/families/999/topups", admin, map[string]any{"bytes": 1}, 404},
		{"add member: phone of another family", "POST", "/families/100/members", owner, map[string]any{"name": "x", "phone": "010-2003"}, 422},
		{"add member: id of another family", "POST", "/families/100/members", owner, map[string]any{"name": "x", "customerId": childB}, 422},
		{"add member: id of this family", "POST", "/families/100/members", owner, map[string]any{"name": "x", "customerId": childA}, 422},
		{"add member: bad password", "POST", "/families/100/members", owner, map[string]any{"name": "x", "password": strings.Repeat("p", 100)}, 422},
		{"add member as admin: phone taken", "POST", "/families/100/members", admin, map[string]any{"name": "x", "phone": "010-2003"}, 409},
		{"add member as admin: id taken", "POST", "/families/100/members", admin, map[string]any{"name": "x", "customerId": childB}, 409},
		{"add member as admin: bad phone", "POST", "/families/100/members", admin, map[string]any{"name": "x", "phone": "12345"}, 422},
		{"remove unknown member", "DELETE", "/families/100/members/777", owner, nil, 404},
		{"remove last owner", "DELETE", "/families/200/members/2001", ownerBTok, nil, 409},
		{"demote last owner", "PUT", "/families/200/members/2001/role", ownerBTok, map[string]string{"role": "MEMBER"}, 409},
		{"role of another family's member", "PUT", "/families/100/members/2002/role", owner, map[string]string{"role": "OWNER"}, 404},
		{"notifications bad limit", "GET", "/families/100/notifications?limit=5000", owner, nil, 422},
		{"read unknown notification", "POST", "/families/100/notifications/999999/read", owner, nil, 404},
		{"read another family's notification", "POST", fmt.Sprintf("/families/200/notifications/%d/read", n.ID), ownerBTok, nil, 404},
		// push subscriptions
		{"push key not configured", "GET", "/push/vapid-public-key", "", nil, 404},
		{"push http endpoint", "POST", "/families/100/push-subscriptions", child, pushBody("http://push.example/x", pushKeys), 422},
		{"push loopback http, not allowed here", "POST", "/families/100/push-subscriptions", child, pushBody("http://127.0.0.1:9/x", pushKeys), 422},
		{"push bad p256dh", "POST", "/families/100/push-subscriptions", child, pushBody("https://push.example/x", map[string]string{"p256dh": strings.Repeat("A", 87), "auth": pushKeys["auth"]}), 422},
		{"push short auth", "POST", "/families/100/push-subscriptions", child, pushBody("https://push.example/x", map[string]string{"p256dh": pushKeys["p256dh"], "auth": "AAAA"}), 422},
		{"push no keys", "POST", "/families/100/push-subscriptions", child, map[string]any{"endpoint": "https://push.example/x"}, 422},
		{"push as admin", "POST", "/families/100/push-subscriptions", admin, pushBody("https://push.example/x", pushKeys), 403},
		{"push other family", "POST", "/families/200/push-subscriptions", owner, pushBody("https://push.example/x", pushKeys), 404},
		{"unsubscribe unknown", "DELETE", "/families/100/push-subscriptions?endpoint=https%3A%2F%2Fpush.example%2Fnone", owner, nil, 404},
		{"unsubscribe without endpoint", "DELETE", "/families/100/push-subscriptions", owner, nil, 422},
		// ask for more
		{"data request no bytes", "POST", "/families/100/data-requests", child, map[string]any{"amountBytes": 0}, 422},
		{"data request too long a message", "POST", "/families/100/data-requests", child, map[string]any{"amountBytes": 1, "message": strings.Repeat("말", 201)}, 422},
		{"data request as admin", "POST", "/families/100/data-requests", admin, map[string]any{"amountBytes": 1}, 403},
		{"data requests bad status", "GET", "/families/100/data-requests?status=LOST", owner, nil, 422},
		{"approve unknown request", "POST", "/families/100/data-requests/999999/approve", owner, map[string]any{"grant": "DAY"}, 404},
		{"approve bad grant", "POST", drPath + "/approve", owner, map[string]any{"grant": "WEEK"}, 422},
		{"approve as member", "POST", drPath + "/approve", child, map[string]any{"grant": "DAY"}, 403},
		{"approve a raise without a limit", "POST", drPath + "/approve", owner, map[string]any{"grant": "DAY"}, 409},
		{"approve top-up over the owner's limit", "POST", drPath + "/approve", owner, map[string]any{"grant": "TOPUP", "amountBytes": 11 << 30}, 422},
		{"decline another family's request", "POST", fmt.Sprintf("/families/200/data-requests/%d/decline", dr.ID), ownerBTok, nil, 404},
		// admin routes
		{"template name taken", "POST", "/admin/policy-templates", admin, map[string]any{"name": "taken", "type": "LIMIT", "defaultRules": map[string]string{}, "active": true}, 409},
		{"template rename to taken", "PUT", fmt.Sprintf("/admin/policy-templates/%d", off.ID), admin, map[string]any{"name": "taken", "type": "LIMIT", "defaultRules": map[string]string{}, "active": true}, 409},
		{"template bad rules", "POST", "/admin/policy-templates", admin, map[string]any{"name": "y", "type": "LIMIT", "defaultRules": map[string]string{"BLOCK:ACCESS": "2"}, "active": true}, 422},
		{"template unknown", "PUT", "/admin/policy-templates/999", admin, map[string]any{"name": "z", "type": "LIMIT", "defaultRules": map[string]string{}, "active": true}, 404},
		{"apply inactive", "POST", fmt.Sprintf("/admin/policy-templates/%d/apply", off.ID), admin, map[string]any{"familyId": famA, "customerId": childA}, 409},
		{"apply owner-only to member", "POST", fmt.Sprintf("/admin/policy-templates/%d/apply", tpl.ID), admin, map[string]any{"familyId": famA, "customerId": childA}, 409},
		{"apply stale", "POST", fmt.Sprintf("/admin/policy-templates/%d/apply", tpl.ID), admin, map[string]any{"familyId": famA, "customerId": ownerA, "expectedVersion": 9}, 409},
		{"apply to unknown member", "POST", fmt.Sprintf("/admin/policy-templates/%d/apply", tpl.ID), admin, map[string]any{"familyId": famA, "customerId": 777}, 404},
		{"family id taken", "POST", "/admin/families", admin, map[string]any{"id": famB, "name": "dup", "planBytes": 1}, 409},
		{"family name blank", "POST", "/admin/families", admin, map[string]any{"name": " ", "planBytes": 1}, 422},
		{"plan unknown family", "PUT", "/admin/families/999/plan", admin, map[string]any{"planBytes": 1}, 404},
		{"search bad limit", "GET", "/admin/families?limit=0", admin, nil, 422},
		{"audit bad limit", "GET", "/admin/audit-log?limit=5000", admin, nil, 422},
		{"admin route as owner", "GET", "/admin/audit-log", owner, nil, 403},
	} {
		resp, body := f.do(c.method, c.path, c.token, c.body)
		if resp.StatusCode != c.want {
			t.Errorf("%s: %s %s: status %d, want %d: %s", c.name, c.method, c.path, resp.StatusCode, c.want, body)
		}
	}

	// Refused for an owner whatever the phone: one of another family, one
	// of this family, and a free one get the same answer.
	var answers []string
	for _, phone := range []string{"010-2003", "010-9999", "010-0000-7777"} {
		p := f.problem(http.MethodPost, "/families/100/members", owner, map[string]any{"name": "x", "phone": phone}, http.StatusUnprocessableEntity, "body.phone")
		answers = append(answers, fmt.Sprintf("%+v", p))
	}
	if answers[0] != answers[1] || answers[1] != answers[2] {
		t.Errorf("an owner's phone answers differ: %q", answers)
	}
	// Likewise any customerId (taken in another family, in this one, or free).
	answers = answers[:0]
	for _, id := range []int64{childB, childA, 777777} {
		p := f.problem(http.MethodPost, "/families/100/members", owner, map[string]any{"name": "x", "customerId": id}, http.StatusUnprocessableEntity, "body.customerId")
		answers = append(answers, fmt.Sprintf("%+v", p))
	}
	if answers[0] != answers[1] || answers[1] != answers[2] {
		t.Errorf("an owner's customerId answers differ: %q", answers)
	}
}

// withAPI replaces the fixture's API with one built from the same store,
// engine, hub and inbox under cfg's changes; tokens stay valid.
func (f *apiFixture) withAPI(change func(*Config)) {
	f.t.Helper()
	cfg := Config{Store: f.store, State: f.qs, Hub: f.hub, Inbox: f.inbox,
		Secret: []byte("0123456789abcdef0123456789abcdef"), Clock: f.clock, PingInterval: 50 * time.Millisecond}
	change(&cfg)
	f.complete(&cfg)
	a, err := New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.api = a
	f.srv = httptest.NewServer(a.Handler())
	f.t.Cleanup(f.srv.Close)
}

// TestOwnerTopUps: owners buy offers within the per-top-up and monthly
// limits (defaults 10 GiB and 50 GiB for the family's members together);
// admins only within the pool's maximum; limits can be set, or turned off
// for owners.
func TestOwnerTopUps(t *testing.T) {
	offers, err := ParseTopUpOffers("1GB=9900,9GB=50000,10GB=55000,11GB=60000,1MB=100,2MB=200")
	if err != nil {
		t.Fatal(err)
	}
	f := newAPIFixture(t, func(c *Config) { c.TopUpOffers = offers })
	owner, admin := f.token(ownerA), f.token(adminID)
	buy := func(id string) map[string]any { return map[string]any{"offerId": id} }
	p := f.problem(http.MethodPost, "/families/100/topups", owner, buy("11GB"), http.StatusUnprocessableEntity, "body.bytes")
	if !strings.Contains(p.Errors[0].Message, "10737418240 bytes per top-up") {
		t.Errorf("per top-up refusal %+v", p)
	}
	for range 4 {
		f.call(http.MethodPost, "/families/100/topups", owner, buy("10GB"), http.StatusCreated, nil)
	}
	f.call(http.MethodPut, "/families/100/members/1002/role", owner, map[string]string{"role": "OWNER"}, http.StatusOK, nil)
	f.call(http.MethodPost, "/families/100/topups", f.token(childA), buy("9GB"), http.StatusCreated, nil)
	f.call(http.MethodPost, "/families/100/topups", owner, buy("1GB"), http.StatusCreated, nil)
	p = f.problem(http.MethodPost, "/families/100/topups", owner, buy("1MB"), http.StatusUnprocessableEntity, "body.bytes")
	if !strings.Contains(p.Errors[0].Message, "can be added in 202602") && !strings.Contains(p.Errors[0].Message, "are used up") {
		t.Errorf("monthly refusal %+v", p)
	}
	// another family is not affected, nor admins
	f.call(http.MethodPost, "/families/200/topups", f.token(ownerB), buy("10GB"), http.StatusCreated, nil)
	var tu TopUpView
	f.call(http.MethodPost, "/families/100/topups", admin, map[string]any{"bytes": 100 * gib}, http.StatusCreated, &tu)
	if tu.TotalBytes != 10*gib+50*gib+100*gib || tu.OfferID != "" || tu.PriceKRW != 0 {
		t.Fatalf("after admin top-up %+v", tu)
	}
	// next month starts afresh
	next := f.clock().AddDate(0, 1, 0)
	f.now.Store(&next)
	clear(f.tokens) // expired
	owner, admin = f.token(ownerA), f.token(adminID)
	f.call(http.MethodPost, "/families/100/topups", owner, buy("10GB"), http.StatusCreated, nil)

	// operator's limits
	f.withAPI(func(c *Config) { c.OwnerTopUpMax, c.OwnerTopUpMonthly, c.TopUpOffers = mib, 2*mib, offers })
	f.call(http.MethodPost, "/families/200/topups", f.token(ownerB), buy("1MB"), http.StatusCreated, nil)
	f.problem(http.MethodPost, "/families/200/topups", f.token(ownerB), buy("2MB"), http.StatusUnprocessableEntity, "body.bytes")
	f.call(http.MethodPost, "/families/200/topups", f.token(ownerB), buy("1MB"), http.StatusCreated, nil)
	f.problem(http.MethodPost, "/families/200/topups", f.token(ownerB), buy("1MB"), http.StatusUnprocessableEntity, "body.bytes")
	// turned off for owners: 403; admins still top up
	f.withAPI(func(c *Config) { c.OwnerTopUpMax = -1 })
	f.problem(http.MethodPost, "/families/200/topups", f.token(ownerB), map[string]any{"bytes": 1}, http.StatusForbidden, "")
	f.call(http.MethodPost, "/families/200/topups", admin, map[string]any{"bytes": 1}, http.StatusCreated, nil)
	f.call(http.MethodPost, "/families/200/topups", f.token(childB), map[string]any{"bytes": 1}, http.StatusForbidden, nil)
}

// A top-up whose Redis write failed after SQL recorded it (Redis down) is
// answered as recorded and not yet in effect (503, family.ErrNotApplied),
// and must not leave Redis short for the month: the next top-up that
// reaches Redis brings it to SQL's total, and an answer never counts a
// top-up twice.
func TestTopUpAfterFailedRedisWrite(t *testing.T) {
	f := newAPIFixture(t)
	admin := f.token(adminID)
	var before TopUpView
	f.call(http.MethodPost, "/families/100/topups", admin, map[string]any{"bytes": gib}, http.StatusCreated, &before)
	f.mr.SetError("LOADING Redis is loading the dataset in memory")
	p := f.problem(http.MethodPost, "/families/100/topups", admin, map[string]any{"bytes": 2 * gib}, http.StatusServiceUnavailable, "")
	if !strings.Contains(p.Detail, "recorded") || !strings.Contains(p.Detail, "read it back") {
		t.Errorf("detail %q: want it to say the top-up is recorded and to read it back", p.Detail)
	}
	f.mr.SetError("")
	var after TopUpView
	f.call(http.MethodPost, "/families/100/topups", admin, map[string]any{"bytes": 3 * gib}, http.StatusCreated, &after)
	if want := before.TotalBytes + 5*gib; after.TotalBytes != want {
		t.Fatalf("total after the failed and a good top-up: %d, want %d (SQL's plan + top-ups)", after.TotalBytes, want)
	}
	fam, err := f.engine.Family(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	if fam.Total != before.TotalBytes+5*gib {
		t.Errorf("Redis pool total %d, want %d", fam.Total, before.TotalBytes+5*gib)
	}
}

// TestBodyErrorsNameTheField: a body encoding/json cannot store (a number no
// Go type holds, a value of the wrong kind after validation) is answered at
// the field's location with a text written for the caller, and a body that
// is not JSON says where it breaks; none repeats the value sent.
func TestBodyErrorsNameTheField(t *testing.T) {
	f := newAPIFixture(t)
	owner, admin := f.token(ownerA), f.token(adminID)
	for _, c := range []struct {
		name, method, path, token, body string
		status                          int
		loc, msg                        string
	}{
		{"top-up 1e400", "POST", "/families/100/topups", admin, `{"bytes":1e400}`, 400, "body.bytes", "must be a number of at most 1.8e308 in size"},
		{"threshold 1e400", "PUT", "/families/100/alerts", owner, `{"thresholds":[50, 1e400]}`, 400, "body.thresholds[1]", "must be a number of at most 1.8e308 in size"},
		{"nested 1e400", "PATCH", "/families/100/members/1002/policies", owner, `{"set":{"A":"1"},"expectedVersion":-1e999}`, 400, "body.expectedVersion", "must be a number of at most 1.8e308 in size"},
		{"id past int64", "PATCH", "/families/policies", owner, `{"customerId":1e19,"set":{"BLOCK:ACCESS":"1"}}`, 422, "body.customerId",
			"must be a whole number from -9223372036854775808 to 9223372036854775807"},
		{"not JSON", "POST", "/auth/token", "", `{"login":"1001","password":"sekrit-pass`, 400, "body", "the body is not valid JSON (at byte 39 of 39)"},
	} {
		p := f.problem(c.method, c.path, c.token, c.body, c.status, c.loc)
		got := map[string]string{}
		for _, e := range p.Errors {
			got[e.Location] = e.Message
		}
		if got[c.loc] != c.msg {
			t.Errorf("%s: errors %v, want %q at %s", c.name, got, c.msg, c.loc)
		}
	}
}

// TestCleanProblem: the transformer every problem passes through drops
// every value, and every detail of a 5xx (a handler error huma wraps as
// "unexpected error occurred" would carry its own text there).
func TestCleanProblem(t *testing.T) {
	in := &huma.ErrorModel{Status: 500, Detail: "unexpected error occurred", Errors: []*huma.ErrorDetail{{Message: "store: dial tcp 10.0.0.1:3306"}}}
	out, err := cleanProblem(nil, "500", in)
	if err != nil || out.(*huma.ErrorModel).Errors != nil || in.Errors == nil {
		t.Errorf("500: %+v (%v); the original must stay as it was: %+v", out, err, in)
	}
	in = &huma.ErrorModel{Status: 422, Errors: []*huma.ErrorDetail{{Location: "body.password", Message: "expected length <= 128", Value: "hunter2"},
		{Location: "body", Message: "body.set.X: must be a string", Value: `{"set":{"X":1}}`}}}
	out, _ = cleanProblem(nil, "422", in)
	want := []*huma.ErrorDetail{{Location: "body.password", Message: "expected length <= 128"}, {Location: "body.set.X", Message: "must be a string"}}
	if diff := cmp.Diff(want, out.(*huma.ErrorModel).Errors); diff != "" {
		t.Errorf("422 details (-want +got):\n%s", diff)
	}
	if body := "plain"; func() any { v, _ := cleanProblem(nil, "200", body); return v }() != body {
		t.Error("a body that is not a problem must pass unchanged")
	}
}

// With DPCS_REDIS_REPLICA_ACK, a family write whose Redis replicas did not
// acknowledge it in time is not a 500: the answer says it is recorded and
// applied on the primary, not yet copied, and that it should be read back
// before being repeated (a repeated top-up would add again).
func TestFamilyWriteNotReplicated(t *testing.T) {
	f := newAPIFixture(t)
	acked, err := quota.New(f.rdb, quota.WithClock(f.clock), quota.WithReplicaAck(1, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	qs, err := judge.NewState(acked)
	if err != nil {
		t.Fatal(err)
	}
	f.withAPI(func(c *Config) { c.State = qs }) // miniredis has no replica: WAIT answers 0
	admin := f.token(adminID)
	before, err := f.engine.Family(context.Background(), famA)
	if err != nil {
		t.Fatal(err)
	}
	p := f.problem(http.MethodPost, "/families/100/topups", admin, map[string]any{"bytes": gib}, http.StatusServiceUnavailable, "")
	if !strings.Contains(p.Detail, "recorded") || !strings.Contains(p.Detail, "read it back") {
		t.Errorf("detail %q: want it to say the change is recorded and to read it back", p.Detail)
	}
	after, err := f.engine.Family(context.Background(), famA)
	if err != nil {
		t.Fatal(err)
	}
	if after.Total != before.Total+gib {
		t.Errorf("pool total %d after the unacknowledged top-up, want %d (applied on the primary)", after.Total, before.Total+gib)
	}
}

// failingMarks is a judge.MarkStore whose records fail (SQL down after the
// family write's own transaction).
type failingMarks struct{ gen string }

func (m failingMarks) Generation(context.Context) (string, error) { return m.gen, nil }
func (failingMarks) Forget()                                      {}
func (failingMarks) Floors(context.Context, string) ([]quota.Mark, error) {
	return nil, nil
}
func (failingMarks) RecordMark(context.Context, string, quota.Mark) error {
	return errors.New("dial tcp 10.0.0.7:3306: connection refused")
}

// A family write applied to Redis whose mark could not be recorded is not
// a 500 and says nothing of SQL: the change is recorded and in effect, to
// be read back before it is repeated.
func TestFamilyWriteNotMarked(t *testing.T) {
	f := newAPIFixture(t)
	ctx := context.Background()
	if _, err := f.engine.BeginRebuild(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	if err := f.engine.FinishRebuild(ctx, "g1", nil); err != nil {
		t.Fatal(err)
	}
	qs, err := judge.NewState(f.engine, judge.WithMarkStore(failingMarks{gen: "g1"}))
	if err != nil {
		t.Fatal(err)
	}
	f.withAPI(func(c *Config) { c.State = qs })
	p := f.problem(http.MethodPost, "/families/100/topups", f.token(adminID), map[string]any{"bytes": gib}, http.StatusServiceUnavailable, "")
	if !strings.Contains(p.Detail, "recorded and in effect") || !strings.Contains(p.Detail, "read it back") || strings.Contains(p.Detail, "3306") {
		t.Errorf("detail %q: want it to say the change is in effect and to read it back, and nothing of SQL", p.Detail)
	}
}
