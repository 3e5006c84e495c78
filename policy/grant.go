package policy

import (
	"time"
)

// GrantRequest is one step of a grant to size (SizeGrant): the network asks
// for units for a member's traffic of one app or category (a rating group)
// and reserves them until it reports their use.
type GrantRequest struct {
	// AppID and Category are what the grant covers ("" = any traffic):
	// blocks, windows and exceptions are judged for them as for an event.
	AppID    string
	Category Category
	At       Moment
	// Want is the size asked for — the request, or the engine's default
	// when the request names none — capped at the operator's maximum; > 0.
	Want int64
	// Minimum is the headroom below which what is granted is the member's
	// last units (GrantSize.Final).
	Minimum int64
	// Grants is how many grants of the family are open, this one included
	// (≥ 1): the fair share is the pool left divided among them.
	Grants int64
}

// GrantSize is what SizeGrant grants.
type GrantSize struct {
	// Decision is Allowed when Granted > 0, else why nothing is granted:
	// a block (as Evaluate decides it for the app at that time), or the
	// limit or pool that leaves nothing.
	Decision Decision
	// Rule names the block, or with Final the limit that ends (e.g.
	// LIMIT:DATA:DAILY, POOL); "" otherwise.
	Rule    string
	Granted int64
	// Final says these are the last units: a block, or a headroom
	// (limits and pool, used bytes only) below the minimum. A grant of 0
	// that is not final is one the other grants' reservations crowd out:
	// asking again later may get units.
	Final        bool
	ThrottleKbps int64
	// Crowded says the other grants' reservations of the pool cut the
	// grant below what it would get otherwise (the request, the fair share
	// and the member's limits): some of them hold more than their share,
	// and asked to report again they would shrink to it.
	Crowded bool
}

// FairShare is a grant's fair share of the pool: what is left (total −
// used, reservations included) divided among the family's open grants,
// this one included, rounded down. A lone grant may take everything left.
func FairShare(p Pool, grants int64) int64 {
	return max(p.Total-p.Used, 0) / max(grants, 1)
}

// SizeGrant sizes one grant step. m and p hold what the member and the family
// used (the step's own report already charged) and what the other grants
// reserve (this grant's previous reservation returned). In Evaluate's order:
// membership, BLOCK:ACCESS, app and category blocks, time windows block the
// grant (Granted 0, Final), then a daily budget of the app or its category
// that leaves nothing (BlockedAppLimit; Constraints.BudgetLeft with m's
// AppUsed and CategoryUsed). Otherwise it grants the smallest of
//
//   - req.Want (the request, or the default, within the operator maximum),
//   - what the app's and its category's daily budgets leave (the use
//     counted; other grants' reservations of the app are not counted),
//   - what the daily and monthly limits leave (limit − used − the member's
//     other reservations, each limit raised by the period's extras),
//   - what the pool leaves (total − used − the other reservations),
//   - the fair share (FairShare: what is left of the pool, reservations
//     included, divided among the open grants),
//
// never below 0. The units are the last (Final) when the headroom — the
// smallest of limit − used and total − used, reservations not counted — is
// below req.Minimum, or what a budget leaves is; Rule then names the
// first of the budget, daily, monthly and pool whose headroom is. When nothing is granted the Decision names the first
// of daily, monthly and pool with no headroom, else the first whose
// reservations leave nothing (the pool also when the fair share is 0).
func SizeGrant(c Constraints, m Member, p Pool, req GrantRequest) GrantSize {
	if d, rule := blocks(c, m, req.AppID, req.Category, req.At); d != Allowed {
		return GrantSize{Decision: d, Rule: rule, Final: true}
	}
	left, budgetRule, budgeted := c.BudgetLeft(m, req.AppID, req.Category, req.At)
	if budgeted && left <= 0 {
		return GrantSize{Decision: BlockedAppLimit, Rule: budgetRule, Final: true}
	}
	daily, monthly := c.EffectiveLimits(req.At)
	// Headroom: hard counts used bytes only, soft the other reservations too.
	type room struct {
		set        bool
		hard, soft int64
		decision   Decision
		rule       string
	}
	rooms := [3]room{
		{decision: BlockedLimitDaily, rule: KeyLimitDaily},
		{decision: BlockedLimitMonthly, rule: KeyLimitMonthly},
		{set: true, hard: p.Total - p.Used, soft: p.Total - p.Used - p.Reserved, decision: BlockedFamilyQuota, rule: poolRule(p)},
	}
	if daily != nil {
		rooms[0] = room{true, *daily - m.DailyUsed, *daily - m.DailyUsed - m.DailyReserved, BlockedLimitDaily, KeyLimitDaily}
	}
	if monthly != nil {
		rooms[1] = room{true, *monthly - m.MonthlyUsed, *monthly - m.MonthlyUsed - m.MonthlyReserved, BlockedLimitMonthly, KeyLimitMonthly}
	}
	share := FairShare(p, req.Grants)
	cap := min(req.Want, share) // what it would get without the others' reservations of the pool
	final, finalRule := false, ""
	if budgeted {
		cap = min(cap, left)
		if left < req.Minimum {
			final, finalRule = true, budgetRule
		}
	}
	for i, r := range rooms {
		if !r.set {
			continue
		}
		if i < 2 {
			cap = min(cap, r.soft)
		}
		if r.hard < req.Minimum && !final {
			final, finalRule = true, r.rule
		}
	}
	granted := max(min(cap, rooms[2].soft), 0)
	crowded := cap > 0 && rooms[2].soft < cap
	if granted > 0 {
		return GrantSize{Decision: Allowed, Rule: finalRule, Granted: granted, Final: final, ThrottleKbps: c.ThrottleKbps, Crowded: crowded}
	}
	g := GrantSize{Decision: BlockedFamilyQuota, Rule: poolRule(p), Final: final, Crowded: crowded}
	for _, r := range rooms {
		if r.set && r.hard <= 0 {
			g.Decision, g.Rule = r.decision, r.rule
			return g
		}
	}
	for _, r := range rooms {
		if r.set && r.soft <= 0 {
			g.Decision, g.Rule = r.decision, r.rule
			return g
		}
	}
	return g // the fair share is 0
}

// NextChange returns the first instant after at at which Evaluate's answer
// for a request of app (of category cat) could change by time alone — what
// a grant's validity ends at. It is the earliest of
//
//   - the end of at's day in loc (day counters, the day's and month's
//     extras and gifts, weekdays; a month ends with a day),
//   - unless BLOCK:ACCESS is set: the end of the app's exception
//     (EXCEPT:APP:<app>) when it ends later that day,
//   - unless BLOCK:ACCESS is set or the app or its category is always
//     allowed: the start and the end, later that day, of every time window
//     holding or starting that day, and the end of the time exception
//     (EXCEPT:TIME),
//   - the next change of loc's offset from UTC (daylight saving time):
//     wall-clock boundaries are counted in minutes from at within one
//     offset.
//
// A boundary at a minute starts that minute (windows and exceptions are
// judged by the minute): the result is after at, at a whole minute (or at
// an offset change). It may name a boundary that changes nothing (a window
// ending inside another); it never skips one that does (the property test
// in policy checks both against Evaluate). A nil loc is DefaultZone.
func NextChange(c Constraints, app string, cat Category, at time.Time, loc *time.Location) time.Time {
	if loc == nil {
		loc, _ = LoadZone(DefaultZone)
	}
	lt := at.In(loc)
	mo := MomentOf(lt, loc)
	best := 24 * 60 // the day's end, in minutes of the day
	consider := func(minute int) {
		if minute > mo.Minute && minute < best {
			best = minute
		}
	}
	// An exception's end (YYYYMMDDHHMM) later today.
	stampToday := func(stamp string) {
		if len(stamp) == 12 && stamp[:8] == mo.Day {
			if m, err := ParseHHMM(stamp[8:]); err == nil {
				consider(m)
			}
		}
	}
	if !c.BlockAccess {
		if app != "" {
			stampToday(c.AppExceptions[app])
		}
		if !c.AlwaysAllowed(app, cat) {
			stampToday(c.TimeException)
			prev := (mo.Weekday+5)%7 + 1
			window := func(w Window) {
				switch {
				case w.Start == w.End: // the whole day: changes at midnight only
				case w.Start < w.End:
					if w.Days.Has(mo.Weekday) {
						consider(w.Start)
						consider(w.End)
					}
				default: // wraps: yesterday's ends today, today's starts today
					if w.Days.Has(prev) {
						consider(w.End)
					}
					if w.Days.Has(mo.Weekday) {
						consider(w.Start)
					}
				}
			}
			if c.Night != nil {
				window(*c.Night)
			}
			for _, w := range c.Windows {
				window(w)
			}
		}
	}
	minute := lt.Truncate(time.Minute)
	next := minute.Add(time.Duration(best-mo.Minute) * time.Minute)
	if _, end := lt.ZoneBounds(); !end.IsZero() && end.Before(next) {
		next = end
	}
	return next
}
