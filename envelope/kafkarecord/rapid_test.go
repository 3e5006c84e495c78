package kafkarecord_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
)

// TestRoundTripProperty: whatever valid event New accepts, the record is
// keyed by its family in decimal, names its type in the headers, and Decode
// gives the event back.
func TestRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		fam := rapid.Int64Range(1, 1<<62).Draw(t, "familyId")
		var p envelope.Payload
		switch rapid.IntRange(0, 2).Draw(t, "kind") {
		case 0:
			p = envelope.UsagePayload{FamilyID: fam, CustomerID: rapid.Int64Range(1, 1<<40).Draw(t, "customerId"),
				AppID: rapid.StringMatching(`[a-z.]{1,20}`).Draw(t, "appId"), BytesUsed: rapid.Int64Range(0, 1<<50).Draw(t, "bytes")}
		case 1:
			p = envelope.QuotaUpdated{FamilyID: fam, CustomerID: rapid.Int64Range(1, 1<<40).Draw(t, "customerId"),
				FamilyRemainingBytes: rapid.Int64Range(0, 1<<50).Draw(t, "remaining")}
		default:
			p = envelope.CustomerBlocked{FamilyID: fam, CustomerID: rapid.Int64Range(1, 1<<40).Draw(t, "customerId"),
				BlockReason: "LIMIT:DATA:DAILY", BlockedAt: time.Unix(rapid.Int64Range(0, 1<<33).Draw(t, "blockedAt"), 0).UTC()}
		}
		ts := time.UnixMilli(rapid.Int64Range(0, 1<<41).Draw(t, "ts")).UTC()
		in := envelope.New(rapid.StringMatching(`evt_[a-z0-9]{1,12}`).Draw(t, "eventId"), ts, p)

		r, err := kafkarecord.New("t", in)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if got, want := string(r.Key), strconv.FormatInt(fam, 10); got != want {
			t.Fatalf("key %q, want %q", got, want)
		}
		headers := map[string]string{}
		for _, h := range r.Headers {
			headers[h.Key] = string(h.Value)
		}
		wantHeaders := map[string]string{kafkarecord.HeaderEventType: string(in.EventType)}
		if in.SubType != "" {
			wantHeaders[kafkarecord.HeaderSubType] = string(in.SubType)
		}
		if diff := cmp.Diff(wantHeaders, headers); diff != "" {
			t.Fatalf("headers (-want +got):\n%s", diff)
		}
		out, err := kafkarecord.Decode(r)
		if err != nil {
			t.Fatalf("Decode(New(x)): %v", err)
		}
		if diff := cmp.Diff(in, out); diff != "" {
			t.Fatalf("Decode(New(x)) (-want +got):\n%s", diff)
		}
	})
}
