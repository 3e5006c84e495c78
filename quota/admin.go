package quota

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
)

// PoolState is a family pool after a change.
type PoolState struct {
	Remaining int64
	Total     int64
	// Month is the pool's month (YYYYMM).
	Month string
	// Rearmed are the thresholds the change re-armed (the pool is above
	// them again), each with how often it had fired this month. The caller
	// that records the family in SQL records them too (FamilyState.Rearmed):
	// a rebuild cannot tell a re-armed threshold from a fired one otherwise.
	Rearmed map[int]int
}

func checkFamily(fid int64) error {
	if fid <= 0 {
		return fmt.Errorf("%w: familyId must be > 0", ErrInvalid)
	}
	return nil
}

func checkMember(fid, cid int64) error {
	if err := checkFamily(fid); err != nil {
		return err
	}
	if cid <= 0 {
		return fmt.Errorf("%w: customerId must be > 0", ErrInvalid)
	}
	return nil
}

// poolBoundReply is in pool.lua's error reply to a change past the bound
// (matched as text: servers differ in how they prefix script errors).
const poolBoundReply = "pool total would exceed the maximum"

func (e *Engine) pool(ctx context.Context, fid int64, op, value string) (PoolState, error) {
	return e.poolOf(ctx, fid, policy.MomentOf(e.now(), e.loc).Month, op, value)
}

// poolOf runs pool.lua on month's pool.
func (e *Engine) poolOf(ctx context.Context, fid int64, month, op, value string) (PoolState, error) {
	ks := []string{e.k.family(fid), e.k.pool(fid, month)}
	v, err := poolScript.Run(ctx, e.rdb, ks, op, value, policy.MaxBytes, int64(monthTTL.Seconds())).Int64Slice()
	if err != nil && strings.Contains(err.Error(), poolBoundReply) {
		return PoolState{}, fmt.Errorf("%w: %s: plan plus this month's top-ups would exceed %d bytes", ErrInvalid, op, policy.MaxBytes)
	}
	if err != nil {
		return PoolState{}, fmt.Errorf("quota: pool %s: %w", op, err)
	}
	if err := e.ackFamily(ctx, fid); err != nil {
		return PoolState{}, err
	}
	ps := PoolState{Remaining: v[0], Total: v[1], Month: month}
	for i := 2; i+1 < len(v); i += 2 {
		if ps.Rearmed == nil {
			ps.Rearmed = map[int]int{}
		}
		ps.Rearmed[int(v[i])] = int(v[i+1])
	}
	return ps, nil
}

// SetPlan sets the family's monthly plan amount (the pool every month starts
// with) and so provisions the pool. Thresholds the pool is now above again are
// re-armed.
func (e *Engine) SetPlan(ctx context.Context, fid, bytes int64) (PoolState, error) {
	if err := checkFamily(fid); err != nil {
		return PoolState{}, err
	}
	if bytes < 0 || bytes > policy.MaxBytes {
		return PoolState{}, fmt.Errorf("%w: plan must be 0..%d bytes", ErrInvalid, policy.MaxBytes)
	}
	return e.pool(ctx, fid, "plan", strconv.FormatInt(bytes, 10))
}

// TopUp adds bytes to the family's pool for the current month (in the
// engine's zone, by its clock) and re-arms the thresholds the pool is above again.
// The plan plus the month's top-ups may not exceed policy.MaxBytes (a
// change past it is refused with an error wrapping ErrInvalid; SetPlan too).
func (e *Engine) TopUp(ctx context.Context, fid, bytes int64) (PoolState, error) {
	if err := checkFamily(fid); err != nil {
		return PoolState{}, err
	}
	if bytes <= 0 || bytes > policy.MaxBytes {
		return PoolState{}, fmt.Errorf("%w: top-up must be 1..%d bytes", ErrInvalid, policy.MaxBytes)
	}
	return e.pool(ctx, fid, "topup", strconv.FormatInt(bytes, 10))
}

// SetTopUps raises the top-ups of the family's pool for month (YYYYMM, as
// SQL records them) to total, the sum of the month's top-ups, and re-arms
// the thresholds the pool is above again. It never lowers them: top-ups only
// add, so a write that arrives late or twice changes nothing, and a write
// after one that never reached Redis (SQL recorded the top-up, Redis was
// down) brings Redis to SQL's total. The caller that records top-ups in SQL
// should prefer it to TopUp, whose delta is lost or doubled in those cases.
// The plan plus total may not exceed policy.MaxBytes (ErrInvalid).
func (e *Engine) SetTopUps(ctx context.Context, fid int64, month string, total int64) (PoolState, error) {
	if err := checkFamily(fid); err != nil {
		return PoolState{}, err
	}
	if _, err := time.Parse("200601", month); err != nil || len(month) != 6 {
		return PoolState{}, fmt.Errorf("%w: month %q: want YYYYMM", ErrInvalid, month)
	}
	if total < 0 || total > policy.MaxBytes {
		return PoolState{}, fmt.Errorf("%w: top-ups must total 0..%d bytes", ErrInvalid, policy.MaxBytes)
	}
	return e.poolOf(ctx, fid, month, "topups", strconv.FormatInt(total, 10))
}

// SetThresholds sets the family's own alert levels (percent remaining); an
// empty list turns alerts off for the family.
func (e *Engine) SetThresholds(ctx context.Context, fid int64, t policy.Thresholds) error {
	if err := checkFamily(fid); err != nil {
		return err
	}
	c, err := t.Canonical()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	_, err = e.pool(ctx, fid, "thr", c.String())
	return err
}

// SetConstraints replaces the member's constraints with m if version is newer
// than the stored one (versions are monotonic per member; the first is 1) and
// reports whether it did. m is validated (policy.ParseConstraints) and stored
// in canonical form; an empty map removes every constraint. A caller that
// holds the parsed constraints already passes them to Enforce.
func (e *Engine) SetConstraints(ctx context.Context, fid, cid, version int64, m map[string]string) (bool, error) {
	c, err := policy.ParseConstraints(m)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return e.setConstraints(ctx, fid, cid, version, c)
}

// setConstraints is SetConstraints of parsed constraints.
func (e *Engine) setConstraints(ctx context.Context, fid, cid, version int64, c policy.Constraints) (bool, error) {
	if err := checkMember(fid, cid); err != nil {
		return false, err
	}
	if version <= 0 {
		return false, fmt.Errorf("%w: version must be ≥ 1", ErrInvalid)
	}
	if err := c.Validate(); err != nil {
		return false, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	args := append([]any{versionField(cid), version}, constraintFields(c)...)
	n, err := constraintsScript.Run(ctx, e.rdb, []string{e.k.constraints(fid, cid), e.k.family(fid), e.k.legacyVersion(fid, cid)}, args...).Int()
	if err != nil {
		return false, fmt.Errorf("quota: set constraints: %w", err)
	}
	if err := e.ackFamily(ctx, fid); err != nil {
		return false, err
	}
	return n == 1, nil
}

// AddMember provisions a member of the family.
func (e *Engine) AddMember(ctx context.Context, fid, cid int64) error {
	if err := checkMember(fid, cid); err != nil {
		return err
	}
	if err := e.rdb.HSet(ctx, e.k.family(fid), memberField(cid), "1").Err(); err != nil {
		return fmt.Errorf("quota: add member: %w", err)
	}
	return e.ackFamily(ctx, fid)
}

// RemoveMember removes a member and its constraints; its next event is
// BLOCKED_NOT_MEMBER. Its usage counters stay (they count against the family
// pool); the policy version stays too, so stale updates remain ignored.
func (e *Engine) RemoveMember(ctx context.Context, fid, cid int64) error {
	if err := checkMember(fid, cid); err != nil {
		return err
	}
	_, err := e.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, e.k.family(fid), memberField(cid))
		p.Del(ctx, e.k.constraints(fid, cid))
		return nil
	})
	if err != nil {
		return fmt.Errorf("quota: remove member: %w", err)
	}
	return e.ackFamily(ctx, fid)
}

// MemberStatus is a member's standing now (the dry run, see Status).
type MemberStatus struct {
	CustomerID int64
	Member     bool
	// Decision is ALLOWED or why any request would be blocked now; see policy.Status.
	Decision policy.Decision
	Rule     string
	// Constraints is the stored constraint map; Version its policy version.
	Constraints            map[string]string
	Version                int64
	DailyUsed, MonthlyUsed int64
	// DailyReserved and MonthlyReserved are what the member's grants hold
	// of its day and month (not usage: Decision reads used bytes only).
	DailyReserved, MonthlyReserved int64
	ThrottleKbps                   int64
}

// Blocked reports whether the member is blocked now.
func (s MemberStatus) Blocked() bool { return s.Decision.Blocked() }

// FamilyStatus is a snapshot of a family's pool and members.
type FamilyStatus struct {
	FamilyID    int64
	Month       string
	Provisioned bool
	Plan        int64
	TopUps      int64
	Used        int64
	Remaining   int64
	Total       int64
	Thresholds  policy.Thresholds
	// Fired lists the thresholds already announced this month, descending.
	Fired []int
	// Reserved is what the family's grants hold of the month's pool.
	Reserved int64
	Members  []MemberStatus
	// Grants are the family's open grants (any month's), by customer and
	// grant id.
	Grants []GrantState
}

// UsedPercent is the share of the month's pool used, in percent.
func (f FamilyStatus) UsedPercent() float64 { return usedPercent(f.Total, f.Remaining) }

type poolReads struct {
	family *redis.MapStringStringCmd
	pool   *redis.MapStringStringCmd
	grants *redis.MapStringStringCmd
}

type memberReads struct {
	cid         int64
	constraints *redis.MapStringStringCmd
	version     *redis.StringCmd // the family hash's v:<cid>
	legacy      *redis.StringCmd // an earlier engine's version key, read while v:<cid> is absent
	usage       *redis.SliceCmd  // the usage hash: m, d:<today>
	pool        *redis.SliceCmd  // the pool hash: u:<cid>, d:<cid>, r:<cid>, r:<cid>:<DD>
}

func (e *Engine) queuePool(ctx context.Context, p redis.Pipeliner, fid int64, m policy.Moment) poolReads {
	return poolReads{
		family: p.HGetAll(ctx, e.k.family(fid)),
		pool:   p.HGetAll(ctx, e.k.pool(fid, m.Month)),
		grants: p.HGetAll(ctx, e.k.grants(fid)),
	}
}

func (e *Engine) queueMember(ctx context.Context, p redis.Pipeliner, fid, cid int64, m policy.Moment) memberReads {
	return memberReads{
		cid:         cid,
		constraints: p.HGetAll(ctx, e.k.constraints(fid, cid)),
		version:     p.HGet(ctx, e.k.family(fid), versionField(cid)),
		legacy:      p.Get(ctx, e.k.legacyVersion(fid, cid)),
		usage:       p.HMGet(ctx, e.k.usage(fid, cid, m.Month), fieldMonth, dayField(m.Day)),
		pool: p.HMGet(ctx, e.k.pool(fid, m.Month), prefixMonthUsage+strconv.FormatInt(cid, 10), prefixDay+strconv.FormatInt(cid, 10),
			prefixReserved+strconv.FormatInt(cid, 10), prefixReserved+strconv.FormatInt(cid, 10)+":"+m.Day[6:8]),
	}
}

func parseInt(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// versionOf is a member's policy version: the family hash's v:<cid>, else
// the key an earlier engine kept it in.
func versionOf(field, legacy *redis.StringCmd) int64 {
	if field.Err() == nil {
		return intCmd(field)
	}
	return intCmd(legacy)
}

func intCmd(c *redis.StringCmd) int64 {
	n, err := c.Int64()
	if err != nil {
		return 0
	}
	return n
}

// familyOf decodes the family and pool hashes; members lists the member ids.
func (e *Engine) familyOf(fid int64, m policy.Moment, r poolReads) (f FamilyStatus, members map[int64]bool) {
	fam, pool := r.family.Val(), r.pool.Val()
	f = FamilyStatus{FamilyID: fid, Month: m.Month, Thresholds: e.thresholds}
	plan, ok := fam[fieldPlan]
	f.Provisioned, f.Plan = ok, parseInt(plan)
	if s, ok := fam[fieldThresholds]; ok {
		if t, err := policy.ParseThresholds(s); err == nil {
			f.Thresholds = t
		}
	}
	members = map[int64]bool{}
	for k, v := range fam {
		if strings.HasPrefix(k, prefixMember) && v == "1" {
			if n, err := strconv.ParseInt(k[len(prefixMember):], 10, 64); err == nil {
				members[n] = true
			}
		}
	}
	f.Used, f.TopUps, f.Reserved = parseInt(pool[fieldUsed]), parseInt(pool[fieldTopUp]), parseInt(pool[fieldReserved])
	for k, v := range r.grants.Val() {
		if g, ok := e.parseGrant(k, v); ok {
			f.Grants = append(f.Grants, g)
		}
	}
	slices.SortFunc(f.Grants, func(a, b GrantState) int {
		if a.CustomerID != b.CustomerID {
			return cmp.Compare(a.CustomerID, b.CustomerID)
		}
		return strings.Compare(a.GrantID, b.GrantID)
	})
	f.Total = f.Plan + f.TopUps
	f.Remaining = policy.Pool{Total: f.Total, Used: f.Used}.Remaining()
	for k := range pool {
		if strings.HasPrefix(k, prefixAlert) {
			if n, err := strconv.Atoi(k[len(prefixAlert):]); err == nil {
				f.Fired = append(f.Fired, n)
			}
		}
	}
	slices.Sort(f.Fired)
	slices.Reverse(f.Fired)
	return f, members
}

func (f FamilyStatus) pool() policy.Pool {
	return policy.Pool{Provisioned: f.Provisioned, Total: f.Total, Used: f.Used}
}

func memberOf(r memberReads, member bool, pool policy.Pool, m policy.Moment) (MemberStatus, error) {
	s := MemberStatus{
		CustomerID:  r.cid,
		Member:      member,
		Constraints: r.constraints.Val(),
		Version:     versionOf(r.version, r.legacy),
	}
	delete(s.Constraints, fieldCompiled) // compiled, not a constraint
	delete(s.Constraints, fieldWindows)
	s.MonthlyUsed, s.DailyUsed = memberUsage(r, m.Day)
	if p := r.pool.Val(); len(p) == 4 {
		s.MonthlyReserved, s.DailyReserved = anyInt(p[2]), anyInt(p[3])
	}
	c, err := policy.ParseConstraints(s.Constraints)
	if err != nil {
		return s, fmt.Errorf("quota: stored constraints of customer %d are invalid: %w", r.cid, err)
	}
	res := policy.Status(c, policy.Member{Member: s.Member, DailyUsed: s.DailyUsed, MonthlyUsed: s.MonthlyUsed}, pool, m)
	s.Decision, s.Rule, s.ThrottleKbps = res.Decision, res.Rule, res.ThrottleKbps
	return s, nil
}

// memberUsage reads a member's month and day as apply.lua does: the month
// is u:<cid> of the pool hash (m of the usage hash in a month an earlier
// engine began), the day the pool hash's slot when it holds that day, else
// the usage hash's d:<DD>.
func memberUsage(r memberReads, day string) (monthly, daily int64) {
	u, p := r.usage.Val(), r.pool.Val()
	if len(u) != 2 || len(p) < 2 {
		return 0, 0
	}
	if s, ok := p[0].(string); ok {
		monthly = parseInt(s)
	} else {
		monthly = anyInt(u[0])
	}
	if s, ok := p[1].(string); ok && len(s) > 3 && s[:2] == day[6:8] {
		return monthly, parseInt(s[3:])
	}
	return monthly, anyInt(u[1])
}

func anyInt(v any) int64 {
	s, _ := v.(string)
	return parseInt(s)
}

func pipeErr(err error) error {
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	return nil
}

// Status is the dry run: whether the member would be blocked now (by the
// engine's clock) and why, read atomically. It changes nothing.
func (e *Engine) Status(ctx context.Context, fid, cid int64) (MemberStatus, error) {
	if err := checkMember(fid, cid); err != nil {
		return MemberStatus{}, err
	}
	m := policy.MomentOf(e.now(), e.loc)
	var pr poolReads
	var mr memberReads
	_, err := e.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		pr = e.queuePool(ctx, p, fid, m)
		mr = e.queueMember(ctx, p, fid, cid, m)
		return nil
	})
	if err := pipeErr(err); err != nil {
		return MemberStatus{}, fmt.Errorf("quota: status: %w", err)
	}
	f, members := e.familyOf(fid, m, pr)
	return memberOf(mr, members[cid], f.pool(), m)
}

// Enforcement is the outcome of Enforce.
type Enforcement struct {
	// Applied is false when the stored policy version was already as new.
	Applied bool
	// Status is the member's standing after the update.
	Status MemberStatus
}

// Enforce applies a policy update of parsed constraints (policy.
// ParseConstraints; only if version is newer, as SetConstraints) and then
// reports the member's standing — retroactive enforcement:
// a member whose usage is at or over a new limit is reported blocked at once, so
// a CUSTOMER_BLOCKED notification can go out before the member's next event.
// The standing is derived from usage and limits; nothing is written as
// BLOCK:ACCESS, so raising the limit or a new period unblocks by itself. The
// status is reported even when the update was stale (the API may have written
// the same version already).
func (e *Engine) Enforce(ctx context.Context, fid, cid, version int64, c policy.Constraints) (Enforcement, error) {
	applied, err := e.setConstraints(ctx, fid, cid, version, c)
	if err != nil {
		return Enforcement{}, err
	}
	st, err := e.Status(ctx, fid, cid)
	if err != nil {
		return Enforcement{}, err
	}
	return Enforcement{Applied: applied, Status: st}, nil
}

// Family returns a snapshot of the family's pool for the current month and of
// every member's standing (by the engine's clock), read atomically.
func (e *Engine) Family(ctx context.Context, fid int64) (FamilyStatus, error) {
	if err := checkFamily(fid); err != nil {
		return FamilyStatus{}, err
	}
	m := policy.MomentOf(e.now(), e.loc)
	var ids []int64
	for range 5 {
		// Read the pool and the members known from the last read in one
		// transaction; read again if the membership changed in between.
		var pr poolReads
		mrs := make([]memberReads, len(ids))
		_, err := e.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			pr = e.queuePool(ctx, p, fid, m)
			for i, cid := range ids {
				mrs[i] = e.queueMember(ctx, p, fid, cid, m)
			}
			return nil
		})
		if err := pipeErr(err); err != nil {
			return FamilyStatus{}, fmt.Errorf("quota: family: %w", err)
		}
		f, members := e.familyOf(fid, m, pr)
		current := slices.Sorted(maps.Keys(members))
		if !slices.Equal(current, ids) {
			ids = current
			continue
		}
		for _, mr := range mrs {
			s, err := memberOf(mr, true, f.pool(), m)
			if err != nil {
				return FamilyStatus{}, err
			}
			f.Members = append(f.Members, s)
		}
		return f, nil
	}
	return FamilyStatus{}, fmt.Errorf("quota: family %d: membership kept changing during the snapshot", fid)
}
