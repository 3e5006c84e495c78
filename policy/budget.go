package policy

import (
	"strconv"
	"strings"
)

// Per-app and per-category daily data budgets ("유튜브 하루 500 MB"), the data
// plan's analog of Screen Time's and Family Link's app limits:
//
//	LIMIT:DATA:APP:<appId>       bytes   the app's data a day
//	LIMIT:DATA:CATEGORY:<c>      bytes   the category's data a day
//
// An event of a budgeted app (or category) whose day's counted use plus
// its bytes is over the budget is BLOCKED_APP_LIMIT, its rule the budget's
// key: the app's budget first, then its category's, after the time windows
// and before the member's daily and monthly limits. An app exception
// (EXCEPT:APP:<app>, "30분 더") lifts both, as it lifts the app's blocks.
// The use counted is the event's day's allowed bytes of the app (of the
// category) while it has a budget: quota's engine counts nothing for an
// app without one, so the hot path of members without budgets is as it
// was (doc/redis-keys.md, the budget hash). A rebuild from SQL counts the
// day's allowed usage recorded for every budgeted app and category.
const (
	KeyLimitAppPrefix = "LIMIT:DATA:APP:"
	KeyLimitCatPrefix = "LIMIT:DATA:CATEGORY:"
)

// BlockedAppLimit: the app's or its category's daily data budget is used
// up (LIMIT:DATA:APP:<app> / LIMIT:DATA:CATEGORY:<c>).
const BlockedAppLimit Decision = "BLOCKED_APP_LIMIT"

// MaxBudgetAppIDLen is the longest app id that can have a budget: its key,
// LIMIT:DATA:APP:<appId>, is at most MaxKeyLen bytes.
const MaxBudgetAppIDLen = MaxKeyLen - len(KeyLimitAppPrefix)

// AppBudgetKey is the key of app's daily data budget.
func AppBudgetKey(app string) string { return KeyLimitAppPrefix + app }

// CategoryBudgetKey is the key of category c's daily data budget.
func CategoryBudgetKey(c Category) string { return KeyLimitCatPrefix + string(c) }

// Budgets reports whether c has any per-app or per-category budget.
func (c Constraints) Budgets() bool { return len(c.AppBudgets) > 0 || len(c.CategoryBudgets) > 0 }

// Budgeted reports whether an event of app (of category cat) is counted
// for a budget: which of the app's and the category's budgets exist.
func (c Constraints) Budgeted(app string, cat Category) (byApp, byCategory bool) {
	if app != "" {
		_, byApp = c.AppBudgets[app]
	}
	if cat != "" {
		_, byCategory = c.CategoryBudgets[cat]
	}
	return byApp, byCategory
}

// BudgetLeft is what app's (of category cat) daily budgets leave of the
// day with m's counted use: the smaller of the app's and the category's
// budget less its use (never below 0; the app's on a tie), the key of the
// budget that leaves it, and ok false when neither has a budget or an app
// exception lifts them at at. SizeGrant caps a grant with it.
func (c Constraints) BudgetLeft(m Member, app string, cat Category, at Moment) (left int64, rule string, ok bool) {
	byApp, byCat := c.Budgeted(app, cat)
	if !byApp && !byCat || c.AppExcepted(app, at) {
		return 0, "", false
	}
	if byApp {
		left, rule = max(c.AppBudgets[app]-m.AppUsed, 0), AppBudgetKey(app)
	}
	if byCat {
		if l := max(c.CategoryBudgets[cat]-m.CategoryUsed, 0); !byApp || l < left {
			left, rule = l, CategoryBudgetKey(cat)
		}
	}
	return left, rule, true
}

// budgetBlock judges an event of req's app and category against their
// daily budgets with the day's counted use m.AppUsed and m.CategoryUsed:
// BlockedAppLimit and the budget's key (the app's first), or Allowed.
// An app exception in effect lifts both.
func budgetBlock(c Constraints, m Member, req Request) (Decision, string) {
	byApp, byCat := c.Budgeted(req.AppID, req.Category)
	if !byApp && !byCat || c.AppExcepted(req.AppID, req.At) {
		return Allowed, ""
	}
	if byApp && m.AppUsed+req.Bytes > c.AppBudgets[req.AppID] {
		return BlockedAppLimit, AppBudgetKey(req.AppID)
	}
	if byCat && m.CategoryUsed+req.Bytes > c.CategoryBudgets[req.Category] {
		return BlockedAppLimit, CategoryBudgetKey(req.Category)
	}
	return Allowed, ""
}

// budgetMap writes c's budgets into m (Constraints.Map).
func (c Constraints) budgetMap(m map[string]string) {
	for app, n := range c.AppBudgets {
		m[AppBudgetKey(app)] = strconv.FormatInt(n, 10)
	}
	for cat, n := range c.CategoryBudgets {
		m[CategoryBudgetKey(cat)] = strconv.FormatInt(n, 10)
	}
}

// parseBudget reads a budget key k with value v into c (ParseConstraints);
// ok is false when k is no budget key. App ids and categories are
// validated as BLOCK:APP and BLOCK:CATEGORY validate them; the budget is
// a byte count from 0 to MaxBytes.
func (c *Constraints) parseBudget(k, v string) (ok bool, err error) {
	switch {
	case strings.HasPrefix(k, KeyLimitAppPrefix):
		app := k[len(KeyLimitAppPrefix):]
		if err := validName(k, app); err != nil {
			return true, err
		}
		n, err := parseBytes(v)
		if err != nil {
			return true, fieldErr(k, "%v", err)
		}
		if c.AppBudgets == nil {
			c.AppBudgets = make(map[string]int64)
		}
		c.AppBudgets[app] = n
		return true, nil
	case strings.HasPrefix(k, KeyLimitCatPrefix):
		cat := Category(k[len(KeyLimitCatPrefix):])
		if !cat.Valid() {
			return true, fieldErr(k, "unknown category %q (want one of VIDEO, GAME, SOCIAL, MESSAGING, WEB, MUSIC)", string(cat))
		}
		n, err := parseBytes(v)
		if err != nil {
			return true, fieldErr(k, "%v", err)
		}
		if c.CategoryBudgets == nil {
			c.CategoryBudgets = make(map[Category]int64)
		}
		c.CategoryBudgets[cat] = n
		return true, nil
	}
	return false, nil
}
