package store_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// outboxNotifications returns the subtypes of the notification-events rows
// in the outbox, oldest first.
func outboxNotifications(t *testing.T, e *env) []envelope.Notification {
	t.Helper()
	rows, err := e.DB.QueryContext(e.Ctx, `SELECT payload FROM outbox WHERE topic = ? ORDER BY id`, envelope.TopicNotificationEvents)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []envelope.Notification
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		ev, err := envelope.DecodeAs[envelope.Notification]([]byte(p))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev.Payload)
	}
	return out
}

func testDataRequests(t *testing.T, e *env) {
	e.Family(t, 1)
	const child = 12
	own := store.Actor{ID: 11, Role: policy.RoleOwner}
	if _, err := e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 1, CustomerID: child,
		Set: map[string]string{policy.KeyLimitMonthly: "100"}, By: own}); err != nil {
		t.Fatal(err)
	}
	ask := func(amount int64, msg, key string) (store.DataRequest, bool, error) {
		return e.S.CreateDataRequest(e.Ctx, store.NewDataRequest{FamilyID: 1, CustomerID: child, AmountBytes: amount,
			Message: msg, Key: key, MaxAmount: 1 << 30, MaxPending: 2})
	}
	r1, created, err := ask(50, " 숙제 ", "k1")
	if err != nil || !created || r1.Status != store.RequestPending || r1.Message != "숙제" || r1.CustomerID != child {
		t.Fatalf("create: %+v %v %v", r1, created, err)
	}
	again, created, err := ask(50, "숙제", "k1")
	if err != nil || created || again.ID != r1.ID {
		t.Errorf("same key again: %+v %v %v", again, created, err)
	}
	_, _, err = ask(60, "숙제", "k1")
	wantErr(t, "key reused for another request", err, store.ErrConflict)
	r2, _, err := ask(30, "", "")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = ask(10, "", "")
	wantErr(t, "third pending request", err, store.ErrConflict)
	_, _, err = ask(0, "", "")
	wantErr(t, "zero bytes", err, store.ErrInvalid)
	_, _, err = ask(2<<30, "", "")
	wantErr(t, "over the cap", err, store.ErrInvalid)
	_, _, err = e.S.CreateDataRequest(e.Ctx, store.NewDataRequest{FamilyID: 2, CustomerID: child, AmountBytes: 1, MaxAmount: 10, MaxPending: 1})
	wantErr(t, "another family", err, store.ErrNotFound)

	answer := func(id int64, approve bool, grant string, amount int64, reason string) (store.AnsweredDataRequest, error) {
		return e.S.AnswerDataRequest(e.Ctx, store.DataRequestAnswer{FamilyID: 1, RequestID: id, Approve: approve, Grant: grant,
			AmountBytes: amount, Reason: reason, By: own, OwnTopUpLimit: 1 << 30})
	}
	a1, err := answer(r1.ID, true, envelope.GrantDay, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if a1.Replayed || a1.Policy == nil || a1.TopUp != nil || a1.Request.Status != store.RequestApproved ||
		a1.Request.GrantedBytes != 50 || a1.Request.Period != "20260210" || a1.Request.AnsweredBy != 11 {
		t.Fatalf("approve DAY: %+v", a1)
	}
	if got := a1.Policy.Policy.Rules["LIMIT:DATA:EXTRA:20260210"]; got != "50" || a1.Policy.Policy.Version != 2 {
		t.Errorf("policy after DAY: v%d %v", a1.Policy.Policy.Version, a1.Policy.Policy.Rules)
	}
	replay, err := answer(r1.ID, true, envelope.GrantDay, 50, "")
	if err != nil || !replay.Replayed || replay.Policy != nil || replay.Request.ID != r1.ID {
		t.Errorf("identical retry: %+v %v", replay, err)
	}
	_, err = answer(r1.ID, false, "", 0, "")
	wantErr(t, "decline after approve", err, store.ErrConflict)
	_, err = answer(r1.ID, true, envelope.GrantMonth, 0, "")
	wantErr(t, "another grant after approve", err, store.ErrConflict)
	_, err = answer(r2.ID, true, "WEEK", 0, "")
	wantErr(t, "unknown grant", err, store.ErrInvalid)
	_, err = answer(r2.ID, false, envelope.GrantDay, 0, "")
	wantErr(t, "decline with a grant", err, store.ErrInvalid)
	_, err = answer(999, false, "", 0, "")
	wantErr(t, "unknown request", err, store.ErrNotFound)
	if _, err := e.S.AnswerDataRequest(e.Ctx, store.DataRequestAnswer{FamilyID: 2, RequestID: r2.ID, By: own}); err == nil {
		t.Error("answered another family's request")
	}

	a2, err := answer(r2.ID, true, envelope.GrantMonth, 20, "이번만")
	if err != nil || a2.Policy == nil || a2.Request.Period != "202602" {
		t.Fatalf("approve MONTH: %+v %v", a2, err)
	}
	// A second DAY grant adds to today's extra.
	r3, _, err := ask(5, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := answer(r3.ID, true, envelope.GrantDay, 0, ""); err != nil {
		t.Fatal(err)
	}
	p, err := e.S.GetPolicy(e.Ctx, 1, child)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{policy.KeyLimitMonthly: "100", "LIMIT:DATA:EXTRA:20260210": "55", "LIMIT:DATA:EXTRA:202602": "20"}
	if diff := cmp.Diff(want, p.Rules); diff != "" {
		t.Errorf("rules after grants (-want +got):\n%s", diff)
	}
	// An owner replacing the whole map keeps the extras it does not name.
	up, err := e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 1, CustomerID: child,
		Replace: map[string]string{policy.KeyLimitMonthly: "200"}, By: own})
	if err != nil {
		t.Fatal(err)
	}
	want[policy.KeyLimitMonthly] = "200"
	if diff := cmp.Diff(want, up.Policy.Rules); diff != "" {
		t.Errorf("replace dropped an extra (-want +got):\n%s", diff)
	}
	// The next day, yesterday's extra is dropped with the next write.
	e.Clock.Add(24 * time.Hour)
	up, err = e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 1, CustomerID: child,
		Set: map[string]string{policy.KeyLimitDaily: "40"}, By: own})
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]string{policy.KeyLimitMonthly: "200", policy.KeyLimitDaily: "40", "LIMIT:DATA:EXTRA:202602": "20"}
	if diff := cmp.Diff(want, up.Policy.Rules); diff != "" {
		t.Errorf("after a day (-want +got):\n%s", diff)
	}

	// TOPUP: within the owners' monthly top-up limit.
	r4, _, _ := ask(7, "", "")
	_, err = e.S.AnswerDataRequest(e.Ctx, store.DataRequestAnswer{FamilyID: 1, RequestID: r4.ID, Approve: true,
		Grant: envelope.GrantTopUp, By: own, OwnTopUpLimit: 5})
	wantErr(t, "top-up over the owners' limit", err, store.ErrInvalid)
	a4, err := answer(r4.ID, true, envelope.GrantTopUp, 0, "")
	if err != nil || a4.TopUp == nil || a4.TopUp.Bytes != 7 || a4.Policy != nil || a4.Request.Period != "202602" {
		t.Fatalf("approve TOPUP: %+v %v", a4, err)
	}

	// A decline, and a member without limits (a raise would do nothing).
	e.Family(t, 2)
	r5, _, err := e.S.CreateDataRequest(e.Ctx, store.NewDataRequest{FamilyID: 2, CustomerID: 22, AmountBytes: 9, MaxAmount: 10, MaxPending: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.S.AnswerDataRequest(e.Ctx, store.DataRequestAnswer{FamilyID: 2, RequestID: r5.ID, Approve: true, Grant: envelope.GrantDay, By: own})
	wantErr(t, "raise without a limit", err, store.ErrConflict)
	d5, err := e.S.AnswerDataRequest(e.Ctx, store.DataRequestAnswer{FamilyID: 2, RequestID: r5.ID, Reason: "내일", By: admin})
	if err != nil || d5.Request.Status != store.RequestDeclined || d5.Request.Reason != "내일" || d5.Request.GrantedBytes != 0 {
		t.Fatalf("decline: %+v %v", d5, err)
	}

	list, err := e.S.DataRequests(e.Ctx, store.DataRequestQuery{FamilyID: 1, Status: store.RequestApproved})
	if err != nil || len(list) != 4 || list[0].ID != r4.ID {
		t.Errorf("approved list: %d %v", len(list), err)
	}
	if l, err := e.S.DataRequests(e.Ctx, store.DataRequestQuery{FamilyID: 1, CustomerID: 11}); err != nil || len(l) != 0 {
		t.Errorf("owner's own: %v %v", l, err)
	}
	if _, err := e.S.DataRequests(e.Ctx, store.DataRequestQuery{FamilyID: 1, Status: "LOST"}); err == nil {
		t.Error("bad status listed")
	}

	var kinds []string
	for _, n := range outboxNotifications(t, e) {
		s := string(n.SubType())
		if a, ok := n.(envelope.DataRequestAnswered); ok {
			s += ":" + a.Status + ":" + a.Grant
		}
		kinds = append(kinds, s)
	}
	wantKinds := []string{"DATA_REQUESTED", "DATA_REQUESTED", "DATA_REQUEST_ANSWERED:APPROVED:DAY", "DATA_REQUEST_ANSWERED:APPROVED:MONTH",
		"DATA_REQUESTED", "DATA_REQUEST_ANSWERED:APPROVED:DAY", "DATA_REQUESTED", "DATA_REQUEST_ANSWERED:APPROVED:TOPUP",
		"DATA_REQUESTED", "DATA_REQUEST_ANSWERED:DECLINED:"}
	if diff := cmp.Diff(wantKinds, kinds); diff != "" {
		t.Errorf("outbox notifications (-want +got):\n%s", diff)
	}
	var audits int
	if err := e.DB.QueryRowContext(e.Ctx, `SELECT COUNT(*) FROM audit_log WHERE action LIKE 'data-request.%'`).Scan(&audits); err != nil {
		t.Fatal(err)
	}
	if audits != 10 {
		t.Errorf("data-request audit rows: %d, want 10", audits)
	}
}
