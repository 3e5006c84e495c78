package notify

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/internal/testenv"
)

// persistRec is a decision's usage-persist record standing for notifies.
func persistRec(tb testing.TB, origin string, family, member int64, result, rule string, notifies ...string) *kgo.Record {
	tb.Helper()
	r, err := kafkarecord.New(envelope.TopicUsagePersist, envelope.New(envelope.DerivedID(envelope.PrefixPersist, origin, "persist"), t0,
		envelope.UsagePersistPayload{OriginEventID: origin, FamilyID: family, CustomerID: member, BytesUsed: 1 << 20,
			ProcessResult: result, Rule: rule, RemainingAfter: 2 << 20, TotalBytes: 10 << 20, DailyUsedBytes: 5 << 20,
			EventTime: t0, Notifies: notifies}))
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// A decision is one usage-persist record (doc/wire-format.md, "One record
// per decision"): the notifier derives the QUOTA_UPDATED and the
// CUSTOMER_BLOCKED it stands for, with the ids and payloads the judge's
// own notification records had — pushed live, stored — passes over a
// live-only one of a family no one watches unread, and derives nothing
// from a record that stands for none (an earlier release's, which came
// with records of its own). A notification record of an earlier release
// with the same id as a derived one (a decision judged again across an
// upgrade) is a duplicate.
func TestDecisionRecordStandsForItsNotifications(t *testing.T) {
	c := newFake(t)
	inbox := newInbox(t, openSQLite(t))
	hub, sub := newHubSub(t, 100, Filter{MemberID: 1, Role: RoleOwner})
	var mu sync.Mutex
	outcomes := map[string]int{}
	n, errc := startNotifier(t, c, inbox, hub, WithGuard(newGuard(t)), WithHooks(Hooks{OnNotify: func(i NotifyInfo) {
		mu.Lock()
		defer mu.Unlock()
		outcomes[fmt.Sprintf("%d %s %s", i.FamilyID, i.Kind, i.Outcome)]++
	}}))
	garbled := persistRec(t, "evt_5", 100, 1, "ALLOWED", "", "QUOTA_UPDATED")
	garbled.Value = []byte(`{"eventId":`)
	produce(t, testenv.Producer(t, c),
		persistRec(t, "evt_1", 100, 1, "ALLOWED", "", "QUOTA_UPDATED"),
		persistRec(t, "evt_2", 100, 2, "BLOCKED_FAMILY_QUOTA", "POOL", "CUSTOMER_BLOCKED"),
		persistRec(t, "evt_3", 200, 3, "ALLOWED", "", "QUOTA_UPDATED"),
		persistRec(t, "evt_4", 100, 1, "ALLOWED", ""),
		garbled,
	)
	want := map[string]int{
		"100 QUOTA_UPDATED delivered":    1,
		"100 CUSTOMER_BLOCKED delivered": 1,
		"200 QUOTA_UPDATED unwatched":    1,
	} // the garbled record of the watched family is read, and stands for nothing
	testenv.Eventually(t, "every record handled", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(outcomes) == len(want)
	})
	// The earlier release's own record of evt_2's block.
	produce(t, testenv.Producer(t, c), record(t, envelope.DerivedID(envelope.PrefixNotification, "evt_2", "customer-blocked"), t0,
		envelope.CustomerBlocked{FamilyID: 100, CustomerID: 2, BlockReason: "POOL", BlockedAt: t0, Decision: "BLOCKED_FAMILY_QUOTA"}))
	want["100 CUSTOMER_BLOCKED duplicate"] = 1
	testenv.Eventually(t, "the earlier release's record handled", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(outcomes) == len(want)
	})
	stopNotifier(t, n, errc)
	if diff := cmp.Diff(want, outcomes); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	var ids []string
	for _, m := range drainSub(sub) {
		ids = append(ids, m.Data.EventID)
	}
	wantIDs := []string{envelope.DerivedID(envelope.PrefixNotification, "evt_1", "quota-updated"),
		envelope.DerivedID(envelope.PrefixNotification, "evt_2", "customer-blocked")}
	if diff := cmp.Diff(wantIDs, ids); diff != "" {
		t.Errorf("pushed to family 100 (-want +got):\n%s", diff)
	}
	stored := rows(t, inbox, 100)
	if len(stored) != 1 || stored[0].Kind != envelope.SubCustomerBlocked || stored[0].MemberID != 2 ||
		stored[0].EventID != wantIDs[1] {
		t.Errorf("the inbox of family 100: %+v", stored)
	}
}
