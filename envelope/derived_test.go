package envelope_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
)

// TestPersistNotifications derives the notifications of the golden record
// standing for a CUSTOMER_BLOCKED, and of a grant step standing for a
// QUOTA_UPDATED and a CUSTOMER_BLOCKED, exactly as the judge built them
// when it produced them as records of their own (ids from the origin
// event, the record's timestamp).
func TestPersistNotifications(t *testing.T) {
	e, err := envelope.DecodeAs[envelope.UsagePersistPayload](readFile(t, "testdata/usage_persist_notifies.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := envelope.PersistNotifications(e)
	if err != nil {
		t.Fatal(err)
	}
	want := []envelope.Envelope[envelope.Notification]{{
		EventID: envelope.DerivedID(envelope.PrefixNotification, "evt_6ba7b810-...", "customer-blocked"), EventType: envelope.TypeNotification,
		SubType: envelope.SubCustomerBlocked, Timestamp: at("2026-02-06T14:40:00Z"),
		Payload: envelope.CustomerBlocked{FamilyID: 100, CustomerID: 12346, BlockReason: "BLOCK:APP:com.youtube.app",
			BlockedAt: at("2026-02-06T14:40:00Z"), Decision: "BLOCKED_APP"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	step := envelope.New("persist_x", at("2026-02-06T15:00:00Z"), envelope.UsagePersistPayload{
		OriginEventID: "chg_1/32/3", FamilyID: 7, CustomerID: 70, BytesUsed: 300, ProcessResult: "BLOCKED_LIMIT_DAILY",
		RemainingAfter: 2500, EventTime: at("2026-02-06T14:59:00Z"), Rule: "LIMIT:DATA:DAILY", TotalBytes: 10000,
		DailyUsedBytes: 900, Notifies: []string{"QUOTA_UPDATED", "CUSTOMER_BLOCKED"}})
	got, err = envelope.PersistNotifications(step)
	if err != nil {
		t.Fatal(err)
	}
	want = []envelope.Envelope[envelope.Notification]{{
		EventID: envelope.DerivedID(envelope.PrefixNotification, "chg_1/32/3", "quota-updated"), EventType: envelope.TypeNotification,
		SubType: envelope.SubQuotaUpdated, Timestamp: at("2026-02-06T15:00:00Z"),
		Payload: envelope.QuotaUpdated{FamilyID: 7, CustomerID: 70, FamilyRemainingBytes: 2500, FamilyUsedPercent: 75,
			CustomerUsedBytesToday: 900},
	}, {
		EventID: envelope.DerivedID(envelope.PrefixNotification, "chg_1/32/3", "customer-blocked"), EventType: envelope.TypeNotification,
		SubType: envelope.SubCustomerBlocked, Timestamp: at("2026-02-06T15:00:00Z"),
		Payload: envelope.CustomerBlocked{FamilyID: 7, CustomerID: 70, BlockReason: "LIMIT:DATA:DAILY",
			BlockedAt: at("2026-02-06T15:00:00Z"), Decision: "BLOCKED_LIMIT_DAILY"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("grant step (-want +got):\n%s", diff)
	}
	for _, n := range got {
		if _, err := envelope.Encode(n); err != nil {
			t.Errorf("a derived %s does not encode: %v", n.SubType, err)
		}
	}

	// A record naming none derives none; a block without a rule, or a kind
	// a record cannot stand for, is refused, and so is a record naming one
	// twice.
	step.Payload.Notifies = nil
	if got, err := envelope.PersistNotifications(step); len(got) != 0 || err != nil {
		t.Errorf("no notifies = %v, %v", got, err)
	}
	step.Payload.Notifies, step.Payload.Rule = []string{"CUSTOMER_BLOCKED"}, ""
	var fe *envelope.FieldError
	if _, err := envelope.PersistNotifications(step); !errors.As(err, &fe) {
		t.Errorf("a block without a rule = %v", err)
	}
	step.Payload.Notifies, step.Payload.Rule = []string{"THRESHOLD_ALERT"}, "LIMIT:DATA:DAILY"
	if _, err := envelope.PersistNotifications(step); !errors.As(err, &fe) {
		t.Errorf("notifies THRESHOLD_ALERT = %v", err)
	}
	step.Payload.Notifies = []string{"QUOTA_UPDATED", "QUOTA_UPDATED"}
	if _, err := envelope.Encode(step); !errors.As(err, &fe) {
		t.Errorf("Encode of a record naming QUOTA_UPDATED twice = %v", err)
	}
}
