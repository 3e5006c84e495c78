package quota

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
)

func TestRestoreAfterFlush(t *testing.T) {
	ctx := context.Background()
	rdb := newMiniredis(t)
	seoul, _ := policy.LoadZone(policy.DefaultZone)
	now := time.Date(2026, 2, 10, 12, 0, 0, 0, seoul)
	e, err := New(rdb, WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	const fid = 7
	if _, err := e.SetPlan(ctx, fid, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := e.TopUp(ctx, fid, 20); err != nil {
		t.Fatal(err)
	}
	for _, c := range []int64{1, 2} {
		if err := e.AddMember(ctx, fid, c); err != nil {
			t.Fatal(err)
		}
	}
	limits := map[string]string{"LIMIT:DATA:MONTHLY": "60", "BLOCK:APP:x": "1"}
	if _, err := e.SetConstraints(ctx, fid, 2, 3, limits); err != nil {
		t.Fatal(err)
	}
	if err := e.SetThresholds(ctx, fid, policy.Thresholds{70, 20}); err != nil {
		t.Fatal(err)
	}
	usage := []Usage{
		{CustomerID: 1, At: now.AddDate(0, 0, -3), Bytes: 30},
		{CustomerID: 2, At: now.Add(-time.Hour), Bytes: 25},
		{CustomerID: 1, At: now.Add(-2 * time.Hour), Bytes: 10},
	}
	for i, u := range usage {
		r, err := e.Apply(ctx, Event{ID: "e" + string(rune('a'+i)), FamilyID: fid, CustomerID: u.CustomerID, Bytes: u.Bytes, At: u.At})
		if err != nil || r.Decision != policy.Allowed {
			t.Fatalf("apply %d: %v %v", i, r, err)
		}
	}
	// Last month's usage is ignored by Restore.
	usage = append(usage, Usage{CustomerID: 1, At: now.AddDate(0, -1, 0), Bytes: 99})
	before, err := e.Family(ctx, fid)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	st := FamilyState{FamilyID: fid, Provisioned: true, Plan: 100, TopUps: map[string]int64{"202602": 20}, Thresholds: policy.Thresholds{70, 20},
		Arms:    map[string]map[int]int{"202602": {70: 1}},
		Members: []MemberState{{CustomerID: 1}, {CustomerID: 2, Constraints: limits, Version: 3}}, Usage: usage}
	if err := e.Restore(ctx, st); err != nil {
		t.Fatal(err)
	}
	after, err := e.Family(ctx, fid)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("Family after restore (-before +after):\n%s", diff)
	}
	// Restoring again is idempotent; a stale version stays ignored.
	if err := e.Restore(ctx, st); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.SetConstraints(ctx, fid, 2, 3, nil); err != nil || ok {
		t.Errorf("SetConstraints(version 3) after restore = %v, %v; want ignored", ok, err)
	}
	again, _ := e.Family(ctx, fid)
	if diff := cmp.Diff(before, again); diff != "" {
		t.Errorf("second restore (-want +got):\n%s", diff)
	}
	month, from, to := e.CurrentMonth()
	if month != "202602" || !from.Equal(time.Date(2026, 2, 1, 0, 0, 0, 0, seoul)) || !to.Equal(time.Date(2026, 3, 1, 0, 0, 0, 0, seoul)) {
		t.Errorf("CurrentMonth = %s %v %v", month, from, to)
	}
}

func TestRestoreUnprovisionedAndDefaults(t *testing.T) {
	ctx := context.Background()
	e, err := New(newMiniredis(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Restore(ctx, FamilyState{FamilyID: 3, Members: []MemberState{{CustomerID: 9}}}); err != nil {
		t.Fatal(err)
	}
	f, err := e.Family(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if f.Provisioned || f.Total != 0 || len(f.Members) != 1 || f.Members[0].Version != 0 || len(f.Fired) != 0 {
		t.Errorf("Family = %+v", f)
	}
}

func TestRestoreInvalid(t *testing.T) {
	ctx := context.Background()
	e, err := New(newMiniredis(t))
	if err != nil {
		t.Fatal(err)
	}
	month, _, _ := e.CurrentMonth()
	for name, st := range map[string]FamilyState{
		"family":      {},
		"plan":        {FamilyID: 1, Plan: -1},
		"total":       {FamilyID: 1, Plan: policy.MaxBytes, TopUps: map[string]int64{month: 1}},
		"judged":      {FamilyID: 1, Judged: []JudgedEvent{{ID: "", Result: Result{Decision: policy.Allowed}}}},
		"thresholds":  {FamilyID: 1, Thresholds: policy.Thresholds{150}},
		"member":      {FamilyID: 1, Members: []MemberState{{CustomerID: 0}}},
		"version":     {FamilyID: 1, Members: []MemberState{{CustomerID: 1, Version: -1}}},
		"constraints": {FamilyID: 1, Members: []MemberState{{CustomerID: 1, Constraints: map[string]string{"NOPE": "1"}}}},
		"usage":       {FamilyID: 1, Usage: []Usage{{CustomerID: 1, Bytes: -1}}},
	} {
		if err := e.Restore(ctx, st); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// The daily budget counters come back from SQL's usage: the day's use of
// each budgeted app and category (the category from the catalog when the
// usage names none), for the days events may still be judged for; a stale
// counter goes; a member without a budget gets none; the next events are
// judged against the restored counters.
func TestRestoreBudgets(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		seoul, _ := policy.LoadZone(policy.DefaultZone)
		now := time.Date(2026, 2, 10, 12, 0, 0, 0, seoul)
		prefix := fmt.Sprintf("rb%d:", time.Now().UnixNano())
		defer dropPrefix(ctx, rdb, prefix)
		cat := policy.NewCatalog([]policy.App{{ID: "yt", Category: policy.CategoryVideo}, {ID: "rb", Category: policy.CategoryGame},
			{ID: "kk", Category: policy.CategoryMessaging}})
		e, err := New(rdb, WithKeyPrefix(prefix), WithClock(func() time.Time { return now }), WithCatalog(cat))
		if err != nil {
			t.Fatal(err)
		}
		const fid = 7
		budgets := map[string]string{"LIMIT:DATA:APP:yt": "100", "LIMIT:DATA:CATEGORY:GAME": "50"}
		if _, err := e.SetPlan(ctx, fid, 1000); err != nil {
			t.Fatal(err)
		}
		for _, c := range []int64{1, 2} {
			if err := e.AddMember(ctx, fid, c); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.SetConstraints(ctx, fid, 1, 1, budgets); err != nil {
			t.Fatal(err)
		}
		usage := []Usage{
			{CustomerID: 1, At: now.Add(-time.Hour), Bytes: 60, AppID: "yt"},
			{CustomerID: 1, At: now.Add(-20 * time.Hour), Bytes: 30, AppID: "yt"}, // yesterday
			{CustomerID: 1, At: now.Add(-2 * time.Hour), Bytes: 40, AppID: "rb", Category: policy.CategoryGame},
			{CustomerID: 1, At: now.Add(-3 * time.Hour), Bytes: 10, AppID: "kk"},
			{CustomerID: 2, At: now.Add(-time.Hour), Bytes: 70, AppID: "yt"},
		}
		for i, u := range usage {
			r, err := e.Apply(ctx, Event{ID: fmt.Sprintf("e%d", i), FamilyID: fid, CustomerID: u.CustomerID, Bytes: u.Bytes, AppID: u.AppID,
				Category: u.Category, At: u.At})
			if err != nil || r.Decision != policy.Allowed {
				t.Fatalf("apply %d: %+v %v", i, r, err)
			}
		}
		today, yesterday := e.k.budget(fid, 1, "20260210"), e.k.budget(fid, 1, "20260209")
		read := func() map[string]map[string]string {
			out := map[string]map[string]string{}
			for _, k := range []string{today, yesterday, e.k.budget(fid, 2, "20260210")} {
				h, err := rdb.HGetAll(ctx, k).Result()
				if err != nil {
					t.Fatal(err)
				}
				out[k] = h
			}
			return out
		}
		before := read()
		if want := map[string]string{"a:yt": "60", "c:GAME": "40"}; !cmp.Equal(before[today], want) {
			t.Fatalf("today's counters before = %v, want %v", before[today], want)
		}
		// A stale state's counter, and a lost one.
		if err := rdb.HSet(ctx, today, "a:yt", "99").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Del(ctx, yesterday).Err(); err != nil {
			t.Fatal(err)
		}
		st := FamilyState{FamilyID: fid, Provisioned: true, Plan: 10000,
			Members: []MemberState{{CustomerID: 1, Constraints: budgets, Version: 1}, {CustomerID: 2}}, Usage: usage}
		if err := e.Restore(ctx, st); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(before, read()); diff != "" {
			t.Errorf("budget counters after restore (-before +after):\n%s", diff)
		}
		ttl, err := rdb.TTL(ctx, today).Result()
		if err != nil || ttl <= 12*time.Hour || ttl > 12*time.Hour+e.bucketTTL() {
			t.Errorf("today's counters' TTL = %v, %v; want the day's end and a dedupe bucket's life", ttl, err)
		}
		for _, tc := range []struct {
			app   string
			bytes int64
			want  policy.Decision
			rule  string
		}{
			{"yt", 41, policy.BlockedAppLimit, "LIMIT:DATA:APP:yt"},
			{"rb", 11, policy.BlockedAppLimit, "LIMIT:DATA:CATEGORY:GAME"},
			{"yt", 40, policy.Allowed, ""},
		} {
			r, err := e.Apply(ctx, Event{ID: "after-" + tc.app + fmt.Sprint(tc.bytes), FamilyID: fid, CustomerID: 1, Bytes: tc.bytes, AppID: tc.app, At: now})
			if err != nil || r.Decision != tc.want || r.Rule != tc.rule {
				t.Errorf("%s %d B after restore: %+v, %v; want %s %s", tc.app, tc.bytes, r, err, tc.want, tc.rule)
			}
		}
	})
}

// TestRestoreKeepsOnlyChargeableDays: a rebuild writes a member's earlier
// days only while something may still be charged to them (an event within
// twice the dedupe window, an open grant's step); older days live on in the
// month's sum only, and a member with nothing else to keep has no usage hash.
func TestRestoreKeepsOnlyChargeableDays(t *testing.T) {
	ctx := context.Background()
	rdb := newMiniredis(t)
	seoul, _ := policy.LoadZone(policy.DefaultZone)
	now := time.Date(2026, 2, 10, 12, 0, 0, 0, seoul)
	e, err := New(rdb, WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	const fid = 7
	day := func(d, h int) time.Time { return time.Date(2026, 2, d, h, 0, 0, 0, seoul) }
	st := FamilyState{FamilyID: fid, Provisioned: true, Plan: 10000,
		Members: []MemberState{{CustomerID: 1}, {CustomerID: 2}, {CustomerID: 3}},
		Usage: []Usage{
			{CustomerID: 1, At: day(2, 9), Bytes: 1},    // older than 2 windows: month only
			{CustomerID: 1, At: day(7, 23), Bytes: 2},   // still older
			{CustomerID: 1, At: day(8, 0), Bytes: 4},    // the day 48 h ago: kept
			{CustomerID: 1, At: day(9, 10), Bytes: 8},   // kept
			{CustomerID: 1, At: day(10, 11), Bytes: 16}, // the slot
			{CustomerID: 2, At: day(3, 10), Bytes: 32},  // its open grant's day: kept
			{CustomerID: 2, At: day(4, 10), Bytes: 64},  // dropped
			{CustomerID: 2, At: day(5, 10), Bytes: 128}, // the slot
			{CustomerID: 3, At: day(1, 10), Bytes: 256}, // dropped
			{CustomerID: 3, At: day(6, 10), Bytes: 512}, // the slot
		},
		Grants: []GrantState{{GrantID: "g1", Step: "s1", CustomerID: 2, Reserved: 10, At: day(3, 11)}},
	}
	if err := e.Restore(ctx, st); err != nil {
		t.Fatal(err)
	}
	for c, want := range map[int64]map[string]string{
		1: {"d:08": "4", "d:09": "8"},
		2: {"d:03": "32"},
		3: {},
	} {
		got, err := rdb.HGetAll(ctx, e.k.usage(fid, c, "202602")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("customer %d's usage hash (-want +got):\n%s", c, diff)
		}
	}
	pool, err := rdb.HMGet(ctx, e.k.pool(fid, "202602"), "used", "u:1", "d:1", "u:2", "d:2", "u:3", "d:3").Result()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]any{"1023", "31", "10:16", "224", "05:128", "768", "06:512"}, pool); diff != "" {
		t.Errorf("pool hash (-want +got):\n%s", diff)
	}
	// A late event of a kept day counts on that day's restored counter.
	r, err := e.Apply(ctx, Event{ID: "late", FamilyID: fid, CustomerID: 1, Bytes: 1, At: day(9, 20)})
	if err != nil || r.Decision != policy.Allowed {
		t.Fatalf("late event: %+v %v", r, err)
	}
	if got, _ := rdb.HGet(ctx, e.k.usage(fid, 1, "202602"), "d:09").Result(); got != "9" {
		t.Errorf("d:09 after a late event = %q, want 9", got)
	}
}

// TestVersionInFamilyHash: a member's policy version is a field of the
// family hash (v:<cid>), not a key of its own; an earlier engine's key is
// read while the field is absent and deleted by the next write; the version
// outlives the membership (RemoveMember, a restore without the member).
func TestVersionInFamilyHash(t *testing.T) { eachBackend(t, checkVersionInFamilyHash) }

func checkVersionInFamilyHash(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	e, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	const fid = 9
	limits := map[string]string{"LIMIT:DATA:DAILY": "100"}
	set := func(c, v int64, want bool) {
		t.Helper()
		if ok, err := e.SetConstraints(ctx, fid, c, v, limits); err != nil || ok != want {
			t.Fatalf("SetConstraints(%d, version %d) = %v, %v; want %v", c, v, ok, err, want)
		}
	}
	field := func(c int64) string {
		t.Helper()
		v, err := rdb.HGet(ctx, e.k.family(fid), versionField(c)).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		return v
	}
	keys := func(c int64) int64 {
		t.Helper()
		n, err := rdb.Exists(ctx, e.k.legacyVersion(fid, c)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, c := range []int64{91, 92, 93} {
		if err := e.AddMember(ctx, fid, c); err != nil {
			t.Fatal(err)
		}
	}
	set(91, 3, true)
	if field(91) != "3" || keys(91) != 0 {
		t.Errorf("after version 3: v:91 = %q, version keys %d; want 3, 0", field(91), keys(91))
	}
	set(91, 3, false)
	// An earlier engine's version key: read, then replaced by the field.
	if err := rdb.Set(ctx, e.k.legacyVersion(fid, 92), 5, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if st, err := e.Status(ctx, fid, 92); err != nil || st.Version != 5 {
		t.Errorf("Status(92).Version = %d, %v; want 5 from the earlier key", st.Version, err)
	}
	set(92, 4, false)
	set(92, 6, true)
	if field(92) != "6" || keys(92) != 0 {
		t.Errorf("after version 6: v:92 = %q, version keys %d; want 6, 0", field(92), keys(92))
	}
	// Removed: the version stays.
	if err := e.RemoveMember(ctx, fid, 91); err != nil {
		t.Fatal(err)
	}
	set(91, 3, false)
	// A restore without 91 and 92 (removed since): their versions stay;
	// 93's comes from the source of truth.
	st := FamilyState{FamilyID: fid, Members: []MemberState{{CustomerID: 93, Constraints: limits, Version: 7}}}
	if err := e.Restore(ctx, st); err != nil {
		t.Fatal(err)
	}
	if field(91) != "3" || field(92) != "6" || field(93) != "7" {
		t.Errorf("after the restore: v:91 %q v:92 %q v:93 %q; want 3 6 7", field(91), field(92), field(93))
	}
	set(92, 6, false)
	if s, err := e.Status(ctx, fid, 93); err != nil || s.Version != 7 || s.Constraints["LIMIT:DATA:DAILY"] != "100" {
		t.Errorf("Status(93) = %+v, %v; want version 7 and its limit", s, err)
	}
	// The source of truth says 93 has no policy now: no version.
	st.Members[0] = MemberState{CustomerID: 93}
	if err := e.Restore(ctx, st); err != nil {
		t.Fatal(err)
	}
	if field(93) != "" {
		t.Errorf("v:93 after a restore without its policy = %q, want none", field(93))
	}
}

// A grant step's charge counts for the daily budgets of the step's day and
// category (what grant.lua counted), though its usage is charged to the
// day of the reservation it returns (Usage.At = ChargedAt): Usage.BudgetAt
// names the step's day. A category-only rating group (no app) counts for
// its category's budget. Restored from what the rebuild reads, the
// counters are those the engine kept, and the next step is judged on them.
func TestRestoreGrantBudgets(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		seoul, _ := policy.LoadZone(policy.DefaultZone)
		now := time.Date(2026, 2, 9, 23, 50, 0, 0, seoul)
		prefix := fmt.Sprintf("rg%d:", time.Now().UnixNano())
		defer dropPrefix(ctx, rdb, prefix)
		e, err := New(rdb, WithKeyPrefix(prefix), WithClock(func() time.Time { return now }))
		if err != nil {
			t.Fatal(err)
		}
		const fid, cid = 8, 1
		budgets := map[string]string{"LIMIT:DATA:APP:yt": "100000", "LIMIT:DATA:CATEGORY:VIDEO": "150000"}
		if _, err := e.SetPlan(ctx, fid, 10_000_000); err != nil {
			t.Fatal(err)
		}
		if err := e.AddMember(ctx, fid, cid); err != nil {
			t.Fatal(err)
		}
		if _, err := e.SetConstraints(ctx, fid, cid, 1, budgets); err != nil {
			t.Fatal(err)
		}
		step := func(id, grant, app string, used int64) GrantResult {
			t.Helper()
			r, err := e.Grant(ctx, []GrantOp{{ID: id, GrantID: grant, FamilyID: fid, CustomerID: cid, AppID: app,
				Category: policy.CategoryVideo, Used: used, Requested: 20_000, At: now}})
			if err != nil {
				t.Fatal(err)
			}
			return r[0]
		}
		// Reserved before midnight, reported after it.
		step("a1", "ga", "yt", 0)
		step("v1", "gv", "", 0)
		now = time.Date(2026, 2, 10, 0, 10, 0, 0, seoul)
		a2 := step("a2", "ga", "yt", 15_000)
		v2 := step("v2", "gv", "", 18_000)
		today, yesterday := e.k.budget(fid, cid, "20260210"), e.k.budget(fid, cid, "20260209")
		read := func() map[string]map[string]string {
			out := map[string]map[string]string{}
			for _, k := range []string{today, yesterday} {
				h, err := rdb.HGetAll(ctx, k).Result()
				if err != nil {
					t.Fatal(err)
				}
				out[k] = h
			}
			return out
		}
		before := read()
		if want := map[string]string{"a:yt": "15000", "c:VIDEO": "33000"}; !cmp.Equal(before[today], want) {
			t.Fatalf("today's counters before = %v, want %v", before[today], want)
		}
		if err := rdb.Del(ctx, today, yesterday).Err(); err != nil {
			t.Fatal(err)
		}
		// What the rebuild reads: each charge at the day it was charged to,
		// with the step's day and category.
		st := FamilyState{FamilyID: fid, Provisioned: true, Plan: 10_000_000,
			Members: []MemberState{{CustomerID: cid, Constraints: budgets, Version: 1}},
			Usage: []Usage{
				{CustomerID: cid, At: a2.ChargedAt, BudgetAt: now, Bytes: 15_000, AppID: "yt", Category: policy.CategoryVideo},
				{CustomerID: cid, At: v2.ChargedAt, BudgetAt: now, Bytes: 18_000, Category: policy.CategoryVideo},
			},
			Grants: []GrantState{{GrantID: "ga", CustomerID: cid, Reserved: a2.Granted, At: now, Step: "a2"},
				{GrantID: "gv", CustomerID: cid, Reserved: v2.Granted, At: now, Step: "v2"}}}
		if !a2.ChargedAt.Before(time.Date(2026, 2, 10, 0, 0, 0, 0, seoul)) {
			t.Fatalf("the step's charge went to %v, not the reservation's day", a2.ChargedAt)
		}
		if err := e.Restore(ctx, st); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(before, read()); diff != "" {
			t.Errorf("budget counters after restore (-before +after):\n%s", diff)
		}
	})
}
