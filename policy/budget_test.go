package policy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// Per-app and per-category daily budgets: parsed and written back, judged
// after the time windows and before the member's limits — the app's
// budget, then its category's; use + request over the budget blocks,
// exactly at it passes —, lifted by the app's exception, and not reported
// by the member's standing (an app's budget does not block the member).
func TestBudgets(t *testing.T) {
	c := mustParse(t, map[string]string{"LIMIT:DATA:APP:com.youtube.app": "500", "LIMIT:DATA:CATEGORY:GAME": "300",
		"BLOCK:TIME:START": "2200", "BLOCK:TIME:END": "0700", "LIMIT:DATA:DAILY": "1000", "ALLOW:CATEGORY:MESSAGING": "1"})
	if diff := cmp.Diff(map[string]int64{"com.youtube.app": 500}, c.AppBudgets); diff != "" {
		t.Errorf("app budgets (-want +got):\n%s", diff)
	}
	if got := c.Map(); got["LIMIT:DATA:APP:com.youtube.app"] != "500" || got["LIMIT:DATA:CATEGORY:GAME"] != "300" {
		t.Errorf("Map() = %v", got)
	}
	noon := Moment{Day: "20261123", Month: "202611", Minute: 12 * 60, Weekday: 1}
	night := Moment{Day: "20261123", Month: "202611", Minute: 23 * 60, Weekday: 1}
	pool := Pool{Provisioned: true, Total: 1 << 30}
	for _, tc := range []struct {
		name string
		m    Member
		req  Request
		want Result
	}{
		{"within the app's", Member{Member: true, AppUsed: 400}, Request{Bytes: 100, AppID: "com.youtube.app", Category: CategoryVideo, At: noon},
			Result{Decision: Allowed, Deduct: 100}},
		{"over the app's", Member{Member: true, AppUsed: 401}, Request{Bytes: 100, AppID: "com.youtube.app", Category: CategoryVideo, At: noon},
			Result{Decision: BlockedAppLimit, Rule: "LIMIT:DATA:APP:com.youtube.app"}},
		{"over the category's", Member{Member: true, CategoryUsed: 250}, Request{Bytes: 51, AppID: "com.roblox", Category: CategoryGame, At: noon},
			Result{Decision: BlockedAppLimit, Rule: "LIMIT:DATA:CATEGORY:GAME"}},
		{"the app's before the member's limit", Member{Member: true, AppUsed: 500, DailyUsed: 1000}, Request{Bytes: 1, AppID: "com.youtube.app", At: noon},
			Result{Decision: BlockedAppLimit, Rule: "LIMIT:DATA:APP:com.youtube.app"}},
		{"the member's limit when within", Member{Member: true, DailyUsed: 1000}, Request{Bytes: 1, AppID: "com.youtube.app", At: noon},
			Result{Decision: BlockedLimitDaily, Rule: KeyLimitDaily}},
		{"a window before the budget", Member{Member: true, AppUsed: 500}, Request{Bytes: 1, AppID: "com.youtube.app", At: night},
			Result{Decision: BlockedTime, Rule: KeyBlockTimeStart}},
		{"an app without a budget", Member{Member: true, AppUsed: 1 << 20}, Request{Bytes: 1, AppID: "com.kakao.talk", Category: CategoryMessaging, At: noon},
			Result{Decision: Allowed, Deduct: 1}},
		{"no app, no budget", Member{Member: true, AppUsed: 1 << 20}, Request{Bytes: 1, At: noon}, Result{Decision: Allowed, Deduct: 1}},
	} {
		if got := Evaluate(c, tc.m, pool, tc.req); got != tc.want {
			t.Errorf("%s: Evaluate = %+v, want %+v", tc.name, got, tc.want)
		}
	}
	// "30분 더" for the app lifts its budget and its category's.
	x := mustParse(t, map[string]string{"LIMIT:DATA:APP:com.youtube.app": "500", "EXCEPT:APP:com.youtube.app": "202611231230"})
	if got := Evaluate(x, Member{Member: true, AppUsed: 500}, pool, Request{Bytes: 1, AppID: "com.youtube.app", At: noon}); got.Decision != Allowed {
		t.Errorf("an exception in effect: %+v", got)
	}
	if got := Evaluate(x, Member{Member: true, AppUsed: 500}, pool, Request{Bytes: 1, AppID: "com.youtube.app",
		At: Moment{Day: "20261123", Month: "202611", Minute: 12*60 + 30, Weekday: 1}}); got.Decision != BlockedAppLimit {
		t.Errorf("an exception ended: %+v", got)
	}
	if got := Status(c, Member{Member: true, AppUsed: 1 << 20}, pool, noon); got.Decision != Allowed {
		t.Errorf("Status with a used-up app budget: %+v, want ALLOWED", got)
	}
	for _, bad := range []map[string]string{{"LIMIT:DATA:APP:": "1"}, {"LIMIT:DATA:APP:a b": "1"}, {"LIMIT:DATA:APP:yt": "-1"},
		{"LIMIT:DATA:APP:yt": "1.5"}, {"LIMIT:DATA:CATEGORY:NEWS": "1"}, {"LIMIT:DATA:CATEGORY:": "1"}, {"LIMIT:DATA:APP:yt": "70368744177665"},
		{AppBudgetKey(strings.Repeat("a", MaxBudgetAppIDLen+1)): "1"}} {
		if _, err := ParseConstraints(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseConstraints(%v) = %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := ParseConstraints(map[string]string{AppBudgetKey(strings.Repeat("a", MaxBudgetAppIDLen)): "1"}); err != nil {
		t.Errorf("the longest app id with a budget: %v", err)
	}
	if !BlockedAppLimit.Valid() || !BlockedAppLimit.Blocked() {
		t.Error("BLOCKED_APP_LIMIT is not a known blocking decision")
	}
}

// A budget only adds BLOCKED_APP_LIMIT where Evaluate without it would
// reach the limits or the pool, the app's budget before its category's,
// none while the app's exception lasts; an event of an app and category
// without a budget is judged as without any budget at all.
func TestBudgetsProperty(t *testing.T) {
	apps := []string{"", "yt", "kk"}
	rapid.Check(t, func(t *rapid.T) {
		at := Moment{Day: "20261123", Month: "202611", Minute: rapid.IntRange(0, 1439).Draw(t, "minute"), Weekday: 1}
		c := genGrantConstraints(t, time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC), time.UTC)
		if rapid.Bool().Draw(t, "daily") {
			c.DailyLimit = Limit(rapid.Int64Range(0, 300).Draw(t, "dl"))
		}
		plain := c
		for _, app := range rapid.SliceOfDistinct(rapid.SampledFrom(apps[1:]), func(s string) string { return s }).Draw(t, "budgetApps") {
			if c.AppBudgets == nil {
				c.AppBudgets = map[string]int64{}
			}
			c.AppBudgets[app] = rapid.Int64Range(0, 300).Draw(t, "appBudget")
		}
		for _, cat := range rapid.SliceOfDistinct(rapid.SampledFrom([]Category{CategoryVideo, CategoryMessaging}), func(c Category) Category { return c }).Draw(t, "budgetCats") {
			if c.CategoryBudgets == nil {
				c.CategoryBudgets = map[Category]int64{}
			}
			c.CategoryBudgets[cat] = rapid.Int64Range(0, 300).Draw(t, "catBudget")
		}
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		m := Member{Member: rapid.IntRange(0, 9).Draw(t, "member") > 0, DailyUsed: rapid.Int64Range(0, 300).Draw(t, "du"),
			AppUsed: rapid.Int64Range(0, 300).Draw(t, "au"), CategoryUsed: rapid.Int64Range(0, 300).Draw(t, "cu")}
		p := Pool{Provisioned: true, Total: 1000, Used: rapid.Int64Range(0, 1000).Draw(t, "used")}
		req := Request{Bytes: rapid.Int64Range(0, 200).Draw(t, "bytes"), AppID: rapid.SampledFrom(apps).Draw(t, "app"),
			Category: rapid.SampledFrom([]Category{"", CategoryVideo, CategoryMessaging, CategoryGame}).Draw(t, "cat"), At: at}
		want := Evaluate(plain, m, p, req)
		reached := want.Decision == Allowed || want.Decision == BlockedLimitDaily || want.Decision == BlockedLimitMonthly || want.Decision == BlockedFamilyQuota
		if reached && !c.AppExcepted(req.AppID, at) {
			ab, byApp := c.AppBudgets[req.AppID]
			cb, byCat := c.CategoryBudgets[req.Category]
			switch {
			case req.AppID != "" && byApp && m.AppUsed+req.Bytes > ab:
				want = Result{Decision: BlockedAppLimit, Rule: AppBudgetKey(req.AppID)}
			case req.Category != "" && byCat && m.CategoryUsed+req.Bytes > cb:
				want = Result{Decision: BlockedAppLimit, Rule: CategoryBudgetKey(req.Category)}
			}
		}
		if got := Evaluate(c, m, p, req); got != want {
			t.Fatalf("Evaluate = %+v, want %+v", got, want)
		}
		if got, plainStatus := Status(c, m, p, at), Status(plain, m, p, at); got != plainStatus {
			t.Fatalf("Status with budgets %+v, without %+v", got, plainStatus)
		}
	})
}

// A grant of a budgeted app is capped by what its budgets leave (the
// smaller of the app's and the category's), final below the minimum with
// the budget's key, blocked when nothing is left, and sized as without a
// budget while the app's exception lasts.
func TestBudgetsSizeGrant(t *testing.T) {
	c := mustParse(t, map[string]string{"LIMIT:DATA:APP:yt": "500", "LIMIT:DATA:CATEGORY:VIDEO": "800", "LIMIT:DATA:DAILY": "10000"})
	noon := Moment{Day: "20261123", Month: "202611", Minute: 12 * 60, Weekday: 1}
	pool := Pool{Provisioned: true, Total: 1 << 30}
	req := GrantRequest{AppID: "yt", Category: CategoryVideo, At: noon, Want: 1000, Minimum: 50, Grants: 1}
	for _, tc := range []struct {
		name string
		m    Member
		req  GrantRequest
		want GrantSize
	}{
		{"the app's budget caps", Member{Member: true, AppUsed: 100}, req, GrantSize{Decision: Allowed, Granted: 400}},
		{"the category's leaves less", Member{Member: true, AppUsed: 100, CategoryUsed: 600}, req, GrantSize{Decision: Allowed, Granted: 200}},
		{"the last units", Member{Member: true, AppUsed: 470}, req, GrantSize{Decision: Allowed, Granted: 30, Final: true, Rule: "LIMIT:DATA:APP:yt"}},
		{"used up", Member{Member: true, AppUsed: 500}, req, GrantSize{Decision: BlockedAppLimit, Rule: "LIMIT:DATA:APP:yt", Final: true}},
		{"the category's used up", Member{Member: true, CategoryUsed: 900}, req, GrantSize{Decision: BlockedAppLimit, Rule: "LIMIT:DATA:CATEGORY:VIDEO", Final: true}},
		{"another app of the category", Member{Member: true, AppUsed: 500, CategoryUsed: 300},
			GrantRequest{AppID: "tv", Category: CategoryVideo, At: noon, Want: 1000, Minimum: 50, Grants: 1}, GrantSize{Decision: Allowed, Granted: 500}},
		{"no budget", Member{Member: true, AppUsed: 500, CategoryUsed: 900},
			GrantRequest{AppID: "kk", Category: CategoryMessaging, At: noon, Want: 1000, Minimum: 50, Grants: 1}, GrantSize{Decision: Allowed, Granted: 1000}},
	} {
		if got := SizeGrant(c, tc.m, pool, tc.req); got != tc.want {
			t.Errorf("%s: SizeGrant = %+v, want %+v", tc.name, got, tc.want)
		}
	}
	x := mustParse(t, map[string]string{"LIMIT:DATA:APP:yt": "500", "EXCEPT:APP:yt": "202611231230"})
	if got := SizeGrant(x, Member{Member: true, AppUsed: 500}, pool, req); got != (GrantSize{Decision: Allowed, Granted: 1000}) {
		t.Errorf("an exception in effect: %+v", got)
	}
}
