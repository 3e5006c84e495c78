package notify

import (
	"testing"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv/readable"
)

// TestEveryKindReadsAsWords walks every notification kind's Korean texts,
// for every reason, request kind and answer, with apps the catalog knows
// and does not know, with and without the member's name, and every gift
// (receiver and giver, whoever made it): none shows a
// package id, a constraint key, a signed count, an ISO time or an English
// sentence (#38).
func TestEveryKindReadsAsWords(t *testing.T) {
	var texts []string
	add := func(title, body string) { texts = append(texts, title, body) }
	labels := []Labels{{}, {Member: "민지"}}
	var payloads []envelope.Notification
	payloads = append(payloads, envelope.ThresholdAlert{FamilyID: 1, ThresholdPercent: 10},
		envelope.QuotaUpdated{FamilyID: 1, CustomerID: 2, FamilyRemainingBytes: 5 << 20, FamilyUsedPercent: 90})
	for _, c := range []struct{ reason, decision string }{{"LIMIT:DATA:DAILY", ""}, {"LIMIT:DATA:MONTHLY", ""}, {"BLOCK:TIME:밤", "BLOCKED_TIME"},
		{"BLOCK:ACCESS", ""}, {"BLOCK:APP:com.youtube.app", "BLOCKED_APP"}, {"BLOCK:APP:com.unknown.app", "BLOCKED_APP"},
		{"BLOCK:CATEGORY:GAME", "BLOCKED_APP"}, {"BLOCK:CATEGORY:NEW", "BLOCKED_APP"}, {"POOL", ""}, {"MEMBERSHIP", ""}, {"SOMETHING:NEW", ""}} {
		payloads = append(payloads, envelope.CustomerBlocked{FamilyID: 1, CustomerID: 1002, BlockReason: c.reason, Decision: c.decision})
	}
	for _, app := range []string{"com.youtube.app", "com.unknown.app"} {
		payloads = append(payloads,
			envelope.DataRequested{FamilyID: 1, CustomerID: 1002, RequestID: 1, AmountBytes: 100 << 20, Message: "숙제"},
			envelope.DataRequested{FamilyID: 1, CustomerID: 1002, RequestID: 1, Kind: envelope.KindTime, Minutes: 30},
			envelope.DataRequested{FamilyID: 1, CustomerID: 1002, RequestID: 1, Kind: envelope.KindApp, AppID: app, Minutes: 30})
		for _, status := range []string{envelope.AnswerApproved, envelope.AnswerDeclined} {
			for _, grant := range []string{envelope.GrantDay, envelope.GrantMonth, envelope.GrantTopUp} {
				payloads = append(payloads, envelope.DataRequestAnswered{FamilyID: 1, CustomerID: 1002, RequestID: 1, Status: status,
					Grant: grant, AmountBytes: 100 << 20, Reason: "내일 다시"})
			}
			for _, kind := range []string{envelope.KindTime, envelope.KindApp} {
				payloads = append(payloads, envelope.DataRequestAnswered{FamilyID: 1, CustomerID: 1002, RequestID: 1, Status: status,
					Kind: kind, AppID: app, Minutes: 30, Until: "202611262230"})
			}
		}
	}
	// A gift, told to the receiver and to the giver, made by the giver, by
	// an owner of neither side or by the back office, with and without the
	// members' names.
	for _, by := range []int64{1001, 1000, 0} {
		for _, named := range []bool{true, false} {
			for _, told := range []int64{1002, 1001} {
				g := envelope.DataGifted{FamilyID: 1, GiftID: 1, CustomerID: told, FromCustomerID: 1001, ToCustomerID: 1002,
					AmountBytes: 300 << 20, Month: "202611", GivenBy: by}
				if named {
					g.FromName, g.ToName, g.ByName = "할머니", "민지", "아빠"
				}
				payloads = append(payloads, g)
			}
		}
	}
	// Every kind of notification is walked.
	kinds := map[envelope.SubType]bool{}
	for _, p := range payloads {
		kinds[p.SubType()] = true
		for _, l := range labels {
			add(TextWith(p, Korean, l))
		}
	}
	for _, k := range []envelope.SubType{envelope.SubQuotaUpdated, envelope.SubCustomerBlocked, envelope.SubThresholdAlert,
		envelope.SubDataRequested, envelope.SubDataRequestAnswered, envelope.SubDataGifted} {
		if !kinds[k] {
			t.Errorf("no %s text walked", k)
		}
	}
	texts = append(texts, MemberThresholdText(10, Korean))
	for _, k := range []string{"POLICY", "PLAN", "THRESHOLDS", "TOPUP", "GIFT", "MEMBER", "REMOVED", "ROLE", "PASSWORD", "REQUEST", "NEW"} {
		n, err := FamilyChanged(1, FamilyChange{Change: k, Members: []int64{1002}}, time.Now(), Korean)
		if err != nil {
			t.Fatal(err)
		}
		add(n.Title, n.Body)
	}
	week := WeeklySummary{FamilyID: 1, Week: "2026-W47", From: "2026-11-16", To: "2026-11-22", UsedBytes: 1 << 30, Blocked: 3,
		Members: []WeeklySummaryMember{{CustomerID: 1002, Name: "민지", UsedBytes: 800 << 20, Blocked: 3}, {CustomerID: 1000, Name: "아빠"}}}
	for _, made := range []int{0, 4} {
		week.Requests.Made = made
		n, err := WeeklySummaryNotification(week, time.Now(), Korean)
		if err != nil {
			t.Fatal(err)
		}
		add(n.Title, n.Body)
	}
	for _, s := range texts {
		if s == "" {
			continue
		}
		for _, p := range readable.Problems(s) {
			t.Errorf("%q: %s", s, p)
		}
	}
	t.Logf("%d texts read", len(texts))
}
