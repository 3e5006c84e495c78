package notify

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
)

func TestText(t *testing.T) {
	blocked := func(reason, decision string) envelope.CustomerBlocked {
		return envelope.CustomerBlocked{FamilyID: 1, CustomerID: 2, BlockReason: reason, BlockedAt: t0, Decision: decision}
	}
	for _, c := range []struct {
		p      envelope.Notification
		ko, en string
	}{
		{envelope.ThresholdAlert{FamilyID: 1, ThresholdPercent: 10, Message: "m"},
			"가족 데이터가 10% 미만입니다! 데이터를 충전해주세요.", "Less than 10% of the family data is left! Please top up."},
		{blocked("LIMIT:DATA:DAILY", ""), "일일 데이터 한도 초과로 차단되었습니다.", "Blocked: the daily data limit was reached."},
		{blocked("LIMIT:DATA:MONTHLY", "BLOCKED_LIMIT_MONTHLY"), "데이터 한도 초과로 차단되었습니다.", "Blocked: the monthly data limit was reached."},
		{blocked("BLOCK:TIME:START", ""), "차단 시간대라 데이터 사용이 차단되었습니다.", "Data is blocked during this time window."},
		{blocked("BLOCK:TIME:night", "BLOCKED_TIME"), "차단 시간대라 데이터 사용이 차단되었습니다.", "Data is blocked during this time window."},
		{blocked("BLOCK:ACCESS", "BLOCKED_ACCESS"), "보호자가 데이터 사용을 차단했습니다.", "Data use was blocked by a parent."},
		{blocked("BLOCK:APP:com.youtube.app", "BLOCKED_APP"), "유튜브 앱 사용이 차단되었습니다.", "YouTube is blocked."},
		{blocked("BLOCK:APP:com.example.unknown", "BLOCKED_APP"), "차단된 앱입니다.", "This app is blocked."},
		{blocked("X", "BLOCKED_APP"), "차단된 앱입니다.", "This app is blocked."},
		{blocked("BLOCK:CATEGORY:GAME", "BLOCKED_APP"), "게임 앱 사용이 차단되었습니다.", "Game apps are blocked."},
		{blocked("LIMIT:DATA:APP:com.youtube.app", "BLOCKED_APP_LIMIT"), "유튜브 앱의 오늘 데이터를 다 썼습니다. 다른 앱은 계속 쓸 수 있습니다.",
			"YouTube's data for today is used up. Other apps still work."},
		{blocked("LIMIT:DATA:CATEGORY:GAME", "BLOCKED_APP_LIMIT"), "게임 앱의 오늘 데이터를 다 썼습니다. 다른 앱은 계속 쓸 수 있습니다.",
			"Today's data for Game apps is used up. Other apps still work."},
		{blocked("", "BLOCKED_APP_LIMIT"), "이 앱의 오늘 데이터를 다 썼습니다. 다른 앱은 계속 쓸 수 있습니다.",
			"This app's data for today is used up. Other apps still work."},
		{blocked("BLOCK:CATEGORY:NEWCAT", "BLOCKED_APP"), "이 분류의 앱 사용이 차단되었습니다.", "Apps of this category are blocked."},
		{blocked("POOL", "BLOCKED_FAMILY_QUOTA"), "가족 데이터를 모두 사용하여 차단되었습니다. 보호자가 충전하면 다시 쓸 수 있습니다.", "Blocked: the family data is used up until a parent tops up."},
		{blocked("POOL:UNPROVISIONED", ""), "가족 데이터를 모두 사용하여 차단되었습니다. 보호자가 충전하면 다시 쓸 수 있습니다.", "Blocked: the family data is used up until a parent tops up."},
		{blocked("MEMBERSHIP", "BLOCKED_NOT_MEMBER"), "가족 요금제 구성원이 아니어서 차단되었습니다.", "Blocked: not a member of this family plan."},
		{blocked("SOMETHING:NEW", ""), "데이터 사용이 차단되었습니다.", "Data use was blocked."},
		{envelope.QuotaUpdated{FamilyID: 1, CustomerID: 2, FamilyRemainingBytes: 53681848320, FamilyUsedPercent: 50.5},
			"가족 데이터가 50.0 GB 남았습니다 (50.5% 사용).", "50.0 GB of family data left (50.5% used)."},
		{nil, "", ""},
	} {
		_, ko := Text(c.p, Korean)
		_, en := Text(c.p, English)
		_, def := Text(c.p, "fr")
		if ko != c.ko || en != c.en || def != c.ko {
			t.Errorf("%+v:\n ko %q\n en %q\n default %q", c.p, ko, en, def)
		}
	}
	if ti, _ := Text(nil, English); ti != "Notification" {
		t.Errorf("title of nothing: %q", ti)
	}
}

// A block and a request for more data name their member when the name is
// known (#24: a block alert reaches the whole family), by id when not.
func TestTextFor(t *testing.T) {
	blocked := envelope.CustomerBlocked{FamilyID: 1, CustomerID: 1002, BlockReason: "LIMIT:DATA:DAILY", BlockedAt: t0}
	asked := envelope.DataRequested{FamilyID: 1, CustomerID: 1002, AmountBytes: 100 << 20, Message: "숙제"}
	type text struct{ Title, Body string }
	var got []text
	for _, c := range []struct {
		p    envelope.Notification
		lang Lang
		name string
	}{{blocked, Korean, "민지"}, {blocked, English, "Minji"}, {blocked, Korean, ""}, {asked, Korean, "민지"}, {asked, English, "Minji"}, {asked, Korean, ""}} {
		ti, b := TextFor(c.p, c.lang, c.name)
		got = append(got, text{ti, b})
	}
	want := []text{
		{"민지님 데이터 차단", "일일 데이터 한도 초과로 차단되었습니다."},
		{"Data blocked for Minji", "Blocked: the daily data limit was reached."},
		{"데이터 차단", "일일 데이터 한도 초과로 차단되었습니다."},
		{"데이터 추가 요청", "민지님이 데이터 100.0 MB 추가를 요청했습니다. \"숙제\""},
		{"Data request", "Minji asks for 100.0 MB more data. \"숙제\""},
		{"데이터 추가 요청", "구성원 1002님이 데이터 100.0 MB 추가를 요청했습니다. \"숙제\""},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// Apps are named as the operator's catalog names them (#38: the inbox said
// "com.youtube.app 앱 사용이 차단되었습니다"), else by the default labels,
// else as "앱": never by a package id.
func TestTextWithApps(t *testing.T) {
	apps := map[string]policy.AppLabel{"com.youtube.app": {Name: "유튜브 키즈", NameEn: "YouTube Kids"}, "kr.new.app": {Name: "새 앱"}}
	blocked := func(app string) envelope.CustomerBlocked {
		return envelope.CustomerBlocked{FamilyID: 1, CustomerID: 2, BlockReason: "BLOCK:APP:" + app, BlockedAt: t0, Decision: "BLOCKED_APP"}
	}
	asked := func(app string) envelope.DataRequested {
		return envelope.DataRequested{FamilyID: 1, CustomerID: 2, RequestID: 1, Kind: envelope.KindApp, AppID: app, Minutes: 30, RequestedAt: t0}
	}
	answered := envelope.DataRequestAnswered{FamilyID: 1, CustomerID: 2, RequestID: 1, Status: envelope.AnswerApproved, Kind: envelope.KindApp,
		AppID: "kr.new.app", Minutes: 30, Until: "202611262230", AnsweredAt: t0}
	for _, c := range []struct {
		p      envelope.Notification
		lang   Lang
		labels Labels
		body   string
	}{
		{blocked("com.youtube.app"), Korean, Labels{Apps: apps}, "유튜브 키즈 앱 사용이 차단되었습니다."},
		{blocked("com.youtube.app"), English, Labels{Apps: apps}, "YouTube Kids is blocked."},
		{blocked("kr.new.app"), English, Labels{Apps: apps}, "새 앱 is blocked."},
		{blocked("com.netflix.mediaclient"), Korean, Labels{Apps: apps}, "넷플릭스 앱 사용이 차단되었습니다."},
		{asked("kr.new.app"), Korean, Labels{Member: "민지", Apps: apps}, "민지님이 새 앱을 30분 더 쓰게 해 달라고 요청했습니다."},
		{asked("kr.unknown.app"), Korean, Labels{Member: "민지"}, "민지님이 앱을 30분 더 쓰게 해 달라고 요청했습니다."},
		{asked("kr.unknown.app"), English, Labels{Member: "Minji"}, "Minji asks for 30 more minutes of an app."},
		{answered, Korean, Labels{Apps: apps}, "승인되었습니다: 새 앱 30분 더, 22:30까지 쓸 수 있습니다."},
	} {
		if _, body := TextWith(c.p, c.lang, c.labels); body != c.body {
			t.Errorf("%T %s: %q, want %q", c.p, c.lang, body, c.body)
		}
	}
}

func TestHumanBytes(t *testing.T) {
	got := []string{humanBytes(0), humanBytes(1023), humanBytes(2 << 20), humanBytes(1536), humanBytes(1 << 62)}
	if diff := cmp.Diff([]string{"0 B", "1023 B", "2.0 MB", "1.5 KB", "4096.0 PB"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestFromEventAndLocalized(t *testing.T) {
	kst := time.FixedZone("KST", 9*3600)
	// 2026-02-28 20:00 UTC is March 1st in Seoul: the period follows loc.
	at := time.Date(2026, 2, 28, 20, 0, 0, 0, time.UTC)
	n, err := FromEvent(envelope.New[envelope.Notification]("ntf_1", at, envelope.ThresholdAlert{FamilyID: 7, ThresholdPercent: 30, Message: "m"}), English, kst)
	if err != nil {
		t.Fatal(err)
	}
	want := Notification{EventID: "ntf_1", FamilyID: 7, Kind: envelope.SubThresholdAlert, Title: "Family data running low",
		Body: "Less than 30% of the family data is left! Please top up.", Payload: []byte(`{"familyId":7,"thresholdPercent":30,"message":"m"}`),
		CreatedAt: at, DedupeKey: "threshold:7:30:2026-03"}
	if diff := cmp.Diff(want, n); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	ko, err := n.Localized(Korean)
	if err != nil || ko.Body != "가족 데이터가 30% 미만입니다! 데이터를 충전해주세요." {
		t.Errorf("Localized: %q %v", ko.Body, err)
	}
	q, err := FromEvent(envelope.New[envelope.Notification]("ntf_2", at, envelope.QuotaUpdated{FamilyID: 7, CustomerID: 3, FamilyRemainingBytes: 1}), Korean, nil)
	if err != nil || q.MemberID != 3 || q.DedupeKey != "ntf_2" {
		t.Errorf("quota: %+v %v", q, err)
	}
	if l, err := q.Localized(English); err != nil || l.Title != "Family data updated" {
		t.Errorf("quota Localized: %+v %v", l, err)
	}
	if _, err := FromEvent(envelope.Envelope[envelope.Notification]{EventID: "x"}, Korean, nil); err == nil {
		t.Error("no payload accepted")
	}
	if _, err := (Notification{Kind: "OTHER"}).Localized(Korean); err == nil {
		t.Error("unknown kind localized")
	}
	if _, err := (Notification{Kind: envelope.SubCustomerBlocked, Payload: []byte("[")}).Localized(Korean); err == nil {
		t.Error("bad payload localized")
	}
}
