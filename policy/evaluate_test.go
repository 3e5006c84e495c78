package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mustParse(t *testing.T, m map[string]string) Constraints {
	t.Helper()
	c, err := ParseConstraints(m)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestEvaluateOrder(t *testing.T) {
	member := Member{Member: true, DailyUsed: 90, MonthlyUsed: 900}
	pool := Pool{Provisioned: true, Total: 1000, Used: 950}
	noon := Moment{Minute: 12 * 60, Weekday: 3}
	today := Moment{Day: "20261123", Month: "202611", Minute: 12 * 60, Weekday: 1}
	all := map[string]string{
		"BLOCK:ACCESS": "1", "BLOCK:APP:yt": "1", "BLOCK:CATEGORY:GAME": "1",
		"BLOCK:TIME:START": "1100", "BLOCK:TIME:END": "1300",
		"LIMIT:DATA:DAILY": "100", "LIMIT:DATA:MONTHLY": "905", "THROTTLE:SPEED": "64",
	}
	without := func(keys ...string) map[string]string {
		m := map[string]string{}
		for k, v := range all {
			m[k] = v
		}
		for _, k := range keys {
			delete(m, k)
		}
		return m
	}
	cases := []struct {
		name   string
		cons   map[string]string
		member Member
		pool   Pool
		req    Request
		want   Result
	}{
		{"not a member first", all, Member{}, pool, Request{Bytes: 1, AppID: "yt", At: noon}, Result{Decision: BlockedNotMember, Rule: RuleMembership}},
		{"access", all, member, pool, Request{Bytes: 1, AppID: "yt", At: noon}, Result{Decision: BlockedAccess, Rule: KeyBlockAccess}},
		{"app", without("BLOCK:ACCESS"), member, pool, Request{Bytes: 1, AppID: "yt", Category: CategoryGame, At: noon}, Result{Decision: BlockedApp, Rule: "BLOCK:APP:yt"}},
		{"category", without("BLOCK:ACCESS"), member, pool, Request{Bytes: 1, AppID: "rb", Category: CategoryGame, At: noon}, Result{Decision: BlockedApp, Rule: "BLOCK:CATEGORY:GAME"}},
		{"time", without("BLOCK:ACCESS"), member, pool, Request{Bytes: 1, AppID: "kk", At: noon}, Result{Decision: BlockedTime, Rule: KeyBlockTimeStart}},
		{"daily", without("BLOCK:ACCESS", "BLOCK:TIME:START", "BLOCK:TIME:END"), member, pool, Request{Bytes: 11, AppID: "kk", At: noon}, Result{Decision: BlockedLimitDaily, Rule: KeyLimitDaily}},
		{"daily exact fits", without("BLOCK:ACCESS", "BLOCK:TIME:START", "BLOCK:TIME:END", "LIMIT:DATA:MONTHLY"), member, pool, Request{Bytes: 10, AppID: "kk", At: noon}, Result{Decision: Allowed, Deduct: 10, ThrottleKbps: 64}},
		{"monthly", without("BLOCK:ACCESS", "BLOCK:TIME:START", "BLOCK:TIME:END"), member, pool, Request{Bytes: 6, AppID: "kk", At: noon}, Result{Decision: BlockedLimitMonthly, Rule: KeyLimitMonthly}},
		{"pool", without("BLOCK:ACCESS", "BLOCK:TIME:START", "BLOCK:TIME:END", "LIMIT:DATA:MONTHLY", "LIMIT:DATA:DAILY"), member, pool, Request{Bytes: 51, At: noon}, Result{Decision: BlockedFamilyQuota, Rule: RulePool}},
		{"pool exact", nil, member, pool, Request{Bytes: 50, At: noon}, Result{Decision: Allowed, Deduct: 50}},
		{"unprovisioned", nil, member, Pool{}, Request{Bytes: 1, At: noon}, Result{Decision: BlockedFamilyQuota, Rule: RulePoolUnprovisioned}},
		{"unprovisioned zero bytes", nil, member, Pool{}, Request{At: noon}, Result{Decision: Allowed}},
		{"overdrawn pool counts as empty", nil, member, Pool{Provisioned: true, Total: 10, Used: 20}, Request{Bytes: 1, At: noon}, Result{Decision: BlockedFamilyQuota, Rule: RulePool}},
		{"limit zero blocks any byte", map[string]string{"LIMIT:DATA:DAILY": "0"}, Member{Member: true}, pool, Request{Bytes: 1, At: noon}, Result{Decision: BlockedLimitDaily, Rule: KeyLimitDaily}},
		{"today's extra lifts monthly", map[string]string{"LIMIT:DATA:MONTHLY": "905", "LIMIT:DATA:EXTRA:20261123": "5"}, member, pool, Request{Bytes: 10, At: today}, Result{Decision: Allowed, Deduct: 10}},
		{"today's extra exact edge", map[string]string{"LIMIT:DATA:MONTHLY": "905", "LIMIT:DATA:EXTRA:20261123": "5"}, member, pool, Request{Bytes: 11, At: today}, Result{Decision: BlockedLimitMonthly, Rule: KeyLimitMonthly}},
		{"month's extra lifts daily", map[string]string{"LIMIT:DATA:DAILY": "100", "LIMIT:DATA:EXTRA:202611": "20"}, member, pool, Request{Bytes: 30, At: today}, Result{Decision: Allowed, Deduct: 30}},
		{"yesterday's extra ignored", map[string]string{"LIMIT:DATA:MONTHLY": "905", "LIMIT:DATA:EXTRA:20261122": "500"}, member, pool, Request{Bytes: 6, At: today}, Result{Decision: BlockedLimitMonthly, Rule: KeyLimitMonthly}},
		{"extra makes no limit", map[string]string{"LIMIT:DATA:EXTRA:20261123": "1"}, member, pool, Request{Bytes: 50, At: today}, Result{Decision: Allowed, Deduct: 50}},
		// Always allowed during downtime, and exceptions ("30분 더").
		{"always-allowed app in downtime", map[string]string{"BLOCK:TIME:START": "1100", "BLOCK:TIME:END": "1300", "ALLOW:APP:kk": "1"}, member, pool, Request{Bytes: 5, AppID: "kk", At: today}, Result{Decision: Allowed, Deduct: 5}},
		{"always-allowed category in downtime", map[string]string{"BLOCK:TIME:night": "1100-1300", "ALLOW:CATEGORY:MESSAGING": "1"}, member, pool, Request{Bytes: 5, AppID: "kk", Category: CategoryMessaging, At: today}, Result{Decision: Allowed, Deduct: 5}},
		{"others still in downtime", map[string]string{"BLOCK:TIME:night": "1100-1300", "ALLOW:CATEGORY:MESSAGING": "1"}, member, pool, Request{Bytes: 5, AppID: "yt", Category: CategoryVideo, At: today}, Result{Decision: BlockedTime, Rule: "BLOCK:TIME:night"}},
		{"always allowed is not unblocked", map[string]string{"BLOCK:APP:kk": "1", "ALLOW:APP:kk": "1"}, member, pool, Request{Bytes: 5, AppID: "kk", At: today}, Result{Decision: BlockedApp, Rule: "BLOCK:APP:kk"}},
		{"always allowed within limits", map[string]string{"BLOCK:TIME:night": "1100-1300", "ALLOW:APP:kk": "1", "LIMIT:DATA:DAILY": "100"}, member, pool, Request{Bytes: 11, AppID: "kk", At: today}, Result{Decision: BlockedLimitDaily, Rule: KeyLimitDaily}},
		{"time exception lifts downtime", map[string]string{"BLOCK:TIME:night": "1100-1300", "EXCEPT:TIME": "202611231201"}, member, pool, Request{Bytes: 5, At: today}, Result{Decision: Allowed, Deduct: 5}},
		{"time exception ended", map[string]string{"BLOCK:TIME:night": "1100-1300", "EXCEPT:TIME": "202611231200"}, member, pool, Request{Bytes: 5, At: today}, Result{Decision: BlockedTime, Rule: "BLOCK:TIME:night"}},
		{"time exception not an app's", map[string]string{"BLOCK:APP:yt": "1", "EXCEPT:TIME": "202611231300"}, member, pool, Request{Bytes: 5, AppID: "yt", At: today}, Result{Decision: BlockedApp, Rule: "BLOCK:APP:yt"}},
		{"app exception lifts the app", map[string]string{"BLOCK:APP:yt": "1", "BLOCK:CATEGORY:VIDEO": "1", "EXCEPT:APP:yt": "202611231230"}, member, pool, Request{Bytes: 5, AppID: "yt", Category: CategoryVideo, At: today}, Result{Decision: Allowed, Deduct: 5}},
		{"app exception not the category's others", map[string]string{"BLOCK:CATEGORY:VIDEO": "1", "EXCEPT:APP:yt": "202611231230"}, member, pool, Request{Bytes: 5, AppID: "nf", Category: CategoryVideo, At: today}, Result{Decision: BlockedApp, Rule: "BLOCK:CATEGORY:VIDEO"}},
		{"app exception ended", map[string]string{"BLOCK:APP:yt": "1", "EXCEPT:APP:yt": "202611231159"}, member, pool, Request{Bytes: 5, AppID: "yt", At: today}, Result{Decision: BlockedApp, Rule: "BLOCK:APP:yt"}},
		{"app exception not downtime", map[string]string{"BLOCK:APP:yt": "1", "BLOCK:TIME:night": "1100-1300", "EXCEPT:APP:yt": "202611231230"}, member, pool, Request{Bytes: 5, AppID: "yt", At: today}, Result{Decision: BlockedTime, Rule: "BLOCK:TIME:night"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Evaluate(mustParse(t, c.cons), c.member, c.pool, c.req)
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestEvaluateNamedWindowsReportSmallestKey(t *testing.T) {
	c := mustParse(t, map[string]string{"BLOCK:TIME:zz": "0000-0000", "BLOCK:TIME:Aa": "1100-1300", "BLOCK:TIME:b": "1100-1300@MON"})
	got := Evaluate(c, Member{Member: true}, Pool{Provisioned: true, Total: 10}, Request{Bytes: 1, At: Moment{Minute: 720, Weekday: 1}})
	if got.Rule != "BLOCK:TIME:Aa" {
		t.Errorf("rule %q, want BLOCK:TIME:Aa (byte order)", got.Rule)
	}
}

func TestStatus(t *testing.T) {
	pool := Pool{Provisioned: true, Total: 100, Used: 10}
	noon := Moment{Day: "20261123", Month: "202611", Minute: 720, Weekday: 1}
	cases := []struct {
		name   string
		cons   map[string]string
		member Member
		pool   Pool
		want   Result
	}{
		{"free", map[string]string{"THROTTLE:SPEED": "9", "BLOCK:APP:yt": "1"}, Member{Member: true}, pool, Result{Decision: Allowed, ThrottleKbps: 9}},
		{"removed", nil, Member{}, pool, Result{Decision: BlockedNotMember, Rule: RuleMembership}},
		{"manual", map[string]string{"BLOCK:ACCESS": "1"}, Member{Member: true}, pool, Result{Decision: BlockedAccess, Rule: KeyBlockAccess}},
		{"time", map[string]string{"BLOCK:TIME:lunch": "1200-1300"}, Member{Member: true}, pool, Result{Decision: BlockedTime, Rule: "BLOCK:TIME:lunch"}},
		{"at daily limit", map[string]string{"LIMIT:DATA:DAILY": "5"}, Member{Member: true, DailyUsed: 5}, pool, Result{Decision: BlockedLimitDaily, Rule: KeyLimitDaily}},
		{"under daily limit", map[string]string{"LIMIT:DATA:DAILY": "5"}, Member{Member: true, DailyUsed: 4}, pool, Result{Decision: Allowed}},
		{"over monthly", map[string]string{"LIMIT:DATA:MONTHLY": "500"}, Member{Member: true, MonthlyUsed: 1200}, pool, Result{Decision: BlockedLimitMonthly, Rule: KeyLimitMonthly}},
		{"pool empty", nil, Member{Member: true}, Pool{Provisioned: true, Total: 5, Used: 5}, Result{Decision: BlockedFamilyQuota, Rule: RulePool}},
		{"pool unprovisioned", nil, Member{Member: true}, Pool{}, Result{Decision: BlockedFamilyQuota, Rule: RulePoolUnprovisioned}},
		{"monthly lifted by today's extra", map[string]string{"LIMIT:DATA:MONTHLY": "500", "LIMIT:DATA:EXTRA:20261123": "800"}, Member{Member: true, MonthlyUsed: 1200}, pool, Result{Decision: Allowed}},
		{"at lifted monthly", map[string]string{"LIMIT:DATA:MONTHLY": "500", "LIMIT:DATA:EXTRA:202611": "700"}, Member{Member: true, MonthlyUsed: 1200}, pool, Result{Decision: BlockedLimitMonthly, Rule: KeyLimitMonthly}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if d := cmp.Diff(c.want, Status(mustParse(t, c.cons), c.member, c.pool, noon)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestDecisions(t *testing.T) {
	for _, d := range Decisions() {
		if !d.Valid() || d.Blocked() != (d != Allowed) || (d != Allowed && !strings.HasPrefix(string(d), "BLOCKED_")) {
			t.Errorf("%s", d)
		}
	}
	if Decision("MAYBE").Valid() {
		t.Error("MAYBE valid")
	}
}

func TestThresholds(t *testing.T) {
	th, err := ParseThresholds("10,50,30")
	if err != nil || th.String() != "50,30,10" {
		t.Fatalf("%v %v", th, err)
	}
	// An empty list is alerts off, not "no list" (nil: the engine default).
	if th, err := ParseThresholds(""); err != nil || th == nil || len(th) != 0 {
		t.Errorf("empty: %#v %v, want an empty, non-nil list", th, err)
	}
	if th, err := Thresholds(nil).Canonical(); err != nil || th == nil || len(th) != 0 {
		t.Errorf("canonical of nil: %#v %v, want an empty, non-nil list", th, err)
	}
	for _, bad := range []string{"0", "100", "50,50", "x", "05", "1,2,3,4,5,6,7,8,9,10,11"} {
		if _, err := ParseThresholds(bad); err == nil || !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	cases := []struct {
		p                int
		total, remaining int64
		want             bool
	}{
		{50, 100, 50, true}, {50, 100, 51, false}, {10, 100, 0, true}, {10, 0, 0, false}, {30, 3, 1, false}, {30, 10, 3, true}, {30, 10, 4, false},
		{10, MaxBytes, MaxBytes / 10, true},
	}
	for _, c := range cases {
		if got := Reached(c.p, c.total, c.remaining); got != c.want {
			t.Errorf("Reached(%d, %d, %d) = %v", c.p, c.total, c.remaining, got)
		}
	}
	if DefaultThresholds().String() != "50,30,10" {
		t.Error(DefaultThresholds())
	}
}
