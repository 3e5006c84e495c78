package quota

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/dabom/dpcs/policy"
)

// A month an earlier engine began keeps each member's counters in the usage
// hash (m, d:<DD>) and none in the pool hash. The engine judges such a family
// as it judges one whose month it began itself, and moves the counters into
// the pool hash as it goes: family 1 gets its usage from the engine, family 2
// the same usage written as the earlier engine wrote it; every later event
// and every status of the two must agree, whatever their days.
func TestLegacyUsageJudgedAlike(t *testing.T) { eachBackend(t, checkLegacyUsage) }

func checkLegacyUsage(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	loc, _ := policy.LoadZone(policy.DefaultZone)
	rapid.Check(t, func(rt *rapid.T) {
		now := time.Date(2026, 3, 10, 0, 0, 0, 0, loc).Add(time.Duration(rapid.IntRange(0, 24*60).Draw(rt, "minute")) * time.Minute)
		prefix := fmt.Sprintf("legacyusage%d:%d:", time.Now().UnixNano(), checkSeq.Add(1))
		defer dropPrefix(context.Background(), rdb, prefix)
		e, err := New(rdb, WithKeyPrefix(prefix), WithLocation(loc), WithClock(func() time.Time { return now }))
		if err != nil {
			rt.Fatal(err)
		}
		for f := int64(1); f <= 2; f++ {
			if _, err := e.SetPlan(ctx, f, 200*mb); err != nil {
				rt.Fatal(err)
			}
			for c := int64(1); c <= 2; c++ {
				if err := e.AddMember(ctx, f, c); err != nil {
					rt.Fatal(err)
				}
			}
		}
		// Earlier usage this month: family 1 through the engine, family 2 as
		// the earlier engine's keys.
		month := policy.MomentOf(now, loc).Month
		days := map[int64]map[string]int64{}
		var used int64
		for i := range rapid.IntRange(0, 6).Draw(rt, "earlier") {
			c := rapid.Int64Range(1, 2).Draw(rt, "earlierMember")
			at := now.Add(-time.Duration(rapid.IntRange(0, 8*24*60).Draw(rt, "earlierAgo")) * time.Minute)
			b := rapid.Int64Range(1, 3*mb).Draw(rt, "earlierBytes")
			mo := policy.MomentOf(at, loc)
			if mo.Month != month {
				continue
			}
			r, err := e.Apply(ctx, Event{ID: fmt.Sprintf("early%d", i), FamilyID: 1, CustomerID: c, Bytes: b, AppID: "a", At: at})
			if err != nil || r.Decision != policy.Allowed {
				rt.Fatalf("earlier usage: %v %v", r, err)
			}
			if days[c] == nil {
				days[c] = map[string]int64{}
			}
			days[c][fieldMonth] += b
			days[c][dayField(mo.Day)] += b
			used += b
		}
		if used > 0 {
			if err := rdb.HSet(ctx, e.k.pool(2, month), fieldUsed, used).Err(); err != nil {
				rt.Fatal(err)
			}
		}
		for c, fields := range days {
			var args []any
			for k, v := range fields {
				args = append(args, k, v)
			}
			if err := rdb.HSet(ctx, e.k.usage(2, c, month), args...).Err(); err != nil {
				rt.Fatal(err)
			}
		}
		cons := genConstraints(rt)
		for f := int64(1); f <= 2; f++ {
			if _, err := e.SetConstraints(ctx, f, 1, 1, cons); err != nil {
				rt.Fatal(err)
			}
		}
		for i := range 8 {
			c := rapid.Int64Range(1, 2).Draw(rt, "member")
			at := now.Add(time.Duration(rapid.IntRange(-30*60, 30*60).Draw(rt, "offset")) * time.Minute)
			b := rapid.Int64Range(0, 4*mb).Draw(rt, "bytes")
			var got [2]Result
			var st [2]MemberStatus
			for f := int64(1); f <= 2; f++ {
				r, err := e.Apply(ctx, Event{ID: fmt.Sprintf("e%d", i), FamilyID: f, CustomerID: c, Bytes: b, AppID: "a", At: at})
				if err != nil {
					rt.Fatal(err)
				}
				got[f-1] = r
				if st[f-1], err = e.Status(ctx, f, c); err != nil {
					rt.Fatal(err)
				}
			}
			if diff := cmp.Diff(got[0], got[1]); diff != "" {
				rt.Fatalf("event %d: engine's month vs earlier engine's month (-new +earlier):\n%s", i, diff)
			}
			if diff := cmp.Diff(st[0], st[1]); diff != "" {
				rt.Fatalf("status after event %d (-new +earlier):\n%s", i, diff)
			}
		}
	})
}
