package envelope_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
)

var update = flag.Bool("update", false, "rewrite testdata/*.canonical.json from the current encoder")

// The goldens in testdata/*.json are the seed's JSON examples (the events of
// doc/wire-format.md), byte for byte, except that POLICY_UPDATED gained
// "version" and "constraints" (DPCS additions, doc/wire-format.md) and the
// three notification examples, which the seed shows as fragments
// ({"subType": …, "payload": …}), were completed with eventId, eventType and
// timestamp.
// data_usage_no_subtype.json is data_usage.json without the "subType": null
// line, as a Java encoder with NON_NULL writes it (doc/wire-format.md,
// "Reading rules"). testdata/*.canonical.json hold this package's exact
// encoding of each; regenerate them with go test -run Golden -update.
// usage_persist_result.json is usage_persist.json with the optional members
// that carry the rest of the engine's result (totalBytes … crossed), a DPCS
// addition for rebuilding Redis from the database; usage_persist_grant.json
// is a grant step's record (the member "grant", doc/wire-format.md);
// usage_persist_notifies.json is a decision's one record standing for its
// CUSTOMER_BLOCKED (the member "notifies", doc/wire-format.md, "One record
// per decision").
// usage_persist_grant_charged.json is a usage event's record of traffic a
// grant charged (grantChargedBytes, doc/wire-format.md "Charged once").
// notification_data_requested.json and notification_data_request_answered.json
// are DPCS's own "ask for more" notifications (no seed example), and
// notification_data_gifted.json its gift notification (the receiver's).

// goldenFiles returns the seed examples (not the canonical encodings).
func goldenFiles(tb testing.TB) []string {
	tb.Helper()
	all, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, f := range all {
		if !strings.HasSuffix(f, ".canonical.json") {
			out = append(out, f)
		}
	}
	if len(out) != 16 {
		tb.Fatalf("want 16 golden files, found %d: %v", len(out), out)
	}
	return out
}

func readFile(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func ptr[T any](v T) *T { return &v }

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// dataUsageEvent is the seed's usage event, decoded.
var dataUsageEvent = envelope.Event{
	EventID: "evt_550e8400-e29b-41d4-a716-446655440000", EventType: envelope.TypeDataUsage,
	Timestamp: at("2026-02-06T14:30:00Z"),
	Payload: envelope.UsagePayload{
		FamilyID: 100, CustomerID: 12345, AppID: "com.youtube.app", BytesUsed: 5242880,
		Metadata: map[string]any{"deviceId": "device_pixel_9", "networkType": "5G"},
	},
}

// wantGolden is what each golden must decode to, field by field.
var wantGolden = map[string]envelope.Event{
	"data_usage.json":            dataUsageEvent,
	"data_usage_no_subtype.json": dataUsageEvent,
	"policy_updated.json": {
		EventID: "pol_7a3d2e1f-...", EventType: envelope.TypePolicyUpdated,
		Timestamp: at("2026-02-06T14:35:00Z"),
		Payload: envelope.PolicyUpdatedPayload{
			FamilyID: 100, TargetCustomerID: 12345, PolicyKey: "LIMIT:DATA:DAILY",
			OldValue: ptr("2147483648"), NewValue: ptr("536870912"), ChangedBy: 99999,
			Version: 7, Constraints: map[string]string{"LIMIT:DATA:DAILY": "536870912"},
		},
	},
	"usage_persist.json": {
		EventID: "persist_8c9d0e1f-...", EventType: envelope.TypeUsagePersist,
		Timestamp: at("2026-02-06T14:30:01Z"),
		Payload: envelope.UsagePersistPayload{
			OriginEventID: "evt_550e8400-...", FamilyID: 100, CustomerID: 12345,
			BytesUsed: 5242880, AppID: "com.youtube.app", ProcessResult: "ALLOWED",
			RemainingAfter: 4823449, EventTime: at("2026-02-06T14:30:00Z"),
		},
	},
	"usage_persist_result.json": {
		EventID: "persist_8c9d0e1f-...", EventType: envelope.TypeUsagePersist,
		Timestamp: at("2026-02-06T14:30:01Z"),
		Payload: envelope.UsagePersistPayload{
			OriginEventID: "evt_550e8400-...", FamilyID: 100, CustomerID: 12345,
			BytesUsed: 5242880, AppID: "com.youtube.app", ProcessResult: "ALLOWED",
			RemainingAfter: 4823449, EventTime: at("2026-02-06T14:30:00Z"),
			TotalBytes: 10737418240, DailyUsedBytes: 10485760, MonthlyUsedBytes: 734003200,
			ThrottleKbps: 1024, Crossed: []envelope.Crossing{{Percent: 50, Arm: 1}, {Percent: 30, Arm: 2}},
		},
	},
	"usage_persist_grant.json": {
		EventID: "persist_1b4e28ba-...", EventType: envelope.TypeUsagePersist,
		Timestamp: at("2026-02-06T14:35:00Z"),
		Payload: envelope.UsagePersistPayload{
			OriginEventID: "chg_7f3a/32/2", FamilyID: 100, CustomerID: 12345,
			BytesUsed: 31457280, AppID: "com.youtube.app", ProcessResult: "ALLOWED",
			RemainingAfter: 4792649728, EventTime: at("2026-02-06T14:30:00Z"),
			TotalBytes: 10737418240, DailyUsedBytes: 41943040, MonthlyUsedBytes: 765460480,
			ThrottleKbps: 1024, Crossed: []envelope.Crossing{{Percent: 50, Arm: 1}},
			Grant: &envelope.GrantStep{GrantID: "chg_7f3a/32", PreviousStep: "chg_7f3a/32/1", GrantedBytes: 52428800,
				Open: true, ReservedBytes: 73400320, ValidUntil: at("2026-02-06T13:00:00Z"), Reclaim: []string{"chg_9c01/32"},
				Category: "VIDEO"},
		},
	},
	"usage_persist_notifies.json": {
		EventID: "persist_3f2b7c10-...", EventType: envelope.TypeUsagePersist,
		Timestamp: at("2026-02-06T14:40:00Z"),
		Payload: envelope.UsagePersistPayload{
			OriginEventID: "evt_6ba7b810-...", FamilyID: 100, CustomerID: 12346,
			BytesUsed: 1048576, AppID: "com.youtube.app", ProcessResult: "BLOCKED_APP",
			RemainingAfter: 4823449, EventTime: at("2026-02-06T14:40:00Z"), Rule: "BLOCK:APP:com.youtube.app",
			TotalBytes: 10737418240, DailyUsedBytes: 10485760, MonthlyUsedBytes: 734003200,
			Notifies: []string{"CUSTOMER_BLOCKED"},
		},
	},
	"usage_persist_grant_charged.json": {
		EventID: "persist_3f2504e0-...", EventType: envelope.TypeUsagePersist,
		Timestamp: at("2026-02-06T14:30:01Z"),
		Payload: envelope.UsagePersistPayload{
			OriginEventID: "evt_6ba7b810-...", FamilyID: 100, CustomerID: 12345,
			BytesUsed: 0, AppID: "com.youtube.app", ProcessResult: "ALLOWED",
			RemainingAfter: 4823449, EventTime: at("2026-02-06T14:30:00Z"),
			TotalBytes: 10737418240, GrantChargedBytes: 5242880,
		},
	},
	"notification_quota_updated.json": {
		EventID: "ntf_0f8fad5b-d9cb-469f-a165-70867728950e", EventType: envelope.TypeNotification,
		SubType: envelope.SubQuotaUpdated, Timestamp: at("2026-02-06T14:30:01Z"),
		Payload: envelope.QuotaUpdated{
			FamilyID: 100, CustomerID: 12345, FamilyRemainingBytes: 53681848320,
			FamilyUsedPercent: 50.5, CustomerUsedBytesToday: 10485760,
		},
	},
	"notification_customer_blocked.json": {
		EventID: "ntf_7c9e6679-7425-40de-944b-e07fc1f90ae7", EventType: envelope.TypeNotification,
		SubType: envelope.SubCustomerBlocked, Timestamp: at("2026-02-06T14:32:00Z"),
		Payload: envelope.CustomerBlocked{
			FamilyID: 100, CustomerID: 12346, BlockReason: "LIMIT:DATA:DAILY",
			BlockedAt: at("2026-02-06T14:32:00Z"),
		},
	},
	"notification_threshold_alert.json": {
		EventID: "ntf_9b2d6c1a-55c4-4f7e-8f0a-2d1e3c4b5a69", EventType: envelope.TypeNotification,
		SubType: envelope.SubThresholdAlert, Timestamp: at("2026-02-06T14:40:00Z"),
		Payload: envelope.ThresholdAlert{
			FamilyID: 100, ThresholdPercent: 10,
			Message: "가족 데이터가 10% 미만입니다! 데이터를 충전해주세요.",
		},
	},
	"notification_data_requested.json": {
		EventID: "ntf_3d5c8a0e-6f21-5b7e-9a4d-1c2b3a4d5e6f", EventType: envelope.TypeNotification,
		SubType: envelope.SubDataRequested, Timestamp: at("2026-02-06T21:05:00Z"),
		Payload: envelope.DataRequested{
			FamilyID: 100, RequestID: 7, CustomerID: 12346, AmountBytes: 1 << 30,
			Message: "숙제 자료를 받아야 해요", RequestedAt: at("2026-02-06T21:05:00Z"),
		},
	},
	"notification_data_request_answered.json": {
		EventID: "ntf_8e1f4b2c-0a93-5d6e-b7c8-9f0a1b2c3d4e", EventType: envelope.TypeNotification,
		SubType: envelope.SubDataRequestAnswered, Timestamp: at("2026-02-06T21:07:30Z"),
		Payload: envelope.DataRequestAnswered{
			FamilyID: 100, RequestID: 7, CustomerID: 12346, Status: envelope.AnswerApproved,
			Grant: envelope.GrantDay, AmountBytes: 512 << 20, AnsweredBy: 12345, AnsweredAt: at("2026-02-06T21:07:30Z"),
		},
	},
	"notification_time_requested.json": {
		EventID: "ntf_5a7b9c1d-2e3f-4a5b-8c6d-7e8f9a0b1c2d", EventType: envelope.TypeNotification,
		SubType: envelope.SubDataRequested, Timestamp: at("2026-02-06T13:10:00Z"),
		Payload: envelope.DataRequested{
			FamilyID: 100, RequestID: 8, CustomerID: 12346, Kind: envelope.KindTime, Minutes: 30,
			Message: "숙제 마무리", RequestedAt: at("2026-02-06T13:10:00Z"),
		},
	},
	"notification_data_gifted.json": {
		EventID: "ntf_4c6d8e0f-1a2b-5c3d-8e4f-5a6b7c8d9e0f", EventType: envelope.TypeNotification,
		SubType: envelope.SubDataGifted, Timestamp: at("2026-02-06T19:20:00Z"),
		Payload: envelope.DataGifted{
			FamilyID: 100, GiftID: 3, CustomerID: 12346, FromCustomerID: 12345, ToCustomerID: 12346,
			AmountBytes: 500 << 20, Month: "202602", GivenBy: 12345, FromName: "엄마", ToName: "민지",
			GivenAt: at("2026-02-06T19:20:00Z"),
		},
	},
	"notification_time_request_answered.json": {
		EventID: "ntf_6b8c0d2e-3f4a-5b6c-9d7e-8f9a0b1c2d3e", EventType: envelope.TypeNotification,
		SubType: envelope.SubDataRequestAnswered, Timestamp: at("2026-02-06T13:11:00Z"),
		Payload: envelope.DataRequestAnswered{
			FamilyID: 100, RequestID: 9, CustomerID: 12346, Status: envelope.AnswerApproved, Grant: envelope.GrantApp,
			Kind: envelope.KindApp, AppID: "com.youtube.app", Minutes: 15, Until: "202602062226",
			AnsweredBy: 12345, AnsweredAt: at("2026-02-06T13:11:00Z"),
		},
	},
}

// semantic decodes JSON into generic values (numbers kept as written) with
// "subType": null removed, so that null and absent compare equal.
func semantic(tb testing.TB, data []byte) any {
	tb.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		tb.Fatalf("not a JSON object: %v\n%s", err, data)
	}
	if s, ok := v["subType"]; ok && s == nil {
		delete(v, "subType")
	}
	return v
}

func TestGolden(t *testing.T) {
	for _, path := range goldenFiles(t) {
		name := filepath.Base(path)
		t.Run(strings.TrimSuffix(name, ".json"), func(t *testing.T) {
			in := readFile(t, path)
			ev, err := envelope.Decode(in)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			want, ok := wantGolden[name]
			if !ok {
				t.Fatalf("no expected event for %s", name)
			}
			if diff := cmp.Diff(want, ev); diff != "" {
				t.Errorf("Decode mismatch (-want +got):\n%s", diff)
			}

			out, err := envelope.Encode(ev)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if diff := cmp.Diff(semantic(t, in), semantic(t, out)); diff != "" {
				t.Errorf("re-encoding differs from the seed (-seed +encoded):\n%s", diff)
			}

			canonical := strings.TrimSuffix(path, ".json") + ".canonical.json"
			if *update {
				if err := os.WriteFile(canonical, append(out, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want2 := bytes.TrimSuffix(readFile(t, canonical), []byte("\n"))
			if diff := cmp.Diff(string(want2), string(out)); diff != "" {
				t.Errorf("canonical encoding changed (-%s +got); run go test -run Golden -update if intended:\n%s", canonical, diff)
			}
			again, err := envelope.Decode(want2)
			if err != nil {
				t.Fatalf("Decode(canonical): %v", err)
			}
			if diff := cmp.Diff(ev, again); diff != "" {
				t.Errorf("canonical decodes differently (-seed +canonical):\n%s", diff)
			}
		})
	}
}
