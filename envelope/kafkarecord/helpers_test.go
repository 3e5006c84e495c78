package kafkarecord_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dabom/dpcs/envelope"
)

// goldenFiles returns envelope's seed examples (not the canonical encodings).
func goldenFiles(tb testing.TB) []string {
	tb.Helper()
	all, err := filepath.Glob(filepath.Join("..", "testdata", "*.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, f := range all {
		if !strings.HasSuffix(f, ".canonical.json") {
			out = append(out, f)
		}
	}
	if len(out) != 16 { // one per payload kind (two data-request notifications since #15, two for time requests, a grant step since #37, a record standing for its notifications since #40, a grant-charged event since #37, a gift since #38)
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

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// dataUsageEvent is the seed's usage event (../testdata/data_usage.json), decoded.
var dataUsageEvent = envelope.Event{
	EventID: "evt_550e8400-e29b-41d4-a716-446655440000", EventType: envelope.TypeDataUsage,
	Timestamp: at("2026-02-06T14:30:00Z"),
	Payload: envelope.UsagePayload{
		FamilyID: 100, CustomerID: 12345, AppID: "com.youtube.app", BytesUsed: 5242880,
		Metadata: map[string]any{"deviceId": "device_pixel_9", "networkType": "5G"},
	},
}
