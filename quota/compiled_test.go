package quota

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/dabom/dpcs/policy"
)

func TestCompileWindows(t *testing.T) {
	tests := []struct {
		name string
		in   map[string]string
		want string
	}{
		{"none", map[string]string{policy.KeyBlockAccess: "1"}, ""},
		{"night first, then names byte-wise", map[string]string{
			policy.KeyBlockTimeStart: "2200", policy.KeyBlockTimeEnd: "0700",
			"BLOCK:TIME:b": "0800-1100@MON-FRI", "BLOCK:TIME:B": "1200-1200@SAT,SUN", "BLOCK:TIME:a": "0000-0100",
		}, "Q0:D1111111START B0B00000011B 001D1111111a <0@D1111100b "},
		{"wrapped days", map[string]string{"BLOCK:TIME:x": "2300-0100@FRI-MON"}, "RD1D1000111x "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := policy.ParseConstraints(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := compileWindows(c); got != tt.want {
				t.Errorf("compileWindows = %q, want %q", got, tt.want)
			}
		})
	}
}

// The compiled constraints (#c) are written first with every non-empty
// constraint set, by SetConstraints and Restore alike, and dropped by
// readers; an empty set leaves no hash.
func TestConstraintFields(t *testing.T) {
	got := constraintFields(rules(t, map[string]string{policy.KeyThrottleSpeed: "10", policy.KeyBlockAccess: "1"}))
	want := []any{fieldCompiled, "10,,10", fieldWindows, "", policy.KeyBlockAccess, "1", policy.KeyThrottleSpeed, "10"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
	if got := constraintFields(policy.Constraints{}); got != nil {
		t.Errorf("empty set: %v", got)
	}
	for _, c := range []struct {
		in   map[string]string
		want string
	}{
		{map[string]string{policy.KeyLimitDaily: "100", policy.KeyLimitMonthly: "2000"}, "00100,2000,"},
		{map[string]string{policy.KeyLimitMonthly: "2000", policy.KeyLimitExtraPrefix + "202602": "5"}, "01,2000,"},
		{map[string]string{policy.KeyBlockTimeStart: "2200", policy.KeyBlockTimeEnd: "0700"}, "00,,"},
	} {
		fields := constraintFields(rules(t, c.in))
		if fields[0] != fieldCompiled || fields[1] != c.want {
			t.Errorf("%v: compiled %q, want %q", c.in, fields[1], c.want)
		}
	}
	ctx := context.Background()
	e, err := New(newMiniredis(t))
	if err != nil {
		t.Fatal(err)
	}
	cons := map[string]string{policy.KeyBlockTimeStart: "2200", policy.KeyBlockTimeEnd: "0700"}
	if _, err := e.SetConstraints(ctx, 1, 2, 1, cons); err != nil {
		t.Fatal(err)
	}
	if err := e.Restore(ctx, FamilyState{FamilyID: 3, Members: []MemberState{{CustomerID: 4, Constraints: cons, Version: 1}}}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{e.k.constraints(1, 2), e.k.constraints(3, 4)} {
		if keys, err := e.rdb.HKeys(ctx, k).Result(); err != nil || len(keys) < 2 || keys[0] != fieldCompiled || keys[1] != fieldWindows {
			t.Errorf("%s fields %q, %v: want #c and #w first", k, keys, err)
		}
		if w, err := e.rdb.HMGet(ctx, k, fieldCompiled, fieldWindows).Result(); err != nil || w[0] != "00,," || w[1] != "Q0:D1111111START " {
			t.Errorf("%s #c, #w = %q, %v", k, w, err)
		}
	}
	st, err := e.Status(ctx, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cons, st.Constraints); diff != "" {
		t.Errorf("status constraints (-want +got):\n%s", diff)
	}
}

// A constraints hash written by an earlier engine has no compiled windows:
// the script reads it whole and judges every event as it judges the same
// constraints written now, and as policy.Evaluate does.
func TestLegacyConstraintsJudgedAlike(t *testing.T) { eachBackend(t, checkLegacyConstraints) }

func checkLegacyConstraints(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	loc, _ := policy.LoadZone(policy.DefaultZone)
	rapid.Check(t, func(rt *rapid.T) {
		now := time.Date(2026, 3, 2, 0, 0, 0, 0, loc).Add(time.Duration(rapid.IntRange(0, 7*24*60).Draw(rt, "minute")) * time.Minute)
		prefix := fmt.Sprintf("legacy%d:%d:", time.Now().UnixNano(), checkSeq.Add(1))
		// Each check's keys go when it ends: the server is shared by every
		// check, and a keyspace growing by a check's keys each time makes
		// every SCAN (snapshots, rollbacks) slower than the last.
		defer dropPrefix(context.Background(), rdb, prefix)
		e, err := New(rdb, WithKeyPrefix(prefix), WithLocation(loc), WithClock(func() time.Time { return now }))
		if err != nil {
			rt.Fatal(err)
		}
		cons := genConstraints(rt)
		// Family 1 gets them written now, family 2 as an earlier engine wrote them.
		for f := int64(1); f <= 2; f++ {
			if _, err := e.SetPlan(ctx, f, 100*mb); err != nil {
				rt.Fatal(err)
			}
			if err := e.AddMember(ctx, f, 1); err != nil {
				rt.Fatal(err)
			}
		}
		if _, err := e.SetConstraints(ctx, 1, 1, 1, cons); err != nil {
			rt.Fatal(err)
		}
		if len(cons) > 0 {
			var raw []any
			for _, k := range slices.Sorted(maps.Keys(cons)) {
				raw = append(raw, k, cons[k])
			}
			if err := rdb.HSet(ctx, e.k.constraints(2, 1), raw...).Err(); err != nil {
				rt.Fatal(err)
			}
		}
		c, err := policy.ParseConstraints(cons)
		if err != nil {
			rt.Fatal(err)
		}
		for i := range 5 {
			app := rapid.SampledFrom(testApps).Draw(rt, "app")
			at := now.Add(time.Duration(rapid.IntRange(-3*24*60, 3*24*60).Draw(rt, "offset")) * time.Minute)
			bytes := rapid.Int64Range(0, 2*mb).Draw(rt, "bytes")
			var got [2]Result
			for f := int64(1); f <= 2; f++ {
				r, err := e.Apply(ctx, Event{ID: fmt.Sprintf("e%d", i), FamilyID: f, CustomerID: 1, Bytes: bytes,
					AppID: app.ID, Category: app.Category, At: at})
				if err != nil {
					rt.Fatal(err)
				}
				got[f-1] = r
			}
			if diff := cmp.Diff(got[0], got[1]); diff != "" {
				rt.Fatalf("compiled vs legacy hash (-compiled +legacy):\n%s", diff)
			}
			mo := policy.MomentOf(at, loc)
			want := policy.Evaluate(c, policy.Member{Member: true, DailyUsed: got[0].DailyUsed - usedIf(got[0], bytes),
				MonthlyUsed: got[0].MonthlyUsed - usedIf(got[0], bytes)},
				policy.Pool{Provisioned: true, Total: got[0].Total, Used: got[0].Total - got[0].Remaining - usedIf(got[0], bytes)},
				policy.Request{Bytes: bytes, AppID: app.ID, Category: app.Category, At: mo})
			if want.Decision != got[0].Decision || want.Rule != got[0].Rule {
				rt.Fatalf("engine %s %q, policy.Evaluate %s %q", got[0].Decision, got[0].Rule, want.Decision, want.Rule)
			}
		}
	})
}

func usedIf(r Result, bytes int64) int64 {
	if r.Decision == policy.Allowed {
		return bytes
	}
	return 0
}
