package policy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Constraint keys (the package doc's table). A member's constraints are stored
// as a map of these keys to string values (the Redis hash
// family:{fid}:customer:{cid}:constraints).
const (
	KeyBlockAccess       = "BLOCK:ACCESS"
	KeyBlockAppPrefix    = "BLOCK:APP:"
	KeyBlockCatPrefix    = "BLOCK:CATEGORY:"
	KeyBlockTimePrefix   = "BLOCK:TIME:"
	KeyBlockTimeStart    = "BLOCK:TIME:START"
	KeyBlockTimeEnd      = "BLOCK:TIME:END"
	KeyLimitDaily        = "LIMIT:DATA:DAILY"
	KeyLimitMonthly      = "LIMIT:DATA:MONTHLY"
	KeyLimitExtraPrefix  = "LIMIT:DATA:EXTRA:"
	KeyLimitGiftPrefix   = "LIMIT:DATA:GIFT:"
	KeyThrottleSpeed     = "THROTTLE:SPEED"
	KeyAllowAppPrefix    = "ALLOW:APP:"
	KeyAllowCatPrefix    = "ALLOW:CATEGORY:"
	KeyExceptTime        = "EXCEPT:TIME"
	KeyExceptAppPrefix   = "EXCEPT:APP:"
	blockValue           = "1"
	maxThrottleKbps      = 100_000_000
	maxConstraintEntries = 256
)

// MaxKeyLen is the longest constraint key, in bytes. A decision's rule
// (Result.Rule) is a key, or a key's prefix with the event's app id or
// category, so it is never longer either: what the truth stores of a
// decision (usage_record.rule) is sized by it.
const MaxKeyLen = 200

// MaxAppIDLen is the longest app id DPCS judges, in bytes: the id that
// every key naming an app but a budget's can hold (EXCEPT:APP:<appId> has
// the longest prefix of the others; an app with a budget has an id of at
// most MaxBudgetAppIDLen). It is the one bound of app ids from the envelope to the SQL
// columns (usage_record.app_id, app_catalog.app_id, data_request.app_id):
// an event with a longer id is refused before it is judged, never charged
// in Redis and then refused by the truth (doc/architecture.md, "Whatever a
// judge accepts, the truth can store").
const MaxAppIDLen = MaxKeyLen - len(KeyExceptAppPrefix)

// MaxBytes is the largest byte amount DPCS accepts for a pool, a limit or a
// request (2^46 B ≈ 70 TB). It keeps every quantity the Lua engine multiplies
// (remaining × 100) below 2^53, where Redis' Lua numbers stay exact.
const MaxBytes int64 = 1 << 46

// ErrInvalid is wrapped by every validation error of this package.
var ErrInvalid = errors.New("invalid policy")

// FieldError names the constraint key (or field) that failed validation.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap makes errors.Is(err, ErrInvalid) hold for every FieldError.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Category is an app category a constraint can block as a whole.
type Category string

// The six app categories of the seed's traffic model.
const (
	CategoryVideo     Category = "VIDEO"
	CategoryGame      Category = "GAME"
	CategorySocial    Category = "SOCIAL"
	CategoryMessaging Category = "MESSAGING"
	CategoryWeb       Category = "WEB"
	CategoryMusic     Category = "MUSIC"
)

// Categories lists every known category in a fixed order.
func Categories() []Category {
	return []Category{CategoryVideo, CategoryGame, CategorySocial, CategoryMessaging, CategoryWeb, CategoryMusic}
}

// Valid reports whether c is one of the known categories.
func (c Category) Valid() bool { return slices.Contains(Categories(), c) }

// Constraints is the typed form of a member's constraint map. The zero value
// has no constraints at all (everything allowed, subject to the family pool).
type Constraints struct {
	// BlockAccess is the manual block (BLOCK:ACCESS=1).
	BlockAccess bool
	// BlockedApps holds app ids blocked with BLOCK:APP:<appId>=1.
	BlockedApps []string
	// BlockedCategories holds categories blocked with BLOCK:CATEGORY:<c>=1.
	BlockedCategories []Category
	// Night is the seed's single daily window (BLOCK:TIME:START / END), nil if unset.
	Night *Window
	// Windows are the named windows BLOCK:TIME:<name>=HHMM-HHMM[@DAYS].
	Windows map[string]Window
	// DailyLimit and MonthlyLimit are per-member limits in bytes; nil means none.
	DailyLimit   *int64
	MonthlyLimit *int64
	// Extras are period-scoped extra allowances, LIMIT:DATA:EXTRA:<period>=bytes,
	// keyed by period: a day (YYYYMMDD) or a month (YYYYMM). While its period is
	// the event's current day or month, an extra raises both limits; see
	// EffectiveLimits. Extras of other periods have no effect.
	Extras map[string]int64
	// Gifts are the data a member received less what it gave away this
	// month ("데이터 선물하기"), LIMIT:DATA:GIFT:<YYYYMM>=signed bytes, keyed
	// by month: while its month is the event's, it moves the monthly limit
	// (never below 0); the daily limit stays. A gift of n bytes is −n on the
	// giver's and +n on the receiver's.
	Gifts map[string]int64
	// ThrottleKbps is returned with ALLOWED so the network can shape speed; 0 = none.
	ThrottleKbps int64
	// AllowedApps and AllowedCategories are always allowed during downtime
	// (ALLOW:APP:<appId>=1, ALLOW:CATEGORY:<c>=1): time windows do not block
	// them. Every other rule (BLOCK:ACCESS, app blocks, limits, the pool)
	// still does.
	AllowedApps       []string
	AllowedCategories []Category
	// TimeException lifts every time window until a local time, a Stamp
	// YYYYMMDDHHMM (EXCEPT:TIME): "30분 더". "" when none.
	TimeException string
	// AppExceptions lift an app's blocks — BLOCK:APP:<appId> and the block
	// of its category, and their daily data budgets — until a local time (EXCEPT:APP:<appId>=YYYYMMDDHHMM),
	// keyed by app id.
	AppExceptions map[string]string
	// AppBudgets and CategoryBudgets are daily data budgets in bytes
	// (LIMIT:DATA:APP:<appId>, LIMIT:DATA:CATEGORY:<c>; see budget.go),
	// keyed by app id and category. An app exception lifts them too.
	AppBudgets      map[string]int64
	CategoryBudgets map[Category]int64
}

// Limit returns a pointer to n, for filling DailyLimit / MonthlyLimit.
func Limit(n int64) *int64 { return &n }

// ParseConstraints validates a raw constraint map and returns its typed form.
// Every error is a *FieldError naming the offending key; all problems are
// reported, joined, in key order.
func ParseConstraints(m map[string]string) (Constraints, error) {
	var c Constraints
	var errs []error
	if len(m) > maxConstraintEntries {
		return c, fieldErr("constraints", "at most %d entries, got %d", maxConstraintEntries, len(m))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var start, end *int
	for _, k := range keys {
		v := m[k]
		if len(k) > MaxKeyLen {
			errs = append(errs, fieldErr(k[:32]+"…", "key longer than %d bytes", MaxKeyLen))
			continue
		}
		if ok, err := c.parseBudget(k, v); ok {
			if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		switch {
		case k == KeyBlockAccess:
			if v != blockValue {
				errs = append(errs, fieldErr(k, "must be \"1\" (delete the key to unblock), got %q", v))
				continue
			}
			c.BlockAccess = true
		case strings.HasPrefix(k, KeyBlockAppPrefix):
			app := k[len(KeyBlockAppPrefix):]
			if err := validName(k, app); err != nil {
				errs = append(errs, err)
				continue
			}
			if v != blockValue {
				errs = append(errs, fieldErr(k, "must be \"1\" (delete the key to unblock), got %q", v))
				continue
			}
			c.BlockedApps = append(c.BlockedApps, app)
		case strings.HasPrefix(k, KeyBlockCatPrefix):
			cat := Category(k[len(KeyBlockCatPrefix):])
			if !cat.Valid() {
				errs = append(errs, fieldErr(k, "unknown category %q (want one of VIDEO, GAME, SOCIAL, MESSAGING, WEB, MUSIC)", string(cat)))
				continue
			}
			if v != blockValue {
				errs = append(errs, fieldErr(k, "must be \"1\" (delete the key to unblock), got %q", v))
				continue
			}
			c.BlockedCategories = append(c.BlockedCategories, cat)
		case k == KeyBlockTimeStart || k == KeyBlockTimeEnd:
			mins, err := ParseHHMM(v)
			if err != nil {
				errs = append(errs, fieldErr(k, "%v", err))
				continue
			}
			if k == KeyBlockTimeStart {
				start = &mins
			} else {
				end = &mins
			}
		case strings.HasPrefix(k, KeyBlockTimePrefix):
			name := k[len(KeyBlockTimePrefix):]
			if err := validWindowName(k, name); err != nil {
				errs = append(errs, err)
				continue
			}
			w, err := ParseWindow(v)
			if err != nil {
				errs = append(errs, fieldErr(k, "%v", err))
				continue
			}
			if c.Windows == nil {
				c.Windows = make(map[string]Window)
			}
			c.Windows[name] = w
		case k == KeyLimitDaily || k == KeyLimitMonthly:
			n, err := parseBytes(v)
			if err != nil {
				errs = append(errs, fieldErr(k, "%v", err))
				continue
			}
			if k == KeyLimitDaily {
				c.DailyLimit = &n
			} else {
				c.MonthlyLimit = &n
			}
		case strings.HasPrefix(k, KeyLimitExtraPrefix):
			period := k[len(KeyLimitExtraPrefix):]
			if !validPeriod(period) {
				errs = append(errs, fieldErr(k, "period must be a day YYYYMMDD or a month YYYYMM, got %q", period))
				continue
			}
			n, err := parseBytes(v)
			if err != nil {
				errs = append(errs, fieldErr(k, "%v", err))
				continue
			}
			if c.Extras == nil {
				c.Extras = make(map[string]int64)
			}
			c.Extras[period] = n
		case strings.HasPrefix(k, KeyAllowAppPrefix):
			app := k[len(KeyAllowAppPrefix):]
			if err := validName(k, app); err != nil {
				errs = append(errs, err)
				continue
			}
			if v != blockValue {
				errs = append(errs, fieldErr(k, "must be \"1\" (delete the key to stop allowing), got %q", v))
				continue
			}
			c.AllowedApps = append(c.AllowedApps, app)
		case strings.HasPrefix(k, KeyAllowCatPrefix):
			cat := Category(k[len(KeyAllowCatPrefix):])
			if !cat.Valid() {
				errs = append(errs, fieldErr(k, "unknown category %q (want one of VIDEO, GAME, SOCIAL, MESSAGING, WEB, MUSIC)", string(cat)))
				continue
			}
			if v != blockValue {
				errs = append(errs, fieldErr(k, "must be \"1\" (delete the key to stop allowing), got %q", v))
				continue
			}
			c.AllowedCategories = append(c.AllowedCategories, cat)
		case k == KeyExceptTime:
			if !ValidStamp(v) {
				errs = append(errs, fieldErr(k, "must be a local time YYYYMMDDHHMM the exception ends at, got %q", v))
				continue
			}
			c.TimeException = v
		case strings.HasPrefix(k, KeyExceptAppPrefix):
			app := k[len(KeyExceptAppPrefix):]
			if err := validName(k, app); err != nil {
				errs = append(errs, err)
				continue
			}
			if !ValidStamp(v) {
				errs = append(errs, fieldErr(k, "must be a local time YYYYMMDDHHMM the exception ends at, got %q", v))
				continue
			}
			if c.AppExceptions == nil {
				c.AppExceptions = make(map[string]string)
			}
			c.AppExceptions[app] = v
		case strings.HasPrefix(k, KeyLimitGiftPrefix):
			month := k[len(KeyLimitGiftPrefix):]
			if len(month) != 6 || !validPeriod(month) {
				errs = append(errs, fieldErr(k, "period must be a month YYYYMM, got %q", month))
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || strconv.FormatInt(n, 10) != v || n < -MaxBytes || n > MaxBytes {
				errs = append(errs, fieldErr(k, "must be a whole number of bytes from %d to %d, got %q", -MaxBytes, MaxBytes, v))
				continue
			}
			if c.Gifts == nil {
				c.Gifts = make(map[string]int64)
			}
			c.Gifts[month] = n
		case k == KeyThrottleSpeed:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 || n > maxThrottleKbps || strconv.FormatInt(n, 10) != v {
				errs = append(errs, fieldErr(k, "must be a whole number of kbps from 1 to %d, got %q", maxThrottleKbps, v))
				continue
			}
			c.ThrottleKbps = n
		default:
			errs = append(errs, fieldErr(k, "unknown constraint key (want BLOCK:ACCESS, BLOCK:APP:<app>, BLOCK:CATEGORY:<c>, BLOCK:TIME:START|END|<name>, LIMIT:DATA:DAILY|MONTHLY, LIMIT:DATA:EXTRA:<YYYYMMDD|YYYYMM>, LIMIT:DATA:GIFT:<YYYYMM>, LIMIT:DATA:APP:<app>, LIMIT:DATA:CATEGORY:<c>, THROTTLE:SPEED, ALLOW:APP:<app>, ALLOW:CATEGORY:<c>, EXCEPT:TIME or EXCEPT:APP:<app>)"))
		}
	}
	switch {
	case start != nil && end != nil:
		c.Night = &Window{Start: *start, End: *end}
	case start != nil:
		errs = append(errs, fieldErr(KeyBlockTimeEnd, "required when BLOCK:TIME:START is set"))
	case end != nil:
		errs = append(errs, fieldErr(KeyBlockTimeStart, "required when BLOCK:TIME:END is set"))
	}
	return c, errors.Join(errs...)
}

// validName checks the <appId> / <name> part of a key: non-empty, printable
// ASCII without spaces or '|'.
func validName(key, name string) error {
	if name == "" {
		return fieldErr(key, "name after the prefix is empty")
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		if b <= ' ' || b > '~' || b == '|' {
			return fieldErr(key, "name may hold printable ASCII without spaces or '|' only")
		}
	}
	return nil
}

// MaxWindowName is the longest time window name, in characters.
const MaxWindowName = 32

// validWindowName checks a time window's name (BLOCK:TIME:<name>): the family
// sees it ("차단 시간대(밤)"), so besides what validName allows it may hold
// letters, digits and combining marks of any script (밤, 학교, 夜); a name
// with any of those is at most MaxWindowName characters. Callers that store names people
// type normalise them to NFC first (the API does).
func validWindowName(key, name string) error {
	if name == "" {
		return fieldErr(key, "name after the prefix is empty")
	}
	if !utf8.ValidString(name) {
		return fieldErr(key, "name is not valid UTF-8")
	}
	n := 0
	for _, r := range name {
		n++
		ascii := r > ' ' && r <= '~' && r != '|'
		if !ascii && !(r > 0x7f && (unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r))) {
			return fieldErr(key, "name may hold letters and digits of any script and printable ASCII without spaces or '|' only")
		}
	}
	if n > MaxWindowName && strings.IndexFunc(name, func(r rune) bool { return r > 0x7f }) >= 0 {
		return fieldErr(key, "name is longer than %d characters", MaxWindowName)
	}
	return nil
}

// validPeriod reports whether p is a calendar day YYYYMMDD or a month YYYYMM
// (years 2000–9999), the forms Moment.Day and Moment.Month take.
func validPeriod(p string) bool {
	layout := ""
	switch len(p) {
	case 8:
		layout = "20060102"
	case 6:
		layout = "200601"
	default:
		return false
	}
	t, err := time.Parse(layout, p)
	return err == nil && t.Format(layout) == p && t.Year() >= 2000
}

// Granted reports whether k is a key granted for a while — an extra
// allowance (LIMIT:DATA:EXTRA:…), data given or received (LIMIT:DATA:GIFT:…) or
// an exception (EXCEPT:…) — which a new rule map (a form, a template) keeps
// unless it names it.
func Granted(k string) bool {
	return strings.HasPrefix(k, KeyLimitExtraPrefix) || strings.HasPrefix(k, KeyLimitGiftPrefix) ||
		k == KeyExceptTime || strings.HasPrefix(k, KeyExceptAppPrefix)
}

// ValidStamp reports whether s is a local time YYYYMMDDHHMM (years
// 2000–9999), the form Moment.Stamp takes.
func ValidStamp(s string) bool {
	if len(s) != 12 {
		return false
	}
	t, err := time.Parse("200601021504", s)
	return err == nil && t.Format("200601021504") == s && t.Year() >= 2000
}

// TimeExcepted reports whether the time exception lifts the time windows at
// the moment at (at is before its end).
func (c Constraints) TimeExcepted(at Moment) bool {
	return c.TimeException != "" && at.Stamp() < c.TimeException
}

// AppExcepted reports whether an app exception lifts app's blocks at the
// moment at.
func (c Constraints) AppExcepted(app string, at Moment) bool {
	until, ok := c.AppExceptions[app]
	return ok && app != "" && at.Stamp() < until
}

// AlwaysAllowed reports whether time windows let app (of category cat)
// through: it or its category is always allowed during downtime.
func (c Constraints) AlwaysAllowed(app string, cat Category) bool {
	return (app != "" && slices.Contains(c.AllowedApps, app)) || (cat != "" && slices.Contains(c.AllowedCategories, cat))
}

// ExtraKey is the constraint key of an extra allowance for period, a day
// YYYYMMDD or a month YYYYMM (Moment.Day / Moment.Month).
func ExtraKey(period string) string { return KeyLimitExtraPrefix + period }

// Extra is the extra allowance in effect at the moment at: the sum of the
// extras for its day and for its month.
func (c Constraints) Extra(at Moment) int64 {
	return c.Extras[at.Day] + c.Extras[at.Month]
}

// EffectiveLimits returns the member's daily and monthly limits at the moment
// at: each set limit raised by Extra(at), the monthly one then lowered by
// the month's gifts (Gifts: received less given, never below 0). A limit that
// is not set stays nil (no limit); an extra never creates one. Every value
// stays below 3 × MaxBytes.
func (c Constraints) EffectiveLimits(at Moment) (daily, monthly *int64) {
	extra := c.Extra(at)
	if c.DailyLimit != nil {
		daily = Limit(*c.DailyLimit + extra)
	}
	if c.MonthlyLimit != nil {
		monthly = Limit(max(*c.MonthlyLimit+extra+c.Gifts[at.Month], 0))
	}
	return daily, monthly
}

// MonthlyAllowance is what the member has for the month at the moment at:
// the monthly limit with the month's extras and gifts (EffectiveLimits'
// monthly one without today's extra, which lifts the monthly limit for
// that day only). nil when no monthly limit is set.
func (c Constraints) MonthlyAllowance(at Moment) *int64 {
	if c.MonthlyLimit == nil {
		return nil
	}
	return Limit(max(*c.MonthlyLimit+c.Extras[at.Month]+c.Gifts[at.Month], 0))
}

// DropExpiredExtras removes what was granted for a time that has passed at
// the moment at — the extras whose period ended before it (days before
// at.Day, months before at.Month) and the exceptions that ended at or before
// it — and reports whether any was removed. Policy writes call it so stale
// keys do not pile up.
func (c *Constraints) DropExpiredExtras(at Moment) bool {
	dropped := false
	now := at.Stamp()
	if c.TimeException != "" && c.TimeException <= now {
		c.TimeException, dropped = "", true
	}
	for app, until := range c.AppExceptions {
		if until <= now {
			delete(c.AppExceptions, app)
			dropped = true
		}
	}
	if len(c.AppExceptions) == 0 {
		c.AppExceptions = nil
	}
	for p := range c.Extras {
		if (len(p) == 8 && p < at.Day) || (len(p) == 6 && p < at.Month) {
			delete(c.Extras, p)
			dropped = true
		}
	}
	if len(c.Extras) == 0 {
		c.Extras = nil
	}
	for m := range c.Gifts {
		if m < at.Month {
			delete(c.Gifts, m)
			dropped = true
		}
	}
	if len(c.Gifts) == 0 {
		c.Gifts = nil
	}
	return dropped
}

func parseBytes(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != v {
		return 0, fmt.Errorf("must be a whole number of bytes, got %q", v)
	}
	if n < 0 {
		return 0, fmt.Errorf("must be ≥ 0, got %d", n)
	}
	if n > MaxBytes {
		return 0, fmt.Errorf("must be ≤ %d, got %d", MaxBytes, n)
	}
	return n, nil
}

// Map returns the canonical constraint map for c: the form written to Redis
// and MySQL. ParseConstraints(c.Map()) yields c again (with sorted slices).
func (c Constraints) Map() map[string]string {
	m := make(map[string]string)
	if c.BlockAccess {
		m[KeyBlockAccess] = blockValue
	}
	for _, app := range c.BlockedApps {
		m[KeyBlockAppPrefix+app] = blockValue
	}
	for _, cat := range c.BlockedCategories {
		m[KeyBlockCatPrefix+string(cat)] = blockValue
	}
	if c.Night != nil {
		m[KeyBlockTimeStart] = FormatHHMM(c.Night.Start)
		m[KeyBlockTimeEnd] = FormatHHMM(c.Night.End)
	}
	for name, w := range c.Windows {
		m[KeyBlockTimePrefix+name] = w.String()
	}
	if c.DailyLimit != nil {
		m[KeyLimitDaily] = strconv.FormatInt(*c.DailyLimit, 10)
	}
	if c.MonthlyLimit != nil {
		m[KeyLimitMonthly] = strconv.FormatInt(*c.MonthlyLimit, 10)
	}
	for period, n := range c.Extras {
		m[KeyLimitExtraPrefix+period] = strconv.FormatInt(n, 10)
	}
	for month, n := range c.Gifts {
		m[KeyLimitGiftPrefix+month] = strconv.FormatInt(n, 10)
	}
	if c.ThrottleKbps > 0 {
		m[KeyThrottleSpeed] = strconv.FormatInt(c.ThrottleKbps, 10)
	}
	for _, app := range c.AllowedApps {
		m[KeyAllowAppPrefix+app] = blockValue
	}
	for _, cat := range c.AllowedCategories {
		m[KeyAllowCatPrefix+string(cat)] = blockValue
	}
	if c.TimeException != "" {
		m[KeyExceptTime] = c.TimeException
	}
	for app, until := range c.AppExceptions {
		m[KeyExceptAppPrefix+app] = until
	}
	c.budgetMap(m)
	return m
}

// Validate checks c by round-tripping it through its map form (a value
// built by hand may hold anything; one from ParseConstraints passes).
func (c Constraints) Validate() error {
	_, err := ParseConstraints(c.Map())
	return err
}

// Canonical validates a raw constraint map and returns its canonical form
// (day lists normalised), ready to store.
func Canonical(m map[string]string) (map[string]string, error) {
	c, err := ParseConstraints(m)
	if err != nil {
		return nil, err
	}
	return c.Map(), nil
}
