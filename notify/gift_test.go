package notify

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/pushtest"
	"github.com/dabom/dpcs/internal/testenv"
)

// gift is a gift of 500 MB from 엄마 (1) to 민지 (3) that 엄마 made, told
// to customer.
func gift(customer int64) envelope.DataGifted {
	return envelope.DataGifted{FamilyID: 100, GiftID: 7, CustomerID: customer, FromCustomerID: 1, ToCustomerID: 3,
		AmountBytes: 500 << 20, Month: "202602", GivenBy: 1, FromName: "엄마", ToName: "민지", GivenAt: t0}
}

// The receiver is told who gave how much, by name and in MB or GB; the
// giver gets its confirmation; a gift an owner made of another member's
// data names who made it and whose data it was, never "my" allowance; the
// back office is named as such (#38).
func TestGiftTexts(t *testing.T) {
	byOwner := func(customer int64) envelope.DataGifted {
		p := gift(customer)
		p.FromCustomerID, p.FromName, p.ToCustomerID, p.ToName, p.GivenBy, p.ByName = 4, "할머니", 3, "민지", 1, "엄마"
		p.AmountBytes = 1 << 30
		return p
	}
	byOffice := func(customer int64) envelope.DataGifted {
		p := gift(customer)
		p.GivenBy = 0
		return p
	}
	nameless := func(customer int64) envelope.DataGifted {
		p := gift(customer)
		p.FromName, p.ToName = "", ""
		return p
	}
	for _, tc := range []struct {
		name        string
		p           envelope.DataGifted
		lang        Lang
		title, body string
	}{
		{"receiver", gift(3), Korean, "민지님에게 데이터 선물 도착",
			"엄마님이 데이터 500 MB를 선물했습니다. 이번 달에 그만큼 더 쓸 수 있습니다."},
		{"giver", gift(1), Korean, "엄마님의 데이터 선물 완료",
			"민지님에게 데이터 500 MB를 선물했습니다. 이번 달에 쓸 수 있는 데이터가 그만큼 줄었습니다."},
		{"receiver of an owner's gift", byOwner(3), Korean, "민지님에게 데이터 선물 도착",
			"엄마님이 할머니님의 데이터 1 GB를 선물했습니다. 이번 달에 그만큼 더 쓸 수 있습니다."},
		{"giver of an owner's gift", byOwner(4), Korean, "할머니님의 데이터 선물 완료",
			"엄마님이 할머니님의 데이터 1 GB를 민지님에게 선물했습니다. 할머니님이 이번 달에 쓸 수 있는 데이터가 그만큼 줄었습니다."},
		{"receiver of the back office's", byOffice(3), Korean, "민지님에게 데이터 선물 도착",
			"고객센터에서 엄마님의 데이터 500 MB를 옮겨 드렸습니다. 이번 달에 그만큼 더 쓸 수 있습니다."},
		{"giver of the back office's", byOffice(1), Korean, "엄마님의 데이터 선물 완료",
			"고객센터에서 엄마님의 데이터 500 MB를 민지님에게 옮겼습니다. 엄마님이 이번 달에 쓸 수 있는 데이터가 그만큼 줄었습니다."},
		{"without names", nameless(3), Korean, "구성원 3님에게 데이터 선물 도착",
			"구성원 1님이 데이터 500 MB를 선물했습니다. 이번 달에 그만큼 더 쓸 수 있습니다."},
		{"receiver in English", gift(3), English, "Data gift for 민지",
			"엄마 gave 민지 500 MB of data. 민지 can use that much more this month."},
		{"giver in English", byOwner(4), English, "Data gift from 할머니 sent",
			"엄마 gave 민지 1 GB of 할머니's data. 할머니 can use that much less this month."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			title, body := Text(tc.p, tc.lang)
			if title != tc.title || body != tc.body {
				t.Errorf("Text = %q, %q\nwant     %q, %q", title, body, tc.title, tc.body)
			}
		})
	}
}

// The longest names an event carries make titles the inbox stores
// (title VARCHAR(255), notify/migrations).
func TestGiftTitlesFitTheInbox(t *testing.T) {
	long := strings.Repeat("긴", envelope.MaxNameLen)
	for _, lang := range []Lang{Korean, English} {
		for _, told := range []int64{1, 3} {
			p := gift(told)
			p.FromName, p.ToName, p.ByName = long, long, long
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			if title, _ := Text(p, lang); utf8.RuneCountInString(title) > 255 {
				t.Errorf("%s, told %d: a title of %d characters", lang, told, utf8.RuneCountInString(title))
			}
		}
	}
}

// A gift's two notifications: the receiver sees its own, the giver its
// confirmation, owners both, another member neither — live and in the
// inbox; the texts come back from the stored payload in either language.
func TestGiftAudience(t *testing.T) {
	ctx := context.Background()
	in := newInbox(t, openSQLite(t))
	mk := func(id string, p envelope.DataGifted) Notification {
		t.Helper()
		n, err := FromEvent(envelope.New(id, t0, envelope.Notification(p)), Korean, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	received, given := mk("ntf_to", gift(3)), mk("ntf_from", gift(1))
	if received.MemberID != 3 || given.MemberID != 1 || received.Kind != envelope.SubDataGifted {
		t.Fatalf("FromEvent: %+v %+v", received, given)
	}
	hub, err := NewHub()
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close(ctx)
	viewers := map[string]Filter{
		"giver (an owner)": {MemberID: 1, Role: RoleOwner}, "other owner": {MemberID: 2, Role: RoleOwner},
		"receiver": {MemberID: 3, Role: RoleMember}, "sibling": {MemberID: 4, Role: RoleMember}, "admin": {Role: RoleAdmin},
	}
	want := map[string][]string{
		"giver (an owner)": {"ntf_to", "ntf_from"}, "other owner": {"ntf_to", "ntf_from"}, "admin": {"ntf_to", "ntf_from"},
		"receiver": {"ntf_to"}, "sibling": nil,
	}
	subs := map[string]*Subscription{}
	for name, f := range viewers {
		if subs[name], err = hub.Subscribe(100, f); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []Notification{received, given} {
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
			if rows[i].EventID == "ntf_to" {
				if rows[i].Body != "엄마님이 데이터 500 MB를 선물했습니다. 이번 달에 그만큼 더 쓸 수 있습니다." {
					t.Errorf("%s: stored body %q", name, rows[i].Body)
				}
				en, err := rows[i].Localized(English)
				if err != nil || en.Title != "Data gift for 민지" {
					t.Errorf("%s: Localized = %q, %v", name, en.Title, err)
				}
			}
		}
		if diff := cmp.Diff(want[name], live); diff != "" {
			t.Errorf("%s live (-want +got):\n%s", name, diff)
		}
		if diff := cmp.Diff(want[name], inbox); diff != "" {
			t.Errorf("%s inbox (-want +got):\n%s", name, diff)
		}
	}
}

// Through the notifier to the push service: each of a gift's two
// notifications reaches the browsers of the member it tells and nobody
// else's (owners are not pushed one gift twice), in Korean with names.
func TestGiftPushedToEachMember(t *testing.T) {
	keys := newVAPID(t)
	ps := pushtest.New(t, keys.Public)
	subs := &memSubs{roles: map[int64]Role{1: RoleOwner, 2: RoleOwner, 3: RoleMember, 4: RoleMember}}
	subs.subs = []PushSubscription{subscribe(ps, 1, "/giver"), subscribe(ps, 2, "/owner"), subscribe(ps, 3, "/receiver"),
		subscribe(ps, 4, "/sibling")}
	wp, err := NewWebPush(subs, keys, "mailto:ops@dpcs.example", WithPushHTTPClient(ps.Client()))
	if err != nil {
		t.Fatal(err)
	}
	c := newFake(t)
	hub, _ := newHubSub(t, 100, Filter{MemberID: 2, Role: RoleOwner})
	var mu sync.Mutex
	var sends []SendInfo
	in := newInbox(t, openSQLite(t))
	n, errc := startNotifier(t, c, in, hub, WithChannel("webpush", wp, DefaultWebPushKinds()...),
		WithHooks(Hooks{OnSend: func(i SendInfo) { mu.Lock(); sends = append(sends, i); mu.Unlock() }}))
	produce(t, testenv.Producer(t, c), record(t, "ntf_to", t0, gift(3)), record(t, "ntf_from", t0, gift(1)))
	testenv.Eventually(t, "2 push sends", 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(sends) == 2 })
	stopNotifier(t, n, errc)

	for _, s := range sends {
		if s.Err != nil {
			t.Errorf("send %s: %v", s.EventID, s.Err)
		}
	}
	got, bad := deliveries(t, ps)
	if len(bad) > 0 {
		t.Fatalf("push service refused: %q", bad)
	}
	slices.SortFunc(got, func(a, b pushDelivery) int { return strings.Compare(a.Path, b.Path) })
	msg := func(id string, member int64, title, body string) PushMessage {
		return PushMessage{Title: title, Body: body, Tag: id, URL: "/app/#inbox", Kind: envelope.SubDataGifted, EventID: id,
			FamilyID: 100, MemberID: member, Lang: Korean}
	}
	want := []pushDelivery{
		{Path: "/giver", TTL: "86400", Urgency: "normal", Msg: msg("ntf_from", 1, "엄마님의 데이터 선물 완료",
			"민지님에게 데이터 500 MB를 선물했습니다. 이번 달에 쓸 수 있는 데이터가 그만큼 줄었습니다.")},
		{Path: "/receiver", TTL: "86400", Urgency: "normal", Msg: msg("ntf_to", 3, "민지님에게 데이터 선물 도착",
			"엄마님이 데이터 500 MB를 선물했습니다. 이번 달에 그만큼 더 쓸 수 있습니다.")},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deliveries (-want +got):\n%s", diff)
	}
	if got := rows(t, in, 100); len(got) != 2 {
		t.Errorf("inbox rows: %d, want the gift's 2", len(got))
	}
}
