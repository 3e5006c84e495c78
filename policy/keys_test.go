package policy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"
)

func TestParseConstraintsErrorsNameTheKey(t *testing.T) {
	cases := []struct {
		name  string
		in    map[string]string
		field string
		msg   string
	}{
		{"block access value", map[string]string{"BLOCK:ACCESS": "yes"}, "BLOCK:ACCESS", `must be "1"`},
		{"app value", map[string]string{"BLOCK:APP:com.x": "0"}, "BLOCK:APP:com.x", `must be "1"`},
		{"app empty", map[string]string{"BLOCK:APP:": "1"}, "BLOCK:APP:", "empty"},
		{"app space", map[string]string{"BLOCK:APP:a b": "1"}, "BLOCK:APP:a b", "printable"},
		{"app pipe", map[string]string{"BLOCK:APP:a|b": "1"}, "BLOCK:APP:a|b", "printable"},
		{"category", map[string]string{"BLOCK:CATEGORY:NEWS": "1"}, "BLOCK:CATEGORY:NEWS", "unknown category"},
		{"category value", map[string]string{"BLOCK:CATEGORY:GAME": "2"}, "BLOCK:CATEGORY:GAME", `must be "1"`},
		{"bad HHMM", map[string]string{"BLOCK:TIME:START": "2500", "BLOCK:TIME:END": "0700"}, "BLOCK:TIME:START", "HHMM"},
		{"bad minutes", map[string]string{"BLOCK:TIME:START": "2200", "BLOCK:TIME:END": "0760"}, "BLOCK:TIME:END", "HHMM"},
		{"short HHMM", map[string]string{"BLOCK:TIME:START": "700", "BLOCK:TIME:END": "0700"}, "BLOCK:TIME:START", "HHMM"},
		{"start without end", map[string]string{"BLOCK:TIME:START": "2200"}, "BLOCK:TIME:END", "required"},
		{"end without start", map[string]string{"BLOCK:TIME:END": "0700"}, "BLOCK:TIME:START", "required"},
		{"window format", map[string]string{"BLOCK:TIME:night": "2200"}, "BLOCK:TIME:night", "HHMM-HHMM"},
		{"window days", map[string]string{"BLOCK:TIME:night": "2200-0700@MON-FUN"}, "BLOCK:TIME:night", "bad day"},
		{"window empty days", map[string]string{"BLOCK:TIME:night": "2200-0700@"}, "BLOCK:TIME:night", "empty"},
		{"window lower-case day", map[string]string{"BLOCK:TIME:night": "2200-0700@mon"}, "BLOCK:TIME:night", "bad day"},
		{"window bad time", map[string]string{"BLOCK:TIME:night": "2200-9999"}, "BLOCK:TIME:night", "HHMM"},
		{"window no name", map[string]string{"BLOCK:TIME:": "2200-0700"}, "BLOCK:TIME:", "empty"},
		{"window name space", map[string]string{"BLOCK:TIME:after school": "1500-1800"}, "BLOCK:TIME:after school", "printable"},
		{"window name symbol", map[string]string{"BLOCK:TIME:밤★": "2200-0700"}, "BLOCK:TIME:밤★", "letters and digits"},
		{"window name zero width", map[string]string{"BLOCK:TIME:밤\u200b": "2200-0700"}, "BLOCK:TIME:밤\u200b", "letters and digits"},
		{"window name long", map[string]string{"BLOCK:TIME:" + strings.Repeat("밤", 33): "2200-0700"}, "BLOCK:TIME:" + strings.Repeat("밤", 33), "longer than 32"},
		{"window name not UTF-8", map[string]string{"BLOCK:TIME:\xff": "2200-0700"}, "BLOCK:TIME:\xff", "UTF-8"},
		{"HHMM not digits", map[string]string{"BLOCK:TIME:START": "22h0", "BLOCK:TIME:END": "0700"}, "BLOCK:TIME:START", "HHMM"},
		{"negative limit", map[string]string{"LIMIT:DATA:DAILY": "-1"}, "LIMIT:DATA:DAILY", "≥ 0"},
		{"huge limit", map[string]string{"LIMIT:DATA:MONTHLY": "99999999999999999"}, "LIMIT:DATA:MONTHLY", "≤"},
		{"limit not a number", map[string]string{"LIMIT:DATA:MONTHLY": "2GB"}, "LIMIT:DATA:MONTHLY", "whole number"},
		{"limit leading zero", map[string]string{"LIMIT:DATA:MONTHLY": "0100"}, "LIMIT:DATA:MONTHLY", "whole number"},
		{"throttle zero", map[string]string{"THROTTLE:SPEED": "0"}, "THROTTLE:SPEED", "kbps"},
		{"throttle text", map[string]string{"THROTTLE:SPEED": "fast"}, "THROTTLE:SPEED", "kbps"},
		{"unknown prefix", map[string]string{"ALLOW:EVERYTHING": "1"}, "ALLOW:EVERYTHING", "unknown constraint key"},
		{"unknown limit", map[string]string{"LIMIT:DATA:WEEKLY": "1"}, "LIMIT:DATA:WEEKLY", "unknown constraint key"},
		{"extra no period", map[string]string{"LIMIT:DATA:EXTRA:": "1"}, "LIMIT:DATA:EXTRA:", "YYYYMMDD"},
		{"extra bad day", map[string]string{"LIMIT:DATA:EXTRA:20260230": "1"}, "LIMIT:DATA:EXTRA:20260230", "YYYYMMDD"},
		{"extra bad month", map[string]string{"LIMIT:DATA:EXTRA:202613": "1"}, "LIMIT:DATA:EXTRA:202613", "YYYYMM"},
		{"extra year", map[string]string{"LIMIT:DATA:EXTRA:2026": "1"}, "LIMIT:DATA:EXTRA:2026", "YYYYMM"},
		{"extra ancient", map[string]string{"LIMIT:DATA:EXTRA:190001": "1"}, "LIMIT:DATA:EXTRA:190001", "YYYYMM"},
		{"extra text", map[string]string{"LIMIT:DATA:EXTRA:TODAY": "1"}, "LIMIT:DATA:EXTRA:TODAY", "YYYYMM"},
		{"extra negative", map[string]string{"LIMIT:DATA:EXTRA:20261123": "-5"}, "LIMIT:DATA:EXTRA:20261123", "≥ 0"},
		{"extra huge", map[string]string{"LIMIT:DATA:EXTRA:202611": "99999999999999999"}, "LIMIT:DATA:EXTRA:202611", "≤"},
		{"extra not a number", map[string]string{"LIMIT:DATA:EXTRA:202611": "1GB"}, "LIMIT:DATA:EXTRA:202611", "whole number"},
		{"long key", map[string]string{"BLOCK:APP:" + strings.Repeat("a", 300): "1"}, "BLOCK:APP:aaaaaaaaaaaaaaaaaaaaaa…", "longer"},
		{"allow app value", map[string]string{"ALLOW:APP:com.kakao.talk": "yes"}, "ALLOW:APP:com.kakao.talk", `must be "1"`},
		{"allow app empty", map[string]string{"ALLOW:APP:": "1"}, "ALLOW:APP:", "empty"},
		{"allow category", map[string]string{"ALLOW:CATEGORY:MAPS": "1"}, "ALLOW:CATEGORY:MAPS", "unknown category"},
		{"allow category value", map[string]string{"ALLOW:CATEGORY:MESSAGING": "0"}, "ALLOW:CATEGORY:MESSAGING", `must be "1"`},
		{"except time short", map[string]string{"EXCEPT:TIME": "2026112622"}, "EXCEPT:TIME", "YYYYMMDDHHMM"},
		{"except time bad hour", map[string]string{"EXCEPT:TIME": "202611262460"}, "EXCEPT:TIME", "YYYYMMDDHHMM"},
		{"except time bad day", map[string]string{"EXCEPT:TIME": "202602302200"}, "EXCEPT:TIME", "YYYYMMDDHHMM"},
		{"except time text", map[string]string{"EXCEPT:TIME": "30m"}, "EXCEPT:TIME", "YYYYMMDDHHMM"},
		{"except app end", map[string]string{"EXCEPT:APP:com.youtube.app": "1"}, "EXCEPT:APP:com.youtube.app", "YYYYMMDDHHMM"},
		{"except app name", map[string]string{"EXCEPT:APP:a b": "202611262230"}, "EXCEPT:APP:a b", "printable"},
		{"except other", map[string]string{"EXCEPT:DATA": "202611262230"}, "EXCEPT:DATA", "unknown constraint key"},
		{"gift day", map[string]string{"LIMIT:DATA:GIFT:20261126": "5"}, "LIMIT:DATA:GIFT:20261126", "YYYYMM"},
		{"gift huge", map[string]string{"LIMIT:DATA:GIFT:202611": "-99999999999999999"}, "LIMIT:DATA:GIFT:202611", "whole number"},
		{"gift plus sign", map[string]string{"LIMIT:DATA:GIFT:202611": "+5"}, "LIMIT:DATA:GIFT:202611", "whole number"},
		{"gift bad month", map[string]string{"LIMIT:DATA:GIFT:202613": "5"}, "LIMIT:DATA:GIFT:202613", "YYYYMM"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConstraints(c.in)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("err %v, want a FieldError", err)
			}
			if fe.Field != c.field || !strings.Contains(fe.Msg, c.msg) {
				t.Errorf("got %q, want field %q with %q", err, c.field, c.msg)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Error("not ErrInvalid")
			}
		})
	}
	big := map[string]string{}
	for i := range 300 {
		big["BLOCK:APP:a"+strings.Repeat("b", i%50)+string(rune('a'+i%26))+strings.Repeat("c", i/26)] = "1"
	}
	if _, err := ParseConstraints(big); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("300 entries: %v", err)
	}
}

func TestParseConstraintsReportsEveryProblem(t *testing.T) {
	_, err := ParseConstraints(map[string]string{"LIMIT:DATA:DAILY": "x", "THROTTLE:SPEED": "y"})
	if err == nil || !strings.Contains(err.Error(), "LIMIT:DATA:DAILY") || !strings.Contains(err.Error(), "THROTTLE:SPEED") {
		t.Errorf("err %v, want both keys named", err)
	}
}

func TestConstraintsRoundTrip(t *testing.T) {
	in := map[string]string{
		"BLOCK:ACCESS": "1", "BLOCK:APP:com.youtube.app": "1", "BLOCK:CATEGORY:GAME": "1",
		"BLOCK:TIME:START": "2200", "BLOCK:TIME:END": "0700",
		"BLOCK:TIME:school": "0900-1500@MON,TUE,WED,THU,FRI", "BLOCK:TIME:weekend": "0000-0000@SAT,SUN",
		"BLOCK:TIME:every": "1200-1300@MON-SUN", "BLOCK:TIME:밤": "2300-0600",
		"LIMIT:DATA:DAILY": "104857600", "LIMIT:DATA:MONTHLY": "0", "THROTTLE:SPEED": "512",
		"LIMIT:DATA:EXTRA:20261123": "1024", "LIMIT:DATA:EXTRA:202611": "2048",
	}
	c, err := ParseConstraints(in)
	if err != nil {
		t.Fatal(err)
	}
	want := Constraints{
		BlockAccess: true, BlockedApps: []string{"com.youtube.app"}, BlockedCategories: []Category{CategoryGame},
		Night: &Window{Start: 22 * 60, End: 7 * 60},
		Windows: map[string]Window{
			"school":  {Start: 9 * 60, End: 15 * 60, Days: 0b00111110},
			"weekend": {Days: 0b11000000},
			"every":   {Start: 12 * 60, End: 13 * 60, Days: 0b11111110},
			"밤":       {Start: 23 * 60, End: 6 * 60},
		},
		DailyLimit: Limit(100 << 20), MonthlyLimit: Limit(0), ThrottleKbps: 512,
		Extras: map[string]int64{"20261123": 1024, "202611": 2048},
	}
	if d := cmp.Diff(want, c); d != "" {
		t.Fatalf("parse (-want +got):\n%s", d)
	}
	canon := c.Map()
	if canon["BLOCK:TIME:school"] != "0900-1500@MON-FRI" || canon["BLOCK:TIME:every"] != "1200-1300" {
		t.Errorf("canonical windows: %q %q", canon["BLOCK:TIME:school"], canon["BLOCK:TIME:every"])
	}
	again, err := ParseConstraints(canon)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(c.Map(), again.Map()); d != "" {
		t.Errorf("round trip:\n%s", d)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
	if got, err := Canonical(nil); err != nil || len(got) != 0 {
		t.Errorf("empty: %v %v", got, err)
	}
	if _, err := Canonical(map[string]string{"X": "1"}); err == nil {
		t.Error("Canonical accepted a bad key")
	}
}

func TestDays(t *testing.T) {
	cases := []struct {
		in, out string
	}{
		{"MON-FRI", "MON-FRI"}, {"SAT,SUN", "SAT,SUN"}, {"FRI-MON", "FRI-MON"}, {"SUN-THU", "SUN-THU"}, {"MON,SAT,SUN", "SAT-MON"}, {"SUN,TUE", "TUE,SUN"}, {"MON", "MON"},
		{"MON,WED,FRI", "MON,WED,FRI"}, {"MON-SUN", ""}, {"SUN-SAT", ""}, {"TUE-THU,SAT", "TUE-THU,SAT"},
		{"MON,TUE", "MON,TUE"},
	}
	for _, c := range cases {
		d, err := ParseDays(c.in)
		if err != nil || d.String() != c.out {
			t.Errorf("%s: %q %v, want %q", c.in, d.String(), err, c.out)
		}
	}
	for _, bad := range []string{"", "MON-", "-FRI", "MONDAY", "MON,,TUE", "mon"} {
		if _, err := ParseDays(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestWindowContains(t *testing.T) {
	at := func(wd int, hhmm string) Moment {
		m, _ := ParseHHMM(hhmm)
		return Moment{Minute: m, Weekday: wd}
	}
	night, _ := ParseWindow("2200-0700")
	school, _ := ParseWindow("2200-0700@MON-FRI")
	day, _ := ParseWindow("0900-1500@SAT")
	whole, _ := ParseWindow("0000-0000")
	wholeSun, _ := ParseWindow("1200-1200@SUN")
	cases := []struct {
		w    Window
		m    Moment
		want bool
	}{
		{night, at(1, "2159"), false}, {night, at(1, "2200"), true}, {night, at(2, "0000"), true},
		{night, at(2, "0659"), true}, {night, at(2, "0700"), false}, {night, at(2, "1200"), false},
		// The after-midnight part belongs to the day the window started.
		{school, at(5, "2300"), true}, {school, at(6, "0300"), true}, {school, at(7, "0300"), false},
		{school, at(7, "2300"), false}, {school, at(1, "0300"), false}, {school, at(1, "2200"), true},
		{day, at(6, "0900"), true}, {day, at(6, "1459"), true}, {day, at(6, "1500"), false}, {day, at(5, "1000"), false},
		{whole, at(3, "0000"), true}, {whole, at(3, "2359"), true},
		{wholeSun, at(7, "0100"), true}, {wholeSun, at(1, "0100"), false},
	}
	for i, c := range cases {
		if got := c.w.Contains(c.m); got != c.want {
			t.Errorf("case %d: %s at day %d minute %d: %v, want %v", i, c.w, c.m.Weekday, c.m.Minute, got, c.want)
		}
	}
}

func TestMomentOf(t *testing.T) {
	loc, err := LoadZone("")
	if err != nil {
		t.Fatal(err)
	}
	// 2026-02-28T15:30Z is 2026-03-01 00:30 KST, a Sunday.
	m := MomentOf(time.Date(2026, 2, 28, 15, 30, 0, 0, time.UTC), loc)
	want := Moment{Day: "20260301", Month: "202603", Minute: 30, Weekday: 7}
	if m != want {
		t.Errorf("got %+v, want %+v", m, want)
	}
	if _, err := LoadZone("Mars/Olympus"); err == nil {
		t.Error("unknown zone accepted")
	}
	utc, _ := LoadZone("UTC")
	if MomentOf(time.Date(2026, 2, 2, 10, 0, 0, 0, time.UTC), utc).Weekday != 1 {
		t.Error("monday")
	}
	// A nil zone is DefaultZone, not a panic.
	if got := MomentOf(time.Date(2026, 2, 28, 15, 30, 0, 0, time.UTC), nil); got != want {
		t.Errorf("MomentOf(t, nil) = %+v, want %+v (Asia/Seoul)", got, want)
	}
	if FormatHHMM(22*60+5) != "2205" {
		t.Error(FormatHHMM(22*60 + 5))
	}
}

// Any valid typed Constraints survive Map → ParseConstraints unchanged.
func TestConstraintsMapProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var c Constraints
		c.BlockAccess = rapid.Bool().Draw(t, "access")
		c.BlockedApps = rapid.SliceOfDistinct(rapid.StringMatching(`[a-z][a-z.]{0,20}`), func(s string) string { return s }).Draw(t, "apps")
		c.BlockedCategories = rapid.SliceOfDistinct(rapid.SampledFrom(Categories()), func(c Category) Category { return c }).Draw(t, "cats")
		if rapid.Bool().Draw(t, "night") {
			c.Night = &Window{Start: rapid.IntRange(0, 1439).Draw(t, "s"), End: rapid.IntRange(0, 1439).Draw(t, "e")}
		}
		for _, n := range rapid.SliceOfDistinct(rapid.StringMatching(`[a-z가-힣]{1,8}`), func(s string) string { return s }).Draw(t, "windows") {
			if n == "start" || n == "end" {
				continue
			}
			if c.Windows == nil {
				c.Windows = map[string]Window{}
			}
			d := Days(rapid.IntRange(0, 127).Draw(t, "days") << 1)
			if d == 0xFE {
				d = 0
			}
			c.Windows[n] = Window{Start: rapid.IntRange(0, 1439).Draw(t, "ws"), End: rapid.IntRange(0, 1439).Draw(t, "we"), Days: d}
		}
		if rapid.Bool().Draw(t, "daily") {
			c.DailyLimit = Limit(rapid.Int64Range(0, MaxBytes).Draw(t, "dl"))
		}
		if rapid.Bool().Draw(t, "monthly") {
			c.MonthlyLimit = Limit(rapid.Int64Range(0, MaxBytes).Draw(t, "ml"))
		}
		c.ThrottleKbps = rapid.Int64Range(0, maxThrottleKbps).Draw(t, "kbps")
		for _, p := range rapid.SliceOfDistinct(rapid.SampledFrom([]string{"202611", "202612", "200001", "999912"}), func(s string) string { return s }).Draw(t, "given") {
			if c.Gifts == nil {
				c.Gifts = map[string]int64{}
			}
			c.Gifts[p] = rapid.Int64Range(-MaxBytes, MaxBytes).Draw(t, "gift")
		}
		for _, p := range rapid.SliceOfDistinct(rapid.SampledFrom([]string{"20261123", "20261130", "202611", "202612", "20000101", "999912"}), func(s string) string { return s }).Draw(t, "extras") {
			if c.Extras == nil {
				c.Extras = map[string]int64{}
			}
			c.Extras[p] = rapid.Int64Range(0, MaxBytes).Draw(t, "extra")
		}
		c.AllowedApps = rapid.SliceOfDistinct(rapid.StringMatching(`[a-z][a-z.]{0,20}`), func(s string) string { return s }).Draw(t, "allowApps")
		c.AllowedCategories = rapid.SliceOfDistinct(rapid.SampledFrom(Categories()), func(c Category) Category { return c }).Draw(t, "allowCats")
		stamp := rapid.SampledFrom([]string{"", "202611262230", "200001010000", "999912312359"})
		c.TimeException = stamp.Draw(t, "exceptTime")
		for _, app := range rapid.SliceOfDistinct(rapid.StringMatching(`[a-z][a-z.]{0,20}`), func(s string) string { return s }).Draw(t, "exceptApps") {
			if until := stamp.Draw(t, "exceptApp"); until != "" {
				if c.AppExceptions == nil {
					c.AppExceptions = map[string]string{}
				}
				c.AppExceptions[app] = until
			}
		}
		for _, app := range rapid.SliceOfDistinct(rapid.StringMatching(`[a-z][a-z.]{0,20}`), func(s string) string { return s }).Draw(t, "budgetApps") {
			if c.AppBudgets == nil {
				c.AppBudgets = map[string]int64{}
			}
			c.AppBudgets[app] = rapid.Int64Range(0, MaxBytes).Draw(t, "appBudget")
		}
		for _, cat := range rapid.SliceOfDistinct(rapid.SampledFrom(Categories()), func(c Category) Category { return c }).Draw(t, "budgetCats") {
			if c.CategoryBudgets == nil {
				c.CategoryBudgets = map[Category]int64{}
			}
			c.CategoryBudgets[cat] = rapid.Int64Range(0, MaxBytes).Draw(t, "catBudget")
		}
		got, err := ParseConstraints(c.Map())
		if err != nil {
			t.Fatal(err)
		}
		opts := []cmp.Option{cmpopts.EquateEmpty(), cmpopts.SortSlices(func(a, b string) bool { return a < b }),
			cmpopts.SortSlices(func(a, b Category) bool { return a < b })}
		if d := cmp.Diff(c, got, opts...); d != "" {
			t.Fatalf("round trip (-want +got):\n%s", d)
		}
	})
}

func TestEffectiveLimitsAndExpiredExtras(t *testing.T) {
	day := Moment{Day: "20261123", Month: "202611"}
	cases := []struct {
		name       string
		cons       map[string]string
		at         Moment
		wantD      *int64
		wantM      *int64
		wantExtras map[string]int64 // after DropExpiredExtras(at)
	}{
		{"no limits stay none", map[string]string{"LIMIT:DATA:EXTRA:20261123": "5"}, day, nil, nil, map[string]int64{"20261123": 5}},
		{"today raises both", map[string]string{"LIMIT:DATA:DAILY": "10", "LIMIT:DATA:MONTHLY": "100", "LIMIT:DATA:EXTRA:20261123": "5"}, day, Limit(15), Limit(105), map[string]int64{"20261123": 5}},
		{"month raises both", map[string]string{"LIMIT:DATA:DAILY": "10", "LIMIT:DATA:MONTHLY": "100", "LIMIT:DATA:EXTRA:202611": "7"}, day, Limit(17), Limit(107), map[string]int64{"202611": 7}},
		{"day and month sum", map[string]string{"LIMIT:DATA:MONTHLY": "100", "LIMIT:DATA:EXTRA:202611": "7", "LIMIT:DATA:EXTRA:20261123": "5"}, day, nil, Limit(112), map[string]int64{"202611": 7, "20261123": 5}},
		{"other periods ignored", map[string]string{"LIMIT:DATA:MONTHLY": "100", "LIMIT:DATA:EXTRA:202610": "7", "LIMIT:DATA:EXTRA:20261122": "5", "LIMIT:DATA:EXTRA:20261124": "3", "LIMIT:DATA:EXTRA:202612": "1"}, day, nil, Limit(100), map[string]int64{"20261124": 3, "202612": 1}},
		{"every extra expired", map[string]string{"LIMIT:DATA:DAILY": "10", ExtraKey("202610"): "7", ExtraKey("20261122"): "5"}, day, Limit(10), nil, nil},
		{"given lowers monthly only", map[string]string{"LIMIT:DATA:DAILY": "10", "LIMIT:DATA:MONTHLY": "100", "LIMIT:DATA:GIFT:202611": "-30", "LIMIT:DATA:EXTRA:202611": "7"}, day, Limit(17), Limit(77), map[string]int64{"202611": 7}},
		{"received raises monthly only", map[string]string{"LIMIT:DATA:DAILY": "10", "LIMIT:DATA:MONTHLY": "100", "LIMIT:DATA:GIFT:202611": "30"}, day, Limit(10), Limit(130), nil},
		{"given past the limit is 0", map[string]string{"LIMIT:DATA:MONTHLY": "100", "LIMIT:DATA:GIFT:202611": "-300"}, day, nil, Limit(0), nil},
		{"last month's gift ignored", map[string]string{"LIMIT:DATA:MONTHLY": "100", "LIMIT:DATA:GIFT:202610": "-30"}, day, nil, Limit(100), nil},
		{"max sums stay exact", map[string]string{"LIMIT:DATA:DAILY": "70368744177664", "LIMIT:DATA:EXTRA:202611": "70368744177664", "LIMIT:DATA:EXTRA:20261123": "70368744177664"}, day, Limit(3 * MaxBytes), nil, map[string]int64{"202611": MaxBytes, "20261123": MaxBytes}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pc, err := ParseConstraints(c.cons)
			if err != nil {
				t.Fatal(err)
			}
			d, m := pc.EffectiveLimits(c.at)
			if diff := cmp.Diff([]*int64{c.wantD, c.wantM}, []*int64{d, m}); diff != "" {
				t.Errorf("limits (-want +got):\n%s", diff)
			}
			// The month's allowance is the monthly limit without today's
			// extra (#38: a day-only extra raised the monthly figure).
			if want := c.wantM; want != nil {
				want = Limit(max(*c.wantM-pc.Extras[c.at.Day], 0))
				if got := pc.MonthlyAllowance(c.at); !cmp.Equal(want, got) {
					t.Errorf("MonthlyAllowance = %v, want %d", got, *want)
				}
			} else if got := pc.MonthlyAllowance(c.at); got != nil {
				t.Errorf("MonthlyAllowance = %d without a monthly limit", *got)
			}
			before := len(pc.Extras)
			oldGiven := false
			for m := range pc.Gifts {
				oldGiven = oldGiven || m < c.at.Month
			}
			if dropped := pc.DropExpiredExtras(c.at); dropped != (before != len(c.wantExtras) || oldGiven) {
				t.Errorf("DropExpiredExtras reported %v with %d extras before, %d after", dropped, before, len(c.wantExtras))
			}
			if diff := cmp.Diff(c.wantExtras, pc.Extras, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("after drop (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExceptionsEndAndAreDropped(t *testing.T) {
	c := mustParse(t, map[string]string{
		KeyExceptTime: "202611262230", KeyExceptAppPrefix + "yt": "202611262200", KeyExceptAppPrefix + "rb": "202611270000",
		ExtraKey("20261126"): "5",
	})
	before := Moment{Day: "20261126", Month: "202611", Minute: 22*60 + 29, Weekday: 4}
	at := Moment{Day: "20261126", Month: "202611", Minute: 22*60 + 30, Weekday: 4}
	if !c.TimeExcepted(before) || c.TimeExcepted(at) {
		t.Errorf("EXCEPT:TIME 2230: in effect at 22:29 %v (want true), at 22:30 %v (want false)", c.TimeExcepted(before), c.TimeExcepted(at))
	}
	if c.AppExcepted("yt", at) || !c.AppExcepted("rb", at) || c.AppExcepted("", at) || c.AppExcepted("kk", at) {
		t.Error("app exceptions: yt ended at 22:00, rb lasts to midnight, none for others")
	}
	if !c.DropExpiredExtras(at) {
		t.Fatal("DropExpiredExtras dropped nothing")
	}
	want := map[string]string{KeyExceptAppPrefix + "rb": "202611270000", ExtraKey("20261126"): "5"}
	if d := cmp.Diff(want, c.Map()); d != "" {
		t.Errorf("after the drop (-want +got):\n%s", d)
	}
	for _, k := range []string{KeyExceptTime, KeyExceptAppPrefix + "x", ExtraKey("202611")} {
		if !Granted(k) {
			t.Errorf("Granted(%q) = false", k)
		}
	}
	for _, k := range []string{KeyLimitDaily, KeyAllowAppPrefix + "x", KeyBlockAppPrefix + "x", "EXCEPT:TIMES"} {
		if Granted(k) {
			t.Errorf("Granted(%q) = true", k)
		}
	}
}

func TestNextDowntime(t *testing.T) {
	kst, _ := LoadZone(DefaultZone)
	at := func(d, hh, mm int) time.Time { return time.Date(2026, 11, d, hh, mm, 0, 0, kst) } // 2026-11-26 is a Thursday
	cases := []struct {
		name     string
		cons     map[string]string
		now      time.Time
		rule     string
		start    time.Time
		hasStart bool
	}{
		{"none", nil, at(26, 12, 0), "", time.Time{}, false},
		{"tonight", map[string]string{"BLOCK:TIME:START": "2200", "BLOCK:TIME:END": "0700"}, at(26, 12, 0), "BLOCK:TIME:START", at(26, 22, 0), true},
		{"inside: tomorrow's", map[string]string{"BLOCK:TIME:START": "2200", "BLOCK:TIME:END": "0700"}, at(26, 23, 0), "BLOCK:TIME:START", at(27, 22, 0), true},
		{"at its start: the next", map[string]string{"BLOCK:TIME:밤": "2200-0700"}, at(26, 22, 0), "BLOCK:TIME:밤", at(27, 22, 0), true},
		{"weekdays skip the weekend", map[string]string{"BLOCK:TIME:school": "0900-1500@MON-FRI"}, at(27, 10, 0), "BLOCK:TIME:school", at(30, 9, 0), true},
		{"the earliest of two", map[string]string{"BLOCK:TIME:b": "2100-2200", "BLOCK:TIME:a": "2300-0600"}, at(26, 12, 0), "BLOCK:TIME:b", at(26, 21, 0), true},
		{"a tie names the smallest key", map[string]string{"BLOCK:TIME:b": "2100-2200", "BLOCK:TIME:a": "2100-2300"}, at(26, 12, 0), "BLOCK:TIME:a", at(26, 21, 0), true},
		{"all day every day never begins", map[string]string{"BLOCK:TIME:x": "0000-0000"}, at(26, 12, 0), "", time.Time{}, false},
		{"all day on Sundays", map[string]string{"BLOCK:TIME:x": "0000-0000@SUN"}, at(26, 12, 0), "BLOCK:TIME:x", at(29, 0, 0), true},
		{"all day written 2200-2200 begins at midnight", map[string]string{"BLOCK:TIME:x": "2200-2200@SUN"}, at(26, 12, 0), "BLOCK:TIME:x", at(29, 0, 0), true},
		{"a whole weekend begins once", map[string]string{"BLOCK:TIME:x": "0000-0000@SAT,SUN"}, at(28, 12, 0), "BLOCK:TIME:x", at(35, 0, 0), true},
		// A time exception ("30분 더") in effect: the downtime comes back
		// when it ends, if a window holds then (#38: "다음 차단 시간대: 밤
		// 토 22:00" was said while the block came back at 22:38).
		{"an exception ends inside the window", map[string]string{"BLOCK:TIME:START": "2200", "BLOCK:TIME:END": "0700", "EXCEPT:TIME": "202611262238"},
			at(26, 22, 10), "BLOCK:TIME:START", at(26, 22, 38), true},
		{"an exception covers a start", map[string]string{"BLOCK:TIME:a": "2100-2200", "EXCEPT:TIME": "202611262130"},
			at(26, 20, 0), "BLOCK:TIME:a", at(26, 21, 30), true},
		{"an exception outlasts the window", map[string]string{"BLOCK:TIME:a": "2100-2200", "EXCEPT:TIME": "202611262230"},
			at(26, 20, 0), "BLOCK:TIME:a", at(27, 21, 0), true},
		{"an exception ends at a start", map[string]string{"BLOCK:TIME:a": "2100-2200", "EXCEPT:TIME": "202611262100"},
			at(26, 20, 0), "BLOCK:TIME:a", at(26, 21, 0), true},
		{"an exception ended", map[string]string{"BLOCK:TIME:a": "2100-2200", "EXCEPT:TIME": "202611261900"},
			at(26, 20, 0), "BLOCK:TIME:a", at(26, 21, 0), true},
		{"an exception in a window of every day", map[string]string{"BLOCK:TIME:x": "0000-0000", "EXCEPT:TIME": "202611261230"},
			at(26, 12, 0), "BLOCK:TIME:x", at(26, 12, 30), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := NextDowntime(mustParse(t, c.cons), c.now, kst)
			if ok != c.hasStart || got.Rule != c.rule || !got.Start.Equal(c.start) {
				t.Errorf("NextDowntime = %+v, %v; want %s at %v", got, ok, c.rule, c.start)
			}
		})
	}
}

// MomentOf's day and month keys are the layouts' formatting of the local
// time, for any instant (years outside 0–9999 included) in any zone.
func TestMomentOfMatchesFormat(t *testing.T) {
	zones := []string{"Asia/Seoul", "UTC", "America/St_Johns", "Pacific/Chatham"}
	rapid.Check(t, func(t *rapid.T) {
		loc, err := LoadZone(rapid.SampledFrom(zones).Draw(t, "zone"))
		if err != nil {
			t.Fatal(err)
		}
		at := time.Unix(rapid.Int64Range(-70_000_000_000, 300_000_000_000).Draw(t, "unix"), 0)
		m, lt := MomentOf(at, loc), at.In(loc)
		if m.Day != lt.Format("20060102") || m.Month != lt.Format("200601") || m.Minute != lt.Hour()*60+lt.Minute() {
			t.Fatalf("MomentOf(%v) = %+v, want day %s, month %s", lt, m, lt.Format("20060102"), lt.Format("200601"))
		}
	})
}
