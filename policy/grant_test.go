package policy

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

func TestSizeGrant(t *testing.T) {
	noon := Moment{Day: "20261123", Month: "202611", Minute: 12 * 60, Weekday: 1}
	member := Member{Member: true, DailyUsed: 40, MonthlyUsed: 400}
	pool := Pool{Provisioned: true, Total: 1000, Used: 600}
	want := func(n int64) GrantRequest {
		return GrantRequest{Want: n, Minimum: 10, Grants: 1, At: noon, AppID: "kk"}
	}
	withGrants := func(r GrantRequest, n int64) GrantRequest { r.Grants = n; return r }
	reserved := func(p Pool, n int64) Pool { p.Reserved = n; return p }
	holding := func(m Member, d, mo int64) Member { m.DailyReserved, m.MonthlyReserved = d, mo; return m }
	limits := map[string]string{"LIMIT:DATA:DAILY": "100", "LIMIT:DATA:MONTHLY": "1000", "THROTTLE:SPEED": "64"}
	cases := []struct {
		name   string
		cons   map[string]string
		member Member
		pool   Pool
		req    GrantRequest
		want   GrantSize
	}{
		{"the request", nil, member, pool, want(50), GrantSize{Decision: Allowed, Granted: 50}},
		{"the pool left", nil, member, pool, want(500), GrantSize{Decision: Allowed, Granted: 400}},
		{"the daily limit left", limits, member, pool, want(500), GrantSize{Decision: Allowed, Granted: 60, ThrottleKbps: 64}},
		{"the monthly limit left", map[string]string{"LIMIT:DATA:MONTHLY": "430"}, member, pool, want(500), GrantSize{Decision: Allowed, Granted: 30}},
		{"a fair share of what is left", nil, member, pool, withGrants(want(500), 3), GrantSize{Decision: Allowed, Granted: 133}},
		{"a fair share counts reservations as left", nil, member, reserved(pool, 200), withGrants(want(500), 2), GrantSize{Decision: Allowed, Granted: 200}},
		{"others' reservations leave less", nil, member, reserved(pool, 350), withGrants(want(500), 2), GrantSize{Decision: Allowed, Granted: 50, Crowded: true}},
		{"the member's other grants", limits, holding(member, 55, 0), pool, want(500), GrantSize{Decision: Allowed, Granted: 5, ThrottleKbps: 64}},
		{"last units: the day's", limits, Member{Member: true, DailyUsed: 95}, pool, want(500), GrantSize{Decision: Allowed, Rule: KeyLimitDaily, Granted: 5, Final: true, ThrottleKbps: 64}},
		{"last units: the pool's", nil, member, Pool{Provisioned: true, Total: 1000, Used: 993}, want(500), GrantSize{Decision: Allowed, Rule: RulePool, Granted: 7, Final: true}},
		{"nothing left today", limits, Member{Member: true, DailyUsed: 100}, pool, want(5), GrantSize{Decision: BlockedLimitDaily, Rule: KeyLimitDaily, Final: true}},
		{"over the month", limits, Member{Member: true, MonthlyUsed: 1200}, pool, want(5), GrantSize{Decision: BlockedLimitMonthly, Rule: KeyLimitMonthly, Final: true}},
		{"pool used up", nil, member, Pool{Provisioned: true, Total: 600, Used: 600}, want(5), GrantSize{Decision: BlockedFamilyQuota, Rule: RulePool, Final: true}},
		{"unprovisioned", nil, member, Pool{}, want(5), GrantSize{Decision: BlockedFamilyQuota, Rule: RulePoolUnprovisioned, Final: true}},
		{"crowded out: not final", nil, member, reserved(pool, 400), withGrants(want(5), 2), GrantSize{Decision: BlockedFamilyQuota, Rule: RulePool, Crowded: true}},
		{"the pool binds below the member's limit: crowded", limits, holding(member, 55, 0), reserved(pool, 396), want(500), GrantSize{Decision: Allowed, Granted: 4, Crowded: true, ThrottleKbps: 64}},
		{"the member's limit binds: not crowded", limits, holding(member, 55, 0), reserved(pool, 395), want(500), GrantSize{Decision: Allowed, Granted: 5, ThrottleKbps: 64}},
		{"own grants hold the day: not final", limits, holding(member, 60, 0), pool, want(5), GrantSize{Decision: BlockedLimitDaily, Rule: KeyLimitDaily}},
		{"daily before the pool", limits, Member{Member: true, DailyUsed: 100}, Pool{Provisioned: true, Total: 10, Used: 10}, want(5), GrantSize{Decision: BlockedLimitDaily, Rule: KeyLimitDaily, Final: true}},
		{"hard before soft", limits, holding(Member{Member: true, DailyUsed: 40}, 60, 0), Pool{Provisioned: true, Total: 10, Used: 10}, want(5), GrantSize{Decision: BlockedFamilyQuota, Rule: RulePool, Final: true}},
		{"a share of 0", nil, member, Pool{Provisioned: true, Total: 602, Used: 600}, withGrants(want(5), 3), GrantSize{Decision: BlockedFamilyQuota, Rule: RulePool, Final: true}},
		{"not a member", nil, Member{}, pool, want(5), GrantSize{Decision: BlockedNotMember, Rule: RuleMembership, Final: true}},
		{"blocked", map[string]string{"BLOCK:ACCESS": "1"}, member, pool, want(5), GrantSize{Decision: BlockedAccess, Rule: KeyBlockAccess, Final: true}},
		{"app blocked", map[string]string{"BLOCK:APP:kk": "1"}, member, pool, want(5), GrantSize{Decision: BlockedApp, Rule: "BLOCK:APP:kk", Final: true}},
		{"downtime", map[string]string{"BLOCK:TIME:lunch": "1130-1230"}, member, pool, want(5), GrantSize{Decision: BlockedTime, Rule: "BLOCK:TIME:lunch", Final: true}},
		{"always allowed in downtime", map[string]string{"BLOCK:TIME:lunch": "1130-1230", "ALLOW:APP:kk": "1"}, member, pool, want(5), GrantSize{Decision: Allowed, Granted: 5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := SizeGrant(mustParse(t, c.cons), c.member, c.pool, c.req)
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// Evaluate reads reservations: a request fits in what is neither used nor
// reserved.
func TestEvaluateCountsReservations(t *testing.T) {
	noon := Moment{Day: "20261123", Month: "202611", Minute: 12 * 60, Weekday: 1}
	c := mustParse(t, map[string]string{"LIMIT:DATA:DAILY": "100", "LIMIT:DATA:MONTHLY": "1000"})
	m := Member{Member: true, DailyUsed: 40, MonthlyUsed: 400, DailyReserved: 50, MonthlyReserved: 500}
	p := Pool{Provisioned: true, Total: 1000, Used: 500, Reserved: 480}
	for _, tc := range []struct {
		bytes int64
		want  Decision
	}{{10, Allowed}, {11, BlockedLimitDaily}} {
		if got := Evaluate(c, m, p, Request{Bytes: tc.bytes, At: noon}).Decision; got != tc.want {
			t.Errorf("%d bytes: %s, want %s", tc.bytes, got, tc.want)
		}
	}
	m.DailyReserved, m.MonthlyReserved = 0, 560
	if got := Evaluate(c, m, p, Request{Bytes: 50, At: noon}); got.Decision != BlockedLimitMonthly {
		t.Errorf("monthly: %+v", got)
	}
	if got := Evaluate(Constraints{}, m, p, Request{Bytes: 21, At: noon}); got.Decision != BlockedFamilyQuota {
		t.Errorf("pool: %+v", got)
	}
	// Reserved past the total (a plan cut): nothing is free, a 0-byte
	// request still fits.
	p.Reserved = 900
	if got := Evaluate(Constraints{}, m, p, Request{At: noon}); got.Decision != Allowed {
		t.Errorf("0 bytes on an overreserved pool: %+v", got)
	}
	// Status reads used bytes only.
	if got := Status(c, Member{Member: true, DailyUsed: 40, DailyReserved: 60}, p, noon); got.Decision != Allowed {
		t.Errorf("status with reservations: %+v", got)
	}
}

func TestNextChange(t *testing.T) {
	kst, _ := LoadZone(DefaultZone)
	at := func(d, hh, mm, ss int) time.Time { return time.Date(2026, 11, d, hh, mm, ss, 0, kst) } // 2026-11-26 is a Thursday
	cases := []struct {
		name string
		cons map[string]string
		app  string
		cat  Category
		now  time.Time
		want time.Time
	}{
		{"nothing: midnight", nil, "kk", "", at(26, 12, 0, 30), at(27, 0, 0, 0)},
		{"month's last day", nil, "kk", "", at(30, 23, 59, 59), time.Date(2026, 12, 1, 0, 0, 0, 0, kst)},
		{"a window starts", map[string]string{"BLOCK:TIME:START": "2200", "BLOCK:TIME:END": "0700"}, "kk", "", at(26, 12, 0, 30), at(26, 22, 0, 0)},
		{"yesterday's window ends", map[string]string{"BLOCK:TIME:START": "2200", "BLOCK:TIME:END": "0700"}, "kk", "", at(26, 3, 0, 0), at(26, 7, 0, 0)},
		{"not on this weekday", map[string]string{"BLOCK:TIME:x": "1300-1400@SAT"}, "kk", "", at(26, 12, 0, 0), at(27, 0, 0, 0)},
		{"wrapped from yesterday only", map[string]string{"BLOCK:TIME:x": "2300-0100@WED"}, "kk", "", at(26, 0, 30, 0), at(26, 1, 0, 0)},
		{"always allowed", map[string]string{"BLOCK:TIME:START": "2200", "BLOCK:TIME:END": "0700", "ALLOW:APP:kk": "1"}, "kk", "", at(26, 12, 0, 0), at(27, 0, 0, 0)},
		{"a category always allowed", map[string]string{"BLOCK:TIME:x": "1300-1400", "ALLOW:CATEGORY:MESSAGING": "1"}, "kk", CategoryMessaging, at(26, 12, 0, 0), at(27, 0, 0, 0)},
		{"blocked all day", map[string]string{"BLOCK:ACCESS": "1", "BLOCK:TIME:x": "1300-1400", "EXCEPT:APP:kk": "202611261230"}, "kk", "", at(26, 12, 0, 0), at(27, 0, 0, 0)},
		{"a time exception ends", map[string]string{"BLOCK:TIME:x": "1100-1400", "EXCEPT:TIME": "202611261230"}, "kk", "", at(26, 12, 0, 0), at(26, 12, 30, 0)},
		{"an app's exception ends", map[string]string{"BLOCK:APP:kk": "1", "EXCEPT:APP:kk": "202611261245"}, "kk", "", at(26, 12, 0, 0), at(26, 12, 45, 0)},
		{"another app's exception", map[string]string{"EXCEPT:APP:yt": "202611261245"}, "kk", "", at(26, 12, 0, 0), at(27, 0, 0, 0)},
		{"an exception ending tomorrow", map[string]string{"EXCEPT:TIME": "202611271245"}, "kk", "", at(26, 12, 0, 0), at(27, 0, 0, 0)},
		{"at a boundary: the next one", map[string]string{"BLOCK:TIME:x": "1200-1300"}, "kk", "", at(26, 12, 0, 0), at(26, 13, 0, 0)},
		{"a whole-day window", map[string]string{"BLOCK:TIME:x": "0000-0000@THU"}, "kk", "", at(26, 12, 0, 0), at(27, 0, 0, 0)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := NextChange(mustParse(t, c.cons), c.app, c.cat, c.now, kst)
			if !got.Equal(c.want) {
				t.Errorf("NextChange = %v, want %v", got.In(kst), c.want)
			}
		})
	}
	// Daylight saving time: the offset's change is a boundary, and
	// boundaries are counted within one offset.
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip("no tz database")
	}
	before := time.Date(2026, 3, 8, 1, 30, 0, 0, ny) // clocks go 02:00 → 03:00
	if got, want := NextChange(Constraints{}, "", "", before, ny), time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("spring forward: %v, want %v", got, want)
	}
}

// genGrantConstraints draws constraints whose answers change by time: windows
// (some wrapping, some on some days), exceptions ending around at, always
// allowed apps and blocks.
func genGrantConstraints(t *rapid.T, at time.Time, loc *time.Location) Constraints {
	var c Constraints
	c.BlockAccess = rapid.IntRange(0, 9).Draw(t, "access") == 0
	minute := rapid.OneOf(rapid.IntRange(0, 1439), rapid.SampledFrom([]int{0, 7 * 60, 22 * 60, 1439}))
	if rapid.Bool().Draw(t, "night") {
		c.Night = &Window{Start: minute.Draw(t, "ns"), End: minute.Draw(t, "ne")}
	}
	for _, n := range []string{"a", "b", "밤"} {
		if rapid.Bool().Draw(t, "window") {
			if c.Windows == nil {
				c.Windows = map[string]Window{}
			}
			c.Windows[n] = Window{Start: minute.Draw(t, "ws"), End: minute.Draw(t, "we"), Days: Days(rapid.IntRange(0, 127).Draw(t, "days") << 1)}
		}
	}
	if rapid.IntRange(0, 4).Draw(t, "blockApp") == 0 {
		c.BlockedApps = []string{"kk"}
	}
	if rapid.IntRange(0, 4).Draw(t, "blockCat") == 0 {
		c.BlockedCategories = []Category{CategoryMessaging}
	}
	if rapid.IntRange(0, 4).Draw(t, "allowApp") == 0 {
		c.AllowedApps = []string{"kk"}
	}
	if rapid.IntRange(0, 5).Draw(t, "allowCat") == 0 {
		c.AllowedCategories = []Category{CategoryMessaging}
	}
	stamp := func(label string) string {
		off := rapid.IntRange(-120, 26*60).Draw(t, label)
		return MomentOf(at.Add(time.Duration(off)*time.Minute), loc).Stamp()
	}
	if rapid.IntRange(0, 2).Draw(t, "exceptTime") == 0 {
		c.TimeException = stamp("exceptTimeEnd")
	}
	if rapid.IntRange(0, 2).Draw(t, "exceptApp") == 0 {
		c.AppExceptions = map[string]string{"kk": stamp("exceptAppEnd")}
	}
	return c
}

// NextChange against Evaluate, minute by minute: Evaluate's answer for the
// app does not change from at until NextChange (soundness), and when the
// answer is ALLOWED under windows alone (no exception, nothing always
// allowed, no block), the first change is exactly there (tightness: a
// window starting is never missed and never anticipated).
func TestNextChangeProperty(t *testing.T) {
	kst, _ := LoadZone(DefaultZone)
	zones := []*time.Location{kst, time.UTC}
	if ny, err := time.LoadLocation("America/New_York"); err == nil {
		zones = append(zones, ny)
	}
	rapid.Check(t, func(t *rapid.T) {
		loc := rapid.SampledFrom(zones).Draw(t, "zone")
		base := time.Date(2026, time.Month(rapid.IntRange(1, 12).Draw(t, "month")), rapid.IntRange(1, 28).Draw(t, "day"), 0, 0, 0, 0, loc)
		if rapid.IntRange(0, 3).Draw(t, "dst") == 0 {
			base = time.Date(2026, 3, 8, 0, 0, 0, 0, loc) // New York's spring forward
		}
		at := base.Add(time.Duration(rapid.IntRange(0, 24*3600-1).Draw(t, "second")) * time.Second)
		c := genGrantConstraints(t, at, loc)
		app, cat := "kk", rapid.SampledFrom([]Category{"", CategoryMessaging}).Draw(t, "category")
		m := Member{Member: true}
		p := Pool{Provisioned: true, Total: 100}
		judge := func(when time.Time) Result {
			return Evaluate(c, m, p, Request{Bytes: 1, AppID: app, Category: cat, At: MomentOf(when, loc)})
		}
		next := NextChange(c, app, cat, at, loc)
		if !next.After(at) {
			t.Fatalf("NextChange %v is not after %v", next, at)
		}
		lt := at.In(loc)
		midnight := time.Date(lt.Year(), lt.Month(), lt.Day()+1, 0, 0, 0, 0, loc)
		if next.After(midnight) {
			t.Fatalf("NextChange %v is after the day's end %v", next, midnight)
		}
		first := judge(at)
		// The first minute whose answer differs, up to the day's end.
		change := midnight
		for when := at.Truncate(time.Minute).Add(time.Minute); when.Before(midnight); when = when.Add(time.Minute) {
			if judge(when) != first {
				change = when
				break
			}
		}
		if next.After(change) {
			t.Fatalf("the answer changes at %v (%+v → %+v) before NextChange %v", change.In(loc), first, judge(change), next.In(loc))
		}
		plain := !c.BlockAccess && c.TimeException == "" && len(c.AppExceptions) == 0 && !c.AlwaysAllowed(app, cat) &&
			len(c.BlockedApps) == 0 && len(c.BlockedCategories) == 0
		if _, end := lt.ZoneBounds(); plain && first.Decision == Allowed && (end.IsZero() || end.After(change)) && !next.Equal(change) {
			t.Fatalf("allowed under windows alone: NextChange %v, but the answer changes first at %v", next.In(loc), change.In(loc))
		}
	})
}
