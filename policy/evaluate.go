package policy

import (
	"slices"
	"strconv"
	"strings"
)

// Decision is the outcome of judging one usage event (see Evaluate).
type Decision string

// The decisions, in the order the evaluator checks for them.
const (
	Allowed             Decision = "ALLOWED"
	BlockedNotMember    Decision = "BLOCKED_NOT_MEMBER"
	BlockedAccess       Decision = "BLOCKED_ACCESS"
	BlockedApp          Decision = "BLOCKED_APP"
	BlockedTime         Decision = "BLOCKED_TIME"
	BlockedLimitDaily   Decision = "BLOCKED_LIMIT_DAILY"
	BlockedLimitMonthly Decision = "BLOCKED_LIMIT_MONTHLY"
	BlockedFamilyQuota  Decision = "BLOCKED_FAMILY_QUOTA"
	// BlockedAppLimit (budget.go), judged after BlockedTime and before
	// BlockedLimitDaily: an app's or category's daily data budget.
)

// Decisions lists every decision.
func Decisions() []Decision {
	return []Decision{Allowed, BlockedNotMember, BlockedAccess, BlockedApp, BlockedTime,
		BlockedLimitDaily, BlockedLimitMonthly, BlockedFamilyQuota, BlockedAppLimit}
}

// Valid reports whether d is a known decision.
func (d Decision) Valid() bool { return slices.Contains(Decisions(), d) }

// Blocked reports whether d blocks the request.
func (d Decision) Blocked() bool { return d != Allowed }

// Rules reported with blocks that no constraint key names.
const (
	RuleMembership        = "MEMBERSHIP"
	RulePool              = "POOL"
	RulePoolUnprovisioned = "POOL:UNPROVISIONED"
)

// Pool is a family's shared pool for the current month.
type Pool struct {
	// Provisioned is false for a family whose monthly plan was never set; such a
	// pool holds 0 bytes (the seed's behaviour) and blocks report RulePoolUnprovisioned.
	Provisioned bool
	// Total is the month's plan amount plus the month's top-ups.
	Total int64
	// Used is what members used from the pool this month.
	Used int64
	// Reserved is what the family's grants hold of the month's pool
	// (reservations not used yet; see SizeGrant): a request fits in what
	// is neither used nor reserved (Free). For a grant being sized, the
	// other grants' reservations only.
	Reserved int64
}

// Remaining is Total − Used, never below 0: what the family sees left, and
// what thresholds are judged on (reservations are not usage).
func (p Pool) Remaining() int64 { return max(p.Total-p.Used, 0) }

// Free is Total − Used − Reserved, never below 0: what a request may take.
func (p Pool) Free() int64 { return max(p.Total-p.Used-p.Reserved, 0) }

// Member is what the evaluator knows about the member an event is for.
type Member struct {
	// Member is false when the family does not have this customer.
	Member bool
	// DailyUsed and MonthlyUsed are the member's usage in the event's day and month.
	DailyUsed, MonthlyUsed int64
	// DailyReserved and MonthlyReserved are what the member's grants hold
	// of its limits in the event's day and month (for a grant being sized,
	// its other grants' only): a request fits in a limit with them.
	DailyReserved, MonthlyReserved int64
	// AppUsed and CategoryUsed are the event's day's counted use of its app
	// and of its category, for their daily budgets (budget.go; counted
	// only while the app or category has one).
	AppUsed, CategoryUsed int64
}

// Request is one usage event to judge.
type Request struct {
	Bytes    int64
	AppID    string
	Category Category
	At       Moment
}

// Result is the evaluator's verdict.
type Result struct {
	Decision Decision
	// Rule names what decided a block: the constraint key (e.g. LIMIT:DATA:DAILY,
	// BLOCK:APP:com.youtube.app, BLOCK:TIME:START for the night window,
	// BLOCK:TIME:<name>), MEMBERSHIP, POOL or POOL:UNPROVISIONED. Empty when allowed.
	Rule string
	// Deduct is what an allowed request takes from the pool and period counters.
	Deduct int64
	// ThrottleKbps is THROTTLE:SPEED, returned with ALLOWED only.
	ThrottleKbps int64
}

// Evaluate judges one request in this order, first match wins:
// membership → BLOCK:ACCESS → app, then category blocks (lifted for the app
// while an EXCEPT:APP:<app> lasts) → time windows (the START/END window,
// then named windows in key order; none while EXCEPT:TIME lasts, none for
// an ALLOW:APP or ALLOW:CATEGORY app) → the app's, then its category's
// daily data budget (counted use of the day + request > budget, see
// budget.go; none while EXCEPT:APP lasts) → daily, then monthly
// limit (used + reserved + request > limit, each limit raised by the extras of the
// event's day and month, see Constraints.EffectiveLimits) → family pool
// (free < request, free = total − used − reserved) → allow.
// It is all or nothing: an allowed request deducts exactly req.Bytes.
func Evaluate(c Constraints, m Member, p Pool, req Request) Result {
	if d, rule := blocks(c, m, req.AppID, req.Category, req.At); d != Allowed {
		return Result{Decision: d, Rule: rule}
	}
	if d, rule := budgetBlock(c, m, req); d != Allowed {
		return Result{Decision: d, Rule: rule}
	}
	daily, monthly := c.EffectiveLimits(req.At)
	if daily != nil && m.DailyUsed+m.DailyReserved+req.Bytes > *daily {
		return Result{Decision: BlockedLimitDaily, Rule: KeyLimitDaily}
	}
	if monthly != nil && m.MonthlyUsed+m.MonthlyReserved+req.Bytes > *monthly {
		return Result{Decision: BlockedLimitMonthly, Rule: KeyLimitMonthly}
	}
	if p.Free() < req.Bytes {
		return Result{Decision: BlockedFamilyQuota, Rule: poolRule(p)}
	}
	return Result{Decision: Allowed, Deduct: req.Bytes, ThrottleKbps: c.ThrottleKbps}
}

// blocks is Evaluate's checks before the limits: membership, BLOCK:ACCESS,
// app and category blocks (with the app's exception), time windows (with
// the time exception and the always-allowed apps).
func blocks(c Constraints, m Member, app string, cat Category, at Moment) (Decision, string) {
	if d, rule := standing(c, m, at); d != Allowed {
		return d, rule
	}
	excepted := c.AppExcepted(app, at)
	if app != "" && slices.Contains(c.BlockedApps, app) && !excepted {
		return BlockedApp, KeyBlockAppPrefix + app
	}
	if cat != "" && slices.Contains(c.BlockedCategories, cat) && !excepted {
		return BlockedApp, KeyBlockCatPrefix + string(cat)
	}
	if !c.AlwaysAllowed(app, cat) {
		return timeBlock(c, at)
	}
	return Allowed, ""
}

// Status is the dry run: would this member be blocked now, whatever app it
// used, and why. It blocks where Evaluate would block any request of one byte
// or more: membership, BLOCK:ACCESS, an active time window, used ≥ a limit
// (DAILY before MONTHLY), or an empty family pool. App and category blocks do
// not block the member as a whole and are not reported. Reservations are
// not usage: a member whose grants hold all of its limit is not blocked
// (its sessions use them), so Status reads used bytes only.
func Status(c Constraints, m Member, p Pool, at Moment) Result {
	if d, rule := standing(c, m, at); d != Allowed {
		return Result{Decision: d, Rule: rule}
	}
	if d, rule := timeBlock(c, at); d != Allowed {
		return Result{Decision: d, Rule: rule}
	}
	daily, monthly := c.EffectiveLimits(at)
	if daily != nil && m.DailyUsed >= *daily {
		return Result{Decision: BlockedLimitDaily, Rule: KeyLimitDaily}
	}
	if monthly != nil && m.MonthlyUsed >= *monthly {
		return Result{Decision: BlockedLimitMonthly, Rule: KeyLimitMonthly}
	}
	if p.Remaining() <= 0 {
		return Result{Decision: BlockedFamilyQuota, Rule: poolRule(p)}
	}
	return Result{Decision: Allowed, ThrottleKbps: c.ThrottleKbps}
}

func standing(c Constraints, m Member, _ Moment) (Decision, string) {
	if !m.Member {
		return BlockedNotMember, RuleMembership
	}
	if c.BlockAccess {
		return BlockedAccess, KeyBlockAccess
	}
	return Allowed, ""
}

// timeBlock checks the START/END window first, then named windows; of several
// matching named windows it reports the smallest key (byte order), as the Lua
// engine does. A time exception in effect lifts them all.
func timeBlock(c Constraints, at Moment) (Decision, string) {
	if c.TimeExcepted(at) {
		return Allowed, ""
	}
	if c.Night != nil && c.Night.Contains(at) {
		return BlockedTime, KeyBlockTimeStart
	}
	best := ""
	for name, w := range c.Windows {
		key := KeyBlockTimePrefix + name
		if w.Contains(at) && (best == "" || key < best) {
			best = key
		}
	}
	if best != "" {
		return BlockedTime, best
	}
	return Allowed, ""
}

func poolRule(p Pool) string {
	if p.Provisioned {
		return RulePool
	}
	return RulePoolUnprovisioned
}

// Thresholds are the family pool's alert levels in percent of the pool
// remaining, strictly descending, each 1–99 (default 50, 30, 10).
type Thresholds []int

// DefaultThresholds returns the seed's alert levels: 50, 30 and 10 % remaining.
func DefaultThresholds() Thresholds { return Thresholds{50, 30, 10} }

// ParseThresholds parses a comma-separated list such as "50,30,10" (any order,
// no duplicates) into canonical descending order. An empty string is no alerts.
func ParseThresholds(s string) (Thresholds, error) {
	if s == "" {
		return Thresholds{}, nil
	}
	parts := strings.Split(s, ",")
	t := make(Thresholds, 0, len(parts))
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || strconv.Itoa(n) != p {
			return nil, fieldErr("thresholds", "bad percent %q", p)
		}
		t = append(t, n)
	}
	return t.Canonical()
}

// MaxThresholds is how many alert thresholds a family may have: so many
// can be crossed by one event (usage_record.crossed is sized by it).
const MaxThresholds = 10

// Canonical validates t and returns it sorted descending.
func (t Thresholds) Canonical() (Thresholds, error) {
	out := slices.Clone(t)
	slices.Sort(out)
	slices.Reverse(out)
	if len(out) > MaxThresholds {
		return nil, fieldErr("thresholds", "at most %d thresholds, got %d", MaxThresholds, len(out))
	}
	for i, p := range out {
		if p < 1 || p > 99 {
			return nil, fieldErr("thresholds", "percent must be 1..99, got %d", p)
		}
		if i > 0 && out[i-1] == p {
			return nil, fieldErr("thresholds", "duplicate percent %d", p)
		}
	}
	if out == nil {
		out = Thresholds{}
	}
	return out, nil
}

// ThresholdAlertText is a threshold alert's message in Korean, the
// service's default language: the text the judges put in every
// THRESHOLD_ALERT they produce (envelope.ThresholdAlert.Message) unless
// given another, and the notifier's Korean text of the alert.
func ThresholdAlertText(percent int) string {
	return "가족 데이터가 " + strconv.Itoa(percent) + "% 미만입니다! 데이터를 충전해주세요."
}

// String formats t as "50,30,10".
func (t Thresholds) String() string {
	parts := make([]string, len(t))
	for i, p := range t {
		parts[i] = strconv.Itoa(p)
	}
	return strings.Join(parts, ",")
}

// Reached reports whether the pool is at or below percent p remaining:
// remaining × 100 ≤ p × total, for a pool with a positive total.
func Reached(p int, total, remaining int64) bool {
	return total > 0 && remaining*100 <= int64(p)*total
}
