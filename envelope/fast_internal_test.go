package envelope

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The fast paths must handle the events DPCS itself writes and the seed's
// examples; otherwise Decode and Encode are correct but slow again. The
// "ask for more" and gift notifications (a few per family a day, not per
// usage event) take the slow path on purpose (slowOnPurpose).
func TestFastPathsTaken(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		if slowOnPurpose(path) {
			if _, ok := decodeFast(mustRead(t, path)); ok {
				t.Errorf("%s: decodeFast read a kind it has no path for", path)
			}
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		ev, ok := decodeFast(data)
		if !ok {
			t.Errorf("%s: decodeFast gave up", path)
			continue
		}
		if err := ev.Validate(); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
}

// Inputs the fast decoder must read itself rather than hand to the slow
// path: the variants producers really write. (What it reads is checked
// against the slow path by the differential tests.)
func TestDecodeFastAccepts(t *testing.T) {
	const usage = `{"eventId":"evt_1","eventType":"DATA_USAGE","timestamp":"2026-02-06T14:30:00Z","payload":{"familyId":100,"customerId":12345,"appId":"a","bytesUsed":5}}`
	for _, in := range []string{
		usage,
		" \t\r\n" + strings.ReplaceAll(usage, ",", " ,\n\t") + "\n",
		strings.Replace(usage, `"eventId"`, `"subType":null,"eventId"`, 1),
		strings.Replace(usage, `"eventId"`, `"subType":"","eventId"`, 1),
		`{"payload":{"familyId":100,"customerId":12345,"appId":"a","bytesUsed":5},"timestamp":"2026-02-06T14:30:00Z","eventType":"DATA_USAGE","eventId":"evt_1"}`,
		`{"eventId":"n","eventType":"NOTIFICATION","payload":{"familyId":1,"customerId":2,"blockReason":"r","blockedAt":"2026-02-06T14:32:00Z"},"subType":"CUSTOMER_BLOCKED","timestamp":"2026-02-06T14:30:00Z"}`,
		strings.Replace(usage, `"eventId"`, `"trace":{"a":["\"\\\/\b\f\n\r\t\u00e9",-1.5e-3,true,false,null,{}]},"eventId"`, 1),
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":9223372036854775807`, 1),
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":-9223372036854775808`, 1), // decoded, then invalid
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":-0`, 1),
		strings.Replace(usage, `"appId":"a"`, "\"appId\":\"가족 데이터 \u2028\u2029\"", 1), // raw, not escaped
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":5,"metadata":{"a":[1,"x",true,null,{"b":{}}],"c":-0.5e-3}`, 1),
		strings.Replace(usage, `2026-02-06T14:30:00Z`, `2024-02-29T23:59:59.999999999Z`, 1),
		strings.Replace(usage, `2026-02-06T14:30:00Z`, `2000-02-29T00:00:00.5Z`, 1),
		strings.Replace(usage, `2026-02-06T14:30:00Z`, `0000-01-01T00:00:00Z`, 1),
		strings.Replace(usage, `2026-02-06T14:30:00Z`, `9999-12-31T23:59:59Z`, 1),
		strings.Replace(usage, `2026-02-06T14:30:00Z`, `2026-02-06T23:30:00+09:00`, 1),
		strings.Replace(usage, `2026-02-06T14:30:00Z`, `0001-01-01T00:00:00Z`, 1), // decoded, then "required"
		`{"eventId":"p","eventType":"USAGE_PERSIST","timestamp":"2026-02-06T14:30:00Z","payload":{"originEventId":"e","familyId":1,"customerId":2,"bytesUsed":3,"appId":"a","processResult":"ALLOWED","remainingAfter":4,"eventTime":"2026-02-06T14:30:00Z","totalBytes":10,"dailyUsedBytes":3,"monthlyUsedBytes":3,"throttleKbps":0,"crossed":[{"percent":50,"arm":1},{"arm":2,"percent":30,"x":null}]}}`,
		`{"eventId":"p","eventType":"USAGE_PERSIST","timestamp":"2026-02-06T14:30:00Z","payload":{"originEventId":"e","familyId":1,"customerId":2,"bytesUsed":3,"appId":"a","processResult":"ALLOWED","remainingAfter":4,"eventTime":"2026-02-06T14:30:00Z","totalBytes":null,"crossed":[]}}`,
		`{"eventId":"p","eventType":"USAGE_PERSIST","timestamp":"2026-02-06T14:30:00Z","payload":{"originEventId":"e","familyId":1,"customerId":2,"bytesUsed":3,"appId":"a","processResult":"ALLOWED","remainingAfter":4,"eventTime":"2026-02-06T14:30:00Z","crossed":null}}`,
		`{"eventId":"p","eventType":"USAGE_PERSIST","timestamp":"2026-02-06T14:30:00Z","payload":{"originEventId":"s","familyId":1,"customerId":2,"bytesUsed":3,"processResult":"ALLOWED","remainingAfter":4,"eventTime":"2026-02-06T14:30:00Z","grant":{"grantId":"g","grantedBytes":0,"open":false,"final":null,"validUntil":null,"reclaim":[],"x":[1]}}}`,
		`{"eventId":"p","eventType":"USAGE_PERSIST","timestamp":"2026-02-06T14:30:00Z","payload":{"originEventId":"s","familyId":1,"customerId":2,"bytesUsed":3,"processResult":"ALLOWED","remainingAfter":4,"eventTime":"2026-02-06T14:30:00Z","grant":null}}`,
	} {
		if _, ok := decodeFast([]byte(in)); !ok {
			t.Errorf("decodeFast gave up on %s", in)
		}
	}
}

// slowOnPurpose reports whether the golden file at path is an "ask for
// more" or a gift notification, which encoding/json reads and writes.
func slowOnPurpose(path string) bool {
	return strings.Contains(path, "data_request") || strings.Contains(path, "time_request") || strings.Contains(path, "data_gifted")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEncodeFastTakesEveryBuiltin: every built-in but the "ask for more"
// and gift notifications, which encoding/json writes (see
// TestFastPathsTaken); appendEnvelope declines those.
func TestEncodeFastTakesEveryBuiltin(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "*.canonical.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		b, ok := appendEnvelope(nil, ev.EventID, ev.EventType, ev.SubType, ev.Timestamp, ev.Payload)
		if slowOnPurpose(path) {
			if ok {
				t.Errorf("%s: appendEnvelope wrote a kind it has no path for", path)
			}
			continue
		}
		if !ok || string(b) != strings.TrimSuffix(string(data), "\n") {
			t.Errorf("%s: appendEnvelope = %v\n%s", path, ok, b)
		}
	}
}

// parseCanonicalTime must agree with parseTime wherever it parses, and parse
// every valid date of the calendar's corner years.
func TestParseCanonicalTime(t *testing.T) {
	for _, year := range []int{0, 1, 4, 100, 200, 400, 1900, 2000, 2023, 2024, 2026, 2100, 2200, 2400, 9999} {
		for month := 0; month <= 13; month++ {
			for day := 0; day <= 32; day++ {
				for _, clock := range []string{"00:00:00", "23:59:59.999999999", "12:34:56.7", "24:00:00", "12:60:00", "12:00:60"} {
					s := fmt.Sprintf("%04d-%02d-%02dT%sZ", year, month, day, clock)
					got, ok := parseCanonicalTime([]byte(s))
					want, err := parseTime(s)
					if ok != (err == nil) || ok && !reflect.DeepEqual(want, got) {
						t.Fatalf("parseCanonicalTime(%s) = %v, %v; parseTime = %v, %v", s, got, ok, want, err)
					}
				}
			}
		}
	}
}
