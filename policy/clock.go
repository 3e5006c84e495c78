package policy

import (
	"fmt"
	"strings"
	"time"
)

// DefaultZone is the service time zone of the seed (KST): time windows, days and
// months are judged in it unless configured otherwise.
const DefaultZone = "Asia/Seoul"

// LoadZone loads a time zone by name. For Asia/Seoul it falls back to a fixed
// UTC+9 zone (Korea has kept no daylight saving time since 1988) when the
// machine has no tz database, so the default works everywhere.
func LoadZone(name string) (*time.Location, error) {
	if name == "" {
		name = DefaultZone
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		if name == DefaultZone {
			return time.FixedZone("KST", 9*60*60), nil
		}
		return nil, fmt.Errorf("policy: load time zone %q: %w", name, err)
	}
	return loc, nil
}

// Moment is an instant seen in the service time zone: what the evaluator and the
// Lua engine need to judge time windows and pick period counters.
type Moment struct {
	// Day is the day's period key, YYYYMMDD.
	Day string
	// Month is the month's period key, YYYYMM.
	Month string
	// Minute is the minute of the day, 0–1439.
	Minute int
	// Weekday is the ISO weekday, 1 (Monday) – 7 (Sunday).
	Weekday int
}

// MomentOf returns t seen in loc. A nil loc is DefaultZone (loaded with
// LoadZone on every such call: a caller in a loop loads the zone once and
// passes it).
func MomentOf(t time.Time, loc *time.Location) Moment {
	if loc == nil {
		// LoadZone never fails for DefaultZone: it falls back to fixed UTC+9.
		loc, _ = LoadZone(DefaultZone)
	}
	lt := t.In(loc)
	wd := int(lt.Weekday())
	if wd == 0 {
		wd = 7
	}
	hour, minute, _ := lt.Clock()
	mo := Moment{Minute: hour*60 + minute, Weekday: wd}
	// lt.Format("20060102") and ("200601") without the layouts' parsing:
	// a rebuild computes them for every usage row it restores
	// (TestMomentOfMatchesFormat).
	y, m, d := lt.Date()
	if y < 0 || y > 9999 {
		mo.Day, mo.Month = lt.Format("20060102"), lt.Format("200601")
		return mo
	}
	b := [8]byte{byte('0' + y/1000), byte('0' + y/100%10), byte('0' + y/10%10), byte('0' + y%10),
		byte('0' + int(m)/10), byte('0' + int(m)%10), byte('0' + d/10), byte('0' + d%10)}
	mo.Day = string(b[:])
	mo.Month = mo.Day[:6]
	return mo
}

// Stamp is the moment's local time YYYYMMDDHHMM: stamps of one zone compare
// as strings in time order (a daylight-saving fall-back repeats an hour).
func (m Moment) Stamp() string { return m.Day + FormatHHMM(m.Minute) }

// ParseHHMM parses "HHMM" (0000–2359) into minutes of the day.
func ParseHHMM(s string) (int, error) {
	if len(s) != 4 {
		return 0, fmt.Errorf("must be HHMM (0000-2359), got %q", s)
	}
	for i := 0; i < 4; i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("must be HHMM (0000-2359), got %q", s)
		}
	}
	h := int(s[0]-'0')*10 + int(s[1]-'0')
	m := int(s[2]-'0')*10 + int(s[3]-'0')
	if h > 23 || m > 59 {
		return 0, fmt.Errorf("must be HHMM (0000-2359), got %q", s)
	}
	return h*60 + m, nil
}

// FormatHHMM formats minutes of the day as "HHMM".
func FormatHHMM(min int) string { return fmt.Sprintf("%02d%02d", min/60, min%60) }

// Days is a set of ISO weekdays as a bit mask (bit 1 = Monday … bit 7 = Sunday).
// The zero value means every day.
type Days uint8

var dayNames = [8]string{"", "MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"}

// Has reports whether the ISO weekday wd (1–7) is in d; an empty set has every day.
func (d Days) Has(wd int) bool { return d == 0 || d&(1<<wd) != 0 }

func dayIndex(s string) int {
	for i := 1; i <= 7; i++ {
		if dayNames[i] == s {
			return i
		}
	}
	return 0
}

// ParseDays parses a day list like "MON-FRI", "SAT,SUN" or "FRI-MON" (ranges wrap
// past Sunday). Day names are upper case.
func ParseDays(s string) (Days, error) {
	if s == "" {
		return 0, fmt.Errorf("day list is empty")
	}
	var d Days
	for _, item := range strings.Split(s, ",") {
		from, to, isRange := strings.Cut(item, "-")
		a := dayIndex(from)
		b := a
		if isRange {
			b = dayIndex(to)
		}
		if a == 0 || b == 0 {
			return 0, fmt.Errorf("bad day %q (want MON..SUN, a range like MON-FRI or a list like SAT,SUN)", item)
		}
		for i := a; ; i = i%7 + 1 {
			d |= 1 << i
			if i == b {
				break
			}
		}
	}
	return d, nil
}

// String formats d with ranges for runs of three or more days, wrapping past
// Sunday, e.g. "MON-FRI", "SAT,SUN", "SUN-THU"; "" for every day.
func (d Days) String() string {
	if d == 0 || d == 0xFE {
		return ""
	}
	next := func(i int) int { return i%7 + 1 }
	prev := func(i int) int { return (i+5)%7 + 1 }
	start := 1
	for i := 1; i <= 7; i++ {
		if d.Has(i) && !d.Has(prev(i)) {
			start = i
			break
		}
	}
	var parts []string
	for n, i := 0, start; n < 7; {
		if !d.Has(i) {
			i, n = next(i), n+1
			continue
		}
		j, run := i, 1
		for n+run < 7 && d.Has(next(j)) {
			j, run = next(j), run+1
		}
		switch {
		case run >= 3:
			parts = append(parts, dayNames[i]+"-"+dayNames[j])
		case run == 2:
			parts = append(parts, dayNames[i], dayNames[j])
		default:
			parts = append(parts, dayNames[i])
		}
		i, n = next(j), n+run
	}
	return strings.Join(parts, ",")
}

// Window is a daily time window [Start, End) in minutes of the day, optionally
// limited to some weekdays. Start > End wraps midnight: the part after midnight
// belongs to the day the window started on. Start == End is the whole day.
type Window struct {
	Start, End int
	Days       Days
}

// ParseWindow parses "HHMM-HHMM" or "HHMM-HHMM@DAYS".
func ParseWindow(s string) (Window, error) {
	span, days, hasDays := strings.Cut(s, "@")
	from, to, ok := strings.Cut(span, "-")
	if !ok {
		return Window{}, fmt.Errorf("must be HHMM-HHMM[@DAYS], got %q", s)
	}
	var w Window
	var err error
	if w.Start, err = ParseHHMM(from); err != nil {
		return Window{}, err
	}
	if w.End, err = ParseHHMM(to); err != nil {
		return Window{}, err
	}
	if hasDays {
		if w.Days, err = ParseDays(days); err != nil {
			return Window{}, err
		}
	}
	return w, nil
}

// String formats w as "HHMM-HHMM[@DAYS]".
func (w Window) String() string {
	s := FormatHHMM(w.Start) + "-" + FormatHHMM(w.End)
	if ds := w.Days.String(); ds != "" {
		s += "@" + ds
	}
	return s
}

// Contains reports whether the moment falls inside the window.
func (w Window) Contains(m Moment) bool {
	prev := (m.Weekday+5)%7 + 1
	switch {
	case w.Start == w.End:
		return w.Days.Has(m.Weekday)
	case w.Start < w.End:
		return w.Days.Has(m.Weekday) && m.Minute >= w.Start && m.Minute < w.End
	default:
		return (m.Minute >= w.Start && w.Days.Has(m.Weekday)) ||
			(m.Minute < w.End && w.Days.Has(prev))
	}
}

// Downtime is a time window's start as an instant: when a member's
// downtime begins next (NextDowntime).
type Downtime struct {
	// Rule is the window's key: BLOCK:TIME:START for the night window,
	// BLOCK:TIME:<name> for a named one.
	Rule string
	// Start is when the window begins.
	Start time.Time
}

// NextDowntime returns the first time window of c that begins after t (in
// loc, nil: DefaultZone), within the next eight days, and whether there is
// one: what a member's dashboard says ("다음 차단 시간대: 밤 22:00부터"). A
// window that holds t now is not next: its following start is. Of windows
// beginning at once the night window, then the smallest key, is named, as
// the engine names the rule. A window of the whole day (start = end)
// begins at midnight of a day it holds that follows a day it does not (on
// every day it never begins: it always holds). A time exception in effect
// (EXCEPT:TIME) lifts the windows until it ends: a start it covers does
// not count, and the downtime comes back when it ends if a window holds
// then.
func NextDowntime(c Constraints, t time.Time, loc *time.Location) (Downtime, bool) {
	if loc == nil {
		loc, _ = LoadZone(DefaultZone)
	}
	type win struct {
		rule string
		w    Window
	}
	var ws []win
	if c.Night != nil {
		ws = append(ws, win{KeyBlockTimeStart, *c.Night})
	}
	for name, w := range c.Windows {
		ws = append(ws, win{KeyBlockTimePrefix + name, w})
	}
	lt := t.In(loc)
	day := time.Date(lt.Year(), lt.Month(), lt.Day(), 0, 0, 0, 0, loc)
	var best Downtime
	found := false
	consider := func(rule string, start time.Time) {
		if !found || start.Before(best.Start) || (start.Equal(best.Start) && ruleFirst(rule, best.Rule)) {
			best, found = Downtime{Rule: rule, Start: start}, true
		}
	}
	// Until the exception ends, nothing begins; when it ends, a window
	// that holds then is back.
	var except time.Time
	if c.TimeException != "" {
		if e, err := time.ParseInLocation("200601021504", c.TimeException, loc); err == nil && e.After(lt) {
			except = e
			at := MomentOf(e, loc)
			for _, x := range ws {
				if x.w.Contains(at) {
					consider(x.rule, e)
				}
			}
		}
	}
	for _, x := range ws {
		if x.w.Start == x.w.End && (x.w.Days == 0 || x.w.Days == 0xFE) {
			continue
		}
		for d := 0; d <= 8; d++ {
			date := day.AddDate(0, 0, d)
			wd := int(date.Weekday())
			if wd == 0 {
				wd = 7
			}
			if !x.w.Days.Has(wd) {
				continue
			}
			minute := x.w.Start
			if x.w.Start == x.w.End {
				if x.w.Days.Has((wd+5)%7 + 1) { // the day before holds it too: no new start
					continue
				}
				minute = 0
			}
			start := time.Date(date.Year(), date.Month(), date.Day(), minute/60, minute%60, 0, 0, loc)
			if !start.After(lt) || start.Before(except) {
				continue
			}
			consider(x.rule, start)
			break
		}
	}
	return best, found
}

// ruleFirst reports whether window rule a is named before b when both
// begin at once: the night window, then byte order.
func ruleFirst(a, b string) bool {
	if a == KeyBlockTimeStart || b == KeyBlockTimeStart {
		return a == KeyBlockTimeStart
	}
	return a < b
}
