package notify

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
)

// "Ask for more": a DATA_REQUESTED is for the family's owners only (not for
// the member who asked, nor the others); a DATA_REQUEST_ANSWERED for the
// member who asked (and the owners) — live on the hub and in the inbox.
func TestAskForMoreAudience(t *testing.T) { askForMoreAudience(t, newInbox(t, openSQLite(t))) }

func askForMoreAudience(t *testing.T, in *SQLInbox) {
	ctx := context.Background()
	at := t0
	mk := func(id string, p envelope.Notification) Notification {
		t.Helper()
		n, err := FromEvent(envelope.New(id, at, p), Korean, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	asked := mk("ntf_ask", envelope.DataRequested{FamilyID: 100, RequestID: 7, CustomerID: 3, AmountBytes: 1 << 30,
		Message: "숙제", RequestedAt: at})
	answered := mk("ntf_ans", envelope.DataRequestAnswered{FamilyID: 100, RequestID: 7, CustomerID: 3,
		Status: envelope.AnswerApproved, Grant: envelope.GrantDay, AmountBytes: 512 << 20, AnsweredBy: 1, AnsweredAt: at})
	if asked.MemberID != 3 || answered.MemberID != 3 || asked.Kind != envelope.SubDataRequested {
		t.Fatalf("FromEvent: %+v %+v", asked, answered)
	}

	hub, err := NewHub()
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close(ctx)
	viewers := map[string]Filter{
		"owner": {MemberID: 1, Role: RoleOwner}, "admin": {Role: RoleAdmin},
		"asker": {MemberID: 3, Role: RoleMember}, "sibling": {MemberID: 4, Role: RoleMember},
	}
	want := map[string][]string{
		"owner": {"ntf_ask", "ntf_ans"}, "admin": {"ntf_ask", "ntf_ans"},
		"asker": {"ntf_ans"}, "sibling": nil,
	}
	subs := map[string]*Subscription{}
	for name, f := range viewers {
		if subs[name], err = hub.Subscribe(100, f); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []Notification{asked, answered} {
		stored, _, err := in.Add(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		hub.Publish(stored)
	}
	for name, f := range viewers {
		var live, inbox []string
		for _, m := range drainSub(subs[name]) {
			live = append(live, m.Data.EventID)
		}
		rows, err := in.List(ctx, Query{FamilyID: 100, Viewer: f})
		if err != nil {
			t.Fatal(err)
		}
		for i := len(rows) - 1; i >= 0; i-- { // oldest first
			inbox = append(inbox, rows[i].EventID)
		}
		if diff := cmp.Diff(want[name], live); diff != "" {
			t.Errorf("%s live (-want +got):\n%s", name, diff)
		}
		if diff := cmp.Diff(want[name], inbox); diff != "" {
			t.Errorf("%s inbox (-want +got):\n%s", name, diff)
		}
	}
	rows, _ := in.List(ctx, Query{FamilyID: 100, Viewer: viewers["owner"]})
	var askID int64
	for _, r := range rows {
		if r.EventID == "ntf_ask" {
			askID = r.ID
		}
	}
	if err := in.MarkRead(ctx, 100, viewers["asker"], askID, at); !errors.Is(err, ErrNotFound) {
		t.Errorf("the asker marked the owners' request read: %v", err)
	}
	if err := in.MarkRead(ctx, 100, viewers["owner"], askID, at); err != nil {
		t.Errorf("owner mark read: %v", err)
	}
}

func TestAskForMoreTexts(t *testing.T) {
	req := envelope.DataRequested{FamilyID: 1, RequestID: 2, CustomerID: 12346, AmountBytes: 1 << 30, Message: "숙제해야 해요", RequestedAt: t0}
	ans := func(status, grant, reason string) envelope.DataRequestAnswered {
		return envelope.DataRequestAnswered{FamilyID: 1, RequestID: 2, CustomerID: 12346, Status: status, Grant: grant,
			AmountBytes: 512 << 20, Reason: reason, AnsweredBy: 1, AnsweredAt: t0}
	}
	for _, c := range []struct {
		p                        envelope.Notification
		koTitle, ko, enTitle, en string
	}{
		{req, "데이터 추가 요청", `구성원 12346님이 데이터 1.0 GB 추가를 요청했습니다. "숙제해야 해요"`,
			"Data request", `Member 12346 asks for 1.0 GB more data. "숙제해야 해요"`},
		{ans(envelope.AnswerApproved, envelope.GrantDay, ""), "데이터 요청 승인", "승인되었습니다: 오늘 데이터 512.0 MB가 추가되었습니다.",
			"Data request approved", "Approved: 512.0 MB more data for today."},
		{ans(envelope.AnswerApproved, envelope.GrantMonth, ""), "데이터 요청 승인", "승인되었습니다: 이번 달 데이터 512.0 MB가 추가되었습니다.",
			"Data request approved", "Approved: 512.0 MB more data for this month."},
		{ans(envelope.AnswerApproved, envelope.GrantTopUp, "아껴 써"), "데이터 요청 승인", `승인되었습니다: 가족 데이터에 512.0 MB가 충전되었습니다. "아껴 써"`,
			"Data request approved", `Approved: 512.0 MB was added to the family data. "아껴 써"`},
		{ans(envelope.AnswerDeclined, "", "내일 다시"), "데이터 요청 거절", `데이터 512.0 MB 추가 요청이 거절되었습니다. "내일 다시"`,
			"Data request declined", `Your request for 512.0 MB more data was declined. "내일 다시"`},
		// "30분 더": time in a downtime, time on an app.
		{envelope.DataRequested{FamilyID: 1, RequestID: 3, CustomerID: 12346, Kind: envelope.KindTime, Minutes: 30, Message: "숙제 마무리", RequestedAt: t0},
			"시간 연장 요청", `구성원 12346님이 쉬는 시간에 30분 더 쓰게 해 달라고 요청했습니다. "숙제 마무리"`,
			"Time request", `Member 12346 asks for 30 more minutes during downtime. "숙제 마무리"`},
		{envelope.DataRequested{FamilyID: 1, RequestID: 4, CustomerID: 12346, Kind: envelope.KindApp, AppID: "com.youtube.app", Minutes: 15, RequestedAt: t0},
			"시간 연장 요청", "구성원 12346님이 유튜브를 15분 더 쓰게 해 달라고 요청했습니다.",
			"Time request", "Member 12346 asks for 15 more minutes of YouTube."},
		{envelope.DataRequestAnswered{FamilyID: 1, RequestID: 3, CustomerID: 12346, Status: envelope.AnswerApproved, Grant: envelope.GrantTime,
			Kind: envelope.KindTime, Minutes: 30, Until: "202611262241", AnsweredBy: 1, AnsweredAt: t0},
			"시간 연장 요청 승인", "승인되었습니다: 30분 더, 22:41까지 쓸 수 있습니다.", "Time request approved", "Approved: 30 more minutes, until 22:41."},
		{envelope.DataRequestAnswered{FamilyID: 1, RequestID: 4, CustomerID: 12346, Status: envelope.AnswerDeclined,
			Kind: envelope.KindApp, AppID: "com.youtube.app", Minutes: 15, Reason: "내일", AnsweredBy: 1, AnsweredAt: t0},
			"시간 연장 요청 거절", `유튜브 15분 더 요청이 거절되었습니다. "내일"`, "Time request declined", `Your request for 15 more minutes of YouTube was declined. "내일"`},
	} {
		kt, kb := Text(c.p, Korean)
		et, eb := Text(c.p, English)
		if diff := cmp.Diff([]string{c.koTitle, c.ko, c.enTitle, c.en}, []string{kt, kb, et, eb}); diff != "" {
			t.Errorf("%+v (-want +got):\n%s", c.p, diff)
		}
		n, err := FromEvent(envelope.New("ntf_x", t0, c.p), Korean, nil)
		if err != nil {
			t.Fatal(err)
		}
		if l, err := n.Localized(English); err != nil || l.Body != c.en {
			t.Errorf("Localized: %q %v", l.Body, err)
		}
	}
}

func TestObjectParticle(t *testing.T) {
	for word, want := range map[string]string{"유튜브": "를", "멜론": "을", "로블록스": "를", "틱톡": "을", "X (트위터)": "을(를)", "LINE": "을(를)", "": "을(를)"} {
		if got := objectParticle(word); got != want {
			t.Errorf("objectParticle(%q) = %q, want %q", word, got, want)
		}
	}
}
