package quota

import (
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

// FamilyState is a family's state as its source of truth (the SQL store)
// knows it, for Restore.
type FamilyState struct {
	FamilyID int64
	// Provisioned false leaves the pool unprovisioned (0 bytes); else Plan
	// is the monthly plan.
	Provisioned bool
	Plan        int64
	// Thresholds are the family's own alert levels; nil means the engine
	// default.
	Thresholds policy.Thresholds
	// TopUps maps a month (YYYYMM) to the sum of its top-ups.
	TopUps map[string]int64
	// Members are the family's current members.
	Members []MemberState
	// Usage is the allowed usage of the family (current and removed
	// members); entries outside the accepted months (AcceptedMonths) are
	// ignored.
	Usage []Usage
	// Arms maps a month (YYYYMM) and a threshold (percent) to how many times
	// it fired that month: the highest arm of the month's crossings.
	Arms map[string]map[int]int
	// Rearmed maps a month and a threshold to the arm after which a pool
	// change (a top-up, a larger plan) re-armed it: the highest recorded
	// (PoolState.Rearmed). A threshold whose last arm was re-armed is armed
	// even when the pool is below it again (a plan cut since), so the next
	// event announces it, as it would have without the rebuild.
	Rearmed map[string]map[int]int
	// Judged are the events judged within the dedupe window with their
	// results; each becomes a dedupe record again, so a replay gets its
	// original result and re-emits identical records.
	Judged []JudgedEvent
	// Steps are the grant steps judged within the dedupe window with
	// their results, deduped as Judged (ids are one event or one step).
	Steps []JudgedStep
	// Grants are the family's open grants with their outstanding
	// reservations (each grant's latest step that kept it open: granted
	// units, or none but not final; a release or the sweep's expiry
	// closes it). Their use is charged as Usage (at GrantResult.ChargedAt).
	Grants []GrantState
	// Generation is the state generation the family is restored by (see
	// ApplyMarked and BeginRebuild); "" writes none.
	Generation string
}

// JudgedEvent is an event already judged, for Restore.
type JudgedEvent struct {
	ID     string
	Result Result
}

// JudgedStep is a grant step already judged, for Restore.
type JudgedStep struct {
	ID     string
	Result GrantResult
}

// MemberState is one member's policy for Restore; Version 0 means none was set.
type MemberState struct {
	CustomerID  int64
	Constraints map[string]string
	Version     int64
}

// Usage is allowed usage of a member at a time (one event, or a sum within
// one day of the service zone), and of what app: AppID and Category ("":
// the engine's catalog's, WithCatalog, as for an event) count it for the
// member's daily budgets of that day (LIMIT:DATA:APP, LIMIT:DATA:CATEGORY),
// or of BudgetAt's day when set: a grant step's charge is charged to the
// day of the reservation it returns (At, its GrantResult.ChargedAt) and
// counted for the budgets of the step's own day (GrantOp.At).
type Usage struct {
	CustomerID int64
	At         time.Time
	Bytes      int64
	AppID      string
	Category   policy.Category
	BudgetAt   time.Time
}

// CurrentMonth returns the month key (YYYYMM) of the engine's clock in its
// zone and the month's bounds [from, to).
func (e *Engine) CurrentMonth() (month string, from, to time.Time) { return e.monthOf(e.now()) }

// AcceptedMonths returns the months (YYYYMM, oldest first) an event judged
// now may belong to — those the dedupe window reaches into, back and ahead
// (a consumer takes events stamped a little ahead of its clock, within a
// skew that must stay under the window, so minutes before a month's end the
// next month may already be charged) — and their bounds [from, to): the
// months a rebuild must restore.
func (e *Engine) AcceptedMonths() (months []string, from, to time.Time) {
	_, first, _ := e.monthOf(e.now().Add(-e.dedupeTTL))
	_, _, to = e.monthOf(e.now().Add(e.dedupeTTL))
	for m := first; m.Before(to); m = m.AddDate(0, 1, 0) {
		months = append(months, policy.MomentOf(m, e.loc).Month)
	}
	return months, first, to
}

func (e *Engine) monthOf(t time.Time) (month string, from, to time.Time) {
	lt := t.In(e.loc)
	from = time.Date(lt.Year(), lt.Month(), 1, 0, 0, 0, 0, e.loc)
	return policy.MomentOf(lt, e.loc).Month, from, from.AddDate(0, 1, 0)
}

// DedupeWindow is how long an event id is remembered (WithDedupeTTL).
func (e *Engine) DedupeWindow() time.Duration { return e.dedupeTTL }

// Restore replaces the family's Redis state with st, atomically (one
// MULTI/EXEC; every key is in the family's slot): membership, plan,
// thresholds and generation; for every accepted month (AcceptedMonths) the
// pool (used = Σ usage, top-ups, the arm counter of every threshold that
// fired that month — in the family's list or not — and as fired every such
// threshold the pool has reached, unless a pool change re-armed it after its
// last arm (FamilyState.Rearmed); one never announced is left for the next
// event to announce); each member's constraints and policy version (written
// as given: the source of truth wins over what Redis held) and month and day
// counters (its earlier days only while something may still be charged to
// them: an event within twice the dedupe window, an open grant's step); the counters and constraints of customers Redis held as members
// that st does not (removed since: a batch judged on a stale state may have
// charged them); the open grants and what they reserve of each accepted
// month, the member's months and days; the daily budget counters of the
// members with a budget, for the days an event may still be judged for,
// from the usage of their budgeted apps and categories (all of the day's,
// whenever the budget was set); and the dedupe records of the judged
// events and grant steps. It is the rebuild after Redis lost data
// (doc/architecture.md, "Never trust Redis blindly").
func (e *Engine) Restore(ctx context.Context, st FamilyState) error {
	out, err := e.restoreBatch(ctx, restoreForce, []FamilyState{st}, nil)
	if err != nil {
		return fmt.Errorf("quota: restore family %d: %w", st.FamilyID, err)
	}
	return out[0].Err
}

// RestoreOutcome is what a batch restore did to one family
// (RestoreBatch, RestoreUnrestoredBatch).
type RestoreOutcome struct {
	// Restored: the family's state was replaced.
	Restored bool
	// Err is why it was not, when it should have been: the state was
	// refused (ErrInvalid), its token moved (ErrMoved), the marker of its
	// node names another generation (a *StaleError), or its hash kept
	// changing. Nil and not Restored: a restore of the generation came
	// first (RestoreUnrestoredBatch).
	Err error
}

// RestoreBatch is Restore for many families: each family is restored
// atomically (one script call) and on its own — one family's refused state
// is its outcome's error, not the others' — and the batch costs two round
// trips per Redis node, not two per family (a rebuild's restores,
// doc/benchmarks.md, "Recovery time"). The error is Redis's (or ctx's):
// then any of the families may or may not have been restored.
func (e *Engine) RestoreBatch(ctx context.Context, sts []FamilyState) ([]RestoreOutcome, error) {
	out, err := e.restoreBatch(ctx, restoreForce, sts, nil)
	if err != nil {
		return nil, fmt.Errorf("quota: restore: %w", err)
	}
	return out, nil
}

// RestoreUnrestoredBatch is RestoreUnrestored for many families, seen[i]
// the token of sts[i], as RestoreBatch is Restore: each family restored or
// not on its own, two round trips per Redis node for the batch (a
// rebuild's sweep).
func (e *Engine) RestoreUnrestoredBatch(ctx context.Context, sts []FamilyState, seen []string) ([]RestoreOutcome, error) {
	if len(seen) != len(sts) {
		return nil, fmt.Errorf("%w: %d families and %d tokens", ErrInvalid, len(sts), len(seen))
	}
	out, err := e.restoreBatch(ctx, restoreUnrestored, sts, seen)
	if err != nil {
		return nil, fmt.Errorf("quota: restore: %w", err)
	}
	return out, nil
}

// restoreAttempts bounds how often a restore (and Settle) tries again when
// the family's hash changed between its read and its write.
const restoreAttempts = 10

// RestoreUnrestored is Restore for a generation restored on touch
// (OnTouch): it restores the family only if its hash does not name
// st.Generation yet, only while its token is still seen — the token read
// before st was read from the source of truth (FamilyToken, FamilyTokens,
// an *UnrestoredError's Seen, Claim) — and only while the marker of the
// node that holds it names st.Generation (read just before the restore,
// which checks the token atomically with its writes: one script call). It
// reports whether it restored: false when a restore of the generation came
// first — the family may have been judged since, and its state is newer
// than SQL's. A token that moved otherwise (the family was claimed for a
// change committed since, perhaps after st was read) is an error wrapping
// ErrMoved: a later read restores it. A marker that names another
// generation (a rebuild began, or gen is not the current one) is a
// *StaleError: a restore for an older generation must never overwrite a
// family a newer one restored and judged.
func (e *Engine) RestoreUnrestored(ctx context.Context, st FamilyState, seen string) (bool, error) {
	out, err := e.restoreBatch(ctx, restoreUnrestored, []FamilyState{st}, []string{seen})
	if err != nil {
		return false, fmt.Errorf("quota: restore family %d: %w", st.FamilyID, err)
	}
	return out[0].Restored, out[0].Err
}

// RestoreClaimed is Restore of a family this caller claimed (Claim, whose
// token is seen), for an operator's rebuild of named families: it writes
// while the family's token is still seen — whatever generation restored it
// before — and while the marker of its node names st.Generation; a token
// that moved is an error wrapping ErrMoved, a marker that names another
// generation a *StaleError. The family is unclaimed after it.
func (e *Engine) RestoreClaimed(ctx context.Context, st FamilyState, seen string) error {
	out, err := e.restoreBatch(ctx, restoreClaimed, []FamilyState{st}, []string{seen})
	if err != nil {
		return fmt.Errorf("quota: restore family %d: %w", st.FamilyID, err)
	}
	return out[0].Err
}

// A restore's mode (lua/restore.lua's ARGV[1]).
const (
	restoreForce      = "f" // Restore
	restoreUnrestored = "u" // RestoreUnrestored
	restoreClaimed    = "c" // RestoreClaimed
)

// restoreBatch restores sts in mode (seen: their tokens, nil when forced)
// and returns each one's outcome, or Redis's error (its callers name the
// family or the batch):
// a read of the families' member fields and (but forced) their nodes'
// markers in one pipeline, then one restore.lua call per family in
// another; a family whose member fields changed between the two is read
// and written again, up to restoreAttempts times.
func (e *Engine) restoreBatch(ctx context.Context, mode string, sts []FamilyState, seen []string) ([]RestoreOutcome, error) {
	out := make([]RestoreOutcome, len(sts))
	builds := make([]func(held []string) restoreCall, len(sts))
	var pending []int
	for i, st := range sts {
		if mode != restoreForce && st.Generation == "" {
			out[i].Err = fmt.Errorf("%w: restore on touch needs a generation", ErrInvalid)
			continue
		}
		b, err := e.restoreWrite(st)
		if err != nil {
			out[i].Err = err
			continue
		}
		builds[i], pending = b, append(pending, i)
	}
	for range restoreAttempts {
		if len(pending) == 0 {
			return out, nil
		}
		held, markers, err := e.restoreReads(ctx, mode != restoreForce, sts, pending)
		if err != nil {
			return nil, err
		}
		var run []int
		for _, i := range pending {
			if mode != restoreForce && markers[i] != sts[i].Generation {
				out[i].Err = &StaleError{Reason: fmt.Sprintf("restoring family %d for state generation %s: the node's marker names %q",
					sts[i].FamilyID, sts[i].Generation, markers[i])}
				continue
			}
			run = append(run, i)
		}
		calls := make([]restoreCall, len(sts))
		for _, i := range run {
			calls[i] = builds[i](held[i])
			tok := ""
			if seen != nil {
				tok = seen[i]
			}
			calls[i].args[0], calls[i].args[1], calls[i].args[2] = mode, sts[i].Generation, tok
		}
		cmds, err := e.runRestores(ctx, calls, run)
		if err != nil {
			return nil, err
		}
		pending = pending[:0]
		for _, i := range run {
			fid := sts[i].FamilyID
			switch r, err := cmds[i].Int64(); {
			case err != nil:
				return nil, fmt.Errorf("family %d: %w", fid, err)
			case r == 1:
				out[i].Restored = true
			case r == 0:
			case r == -1:
				out[i].Err = fmt.Errorf("quota: restore family %d: %w", fid, ErrMoved)
			case r == -2:
				pending = append(pending, i) // its members changed: read again
			default:
				return nil, fmt.Errorf("family %d: unexpected reply %d", fid, r)
			}
		}
	}
	for _, i := range pending {
		out[i].Err = fmt.Errorf("quota: restore family %d: its hash kept changing (%d attempts)", sts[i].FamilyID, restoreAttempts)
	}
	return out, nil
}

// restoreReads reads, for the families sts[i] of idx, the member fields
// their hashes hold and, when marked, the generation the marker of each
// one's node names, in one pipeline.
func (e *Engine) restoreReads(ctx context.Context, marked bool, sts []FamilyState, idx []int) (held [][]string, markers []string, err error) {
	held, markers = make([][]string, len(sts)), make([]string, len(sts))
	keys := make([]*redis.StringSliceCmd, len(sts))
	markerOf := make([]string, len(sts))
	gens := map[string]*redis.StringCmd{}
	if marked {
		for _, i := range idx {
			if markerOf[i], err = e.FamilyMarker(ctx, sts[i].FamilyID); err != nil {
				return nil, nil, err
			}
			gens[markerOf[i]] = nil
		}
	}
	_, err = e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k := range gens {
			gens[k] = p.HGet(ctx, k, "g")
		}
		for _, i := range idx {
			keys[i] = p.HKeys(ctx, e.k.family(sts[i].FamilyID))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, err
	}
	for _, c := range gens {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return nil, nil, fmt.Errorf("quota: state marker: %w", err)
		}
	}
	for _, i := range idx {
		if err := keys[i].Err(); err != nil {
			return nil, nil, fmt.Errorf("family %d: %w", sts[i].FamilyID, err)
		}
		for _, f := range keys[i].Val() {
			if strings.HasPrefix(f, prefixMember) {
				held[i] = append(held[i], f)
			}
		}
		if marked {
			markers[i] = gens[markerOf[i]].Val()
		}
	}
	return held, markers, nil
}

// runRestores runs calls[i] for every i of idx in one pipeline, loading
// restore.lua again when Redis lost it (a restart).
func (e *Engine) runRestores(ctx context.Context, calls []restoreCall, idx []int) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	run := func(idx []int) error {
		_, err := e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range idx {
				cmds[i] = restoreScript.EvalSha(ctx, p, calls[i].keys, calls[i].args...)
			}
			return nil
		})
		return err
	}
	if err := run(idx); err != nil {
		var missing []int
		for _, i := range idx {
			if c := cmds[i]; c.Err() != nil && redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
				missing = append(missing, i)
			}
		}
		if len(missing) == 0 {
			return nil, err
		}
		if err := restoreScript.Load(ctx, e.rdb).Err(); err != nil {
			return nil, fmt.Errorf("load scripts: %w", err)
		}
		if err := run(missing); err != nil {
			return nil, err
		}
	}
	return cmds, nil
}

// restoreCall is one restore.lua call: the family hash and every key it
// replaces, and its arguments (the first three, mode, generation and
// token, set by the caller).
type restoreCall struct {
	keys []string
	args []any
}

// restoreWriter builds a restoreCall's keys and writes.
type restoreWriter struct {
	keys   []string
	index  map[string]int // key -> its index in KEYS (1-based)
	writes []any
}

// key adds k to the keys the restore replaces and returns its index.
func (w *restoreWriter) key(k string) int {
	if i, ok := w.index[k]; ok {
		return i
	}
	w.keys = append(w.keys, k)
	w.index[k] = len(w.keys)
	return len(w.keys)
}

// hset writes field, value pairs into the hash k (replaced), at most
// restoreHSetPairs pairs per HSET (a script's unpack is bounded).
func (w *restoreWriter) hset(k string, pairs []any) {
	i := w.key(k)
	for len(pairs) > 0 {
		n := min(len(pairs), 2*restoreHSetPairs)
		w.writes = append(append(w.writes, "h", i, n), pairs[:n]...)
		pairs = pairs[n:]
	}
}

// expire sets k's TTL in whole seconds, as go-redis's Expire sends it.
func (w *restoreWriter) expire(k string, d time.Duration) {
	s := int64(d / time.Second)
	if d > 0 && s == 0 {
		s = 1
	}
	w.writes = append(w.writes, "e", w.key(k), 1, s)
}

// restoreHSetPairs bounds the field, value pairs of one HSET of a restore.
const restoreHSetPairs = 1000

// restoreWrite checks st and returns the restore.lua call that restores
// it, given the member fields (m:<cid>) of the family's hash as Redis holds
// it.
func (e *Engine) restoreWrite(st FamilyState) (func(held []string) restoreCall, error) {
	fid := st.FamilyID
	if err := checkFamily(fid); err != nil {
		return nil, err
	}
	months, from, to := e.AcceptedMonths()
	for _, m := range months {
		if st.Plan < 0 || st.TopUps[m] < 0 || st.Plan+st.TopUps[m] > policy.MaxBytes {
			return nil, fmt.Errorf("%w: month %s: plan and top-ups must be ≥ 0 and total at most %d", ErrInvalid, m, policy.MaxBytes)
		}
	}
	thr := e.thresholds
	var ownThr string
	if st.Thresholds != nil {
		c, err := st.Thresholds.Canonical()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		thr, ownThr = c, c.String()
	}
	type memberWrite struct {
		cid     int64
		fields  []any // the constraints hash
		version int64
	}
	members := make([]memberWrite, 0, len(st.Members))
	budgeted := map[int64]policy.Constraints{}
	for _, m := range st.Members {
		if err := checkMember(fid, m.CustomerID); err != nil {
			return nil, err
		}
		if m.Version < 0 {
			return nil, fmt.Errorf("%w: customer %d: version must be ≥ 0", ErrInvalid, m.CustomerID)
		}
		c, err := policy.ParseConstraints(m.Constraints)
		if err != nil {
			return nil, fmt.Errorf("%w: customer %d: %w", ErrInvalid, m.CustomerID, err)
		}
		fields := constraintFields(c)
		members = append(members, memberWrite{m.CustomerID, fields, m.Version})
		if c.Budgets() {
			budgeted[m.CustomerID] = c
		}
	}
	// The daily budget counters of the days whose hash may live (see
	// restoreBudgets), for the members with a budget.
	var days []budgetDay
	if len(budgeted) > 0 {
		days = e.budgetDays()
	}
	spent := map[int64]map[string]map[string]int64{} // cid -> day -> a:<app> / c:<category> -> bytes
	used := map[string]int64{}                       // month -> bytes
	usage := map[string]map[int64]map[string]int64{} // month -> cid -> d:<DD> -> bytes
	for _, u := range st.Usage {
		if u.CustomerID <= 0 || u.Bytes < 0 || u.Bytes > policy.MaxBytes {
			return nil, fmt.Errorf("%w: usage of customer %d: bad customer or bytes", ErrInvalid, u.CustomerID)
		}
		if u.At.Before(from) || !u.At.Before(to) {
			continue
		}
		mo := policy.MomentOf(u.At, e.loc)
		if usage[mo.Month] == nil {
			usage[mo.Month] = map[int64]map[string]int64{}
		}
		f := usage[mo.Month][u.CustomerID]
		if f == nil {
			f = map[string]int64{}
			usage[mo.Month][u.CustomerID] = f
		}
		f[dayField(mo.Day)] += u.Bytes
		used[mo.Month] += u.Bytes
		if c, ok := budgeted[u.CustomerID]; ok {
			bday := mo.Day
			if !u.BudgetAt.IsZero() {
				bday = policy.MomentOf(u.BudgetAt, e.loc).Day
			}
			if slices.ContainsFunc(days, func(d budgetDay) bool { return d.day == bday }) {
				e.countBudget(spent, c, u, bday)
			}
		}
	}
	judged := make([]any, 0, 2*(len(st.Judged)+len(st.Steps)))
	for _, j := range st.Judged {
		if j.ID == "" || len(j.ID) > MaxEventIDLen || !j.Result.Decision.Valid() {
			return nil, fmt.Errorf("%w: judged event %q: bad id or decision", ErrInvalid, j.ID)
		}
		judged = append(judged, j.ID, encodeResult(j.Result, e.longResults))
	}
	for _, j := range st.Steps {
		if j.ID == "" || len(j.ID) > MaxEventIDLen || !j.Result.Decision.Valid() {
			return nil, fmt.Errorf("%w: judged grant step %q: bad id or decision", ErrInvalid, j.ID)
		}
		for _, id := range append([]string{j.Result.Previous}, j.Result.Reclaim...) {
			if id != "" && !ValidGrantID(id) {
				return nil, fmt.Errorf("%w: judged grant step %q: bad grant or step id %q", ErrInvalid, j.ID, id)
			}
		}
		judged = append(judged, j.ID, encodeGrantResult(j.Result))
	}
	// The open grants, and what they reserve of each accepted month (r),
	// each member's month (r:<cid>) and day (r:<cid>:<DD>).
	grants := make([]any, 0, 2*len(st.Grants))
	reserved := map[string]map[string]int64{} // month -> pool field -> bytes
	grantDays := map[int64]map[string]bool{}  // cid -> the days of its open grants' steps
	for _, g := range st.Grants {
		if !ValidGrantID(g.GrantID) || !ValidGrantID(g.Step) || g.CustomerID <= 0 || g.Reserved < 0 || g.Reserved > policy.MaxBytes || g.At.IsZero() {
			return nil, fmt.Errorf("%w: grant %q of customer %d: bad id, step, customer, bytes or time", ErrInvalid, g.GrantID, g.CustomerID)
		}
		grants = append(grants, grantField(g.CustomerID, g.GrantID), e.grantValue(g))
		mo := policy.MomentOf(g.At, e.loc)
		if grantDays[g.CustomerID] == nil {
			grantDays[g.CustomerID] = map[string]bool{}
		}
		grantDays[g.CustomerID][mo.Day] = true // its use is charged to that day
		if g.Reserved == 0 || g.At.Before(from) || !g.At.Before(to) {
			continue
		}
		if reserved[mo.Month] == nil {
			reserved[mo.Month] = map[string]int64{}
		}
		c := prefixReserved + strconv.FormatInt(g.CustomerID, 10)
		reserved[mo.Month][fieldReserved] += g.Reserved
		reserved[mo.Month][c] += g.Reserved
		reserved[mo.Month][c+":"+mo.Day[6:8]] += g.Reserved
	}
	bucket := e.bucket(e.now())
	lateFrom := policy.MomentOf(e.now().Add(-2*e.dedupeTTL), e.loc).Day
	return func(held []string) restoreCall {
		// Customers the state in Redis holds as members but the source of truth
		// does not (removed since a snapshot was taken): a batch judged on that
		// state may have charged them, and their counters go too.
		var former []int64
		for _, f := range held {
			if !strings.HasPrefix(f, prefixMember) {
				continue
			}
			cid, err := strconv.ParseInt(f[len(prefixMember):], 10, 64)
			if err == nil && !slices.ContainsFunc(members, func(m memberWrite) bool { return m.cid == cid }) {
				former = append(former, cid)
			}
		}
		fam := e.k.family(fid)
		// Every key is deleted before the writes (restore.lua).
		w := &restoreWriter{index: map[string]int{}}
		w.key(fam)
		var famFields []any
		if st.Provisioned {
			famFields = append(famFields, fieldPlan, st.Plan)
		}
		if st.Thresholds != nil {
			famFields = append(famFields, fieldThresholds, ownThr)
		}
		if st.Generation != "" {
			famFields = append(famFields, fieldGeneration, st.Generation)
		}
		for _, m := range members {
			famFields = append(famFields, memberField(m.cid), "1")
			if m.version > 0 {
				famFields = append(famFields, versionField(m.cid), m.version)
			}
		}
		if len(famFields) > 0 {
			w.hset(fam, famFields)
		}
		for _, month := range months {
			total := st.Plan + st.TopUps[month]
			if !st.Provisioned {
				total = st.TopUps[month]
			}
			remaining := policy.Pool{Total: total, Used: used[month]}.Remaining()
			pool := e.k.pool(fid, month)
			w.key(pool)
			poolFields := []any{fieldUsed, used[month], fieldTopUp, st.TopUps[month]}
			// Every threshold that fired this month, in the family's list
			// or not (turned off since): turned on again, it must not be
			// announced again on an arm already announced.
			pcts := slices.Clone(thr)
			for pct := range st.Arms[month] {
				if !slices.Contains(pcts, pct) {
					pcts = append(pcts, pct)
				}
			}
			slices.Sort(pcts)
			for _, pct := range pcts {
				arms := st.Arms[month][pct]
				if arms > 0 {
					poolFields = append(poolFields, prefixArms+strconv.Itoa(pct), arms)
					if restoredFired(pct, arms, total, remaining, st.Rearmed[month][pct]) {
						poolFields = append(poolFields, prefixAlert+strconv.Itoa(pct), "1")
					}
				}
			}
			// Each member's month and latest day in the pool hash, the
			// member's other days in the usage hash (see apply.lua).
			type otherDays struct {
				cid  int64
				args []any // d:<DD>, bytes pairs
			}
			var others []otherDays
			for _, cid := range slices.Sorted(maps.Keys(usage[month])) {
				f := usage[month][cid]
				days := slices.Sorted(maps.Keys(f))
				last := days[len(days)-1]
				var sum int64
				for _, b := range f {
					sum += b
				}
				poolFields = append(poolFields, prefixMonthUsage+strconv.FormatInt(cid, 10), sum,
					prefixDay+strconv.FormatInt(cid, 10), last[len(prefixDay):]+":"+strconv.FormatInt(f[last], 10))
				// Only the days something may still be charged to: an
				// event's (the dedupe window's, twice over for the clocks
				// of processors; consumers reject older events) or an
				// open grant's step's. An older day's counter is read by
				// nothing, and the month's sum above holds its bytes.
				o := otherDays{cid: cid}
				for _, d := range days[:len(days)-1] {
					if day := month + d[len(prefixDay):]; day >= lateFrom || grantDays[cid][day] {
						o.args = append(o.args, d, f[d])
					}
				}
				others = append(others, o)
			}
			for _, f := range slices.Sorted(maps.Keys(reserved[month])) {
				poolFields = append(poolFields, f, reserved[month][f])
			}
			w.hset(pool, poolFields)
			w.expire(pool, monthTTL)
			// Every usage hash a stale state may hold goes (members, former
			// members, customers SQL has usage of); the other days come back.
			for _, m := range members {
				w.key(e.k.usage(fid, m.cid, month))
			}
			for _, cid := range former {
				w.key(e.k.usage(fid, cid, month))
			}
			for _, o := range others {
				uk := e.k.usage(fid, o.cid, month)
				w.key(uk)
				if len(o.args) > 0 {
					w.hset(uk, o.args)
					w.expire(uk, monthTTL)
				}
			}
		}
		for _, cid := range former { // as RemoveMember: the version stays (restore.lua)
			w.key(e.k.constraints(fid, cid))
		}
		for _, m := range members {
			ck := e.k.constraints(fid, m.cid)
			w.key(ck)
			if len(m.fields) > 0 {
				w.hset(ck, m.fields)
			}
			w.key(e.k.legacyVersion(fid, m.cid)) // its version is the family hash's v:<cid>
		}
		// The budget counters of the members with a budget: what a stale
		// state counted goes, what SQL recorded of their days comes back.
		for _, cid := range slices.Sorted(maps.Keys(budgeted)) {
			for _, d := range days {
				bk := e.k.budget(fid, cid, d.day)
				w.key(bk)
				if f := spent[cid][d.day]; len(f) > 0 {
					args := make([]any, 0, 2*len(f))
					for _, k := range slices.Sorted(maps.Keys(f)) {
						args = append(args, k, f[k])
					}
					w.hset(bk, args)
					w.expire(bk, d.ttl) // relative: Redis' clock is not the engine's
				}
			}
		}
		w.key(e.k.grants(fid))
		if len(grants) > 0 {
			w.hset(e.k.grants(fid), grants)
		}
		// The dedupe buckets: what a stale state recorded goes, what SQL
		// knows comes back, remembered for a bucket's life from now (marked:
		// the script does not set the TTL again).
		for b := bucket - 2; b <= bucket+1; b++ {
			w.key(e.k.events(fid, b))
		}
		if len(judged) > 0 {
			ek := e.k.events(fid, bucket)
			w.hset(ek, append(judged, bucketMarked, "1"))
			w.expire(ek, e.bucketTTL())
		}
		args := make([]any, 0, 4+len(held)+len(w.writes))
		args = append(args, "", "", "", len(held))
		for _, f := range held {
			args = append(args, f)
		}
		return restoreCall{keys: w.keys, args: append(args, w.writes...)}
	}, nil
}
