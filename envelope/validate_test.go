package envelope_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
)

// absent, as the new value of a member, deletes it.
const absent = ""

// mutate returns the golden file with the member at path ("payload.bytesUsed")
// replaced by the raw JSON value, or deleted when value is absent.
func mutate(tb testing.TB, golden, path, value string) []byte {
	tb.Helper()
	dec := json.NewDecoder(bytes.NewReader(readFile(tb, filepath.Join("testdata", golden))))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		tb.Fatal(err)
	}
	obj := doc
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := obj[p].(map[string]any)
		if !ok {
			tb.Fatalf("%s: %s is not an object", golden, p)
		}
		obj = next
	}
	last := parts[len(parts)-1]
	if value == absent {
		delete(obj, last)
	} else {
		obj[last] = json.RawMessage(value)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// fieldErrors flattens err (joined or not) into its FieldErrors, failing the
// test if any problem is not a *FieldError: every problem must name a field.
func fieldErrors(tb testing.TB, err error) []*envelope.FieldError {
	tb.Helper()
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*envelope.FieldError
		for _, e := range j.Unwrap() {
			out = append(out, fieldErrors(tb, e)...)
		}
		return out
	}
	var fe *envelope.FieldError
	if !errors.As(err, &fe) {
		tb.Fatalf("error %q (%T) names no field", err, err)
	}
	return []*envelope.FieldError{fe}
}

// checkErr asserts that err's first problem is field: msg… and that it wraps
// sentinel (or neither sentinel when nil).
func checkErr(t *testing.T, err error, field, msg string, sentinel error) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s: %s", field, msg)
	}
	fes := fieldErrors(t, err)
	var fe *envelope.FieldError
	if !errors.As(err, &fe) || fe != fes[0] {
		t.Fatalf("errors.As did not find the first problem of %q", err)
	}
	if fe.Field != field || !strings.HasPrefix(fe.Msg, msg) {
		t.Errorf("first problem = %q, want %s: %s…", fe, field, msg)
	}
	if !strings.HasPrefix(err.Error(), field+": "+msg) {
		t.Errorf("Error() = %q, want prefix %q", err, field+": "+msg)
	}
	for _, s := range []error{envelope.ErrMalformed, envelope.ErrUnknownType} {
		if want := s == sentinel; errors.Is(err, s) != want {
			t.Errorf("errors.Is(%q, %v) = %v, want %v", err, s, !want, want)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	const (
		usage     = "data_usage.json"
		policy    = "policy_updated.json"
		persist   = "usage_persist.json"
		quota     = "notification_quota_updated.json"
		blocked   = "notification_customer_blocked.json"
		threshold = "notification_threshold_alert.json"
		gifted    = "notification_data_gifted.json"
	)
	mal, unk := envelope.ErrMalformed, envelope.ErrUnknownType
	tests := []struct {
		golden, path, value string
		field, msg          string
		sentinel            error
	}{
		// envelope members
		{usage, "eventId", absent, "eventId", "required", nil},
		{usage, "eventId", `null`, "eventId", "required", nil},
		{usage, "eventId", `""`, "eventId", "required", nil},
		{usage, "eventId", `5`, "eventId", "must be a string", mal},
		{usage, "eventType", absent, "eventType", "required", nil},
		{usage, "eventType", `""`, "eventType", "required", nil},
		{usage, "eventType", `"DATA_USED"`, "eventType", `unknown event type "DATA_USED"`, unk},
		{usage, "eventType", `"data_usage"`, "eventType", `unknown event type "data_usage"`, unk},
		{usage, "eventType", `["DATA_USAGE"]`, "eventType", "must be a string", mal},
		{usage, "subType", `"QUOTA_UPDATED"`, "subType", `unknown subType "QUOTA_UPDATED" for DATA_USAGE`, unk},
		{usage, "subType", `7`, "subType", "must be a string", mal},
		{quota, "subType", absent, "subType", "required for NOTIFICATION", nil},
		{quota, "subType", `null`, "subType", "required for NOTIFICATION", nil},
		{quota, "subType", `"QUOTA_EXCEEDED"`, "subType", `unknown subType "QUOTA_EXCEEDED" for NOTIFICATION`, unk},
		{usage, "timestamp", absent, "timestamp", "required", nil},
		{usage, "timestamp", `"2026-02-06 14:30:00"`, "timestamp", "must be an RFC 3339 timestamp", mal},
		{usage, "timestamp", `"2026-02-06T14:30:00"`, "timestamp", "must be an RFC 3339 timestamp", mal},
		{usage, "timestamp", `"2026-02-30T14:30:00Z"`, "timestamp", "must be an RFC 3339 timestamp", mal},
		{usage, "timestamp", `1770388200`, "timestamp", "must be an RFC 3339 timestamp", mal},
		{usage, "timestamp", `"0000-01-01T00:30:00+01:00"`, "timestamp", "year -1 out of range", mal},
		{usage, "timestamp", `"0001-01-01T00:00:00Z"`, "timestamp", "required", nil},
		{usage, "payload", absent, "payload", "required", nil},
		{usage, "payload", `null`, "payload", "required", nil},
		{usage, "payload", `[]`, "payload", "must be a JSON object", mal},
		{usage, "payload", `"{}"`, "payload", "must be a JSON object", mal},

		// DATA_USAGE
		{usage, "payload.familyId", absent, "payload.familyId", "required", nil},
		{usage, "payload.familyId", `0`, "payload.familyId", "must be > 0", nil},
		{usage, "payload.familyId", `-100`, "payload.familyId", "must be > 0", nil},
		{usage, "payload.familyId", `"100"`, "payload.familyId", "must be an integer", mal},
		{usage, "payload.familyId", `100.5`, "payload.familyId", "must be an integer", mal},
		{usage, "payload.familyId", `1e2`, "payload.familyId", "must be an integer", mal},
		{usage, "payload.familyId", `9223372036854775808`, "payload.familyId", "out of range", mal},
		{usage, "payload.customerId", absent, "payload.customerId", "required", nil},
		{usage, "payload.customerId", `0`, "payload.customerId", "must be > 0", nil},
		{usage, "payload.appId", absent, "payload.appId", "required", nil},
		{usage, "payload.appId", `""`, "payload.appId", "required", nil},
		{usage, "payload.appId", `true`, "payload.appId", "must be a string", mal},
		{usage, "payload.bytesUsed", absent, "payload.bytesUsed", "required", nil},
		{usage, "payload.bytesUsed", `null`, "payload.bytesUsed", "required", nil},
		{usage, "payload.bytesUsed", `-1`, "payload.bytesUsed", "must be ≥ 0", nil},
		{usage, "payload.bytesUsed", `{}`, "payload.bytesUsed", "must be an integer", mal},
		{usage, "payload.metadata", `[]`, "payload.metadata", "must be a JSON object", mal},
		{usage, "payload.metadata", `{"n":1e400}`, "payload.metadata", "json: cannot unmarshal", mal},

		// POLICY_UPDATED
		{policy, "payload.familyId", absent, "payload.familyId", "required", nil},
		{policy, "payload.targetCustomerId", absent, "payload.targetCustomerId", "required", nil},
		{policy, "payload.targetCustomerId", `-5`, "payload.targetCustomerId", "must be > 0", nil},
		{policy, "payload.policyKey", `1`, "payload.policyKey", "must be a string", mal},
		{policy, "payload.oldValue", `2147483648`, "payload.oldValue", "must be a string", mal},
		{policy, "payload.newValue", `false`, "payload.newValue", "must be a string", mal},
		{policy, "payload.changedBy", `-1`, "payload.changedBy", "must be ≥ 0", nil},
		{policy, "payload.version", absent, "payload.version", "required", nil},
		{policy, "payload.version", `0`, "payload.version", "must be ≥ 1", nil},
		{policy, "payload.constraints", absent, "payload.constraints", "required", nil},
		{policy, "payload.constraints", `null`, "payload.constraints", "required", nil},
		{policy, "payload.constraints", `[]`, "payload.constraints", "must be a JSON object", mal},
		{policy, "payload.constraints", `{"A":"1","LIMIT:DATA:DAILY":536870912}`, `payload.constraints["LIMIT:DATA:DAILY"]`, "must be a string", mal},
		{policy, "payload.constraints", `{"B":null}`, `payload.constraints["B"]`, "must be a string", mal},

		// USAGE_PERSIST
		{persist, "payload.originEventId", absent, "payload.originEventId", "required", nil},
		{persist, "payload.originEventId", `""`, "payload.originEventId", "required", nil},
		{persist, "payload.familyId", `0`, "payload.familyId", "must be > 0", nil},
		{persist, "payload.customerId", absent, "payload.customerId", "required", nil},
		{persist, "payload.bytesUsed", `-5242880`, "payload.bytesUsed", "must be ≥ 0", nil},
		{persist, "payload.appId", `7`, "payload.appId", "must be a string", mal},
		{persist, "payload.processResult", absent, "payload.processResult", "required", nil},
		{persist, "payload.processResult", `""`, "payload.processResult", "required", nil},
		{persist, "payload.remainingAfter", absent, "payload.remainingAfter", "required", nil},
		{persist, "payload.remainingAfter", `-1`, "payload.remainingAfter", "must be ≥ 0", nil},
		{persist, "payload.eventTime", absent, "payload.eventTime", "required", nil},
		{persist, "payload.eventTime", `"14:30"`, "payload.eventTime", "must be an RFC 3339 timestamp", mal},
		{persist, "payload.eventTime", `"0001-01-01T00:00:00Z"`, "payload.eventTime", "required", nil},
		{persist, "payload.rule", `[]`, "payload.rule", "must be a string", mal},
		{persist, "payload.totalBytes", `-1`, "payload.totalBytes", "must be ≥ 0", nil},
		{persist, "payload.totalBytes", `"1"`, "payload.totalBytes", "must be an integer", mal},
		{persist, "payload.dailyUsedBytes", `-1`, "payload.dailyUsedBytes", "must be ≥ 0", nil},
		{persist, "payload.monthlyUsedBytes", `-1`, "payload.monthlyUsedBytes", "must be ≥ 0", nil},
		{persist, "payload.monthlyUsedBytes", `1.5`, "payload.monthlyUsedBytes", "must be an integer", mal},
		{persist, "payload.throttleKbps", `-1`, "payload.throttleKbps", "must be ≥ 0", nil},
		{persist, "payload.grantChargedBytes", `-1`, "payload.grantChargedBytes", "must be ≥ 0", nil},
		{persist, "payload.crossed", `{}`, "payload.crossed", "must be an array", mal},
		{persist, "payload.crossed", `"50:1"`, "payload.crossed", "must be an array", mal},
		{persist, "payload.crossed", `[null]`, "payload.crossed[0]", "must be a JSON object", mal},
		{persist, "payload.crossed", `[{"percent":50,"arm":1},7]`, "payload.crossed[1]", "must be a JSON object", mal},
		{persist, "payload.crossed", `[{"percent":50}]`, "payload.crossed[0].arm", "required", nil},
		{persist, "payload.crossed", `[{"percent":"50","arm":1}]`, "payload.crossed[0].percent", "must be an integer", mal},
		{persist, "payload.crossed", `[{"percent":0,"arm":1}]`, "payload.crossed[0].percent", "must be between 1 and 100", nil},
		{persist, "payload.crossed", `[{"percent":50,"arm":1},{"percent":101,"arm":1}]`, "payload.crossed[1].percent", "must be between 1 and 100", nil},
		{persist, "payload.crossed", `[{"percent":50,"arm":0}]`, "payload.crossed[0].arm", "must be ≥ 1", nil},
		{persist, "payload.grant", `[]`, "payload.grant", "must be a JSON object", mal},
		{persist, "payload.grant", `{"grantedBytes":1}`, "payload.grant.grantId", "required", nil},
		{persist, "payload.grant", `{"grantId":"g"}`, "payload.grant.grantedBytes", "required", nil},
		{persist, "payload.grant", `{"grantId":"g","grantedBytes":-1}`, "payload.grant.grantedBytes", "must be ≥ 0", nil},
		{persist, "payload.grant", `{"grantId":"g","grantedBytes":1,"open":"yes"}`, "payload.grant.open", "must be true or false", mal},
		{persist, "payload.grant", `{"grantId":"g","grantedBytes":1,"overageBytes":-5}`, "payload.grant.overageBytes", "must be ≥ 0", nil},
		{persist, "payload.grant", `{"grantId":"g","grantedBytes":1,"validUntil":"soon"}`, "payload.grant.validUntil", "must be an RFC 3339 timestamp", mal},
		{persist, "payload.grant", `{"grantId":"g","grantedBytes":1,"reclaim":"h"}`, "payload.grant.reclaim", "must be an array of strings", mal},
		{persist, "payload.grant", `{"grantId":"g","grantedBytes":1,"reclaim":["h",""]}`, "payload.grant.reclaim[1]", "required", nil},
		{persist, "payload.grant", `{"grantId":"g","grantedBytes":1,"category":"video"}`, "payload.grant.category", "must be an app category", nil},

		// NOTIFICATION / QUOTA_UPDATED
		{quota, "payload.familyId", absent, "payload.familyId", "required", nil},
		{quota, "payload.customerId", `0`, "payload.customerId", "must be > 0", nil},
		{quota, "payload.familyRemainingBytes", absent, "payload.familyRemainingBytes", "required", nil},
		{quota, "payload.familyRemainingBytes", `-1`, "payload.familyRemainingBytes", "must be ≥ 0", nil},
		{quota, "payload.familyUsedPercent", absent, "payload.familyUsedPercent", "required", nil},
		{quota, "payload.familyUsedPercent", `100.5`, "payload.familyUsedPercent", "must be between 0 and 100", nil},
		{quota, "payload.familyUsedPercent", `-0.1`, "payload.familyUsedPercent", "must be between 0 and 100", nil},
		{quota, "payload.familyUsedPercent", `"50.5"`, "payload.familyUsedPercent", "must be a number", mal},
		{quota, "payload.familyUsedPercent", `1e999`, "payload.familyUsedPercent", "out of range", mal},
		{quota, "payload.customerUsedBytesToday", absent, "payload.customerUsedBytesToday", "required", nil},
		{quota, "payload.customerUsedBytesToday", `-10485760`, "payload.customerUsedBytesToday", "must be ≥ 0", nil},

		// NOTIFICATION / CUSTOMER_BLOCKED
		{blocked, "payload.familyId", `-1`, "payload.familyId", "must be > 0", nil},
		{blocked, "payload.customerId", absent, "payload.customerId", "required", nil},
		{blocked, "payload.blockReason", absent, "payload.blockReason", "required", nil},
		{blocked, "payload.blockReason", `""`, "payload.blockReason", "required", nil},
		{blocked, "payload.blockedAt", absent, "payload.blockedAt", "required", nil},
		{blocked, "payload.blockedAt", `"2026-02-06T25:00:00Z"`, "payload.blockedAt", "must be an RFC 3339 timestamp", mal},
		{blocked, "payload.blockedAt", `"10000-01-01T00:00:00Z"`, "payload.blockedAt", "must be an RFC 3339 timestamp", mal},
		{blocked, "payload.decision", `1`, "payload.decision", "must be a string", mal},

		// NOTIFICATION / THRESHOLD_ALERT
		{threshold, "payload.familyId", absent, "payload.familyId", "required", nil},
		{threshold, "payload.thresholdPercent", absent, "payload.thresholdPercent", "required", nil},
		{threshold, "payload.thresholdPercent", `0`, "payload.thresholdPercent", "must be between 1 and 99", nil},
		{threshold, "payload.thresholdPercent", `100`, "payload.thresholdPercent", "must be between 1 and 99", nil},
		{threshold, "payload.thresholdPercent", `10.0`, "payload.thresholdPercent", "must be an integer", mal},
		{threshold, "payload.message", absent, "payload.message", "required", nil},
		{threshold, "payload.message", `""`, "payload.message", "required", nil},
		{threshold, "payload.period", `202602`, "payload.period", "must be a string", mal},

		// NOTIFICATION / DATA_GIFTED
		{gifted, "payload.giftId", absent, "payload.giftId", "required", nil},
		{gifted, "payload.customerId", `12347`, "payload.customerId", "must be fromCustomerId or toCustomerId", nil},
		{gifted, "payload.toCustomerId", `12347`, "payload.customerId", "must be fromCustomerId or toCustomerId", nil},
		{gifted, "payload.fromCustomerId", `12346`, "payload.toCustomerId", "must not be fromCustomerId", nil},
		{gifted, "payload.amountBytes", `0`, "payload.amountBytes", "must be > 0", nil},
		{gifted, "payload.month", `"2026-02"`, "payload.month", "must be YYYYMM", nil},
		{gifted, "payload.month", `"202613"`, "payload.month", "must be YYYYMM", nil},
		{gifted, "payload.month", absent, "payload.month", "required", nil},
		{gifted, "payload.givenBy", `-1`, "payload.givenBy", "must be ≥ 0", nil},
		{gifted, "payload.givenBy", absent, "payload.givenBy", "required", nil},
		{gifted, "payload.givenAt", absent, "payload.givenAt", "required", nil},
		{gifted, "payload.fromName", `5`, "payload.fromName", "must be a string", mal},
		{gifted, "payload.toName", `"` + strings.Repeat("민", envelope.MaxNameLen+1) + `"`, "payload.toName", "at most 100 characters", nil},
	}
	for _, tt := range tests {
		name := strings.TrimSuffix(tt.golden, ".json") + "/" + tt.path + "=" + tt.value
		if tt.value == absent {
			name = strings.TrimSuffix(tt.golden, ".json") + "/" + tt.path + "-absent"
		}
		t.Run(name, func(t *testing.T) {
			data := mutate(t, tt.golden, tt.path, tt.value)
			ev, err := envelope.Decode(data)
			checkErr(t, err, tt.field, tt.msg, tt.sentinel)
			if diff := cmp.Diff(envelope.Event{}, ev); diff != "" {
				t.Errorf("Decode returned a non-zero Event with its error:\n%s", diff)
			}
		})
	}
}

func TestDecodeNotJSON(t *testing.T) {
	for _, in := range []string{
		``, `{`, `{"eventId":"x",}`, `nul`, `{"a":1} {"b":2}`, "\xff",
		`null`, `[]`, `"eventId"`, `42`, `true`,
	} {
		t.Run(in, func(t *testing.T) {
			_, err := envelope.Decode([]byte(in))
			if !errors.Is(err, envelope.ErrMalformed) {
				t.Fatalf("Decode(%q) = %v, want ErrMalformed", in, err)
			}
			if errors.Is(err, envelope.ErrUnknownType) {
				t.Errorf("Decode(%q) = %v, also ErrUnknownType", in, err)
			}
		})
	}
}

func TestDecodeReportsEveryProblem(t *testing.T) {
	_, err := envelope.Decode([]byte(`{"eventType":"DATA_USAGE","timestamp":"soon","payload":{"familyId":"x","appId":"a","customerId":1}}`))
	var got []string
	for _, fe := range fieldErrors(t, err) {
		got = append(got, fe.Field)
	}
	want := []string{"eventId", "timestamp", "payload.familyId", "payload.bytesUsed"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s\nerror: %v", diff, err)
	}

	// Validation runs only on a cleanly decoded event, and reports all.
	_, err = envelope.Decode([]byte(`{"eventId":"","eventType":"DATA_USAGE","timestamp":"2026-02-06T14:30:00Z","payload":{"familyId":0,"customerId":-1,"appId":"","bytesUsed":-1}}`))
	got = nil
	for _, fe := range fieldErrors(t, err) {
		got = append(got, fe.Error())
	}
	want = []string{"eventId: required", "payload.familyId: must be > 0", "payload.customerId: must be > 0", "payload.appId: required", "payload.bytesUsed: must be ≥ 0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func TestDecodeLeniency(t *testing.T) {
	want := dataUsageEvent
	tests := map[string]string{
		"unknown members ignored": `{"eventId":"evt_550e8400-e29b-41d4-a716-446655440000","eventType":"DATA_USAGE","timestamp":"2026-02-06T14:30:00Z","traceId":"abc","payload":{"familyId":100,"customerId":12345,"appId":"com.youtube.app","bytesUsed":5242880,"metadata":{"deviceId":"device_pixel_9","networkType":"5G"},"extra":[1,2,{"x":null}]}}`,
		"offset and fraction":     `{"eventId":"evt_550e8400-e29b-41d4-a716-446655440000","eventType":"DATA_USAGE","timestamp":"2026-02-06T23:30:00.000+09:00","payload":{"familyId":100,"customerId":12345,"appId":"com.youtube.app","bytesUsed":5242880,"metadata":{"deviceId":"device_pixel_9","networkType":"5G"}}}`,
		"whitespace everywhere":   " {\n\t\"eventId\" : \"evt_550e8400-e29b-41d4-a716-446655440000\" , \"eventType\" : \"DATA_USAGE\" , \"subType\" : null , \"timestamp\" : \"2026-02-06T14:30:00Z\" , \"payload\" : { \"familyId\" : 100 , \"customerId\" : 12345 , \"appId\" : \"com.youtube.app\" , \"bytesUsed\" : 5242880 , \"metadata\" : { \"deviceId\" : \"device_pixel_9\" , \"networkType\" : \"5G\" } } }\n",
		"lower-case t and z":      `{"eventId":"evt_550e8400-e29b-41d4-a716-446655440000","eventType":"DATA_USAGE","timestamp":"2026-02-06t14:30:00z","payload":{"familyId":100,"customerId":12345,"appId":"com.youtube.app","bytesUsed":5242880,"metadata":{"deviceId":"device_pixel_9","networkType":"5G"}}}`,
		"empty subType string":    `{"eventId":"evt_550e8400-e29b-41d4-a716-446655440000","eventType":"DATA_USAGE","subType":"","timestamp":"2026-02-06T14:30:00Z","payload":{"familyId":100,"customerId":12345,"appId":"com.youtube.app","bytesUsed":5242880,"metadata":{"deviceId":"device_pixel_9","networkType":"5G"}}}`,
		"members in any order":    `{"payload":{"metadata":{"networkType":"5G","deviceId":"device_pixel_9"},"bytesUsed":5242880,"appId":"com.youtube.app","customerId":12345,"familyId":100},"timestamp":"2026-02-06T14:30:00Z","eventType":"DATA_USAGE","eventId":"evt_550e8400-e29b-41d4-a716-446655440000"}`,
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := envelope.Decode([]byte(in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got.Timestamp.Location() != time.UTC {
				t.Errorf("timestamp location = %v, want UTC", got.Timestamp.Location())
			}
		})
	}

	// Member names are case-sensitive, as in Jackson: "EventId" is an
	// unknown member, so eventId is missing.
	_, err := envelope.Decode(bytes.Replace(readFile(t, "testdata/data_usage.json"), []byte(`"eventId"`), []byte(`"EventId"`), 1))
	checkErr(t, err, "eventId", "required", nil)
	_, err = envelope.Decode(bytes.Replace(readFile(t, "testdata/data_usage.json"), []byte(`"bytesUsed"`), []byte(`"BytesUsed"`), 1))
	checkErr(t, err, "payload.bytesUsed", "required", nil)

	// Empty metadata and zero bytes are valid and round-trip.
	ev, err := envelope.Decode(mutate(t, "data_usage.json", "payload.metadata", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if md := ev.Payload.(envelope.UsagePayload).Metadata; md != nil {
		t.Errorf("empty metadata decoded as %#v, want nil", md)
	}
	ev, err = envelope.Decode(mutate(t, "data_usage.json", "payload.bytesUsed", `0`))
	if err != nil || ev.Payload.(envelope.UsagePayload).BytesUsed != 0 {
		t.Fatalf("bytesUsed 0: %v, %v", ev, err)
	}
	// An empty constraint map (every constraint removed) is valid.
	ev, err = envelope.Decode(mutate(t, "policy_updated.json", "payload.constraints", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if c := ev.Payload.(envelope.PolicyUpdatedPayload).Constraints; c == nil || len(c) != 0 {
		t.Errorf("constraints {} decoded as %#v, want empty non-nil map", c)
	}
	// Null old/new values mean "not set".
	ev, err = envelope.Decode(mutate(t, "policy_updated.json", "payload.oldValue", `null`))
	if err != nil || ev.Payload.(envelope.PolicyUpdatedPayload).OldValue != nil {
		t.Fatalf("oldValue null: %v, %v", ev, err)
	}
}

// validUsage returns a valid usage envelope to break in one place.
func validUsage() envelope.Envelope[envelope.UsagePayload] {
	return envelope.New("evt_1", at("2026-02-06T14:30:00Z"), envelope.UsagePayload{FamilyID: 100, CustomerID: 12345, AppID: "com.youtube.app", BytesUsed: 1})
}

func TestEncodeValidates(t *testing.T) {
	ts := at("2026-02-06T14:30:00Z")
	tests := []struct {
		name   string
		encode func() ([]byte, error)
		field  string
		msg    string
	}{
		{"empty id", func() ([]byte, error) {
			e := validUsage()
			e.EventID = ""
			return envelope.Encode(e)
		}, "eventId", "required"},
		{"zero timestamp", func() ([]byte, error) {
			e := validUsage()
			e.Timestamp = time.Time{}
			return envelope.Encode(e)
		}, "timestamp", "required"},
		{"year 10000", func() ([]byte, error) {
			e := validUsage()
			e.Timestamp = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
			return envelope.Encode(e)
		}, "timestamp", "year 10000 out of range"},
		{"year -1 in UTC", func() ([]byte, error) {
			e := validUsage()
			e.Timestamp = time.Date(0, 1, 1, 0, 0, 0, 0, time.FixedZone("", 3600))
			return envelope.Encode(e)
		}, "timestamp", "year -1 out of range"},
		{"eventType cleared", func() ([]byte, error) {
			e := validUsage()
			e.EventType = ""
			return envelope.Encode(e)
		}, "eventType", "required"},
		{"eventType mismatch", func() ([]byte, error) {
			e := validUsage()
			e.EventType = envelope.TypeUsagePersist
			return envelope.Encode(e)
		}, "eventType", `"USAGE_PERSIST" does not match the payload (DATA_USAGE)`},
		{"subType on DATA_USAGE", func() ([]byte, error) {
			e := validUsage()
			e.SubType = envelope.SubQuotaUpdated
			return envelope.Encode(e)
		}, "subType", "must be empty for DATA_USAGE"},
		{"subType missing", func() ([]byte, error) {
			e := envelope.New("ntf_1", ts, envelope.ThresholdAlert{FamilyID: 1, ThresholdPercent: 50, Message: "m"})
			e.SubType = ""
			return envelope.Encode(e)
		}, "subType", "required for NOTIFICATION (THRESHOLD_ALERT)"},
		{"subType mismatch", func() ([]byte, error) {
			e := envelope.New("ntf_1", ts, envelope.ThresholdAlert{FamilyID: 1, ThresholdPercent: 50, Message: "m"})
			e.SubType = envelope.SubQuotaUpdated
			return envelope.Encode(e)
		}, "subType", `"QUOTA_UPDATED" does not match the payload (THRESHOLD_ALERT)`},
		{"nil payload", func() ([]byte, error) {
			return envelope.Encode(envelope.Event{EventID: "evt_1", EventType: envelope.TypeDataUsage, Timestamp: ts})
		}, "payload", "required"},
		{"nil payload from New", func() ([]byte, error) {
			return envelope.Encode(envelope.New[envelope.Payload]("evt_1", ts, nil))
		}, "eventType", "required"},
		{"nil pointer payload", func() ([]byte, error) {
			return envelope.Encode(envelope.New[*envelope.UsagePayload]("evt_1", ts, nil))
		}, "eventType", "required"},
		{"invalid payload", func() ([]byte, error) {
			e := validUsage()
			e.Payload.BytesUsed = -1
			return envelope.Encode(e)
		}, "payload.bytesUsed", "must be ≥ 0"},
		{"nil constraints", func() ([]byte, error) {
			return envelope.Encode(envelope.New("pol_1", ts, envelope.PolicyUpdatedPayload{FamilyID: 1, TargetCustomerID: 2, Version: 1}))
		}, "payload.constraints", "required"},
		{"persist zero eventTime", func() ([]byte, error) {
			return envelope.Encode(envelope.New("persist_1", ts, envelope.UsagePersistPayload{OriginEventID: "evt_1", FamilyID: 1, CustomerID: 2, ProcessResult: "ALLOWED"}))
		}, "payload.eventTime", "required"},
		{"blocked zero blockedAt", func() ([]byte, error) {
			return envelope.Encode(envelope.New("ntf_1", ts, envelope.CustomerBlocked{FamilyID: 1, CustomerID: 2, BlockReason: "BLOCK:ALL"}))
		}, "payload.blockedAt", "required"},
		{"NaN percent", func() ([]byte, error) {
			return envelope.Encode(envelope.New("ntf_1", ts, envelope.QuotaUpdated{FamilyID: 1, CustomerID: 2, FamilyUsedPercent: math.NaN()}))
		}, "payload.familyUsedPercent", "must be between 0 and 100"},
		{"metadata JSON cannot hold", func() ([]byte, error) {
			e := validUsage()
			e.Payload.Metadata = map[string]any{"f": func() {}}
			return envelope.Encode(e)
		}, "payload", "json: unsupported type"},
		{"metadata NaN via json.Marshal", func() ([]byte, error) {
			e := validUsage()
			e.Payload.Metadata = map[string]any{"x": math.Inf(1)}
			return json.Marshal(e)
		}, "payload", "json: unsupported value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.encode()
			if b != nil {
				t.Errorf("encoded %s despite the error", b)
			}
			if err == nil {
				t.Fatalf("no error, want %s: %s", tt.field, tt.msg)
			}
			fe := fieldErrors(t, err)[0]
			if fe.Field != tt.field || !strings.HasPrefix(fe.Msg, tt.msg) {
				t.Errorf("first problem = %q, want %s: %s…", fe, tt.field, tt.msg)
			}
		})
	}
}

func TestValidateIsAllNamed(t *testing.T) {
	// Every payload's zero value is invalid and every problem names a field.
	for _, p := range []envelope.Payload{
		envelope.UsagePayload{}, envelope.PolicyUpdatedPayload{}, envelope.UsagePersistPayload{},
		envelope.QuotaUpdated{FamilyUsedPercent: -1}, envelope.CustomerBlocked{}, envelope.ThresholdAlert{},
		envelope.DataRequested{}, envelope.DataRequestAnswered{}, envelope.DataGifted{},
	} {
		err := envelope.New("", time.Time{}, p).Validate()
		var got []string
		for _, fe := range fieldErrors(t, err) {
			got = append(got, fe.Field)
		}
		if len(got) < 4 || got[0] != "eventId" || got[1] != "timestamp" || !strings.HasPrefix(got[2], "payload.") {
			t.Errorf("%T: problems %v", p, got)
		}
	}
}
