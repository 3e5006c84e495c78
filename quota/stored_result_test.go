package quota

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/dabom/dpcs/policy"
)

// A result survives its stored form (the dedupe record a replay answers
// with, written by apply.lua and by Restore through encodeResult).
func TestStoredResultRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 4).Draw(t, "crossings")
		var crossed, arms []int
		for range n {
			crossed = append(crossed, rapid.IntRange(1, 99).Draw(t, "pct"))
			arms = append(arms, rapid.IntRange(1, 1000).Draw(t, "arm"))
		}
		bytes := rapid.Int64Range(0, policy.MaxBytes)
		r := Result{
			Decision:     rapid.SampledFrom(policy.Decisions()).Draw(t, "decision"),
			Rule:         rapid.String().Draw(t, "rule"), // '|' included: the rule is the last field
			Remaining:    bytes.Draw(t, "remaining"),
			Total:        bytes.Draw(t, "total"),
			DailyUsed:    bytes.Draw(t, "daily"),
			MonthlyUsed:  bytes.Draw(t, "monthly"),
			ThrottleKbps: rapid.Int64Range(0, 1<<20).Draw(t, "throttle"),
			Crossed:      crossed,
			Arms:         arms,
		}
		s := encodeResult(r)
		got, err := decodeResult(s)
		if err != nil {
			t.Fatalf("decode %q: %v", s, err)
		}
		if diff := cmp.Diff(r, got); diff != "" {
			t.Fatalf("round trip of %q (-want +got):\n%s", s, diff)
		}
	})
}

// A crossing stored without its arm count (an earlier engine's record)
// reads as the first arm; a result without arms is stored as first arms.
func TestStoredResultEarlierForms(t *testing.T) {
	got, err := decodeResult("ALLOWED|5|100|95|95|0|50,10|")
	if err != nil {
		t.Fatal(err)
	}
	want := Result{Decision: policy.Allowed, Remaining: 5, Total: 100, DailyUsed: 95, MonthlyUsed: 95, Crossed: []int{50, 10}, Arms: []int{1, 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if s := encodeResult(Result{Decision: policy.Allowed, Crossed: []int{30, 10}, Arms: []int{2}}); s != "ALLOWED|0|0|0|0|0|30:2,10:1|" {
		t.Errorf("encode with a missing arm = %q", s)
	}
}

// A dedupe record that is not a stored result fails the replay with an
// error naming the event and the record, never a decision made up from it,
// and nothing is charged.
func TestCorruptDedupeRecord(t *testing.T) {
	now := kst(t, "2026-02-06 14:30")
	for _, tt := range []struct{ name, record, why string }{
		{"too few fields", "ALLOWED|1|2", ""},
		{"not a number", "ALLOWED|x|100|0|0|0||", "invalid syntax"},
		{"bad crossing", "ALLOWED|1|100|0|0|0|5x:1|", "invalid syntax"},
		{"bad arm", "ALLOWED|1|100|0|0|0|50:y|", "invalid syntax"},
		{"unknown decision", "MAYBE|1|100|0|0|0||", "unknown decision"},
		{"empty", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, _, e := provisioned(t, now)
			m.HSet(e.k.events(1, e.bucket(now)), "evt_1", tt.record)
			rs, err := e.ApplyBatch(context.Background(), []Event{
				{ID: "evt_0", FamilyID: 1, CustomerID: 1, Bytes: 1, At: now},
				{ID: "evt_1", FamilyID: 1, CustomerID: 1, Bytes: 1, At: now},
			})
			if rs != nil || err == nil {
				t.Fatalf("ApplyBatch = %+v, %v; want an error", rs, err)
			}
			prefix := `quota: event 1: malformed stored result "` + tt.record + `"`
			if !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tt.why) {
				t.Errorf("error %q, want it to start %q and say %q", err, prefix, tt.why)
			}
			if f, err := e.Family(context.Background(), 1); err != nil || f.Used != 1 {
				t.Errorf("used %d, %v; want 1 (the valid event only)", f.Used, err)
			}
		})
	}
}
