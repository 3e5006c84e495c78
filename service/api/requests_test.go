package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/policy"
)

// TestDataRequests: "ask for more" over the API — idempotent creation, the
// pending cap, owners' answers (DAY unblocks a member blocked by its monthly
// limit at once), answered once, identical retries, the extras shown and
// kept by later policy changes, and refusals that say what to do.
func TestDataRequests(t *testing.T) {
	f := newAPIFixture(t)
	owner, child, admin := f.token(ownerA), f.token(childA), f.token(adminID)
	f.call(http.MethodPatch, "/families/100/members/1002/policies", owner,
		map[string]any{"set": map[string]string{policy.KeyLimitMonthly: "1000"}}, http.StatusOK, nil)
	if r := f.use(famA, childA, 1000); r.Decision != policy.Allowed {
		t.Fatalf("first use: %+v", r)
	}
	if r := f.use(famA, childA, 1); r.Decision != policy.BlockedLimitMonthly {
		t.Fatalf("over the limit: %+v", r)
	}

	// Create: 201, then the same key and body again: 200 with the same request.
	body := map[string]any{"amountBytes": 500, "message": "숙제 자료"}
	resp, data := f.do(http.MethodPost, "/families/100/data-requests", child, body, "Idempotency-Key", "k-1")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, data)
	}
	var r1 DataRequestView
	decodeJSON(t, data, &r1)
	if r1.Status != "PENDING" || r1.CustomerID != childA || r1.AmountBytes != 500 || r1.Message != "숙제 자료" {
		t.Fatalf("created %+v", r1)
	}
	var again DataRequestView
	resp, data = f.do(http.MethodPost, "/families/100/data-requests", child, body, "Idempotency-Key", "k-1")
	decodeJSON(t, data, &again)
	if resp.StatusCode != http.StatusOK || again.ID != r1.ID {
		t.Errorf("retry: %d %+v", resp.StatusCode, again)
	}
	// The key in the body works the same; a key reused for another request is 409.
	resp, _ = f.do(http.MethodPost, "/families/100/data-requests", child, map[string]any{"amountBytes": 500, "message": "숙제 자료", "clientRequestId": "k-1"})
	if resp.StatusCode != http.StatusOK {
		t.Errorf("clientRequestId retry: %d", resp.StatusCode)
	}
	f.call(http.MethodPost, "/families/100/data-requests", child, map[string]any{"amountBytes": 9}, http.StatusCreated, nil)
	f.problem(http.MethodPost, "/families/100/data-requests", child, map[string]any{"amountBytes": 9, "clientRequestId": "k-1"}, http.StatusConflict, "header.Idempotency-Key")
	if resp, data := f.do(http.MethodPost, "/families/100/data-requests", child, map[string]any{"amountBytes": 9, "clientRequestId": "a"},
		"Idempotency-Key", "b"); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("key in header and body differ: %d %s", resp.StatusCode, data)
	}

	// The owner sees it; another member of the family does not.
	var list DataRequestList
	f.call(http.MethodGet, "/families/100/data-requests?status=PENDING", owner, nil, http.StatusOK, &list)
	if len(list.Requests) != 2 { // r1 and the 9-byte one
		t.Fatalf("owner's pending list: %+v", list)
	}
	f.addMember(famA, 1009, policy.RoleMember)
	f.call(http.MethodGet, "/families/100/data-requests", f.token(1009), nil, http.StatusOK, &list)
	if len(list.Requests) != 0 {
		t.Errorf("a sibling sees %d requests", len(list.Requests))
	}
	f.problem(http.MethodGet, "/families/100/data-requests/"+itoa(r1.ID), f.token(1009), nil, http.StatusNotFound, "")

	// Approve DAY with the asked amount: the member is unblocked at once.
	var a1 DataRequestView
	f.call(http.MethodPost, "/families/100/data-requests/"+itoa(r1.ID)+"/approve", owner, map[string]any{"grant": "DAY"}, http.StatusOK, &a1)
	if a1.Status != "APPROVED" || a1.Grant != "DAY" || a1.GrantedBytes != 500 || a1.Period != "20260210" ||
		a1.Standing == nil || a1.Standing.Status != "ALLOWED" || a1.PolicyVersion != 2 {
		t.Fatalf("approve: %+v (standing %+v)", a1, a1.Standing)
	}
	if r := f.use(famA, childA, 400); r.Decision != policy.Allowed {
		t.Errorf("after the grant: %+v", r)
	}
	// The same answer again: 200, the same request, no second grant.
	var replay DataRequestView
	f.call(http.MethodPost, "/families/100/data-requests/"+itoa(r1.ID)+"/approve", owner, map[string]any{"grant": "DAY", "amountBytes": 500}, http.StatusOK, &replay)
	if replay.ID != r1.ID || replay.PolicyVersion != 2 || replay.GrantedBytes != 500 {
		t.Errorf("replay: %+v", replay)
	}
	p := f.problem(http.MethodPost, "/families/100/data-requests/"+itoa(r1.ID)+"/decline", owner, nil, http.StatusConflict, "")
	if p.Detail != "the request was already approved (DAY, 500 bytes): a request is answered once" {
		t.Errorf("second answer: %+v", p)
	}

	// GET policies shows the extra in effect; a replacing PATCH keeps it.
	var pv PolicyView
	f.call(http.MethodGet, "/families/100/members/1002/policies", child, nil, http.StatusOK, &pv)
	wantExtras := []ExtraView{{Key: "LIMIT:DATA:EXTRA:20260210", Scope: "DAY", Period: "20260210", Bytes: 500}}
	if diff := cmp.Diff(wantExtras, pv.Extras); diff != "" {
		t.Errorf("extras (-want +got):\n%s", diff)
	}
	f.call(http.MethodPatch, "/families/100/members/1002/policies", owner,
		map[string]any{"replace": map[string]string{policy.KeyLimitMonthly: "1200"}}, http.StatusOK, &pv)
	if diff := cmp.Diff(wantExtras, pv.Extras); diff != "" || pv.Rules["LIMIT:DATA:EXTRA:20260210"] != "500" {
		t.Errorf("replace dropped the extra: %v (-want +got):\n%s", pv.Rules, diff)
	}

	// Decline with a reason; then a TOPUP approval as admin.
	var pending DataRequestList
	f.call(http.MethodGet, "/families/100/data-requests?status=PENDING", child, nil, http.StatusOK, &pending)
	if len(pending.Requests) != 1 {
		t.Fatalf("child's pending: %+v", pending)
	}
	var d DataRequestView
	f.call(http.MethodPost, "/families/100/data-requests/"+itoa(pending.Requests[0].ID)+"/decline", owner, map[string]any{"reason": "내일"}, http.StatusOK, &d)
	if d.Status != "DECLINED" || d.Reason != "내일" || d.Grant != "" {
		t.Errorf("decline: %+v", d)
	}
	f.call(http.MethodPost, "/families/100/data-requests/"+itoa(pending.Requests[0].ID)+"/decline", owner, map[string]any{"reason": "내일"}, http.StatusOK, nil)
	var r3, a3 DataRequestView
	f.call(http.MethodPost, "/families/100/data-requests", child, map[string]any{"amountBytes": 1 << 20}, http.StatusCreated, &r3)
	f.call(http.MethodPost, "/families/100/data-requests/"+itoa(r3.ID)+"/approve", admin, map[string]any{"grant": "TOPUP"}, http.StatusOK, &a3)
	if a3.Grant != "TOPUP" || a3.GrantedBytes != 1<<20 || a3.PoolRemainingBytes == nil || a3.AnsweredBy != adminID {
		t.Errorf("top-up approval: %+v", a3)
	}

	// Refusals.
	var r4 DataRequestView
	f.call(http.MethodPost, "/families/100/data-requests", child, map[string]any{"amountBytes": 100 << 30}, http.StatusCreated, &r4)
	f.problem(http.MethodPost, "/families/100/data-requests/"+itoa(r4.ID)+"/approve", owner, map[string]any{"grant": "TOPUP"}, http.StatusUnprocessableEntity, "body.offerId")
	f.problem(http.MethodPost, "/families/100/data-requests/"+itoa(r4.ID)+"/approve", owner, map[string]any{"grant": "TOPUP", "amountBytes": 1 << 20}, http.StatusUnprocessableEntity, "body.amountBytes")
	f.problem(http.MethodPost, "/families/100/data-requests/"+itoa(r4.ID)+"/approve", owner, map[string]any{"grant": "WEEK"}, http.StatusUnprocessableEntity, "body.grant")
	f.problem(http.MethodPost, "/families/100/data-requests/"+itoa(r4.ID)+"/approve", child, map[string]any{"grant": "DAY"}, http.StatusForbidden, "")
	f.problem(http.MethodPost, "/families/100/data-requests/99999/approve", owner, map[string]any{"grant": "DAY"}, http.StatusNotFound, "")
	f.problem(http.MethodPost, "/families/100/data-requests", child, map[string]any{"amountBytes": 0}, http.StatusUnprocessableEntity, "body.amountBytes")
	f.problem(http.MethodPost, "/families/100/data-requests", child, map[string]any{"amountBytes": 1, "message": string(make([]rune, 201))}, http.StatusUnprocessableEntity, "body.message")
	f.problem(http.MethodPost, "/families/100/data-requests", admin, map[string]any{"amountBytes": 1}, http.StatusForbidden, "")
	f.problem(http.MethodGet, "/families/100/data-requests?status=LOST", owner, nil, http.StatusUnprocessableEntity, "")
	// The owner has no limit: a raise would change nothing (409, use TOPUP).
	var r5 DataRequestView
	f.call(http.MethodPost, "/families/100/data-requests", owner, map[string]any{"amountBytes": 5}, http.StatusCreated, &r5)
	f.problem(http.MethodPost, "/families/100/data-requests/"+itoa(r5.ID)+"/approve", owner, map[string]any{"grant": "MONTH"}, http.StatusConflict, "body.grant")
	// At most 3 pending per member.
	f.call(http.MethodPost, "/families/100/data-requests", child, map[string]any{"amountBytes": 1}, http.StatusCreated, nil)
	f.call(http.MethodPost, "/families/100/data-requests", child, map[string]any{"amountBytes": 1}, http.StatusCreated, nil)
	f.problem(http.MethodPost, "/families/100/data-requests", child, map[string]any{"amountBytes": 1}, http.StatusConflict, "body.amountBytes")

	// Audited.
	var audit struct {
		Entries []struct {
			Action string `json:"action"`
		} `json:"entries"`
	}
	f.call(http.MethodGet, "/admin/audit-log?familyId=100&limit=500", admin, nil, http.StatusOK, &audit)
	count := map[string]int{}
	for _, e := range audit.Entries {
		count[e.Action]++
	}
	if count["data-request.create"] != 7 || count["data-request.approve"] != 2 || count["data-request.decline"] != 1 {
		t.Errorf("audit counts: %v", count)
	}
}

func decodeJSON(t *testing.T, data []byte, out any) {
	t.Helper()
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestTimeAndAppRequests: "30분 더" over the API — a child in a downtime
// asks for 30 minutes, the owner approves (no grant named), the engine
// lets it through at once and blocks again when the exception ends; an
// owner lifts an app's block directly and extends it; exceptions are
// listed, kept by a replacing PATCH and refused where nothing is blocked.
func TestTimeAndAppRequests(t *testing.T) {
	f := newAPIFixture(t) // 2026-02-10 21:00 KST
	owner, child := f.token(ownerA), f.token(childA)
	f.call(http.MethodPatch, "/families/100/members/1002/policies", owner,
		map[string]any{"set": map[string]string{"BLOCK:TIME:밤": "2030-0700"}}, http.StatusOK, nil)
	if r := f.use(famA, childA, 10); r.Decision != policy.BlockedTime {
		t.Fatalf("in the downtime: %+v", r)
	}
	// The dashboard says when the downtime begins next: inside it now
	// (21:00), tomorrow at 20:30.
	var d Dashboard
	f.call(http.MethodGet, "/families/100", child, nil, http.StatusOK, &d)
	for _, m := range d.Members {
		if m.CustomerID == childA && (m.NextDowntime == nil || m.NextDowntime.Rule != "BLOCK:TIME:밤" ||
			!m.NextDowntime.Start.Equal(time.Date(2026, 2, 11, 11, 30, 0, 0, time.UTC)) || m.NextDowntime.Local != "202602112030") {
			t.Errorf("next downtime: %+v", m.NextDowntime)
		}
	}
	// Bad requests name the field.
	f.problem(http.MethodPost, "/families/100/data-requests", child, map[string]any{"kind": "TIME"}, http.StatusUnprocessableEntity, "body.minutes")
	f.problem(http.MethodPost, "/families/100/data-requests", child, map[string]any{"kind": "TIME", "minutes": 30, "amountBytes": 5}, http.StatusUnprocessableEntity, "body.amountBytes")
	f.problem(http.MethodPost, "/families/100/data-requests", child, map[string]any{"kind": "APP", "minutes": 30}, http.StatusUnprocessableEntity, "body.appId")
	f.problem(http.MethodPost, "/families/100/data-requests", child, map[string]any{"minutes": 30}, http.StatusUnprocessableEntity, "body.minutes")

	var r1, a1 DataRequestView
	f.call(http.MethodPost, "/families/100/data-requests", child, map[string]any{"kind": "TIME", "minutes": 30, "message": "숙제 마무리"}, http.StatusCreated, &r1)
	if r1.Kind != "TIME" || r1.Minutes != 30 || r1.AmountBytes != 0 || r1.Status != "PENDING" {
		t.Fatalf("created %+v", r1)
	}
	f.problem(http.MethodPost, "/families/100/data-requests/"+itoa(r1.ID)+"/approve", owner, map[string]any{"grant": "DAY"}, http.StatusUnprocessableEntity, "body.grant")
	f.call(http.MethodPost, "/families/100/data-requests/"+itoa(r1.ID)+"/approve", owner, map[string]any{}, http.StatusOK, &a1)
	if a1.Status != "APPROVED" || a1.Grant != "TIME" || a1.GrantedMinutes != 30 || a1.Until != "202602102130" ||
		a1.Standing == nil || a1.Standing.Status != "ALLOWED" {
		t.Fatalf("approve: %+v (standing %+v)", a1, a1.Standing)
	}
	if r := f.use(famA, childA, 10); r.Decision != policy.Allowed {
		t.Errorf("during the 30 minutes: %+v", r)
	}
	// A second request for 30 minutes approved at once does not add up
	// (an owner's own grant does: below).
	var r1b DataRequestView
	f.call(http.MethodPost, "/families/100/data-requests", child, map[string]any{"kind": "TIME", "minutes": 30}, http.StatusCreated, &r1b)
	f.call(http.MethodPost, "/families/100/data-requests/"+itoa(r1b.ID)+"/approve", owner, map[string]any{}, http.StatusOK, &r1b)
	if r1b.Until != "202602102130" {
		t.Errorf("a second 30 minutes approved at once ends at %s, want 202602102130", r1b.Until)
	}
	f.problem(http.MethodPost, "/families/100/data-requests/"+itoa(r1b.ID)+"/approve", owner, map[string]any{"amountBytes": 5}, http.StatusUnprocessableEntity, "body.amountBytes")
	// The same answer again is a replay; the exception is listed.
	f.call(http.MethodPost, "/families/100/data-requests/"+itoa(r1.ID)+"/approve", owner, map[string]any{"grant": "TIME", "minutes": 30}, http.StatusOK, nil)
	var pv PolicyView
	f.call(http.MethodGet, "/families/100/members/1002/policies", child, nil, http.StatusOK, &pv)
	if len(pv.Exceptions) != 1 || pv.Exceptions[0].Kind != "TIME" || pv.Exceptions[0].Until != "202602102130" ||
		!pv.Exceptions[0].Ends.Equal(f.clock().Add(30*time.Minute)) {
		t.Errorf("exceptions: %+v", pv.Exceptions)
	}

	// An owner lifts YouTube's block directly; granted again, it extends.
	f.problem(http.MethodPost, "/families/100/members/1002/exceptions", owner, map[string]any{"kind": "APP", "appId": "com.youtube.app", "minutes": 30},
		http.StatusConflict, "")
	f.call(http.MethodPatch, "/families/100/members/1002/policies", owner,
		map[string]any{"replace": map[string]string{"BLOCK:CATEGORY:VIDEO": "1", "BLOCK:TIME:밤": "2030-0700"}}, http.StatusOK, &pv)
	if pv.Rules[policy.KeyExceptTime] != "202602102130" {
		t.Errorf("a replace dropped the time exception: %v", pv.Rules)
	}
	f.call(http.MethodPost, "/families/100/members/1002/exceptions", owner, map[string]any{"kind": "APP", "appId": "com.youtube.app", "minutes": 20}, http.StatusOK, &pv)
	f.call(http.MethodPost, "/families/100/members/1002/exceptions", owner, map[string]any{"kind": "APP", "appId": "com.youtube.app", "minutes": 20}, http.StatusOK, &pv)
	if pv.Rules["EXCEPT:APP:com.youtube.app"] != "202602102140" || len(pv.Exceptions) != 2 {
		t.Errorf("app exception extended to 21:40: %v %+v", pv.Rules, pv.Exceptions)
	}
	f.problem(http.MethodPost, "/families/100/members/1002/exceptions", child, map[string]any{"kind": "TIME", "minutes": 20}, http.StatusForbidden, "")
	f.problem(http.MethodPost, "/families/100/members/1002/exceptions", owner, map[string]any{"kind": "APP", "minutes": 20}, http.StatusUnprocessableEntity, "body.appId")
	f.problem(http.MethodPost, "/families/100/members/1002/exceptions", owner, map[string]any{"kind": "TIME", "minutes": 241}, http.StatusUnprocessableEntity, "body.minutes")

	// 21:30: the downtime is back (YouTube's own exception is not downtime's).
	later := f.clock().Add(30 * time.Minute)
	f.now.Store(&later)
	clear(f.tokens) // the earlier access tokens expired
	owner, child = f.token(ownerA), f.token(childA)
	if r := f.use(famA, childA, 10); r.Decision != policy.BlockedTime {
		t.Errorf("after the 30 minutes: %+v", r)
	}
	f.call(http.MethodGet, "/families/100/members/1002/policies", owner, nil, http.StatusOK, &pv)
	if len(pv.Exceptions) != 1 || pv.Exceptions[0].Key != "EXCEPT:APP:com.youtube.app" {
		t.Errorf("exceptions at 21:30: %+v", pv.Exceptions)
	}
	// Declining a time request tells its minutes.
	var r2, d2 DataRequestView
	f.call(http.MethodPost, "/families/100/data-requests", child, map[string]any{"kind": "APP", "appId": "com.youtube.app", "minutes": 15}, http.StatusCreated, &r2)
	f.call(http.MethodPost, "/families/100/data-requests/"+itoa(r2.ID)+"/decline", owner, map[string]any{"reason": "내일"}, http.StatusOK, &d2)
	if d2.Status != "DECLINED" || d2.Kind != "APP" || d2.AppID != "com.youtube.app" || d2.Minutes != 15 || d2.GrantedMinutes != 0 {
		t.Errorf("decline: %+v", d2)
	}
}

// TestAppBudgetRequest: "유튜브 하루 100 B" over the API — the owner sets
// the app's daily budget by its key, the child's YouTube is
// BLOCKED_APP_LIMIT once it is used up, the child asks for more time on
// the app (kind APP, as for a blocked app), the owner approves and YouTube
// goes on at once; a category's budget is liftable for its apps too, and
// an app with neither block nor budget has nothing to lift.
func TestAppBudgetRequest(t *testing.T) {
	f := newAPIFixture(t) // 2026-02-10 21:00 KST
	owner, child := f.token(ownerA), f.token(childA)
	f.problem(http.MethodPost, "/families/100/members/1002/exceptions", owner, map[string]any{"kind": "APP", "appId": "com.youtube.app", "minutes": 30},
		http.StatusConflict, "")
	var pv PolicyView
	f.call(http.MethodPatch, "/families/100/members/1002/policies", owner,
		map[string]any{"set": map[string]string{"LIMIT:DATA:APP:com.youtube.app": "100"}}, http.StatusOK, &pv)
	if pv.Standing == nil || pv.Standing.Status != "ALLOWED" {
		t.Errorf("a budget does not block the member: %+v", pv.Standing)
	}
	if r := f.use(famA, childA, 60); r.Decision != policy.Allowed {
		t.Fatalf("within the budget: %+v", r)
	}
	if r := f.use(famA, childA, 41); r.Decision != policy.BlockedAppLimit || r.Rule != "LIMIT:DATA:APP:com.youtube.app" {
		t.Fatalf("over the budget: %+v", r)
	}
	var req, ans DataRequestView
	f.call(http.MethodPost, "/families/100/data-requests", child, map[string]any{"kind": "APP", "appId": "com.youtube.app", "minutes": 30}, http.StatusCreated, &req)
	f.call(http.MethodPost, "/families/100/data-requests/"+itoa(req.ID)+"/approve", owner, map[string]any{}, http.StatusOK, &ans)
	if ans.Status != "APPROVED" || ans.Grant != "APP" || ans.Until != "202602102130" {
		t.Fatalf("approve: %+v", ans)
	}
	if r := f.use(famA, childA, 41); r.Decision != policy.Allowed {
		t.Errorf("during the 30 minutes: %+v", r)
	}
	// A category's budget: its apps' exceptions lift it.
	f.call(http.MethodPatch, "/families/100/members/1002/policies", owner,
		map[string]any{"set": map[string]string{"LIMIT:DATA:CATEGORY:GAME": "100"}}, http.StatusOK, nil)
	f.call(http.MethodPost, "/families/100/members/1002/exceptions", owner, map[string]any{"kind": "APP", "appId": "com.roblox.client", "minutes": 10}, http.StatusOK, nil)
	f.problem(http.MethodPost, "/families/100/members/1002/exceptions", owner, map[string]any{"kind": "APP", "appId": "com.kakao.talk", "minutes": 10},
		http.StatusConflict, "")
}
