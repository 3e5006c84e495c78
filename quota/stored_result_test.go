package quota

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/dabom/dpcs/policy"
)

// A result survives its stored form, short and long (the dedupe record a
// replay answers with, written by apply.lua and by Restore through
// encodeResult).
func TestStoredResultRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 4).Draw(t, "crossings")
		var crossed, arms []int
		for range n {
			crossed = append(crossed, rapid.IntRange(1, 99).Draw(t, "pct"))
			arms = append(arms, rapid.IntRange(1, 1000).Draw(t, "arm"))
		}
		bytes := rapid.Int64Range(0, policy.MaxBytes)
		d := rapid.SampledFrom(policy.Decisions()).Draw(t, "decision")
		_, implied, _ := shortCode(d)
		r := Result{
			Decision: d,
			// '|' included: the rule is the last field; the implied one
			// (left out of a short record) as often as any other.
			Rule:         rapid.OneOf(rapid.Just(implied), rapid.String()).Draw(t, "rule"),
			Remaining:    bytes.Draw(t, "remaining"),
			Total:        bytes.Draw(t, "total"),
			DailyUsed:    bytes.Draw(t, "daily"),
			MonthlyUsed:  bytes.Draw(t, "monthly"),
			ThrottleKbps: rapid.Int64Range(0, 1<<20).Draw(t, "throttle"),
			Crossed:      crossed,
			Arms:         arms,
		}
		long := rapid.Bool().Draw(t, "long")
		s := encodeResult(r, long)
		if first := s[0]; long != (first >= 'A' && first <= 'Z') {
			t.Fatalf("%q: long %v, but it starts with %q", s, long, first)
		}
		got, err := decodeResult(s)
		if err != nil {
			t.Fatalf("decode %q: %v", s, err)
		}
		if diff := cmp.Diff(r, got); diff != "" {
			t.Fatalf("round trip of %q (-want +got):\n%s", s, diff)
		}
	})
}

// The short form, record by record: what it leaves out and what it keeps.
func TestStoredResultShortForm(t *testing.T) {
	const gib = 1 << 30
	for _, tt := range []struct {
		r           Result
		short, long string
	}{
		{Result{Decision: policy.Allowed, Remaining: 10 * gib, Total: 20 * gib, DailyUsed: 300 << 20, MonthlyUsed: 5 * gib, Crossed: []int{50}, Arms: []int{2}},
			"a10737418240|21474836480|314572800|5368709120|0|50:2",
			"ALLOWED|10737418240|21474836480|314572800|5368709120|0|50:2|"},
		{Result{Decision: policy.BlockedLimitMonthly, Rule: policy.KeyLimitMonthly, Total: 20 * gib, MonthlyUsed: 2 * gib},
			"o0|21474836480|0|2147483648|0|",
			"BLOCKED_LIMIT_MONTHLY|0|21474836480|0|2147483648|0||LIMIT:DATA:MONTHLY"},
		{Result{Decision: policy.BlockedFamilyQuota, Rule: policy.RulePoolUnprovisioned},
			"q0|0|0|0|0||POOL:UNPROVISIONED",
			"BLOCKED_FAMILY_QUOTA|0|0|0|0|0||POOL:UNPROVISIONED"},
		{Result{Decision: policy.BlockedTime, Rule: "BLOCK:TIME:밤 2200-0700", Remaining: 5},
			"t5|0|0|0|0||BLOCK:TIME:밤 2200-0700",
			"BLOCKED_TIME|5|0|0|0|0||BLOCK:TIME:밤 2200-0700"},
		{Result{Decision: policy.BlockedApp}, "p0|0|0|0|0|", "BLOCKED_APP|0|0|0|0|0||"},
	} {
		if s := encodeResult(tt.r, false); s != tt.short {
			t.Errorf("short %q, want %q", s, tt.short)
		}
		if s := encodeResult(tt.r, true); s != tt.long {
			t.Errorf("long %q, want %q", s, tt.long)
		}
	}
	// Redis keeps a hash as a listpack while every value is at most 64
	// bytes (hash-max-listpack-value): a month blocked on a 20 GiB pool
	// fits, as it did not in the long form.
	blocked := Result{Decision: policy.BlockedLimitMonthly, Rule: policy.KeyLimitMonthly, Remaining: 10 * gib, Total: 20 * gib, DailyUsed: 1 * gib, MonthlyUsed: 10 * gib, Crossed: []int{50}, Arms: []int{1}}
	if s := encodeResult(blocked, false); len(s) > 64 {
		t.Errorf("%q is %d bytes, over 64", s, len(s))
	}
	for c := byte('a'); c <= 'z'; c++ {
		if d, _, ok := decisionOf(c); ok {
			if back, _, _ := shortCode(d); back != c {
				t.Errorf("letter %q is %s, whose letter is %q", c, d, back)
			}
		}
	}
	for _, d := range policy.Decisions() {
		if _, _, ok := shortCode(d); !ok {
			t.Errorf("%s has no letter: stored long", d)
		}
	}
}

// apply.lua writes the record Go's encodeResult writes for the result it
// returns, in either form, over random policies and events: a rebuild
// (Restore) writes what the script would have. A short engine and a long
// one, each under a key prefix of its own, judge every event alike, and
// each answers a replay of the other's record with the original result.
func TestStoredResultLuaMatchesGo(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		now := kst(t, "2026-02-06 23:30")
		ctx := context.Background()
		rapid.Check(t, func(rt *rapid.T) {
			run := uniquePrefix() // real servers outlive a run
			engine := func(form string, long bool) *Engine {
				opts := []Option{WithClock(func() time.Time { return now }), WithKeyPrefix(run + form + ":")}
				if long {
					opts = append(opts, WithLongResults())
				}
				e, err := New(rdb, opts...)
				if err != nil {
					rt.Fatal(err)
				}
				return e
			}
			short, long := engine("s", false), engine("l", true)
			// The readers: a short engine on the long one's keys, and back.
			shortOnLong, longOnShort := engine("l", false), engine("s", true)
			cons := map[string]string{}
			for _, kv := range [][2]string{
				{policy.KeyLimitDaily, "40"}, {policy.KeyLimitMonthly, "70"}, {"BLOCK:APP:yt", "1"}, {"BLOCK:TIME:밤", "2200-0700"},
				{"LIMIT:DATA:APP:melon", "20"}, {"BLOCK:ACCESS", "1"}, {"THROTTLE:SPEED", "512"},
			} {
				if rapid.Bool().Draw(rt, kv[0]) {
					cons[kv[0]] = kv[1]
				}
			}
			for _, e := range []*Engine{short, long} {
				if _, err := e.SetPlan(ctx, 1, 100); err != nil {
					rt.Fatal(err)
				}
				if err := e.AddMember(ctx, 1, 1); err != nil {
					rt.Fatal(err)
				}
				if _, err := e.SetConstraints(ctx, 1, 1, 1, cons); err != nil {
					rt.Fatal(err)
				}
			}
			for i := range rapid.IntRange(1, 12).Draw(rt, "events") {
				ev := Event{ID: fmt.Sprintf("evt_%d", i), FamilyID: 1, CustomerID: rapid.Int64Range(1, 2).Draw(rt, "customer"),
					Bytes: rapid.Int64Range(0, 50).Draw(rt, "bytes"), AppID: rapid.SampledFrom([]string{"yt", "melon", "web"}).Draw(rt, "app"),
					At: now.Add(-time.Duration(rapid.IntRange(0, 120).Draw(rt, "minutes ago")) * time.Minute)}
				var rs [2]Result
				for j, e := range []*Engine{short, long} {
					var err error
					if rs[j], err = e.Apply(ctx, ev); err != nil {
						rt.Fatal(err)
					}
					stored, err := rdb.HGet(ctx, e.k.events(1, e.bucket(now)), ev.ID).Result()
					if err != nil {
						rt.Fatal(err)
					}
					if want := encodeResult(rs[j], e.longResults); stored != want {
						rt.Fatalf("%s: apply.lua stored %q, encodeResult %q", rs[j].Decision, stored, want)
					}
				}
				if diff := cmp.Diff(rs[1], rs[0]); diff != "" {
					rt.Fatalf("short engine's result (-long +short):\n%s", diff)
				}
				for _, e := range []*Engine{shortOnLong, longOnShort} {
					again, err := e.Apply(ctx, ev)
					if err != nil {
						rt.Fatal(err)
					}
					want := rs[0]
					want.Duplicate = true
					if diff := cmp.Diff(want, again); diff != "" {
						rt.Fatalf("replay by the other form's engine (-want +got):\n%s", diff)
					}
				}
			}
		})
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
	if s := encodeResult(Result{Decision: policy.Allowed, Crossed: []int{30, 10}, Arms: []int{2}}, true); s != "ALLOWED|0|0|0|0|0|30:2,10:1|" {
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
		{"short, too few fields", "a1|100|0|0", ""},
		{"short, not a number", "o1|x|0|0|0|", "invalid syntax"},
		{"short, unknown letter", "z1|100|0|0|0|", "unknown decision"},
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
