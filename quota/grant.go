package quota

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dabom/dpcs/policy"
)

// GrantOp is one step of a grant's life for one rating group: create (the
// first step), update, or release. A grant reserves bytes of the member's
// limits and of the family pool for the session's traffic of one app or
// category, until the network reports their use (doc/architecture.md,
// "Grants"). ID dedupes the step (a retry returns the stored result,
// Duplicate, and changes nothing); GrantID names the reservation across
// steps, per member (a step of another CustomerID is another grant).
type GrantOp struct {
	// ID is the step's unique id, deduped with the events' ids (the same
	// buckets: an id is one event or one step): ValidGrantID's form.
	ID string
	// GrantID names the grant: 1..MaxEventIDLen bytes of printable ASCII
	// without spaces, '|' or ','.
	GrantID              string
	FamilyID, CustomerID int64
	// AppID and Category are what the rating group covers ("" = any
	// traffic). An empty Category is looked up in the engine's catalog
	// from AppID, as for events.
	AppID    string
	Category policy.Category
	// Used is what the session used since the grant's last step (bytes),
	// charged now: to the reservation's day and month (see GrantResult.
	// ChargedAt), beyond the reservation too (GrantResult.Overage).
	Used int64
	// Requested is what the session asks for next; 0 asks for the
	// engine's default (WithGrantSizes). Ignored on a release.
	Requested int64
	// Release charges Used, returns the rest of the reservation and grants
	// nothing: the session's end, or the sweep's expiry of a session that
	// stopped reporting (Used 0: it costs the family nothing more).
	Release bool
	// At is when the step is judged: windows, the day and the month of the
	// new reservation. Within the engine's dedupe window of its clock, as
	// an event's timestamp.
	At time.Time
}

// MaxGrantIDLen is the longest GrantID or step id.
const MaxGrantIDLen = MaxEventIDLen

// MaxReclaim is the most grants a GrantResult names in Reclaim (the
// smallest ids first).
const MaxReclaim = 64

// ValidGrantID reports whether id can name a grant or a grant step: 1 to
// MaxGrantIDLen bytes of printable ASCII without spaces, '|' or ','.
func ValidGrantID(id string) bool {
	if id == "" || len(id) > MaxGrantIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if b := id[i]; b <= ' ' || b > '~' || b == '|' || b == ',' {
			return false
		}
	}
	return true
}

// Validate checks op as Grant does (an error wraps ErrInvalid): a caller
// that group-commits steps of several callers checks each alone first.
func (op GrantOp) Validate() error {
	switch {
	case !ValidGrantID(op.ID):
		return fmt.Errorf("%w: step id must be 1..%d bytes of printable ASCII without spaces, '|' or ','", ErrInvalid, MaxGrantIDLen)
	case !ValidGrantID(op.GrantID):
		return fmt.Errorf("%w: grant id must be 1..%d bytes of printable ASCII without spaces, '|' or ','", ErrInvalid, MaxGrantIDLen)
	case op.FamilyID <= 0:
		return fmt.Errorf("%w: familyId must be > 0", ErrInvalid)
	case op.CustomerID <= 0:
		return fmt.Errorf("%w: customerId must be > 0", ErrInvalid)
	case op.Used < 0 || op.Used > policy.MaxBytes:
		return fmt.Errorf("%w: used must be 0..%d, got %d", ErrInvalid, policy.MaxBytes, op.Used)
	case op.Requested < 0 || op.Requested > policy.MaxBytes:
		return fmt.Errorf("%w: requested must be 0..%d, got %d", ErrInvalid, policy.MaxBytes, op.Requested)
	case op.At.IsZero():
		return fmt.Errorf("%w: step time is zero", ErrInvalid)
	}
	return nil
}

// GrantResult is the engine's answer to one grant step.
type GrantResult struct {
	// Duplicate is true when the step id was judged before: the result is
	// the original one and nothing changed.
	Duplicate bool
	// Decision is ALLOWED when units are granted (or on a release), else
	// why none are: a block, or the limit or pool that leaves nothing (see
	// policy.SizeGrant).
	Decision policy.Decision
	// Rule names the block, or with Final the limit that ends.
	Rule string
	// Granted is what is reserved now for the grant (0: blocked, crowded
	// out or released).
	Granted int64
	// Final says these are the member's last units (a block, or a headroom
	// below WithGrantSizes' minimum): the network ends the session after
	// them (finalUnitIndication).
	Final bool
	// Charged is what of Used was charged: all of it, unless the customer
	// is not a member and held no reservation (then 0).
	Charged int64
	// ChargedAt is the time whose day and month the charge counts in: the
	// time of the step that made the reservation, or the step's own when
	// the grant held none (or one of a month the engine no longer holds).
	ChargedAt time.Time
	// Overage is what of Charged the grant had not reserved in the
	// charged period (all of it when it held no reservation there).
	Overage int64
	// Remaining and Total are the step's month's pool after the step
	// (Remaining: total − used; reservations are not usage); Reserved is
	// what the family's grants hold of it.
	Remaining, Total, Reserved int64
	// DailyUsed and MonthlyUsed are the member's usage in the step's day
	// and month after the step.
	DailyUsed, MonthlyUsed int64
	// ValidUntil is the next boundary that could change the answer
	// (policy.NextChange): a window starting or ending, an exception
	// ending, the day's end; zero on a release.
	ValidUntil   time.Time
	ThrottleKbps int64
	// Crossed and Arms are the thresholds the charge crossed in the month
	// of ChargedAt, as Result's.
	Crossed []int
	Arms    []int
	// Previous is the id of the step whose reservation this step returned
	// ("" when the grant held none): a grant's steps form a chain, so the
	// truth can tell its latest step whatever order their records arrive
	// in (a rebuild restores the open reservation no step replaced).
	Previous string
	// Reclaim names the family's other grants (GrantIDs, sorted, at most
	// MaxReclaim) holding
	// more than the fair share (policy.FairShare) of the step's month
	// when the others' reservations cut this grant below what it would
	// get otherwise: asked to report again (a re-authorization), they
	// shrink to their share and this grant's next step gets its own.
	Reclaim []string
}

// UsedPercent is the share of the month's pool used, in percent.
func (r GrantResult) UsedPercent() float64 { return usedPercent(r.Total, r.Remaining) }

// grantPrefix starts a grant step's stored result, which an event's never
// does (an event's starts with its decision).
const grantPrefix = "G|"

// encodeGrantResult is the stored form of a grant step's result, as
// grant.lua writes it.
func encodeGrantResult(r GrantResult) string {
	fl := "0"
	if r.Final {
		fl = "1"
	}
	unix := func(t time.Time) string {
		if t.IsZero() {
			return "0"
		}
		return strconv.FormatInt(t.Unix(), 10)
	}
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	return grantPrefix + strings.Join([]string{string(r.Decision), n(r.Granted), fl, n(r.Charged), unix(r.ChargedAt),
		n(r.Overage), n(r.Remaining), n(r.Total), n(r.Reserved), n(r.DailyUsed), n(r.MonthlyUsed), unix(r.ValidUntil),
		n(r.ThrottleKbps), encodeCrossed(r.Crossed, r.Arms), r.Rule, r.Previous, strings.Join(r.Reclaim, ",")}, "|")
}

func encodeCrossed(crossed, arms []int) string {
	out := make([]string, len(crossed))
	for i, p := range crossed {
		arm := 1
		if i < len(arms) {
			arm = arms[i]
		}
		out[i] = strconv.Itoa(p) + ":" + strconv.Itoa(arm)
	}
	return strings.Join(out, ",")
}

// decodeCrossed parses "pct:arm,…" (an arm-less "pct" is arm 1).
func decodeCrossed(s string) (crossed, arms []int, err error) {
	if s == "" {
		return nil, nil, nil
	}
	for _, c := range strings.Split(s, ",") {
		pct, arm, _ := strings.Cut(c, ":")
		n, err := strconv.Atoi(pct)
		if err != nil {
			return nil, nil, err
		}
		a := 1
		if arm != "" {
			if a, err = strconv.Atoi(arm); err != nil {
				return nil, nil, err
			}
		}
		crossed, arms = append(crossed, n), append(arms, a)
	}
	return crossed, arms, nil
}

// decodeGrantResult parses grant.lua's result (see encodeGrantResult); loc
// is the zone the times are given in.
func decodeGrantResult(s string, loc *time.Location) (GrantResult, error) {
	body, ok := strings.CutPrefix(s, grantPrefix)
	f := strings.SplitN(body, "|", 17)
	if !ok || len(f) != 17 {
		return GrantResult{}, fmt.Errorf("malformed stored grant result %q", s)
	}
	var r GrantResult
	r.Decision = policy.Decision(f[0])
	r.Final = f[2] == "1"
	var chargedAt, validUntil int64
	nums := map[int]*int64{1: &r.Granted, 3: &r.Charged, 4: &chargedAt, 5: &r.Overage, 6: &r.Remaining, 7: &r.Total,
		8: &r.Reserved, 9: &r.DailyUsed, 10: &r.MonthlyUsed, 11: &validUntil, 12: &r.ThrottleKbps}
	for i, p := range nums {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return GrantResult{}, fmt.Errorf("malformed stored grant result %q: %w", s, err)
		}
		*p = n
	}
	if chargedAt != 0 {
		r.ChargedAt = time.Unix(chargedAt, 0).In(loc)
	}
	if validUntil != 0 {
		r.ValidUntil = time.Unix(validUntil, 0).In(loc)
	}
	var err error
	if r.Crossed, r.Arms, err = decodeCrossed(f[13]); err != nil {
		return GrantResult{}, fmt.Errorf("malformed stored grant result %q: %w", s, err)
	}
	r.Rule, r.Previous = f[14], f[15]
	if f[16] != "" {
		// grant.lua lists them in the hash's order.
		r.Reclaim = slices.Compact(slices.Sorted(slices.Values(strings.Split(f[16], ","))))
		if len(r.Reclaim) > MaxReclaim {
			r.Reclaim = r.Reclaim[:MaxReclaim]
		}
	}
	if !r.Decision.Valid() || (f[2] != "0" && f[2] != "1") {
		return GrantResult{}, fmt.Errorf("malformed stored grant result %q", s)
	}
	return r, nil
}

// GrantSizes are the operator's grant sizes (WithGrantSizes).
type GrantSizes struct {
	// Default is what a step that requests nothing (0) asks for.
	Default int64
	// Max caps what a step asks for.
	Max int64
	// Min is the headroom below which the member's last units are granted
	// as final (GrantResult.Final).
	Min int64
}

// DefaultGrantSizes are WithGrantSizes' defaults: 10 MiB asked for when
// the request names nothing, at most 1 GiB a grant, the last units final
// below 1 MiB of headroom.
func DefaultGrantSizes() GrantSizes { return GrantSizes{Default: 10 << 20, Max: 1 << 30, Min: 1 << 20} }

// WithGrantSizes sets the grant sizes: 1 ≤ Default ≤ Max ≤ policy.MaxBytes,
// 0 ≤ Min ≤ Max. Default: DefaultGrantSizes.
func WithGrantSizes(s GrantSizes) Option {
	return func(e *Engine) error {
		if s.Default < 1 || s.Default > s.Max || s.Max > policy.MaxBytes || s.Min < 0 || s.Min > s.Max {
			return fmt.Errorf("%w: grant sizes %+v: want 1 ≤ default ≤ max ≤ %d and 0 ≤ min ≤ max", ErrInvalid, s, policy.MaxBytes)
		}
		e.sizes = s
		return nil
	}
}

// GrantSizes returns the engine's grant sizes.
func (e *Engine) GrantSizes() GrantSizes { return e.sizes }

// grantCall is grant.lua's keys and arguments for op; accepted are the
// months the engine holds (AcceptedMonths): a reservation of the month
// before or after op's is returned there (and its use charged there) only
// while it is one.
func (e *Engine) grantCall(op GrantOp, bucket int64, gen string, accepted []string) ([]string, []any) {
	lt := op.At.In(e.loc)
	m := policy.MomentOf(lt, e.loc)
	f, c := op.FamilyID, op.CustomerID
	category := op.Category
	if category == "" && e.catalog != nil {
		category = e.catalog.Category(op.AppID)
	}
	first := time.Date(lt.Year(), lt.Month(), 1, 12, 0, 0, 0, e.loc)
	prevMonth := policy.MomentOf(first.AddDate(0, -1, 0), e.loc).Month
	nextMonth := policy.MomentOf(first.AddDate(0, 1, 0), e.loc).Month
	prev, next := "", ""
	if slices.Contains(accepted, prevMonth) {
		prev = prevMonth
	}
	if slices.Contains(accepted, nextMonth) {
		next = nextMonth
	}
	var zone int64
	if _, end := lt.ZoneBounds(); !end.IsZero() {
		zone = end.Unix()
	}
	release := "0"
	if op.Release {
		release = "1"
	}
	ks := []string{
		e.k.family(f), e.k.constraints(f, c), e.k.pool(f, m.Month), e.k.usage(f, c, m.Month),
		e.k.events(f, bucket), e.k.events(f, bucket-1), e.k.grants(f),
		e.k.pool(f, prevMonth), e.k.usage(f, c, prevMonth), e.k.pool(f, nextMonth), e.k.usage(f, c, nextMonth),
		e.k.budget(f, c, m.Day),
	}
	args := []any{c, op.Used, op.Requested, release, op.AppID, string(category), m.Minute, m.Weekday, m.Day, op.ID, gen,
		op.GrantID, op.At.Unix(), op.At.Truncate(time.Minute).Unix(), zone, prev, next}
	return ks, args
}

// GrantCommand returns the Redis command the engine sends to judge op: the
// EVALSHA arguments (script SHA1, keys, args) exactly as Grant sends them,
// for measuring the server's cost with an external load generator, as
// ApplyCommand; op is not validated and nothing is sent.
func (e *Engine) GrantCommand(op GrantOp) (sha string, keys []string, args []any) {
	accepted, _, _ := e.AcceptedMonths()
	keys, args = e.grantCall(op, e.bucket(e.now()), "", accepted)
	return e.grant.Hash(), keys, args
}

// Judge judges events and grant steps in one pipeline (the events first,
// then the steps, each in order), trusting the Redis state it finds: what
// ApplyBatch and Grant do together. JudgeMarked checks the state first.
func (e *Engine) Judge(ctx context.Context, evs []Event, ops []GrantOp) ([]Result, []GrantResult, error) {
	return e.judgeBatch(ctx, "", nil, evs, ops)
}

// Grant judges grant steps in order in one pipeline, as ApplyBatch judges
// events: for each, atomically, the grant's reservation is returned and
// Used charged, and (unless a release) a new reservation is sized and made
// (see GrantResult, policy.SizeGrant). It trusts the Redis state it finds;
// GrantMarked checks it first.
func (e *Engine) Grant(ctx context.Context, ops []GrantOp) ([]GrantResult, error) {
	_, rs, err := e.judgeBatch(ctx, "", nil, nil, ops)
	return rs, err
}

// GrantMarked is Grant under the state guard, as ApplyMarked (its errors
// are ApplyMarked's: a *StaleError, an *UnrestoredError naming the steps
// not judged in GrantPending).
func (e *Engine) GrantMarked(ctx context.Context, gen string, marks []Mark, ops []GrantOp) ([]GrantResult, error) {
	_, rs, err := e.JudgeMarked(ctx, gen, marks, nil, ops)
	return rs, err
}

// GrantError reports which grant step of a batch was invalid.
type GrantError struct {
	Index int
	Err   error
}

func (e *GrantError) Error() string { return fmt.Sprintf("grant step %d: %v", e.Index, e.Err) }
func (e *GrantError) Unwrap() error { return e.Err }

// GrantState is an open grant's reservation, for Restore and Family.
type GrantState struct {
	GrantID    string
	CustomerID int64
	// Reserved is what it holds (0: a session waiting for units).
	Reserved int64
	// At is when the step that made it was judged (whole seconds): the
	// reservation is of its day and month.
	At time.Time
	// Step is the id of the step that made it (GrantResult.Previous of
	// the grant's next step).
	Step string
}

// grantField is the grants hash's field of a grant.
func grantField(cid int64, grantID string) string { return strconv.FormatInt(cid, 10) + "|" + grantID }

// grantValue is the grants hash's value of a reservation.
func (e *Engine) grantValue(g GrantState) string {
	return strconv.FormatInt(g.Reserved, 10) + "|" + policy.MomentOf(g.At, e.loc).Day + "|" + strconv.FormatInt(g.At.Unix(), 10) +
		"|" + g.Step
}

// parseGrant reads a grants hash entry.
func (e *Engine) parseGrant(field, value string) (GrantState, bool) {
	c, id, ok := strings.Cut(field, "|")
	parts := strings.SplitN(value, "|", 4)
	if !ok || len(parts) != 4 {
		return GrantState{}, false
	}
	cid, err1 := strconv.ParseInt(c, 10, 64)
	n, err2 := strconv.ParseInt(parts[0], 10, 64)
	at, err3 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return GrantState{}, false
	}
	return GrantState{GrantID: id, CustomerID: cid, Reserved: n, At: time.Unix(at, 0).In(e.loc), Step: parts[3]}, true
}
