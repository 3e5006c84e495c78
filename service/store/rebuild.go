package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// Window is what reading families for a restore needs to know of the
// quota state: the months it accepts events for, how long it remembers an
// event id, and its time zone (judge.State, quota.Engine).
type Window interface {
	AcceptedMonths() (months []string, from, to time.Time)
	DedupeWindow() time.Duration
	Location() *time.Location
}

// ReadFamilies reads the state of ids from SQL for a restore
// (quota.Engine.Restore), one query per table (usage_record and
// grant_step: one per readChunk families): plan, thresholds, current
// members, each member's constraints and version, and for every month w
// accepts events for the top-ups, the allowed usage and the threshold arms
// from usage_record and the thresholds pool changes re-armed
// (threshold_rearms); and the dedupe records of the events written within
// w's dedupe window, with their whole results. It returns the states to
// restore (by family id) and the families whose rows cannot be restored
// (missing, or a value that does not parse) with why. span says ids are
// every family from ids[0] to ids[len(ids)-1], ascending (a page of
// FamilyIDs), so the small tables are read by an id range through their
// family index; usage_record and grant_step are read by each family's
// range of their time index, from the earlier of the first accepted month
// and twice the dedupe window ago (a family's earlier months are never
// read). An error means the families could not be read: it wraps
// ErrUnreadable when a value did not scan, else the database failed.
func (s *Store) ReadFamilies(ctx context.Context, w Window, ids []int64, span bool) (map[int64]quota.FamilyState, map[int64]error, error) {
	return s.readFamilies(ctx, w, ids, span, true)
}

// ReadFamilyConfigs is ReadFamilies without the usage_record query (no
// usage, threshold arms or judged events): a family's configuration, what
// settling a committed change reads (quota.Engine.Settle).
func (s *Store) ReadFamilyConfigs(ctx context.Context, w Window, ids []int64) (map[int64]quota.FamilyState, map[int64]error, error) {
	return s.readFamilies(ctx, w, ids, false, false)
}

func (s *Store) readFamilies(ctx context.Context, w Window, ids []int64, span, usage bool) (map[int64]quota.FamilyState, map[int64]error, error) {
	if len(ids) == 0 {
		return map[int64]quota.FamilyState{}, map[int64]error{}, nil
	}
	// which(col) selects the rows of ids by col; args are its arguments.
	which := func(col string) string {
		return col + " IN (" + strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",") + ")"
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	if span {
		which = func(col string) string { return col + " BETWEEN ? AND ?" }
		args = []any{ids[0], ids[len(ids)-1]}
	}
	states := make(map[int64]quota.FamilyState, len(ids))
	bad := map[int64]error{}
	fail := func(fid int64, err error) {
		if _, ok := bad[fid]; !ok {
			bad[fid] = fmt.Errorf("store: rebuild family %d: %w", fid, err)
		}
	}
	months, from, to := w.AcceptedMonths()

	rows, err := s.db.QueryContext(ctx, `SELECT id, plan_bytes, thresholds FROM families WHERE `+which("id"), args...)
	if err != nil {
		return nil, nil, dbErr("rebuild: families", err)
	}
	err = scanAll(rows, func(sc scanner) error {
		var fid, plan int64
		var thr sql.NullString
		if err := sc.Scan(&fid, &plan, &thr); err != nil {
			return err
		}
		if _, listed := slices.BinarySearch(ids, fid); span && !listed { // created since the page was listed
			return nil
		}
		st := quota.FamilyState{FamilyID: fid, Provisioned: true, Plan: plan, TopUps: map[string]int64{},
			Arms: map[string]map[int]int{}, Rearmed: map[string]map[int]int{}}
		for _, m := range months {
			st.TopUps[m] = 0
		}
		if thr.Valid {
			t, err := policy.ParseThresholds(thr.String)
			if err != nil {
				fail(fid, fmt.Errorf("family %d: thresholds: %w", fid, err))
			}
			st.Thresholds = t
		}
		states[fid] = st
		return nil
	})
	if err != nil {
		return nil, nil, dbErr("rebuild: families", err)
	}
	for _, fid := range ids {
		if _, ok := states[fid]; !ok {
			fail(fid, notFound("family", fid))
		}
	}

	// Current members by id, with their policy (none: version 0, no rules).
	rows, err = s.db.QueryContext(ctx, `SELECT m.family_id, m.id, p.rules, p.version FROM members m
		LEFT JOIN policy_assignment p ON p.customer_id = m.id
		WHERE `+which("m.family_id")+` AND m.deleted_at IS NULL ORDER BY m.family_id, m.id`, args...)
	if err != nil {
		return nil, nil, dbErr("rebuild: members", err)
	}
	err = scanAll(rows, func(sc scanner) error {
		var fid, cid int64
		var rules sql.NullString
		var version sql.NullInt64
		if err := sc.Scan(&fid, &cid, &rules, &version); err != nil {
			return err
		}
		m := quota.MemberState{CustomerID: cid, Constraints: map[string]string{}, Version: version.Int64}
		if rules.Valid {
			if err := json.Unmarshal([]byte(rules.String), &m.Constraints); err != nil {
				fail(fid, fmt.Errorf("store: policy of member %d: rules: %w", cid, err))
			}
			if m.Constraints == nil {
				m.Constraints = map[string]string{}
			}
		}
		st, ok := states[fid]
		if !ok {
			return nil
		}
		st.Members = append(st.Members, m)
		states[fid] = st
		return nil
	})
	if err != nil {
		return nil, nil, dbErr("rebuild: members", err)
	}

	monthIn := strings.TrimSuffix(strings.Repeat("?,", len(months)), ",")
	targs := append(append([]any{}, args...), anys(months)...)
	rows, err = s.db.QueryContext(ctx, `SELECT family_id, month, COALESCE(SUM(bytes), 0) FROM topups
		WHERE `+which("family_id")+` AND month IN (`+monthIn+`) GROUP BY family_id, month`, targs...)
	if err != nil {
		return nil, nil, dbErr("rebuild: top-ups", err)
	}
	err = scanAll(rows, func(sc scanner) error {
		var fid, sum int64
		var month string
		if err := sc.Scan(&fid, &month, &sum); err != nil {
			return err
		}
		if st, ok := states[fid]; ok {
			st.TopUps[month] = sum
		}
		return nil
	})
	if err != nil {
		return nil, nil, dbErr("rebuild: top-ups", err)
	}

	// The thresholds pool changes re-armed (RecordRearms).
	rows, err = s.db.QueryContext(ctx, `SELECT family_id, month, pct, arm FROM threshold_rearms
		WHERE `+which("family_id")+` AND month IN (`+monthIn+`)`, targs...)
	if err != nil {
		return nil, nil, dbErr("rebuild: threshold re-arms", err)
	}
	err = scanAll(rows, func(sc scanner) error {
		var fid int64
		var month string
		var pct, arm int
		if err := sc.Scan(&fid, &month, &pct, &arm); err != nil {
			return err
		}
		if st, ok := states[fid]; ok {
			if st.Rearmed[month] == nil {
				st.Rearmed[month] = map[int]int{}
			}
			st.Rearmed[month][pct] = arm
		}
		return nil
	})
	if err != nil {
		return nil, nil, dbErr("rebuild: threshold re-arms", err)
	}

	if !usage {
		return states, bad, nil
	}
	// Every judged event of the accepted months: allowed usage, the arms of
	// the thresholds crossed, and — for those written within the dedupe
	// window — the dedupe records (a row is written after its event was
	// judged, so created_at ≥ the judging time).
	since := s.now().Add(-w.DedupeWindow())
	// Only rows of [lo, to) can matter, read by the (family_id, event_time)
	// index for each family: the accepted months' and those of events
	// judged within the dedupe window, which a judge takes no older than
	// the window (judge.WithMaxEventAge), so stamped after since minus the
	// window. The family's earlier history is never read (doc/store.md).
	// Rows of [lo, to) written before since and outside the accepted months
	// are read and skipped below.
	lo := since.Add(-w.DedupeWindow())
	if from.Before(lo) {
		lo = from
	}
	// One read of the usage and one of the grant steps per chunk of at
	// most readChunk families: an IN list each, so every family is a range
	// of the (family_id, event_time) index from lo and its rows of earlier
	// months are not read. (A page's BETWEEN, or an IN list of 1,000 ids,
	// which MariaDB turns into a join, in_predicate_conversion_threshold,
	// is read by a scan of the whole table once the page's families hold a
	// fifth of its rows.)
	// created_at is the database's clock in the session's zone (see JudgedSince).
	created := "created_at"
	if s.d == sqldialect.MySQL {
		created = "CONVERT_TZ(created_at, @@session.time_zone, '+00:00')"
	}
	// The charges of grant steps written within the dedupe window, by
	// step id: half of each step's answer (grant_step holds the rest).
	charges := map[string]quota.GrantResult{}
	// The usage of grant steps, by step id: its place in its family's
	// Usage, which the step's row completes (its day and category count
	// it for the daily budgets).
	stepUsage := map[string]int{}
	read := func(byFamily string, famArgs []any) error {
		uargs := append(append([]any{}, famArgs...), s.t(lo), s.t(to))
		rows, err := s.db.QueryContext(ctx, fmt.Sprintf(`SELECT family_id, event_id, customer_id, bytes_used, process_result, remaining_after, rule,
		total_bytes, daily_used, monthly_used, throttle_kbps, crossed, event_time, %s, grant_id, app_id
		FROM usage_record WHERE %s AND event_time >= ? AND event_time < ?`, created, byFamily),
			uargs...)
		if err != nil {
			return dbErr("rebuild: usage", err)
		}
		err = scanAll(rows, func(sc scanner) error {
			var id, decision, rule, crossed, grant, app string
			var fid, cid, bytes, remaining, total, daily, monthly, throttle int64
			var at, created sqldialect.NullTime
			if err := sc.Scan(&fid, &id, &cid, &bytes, &decision, &remaining, &rule, &total, &daily, &monthly, &throttle, &crossed, &at, &created, &grant, &app); err != nil {
				return err
			}
			st, ok := states[fid]
			if !ok {
				return nil
			}
			cs, err := ParseCrossed(crossed)
			if err != nil {
				fail(fid, fmt.Errorf("event %s: %w", id, err))
				return nil
			}
			inMonths := !at.Time.Before(from) && at.Time.Before(to)
			// A grant step's charge is used whatever its answer about the
			// next units (process_result).
			if inMonths && (decision == string(policy.Allowed) || grant != "") && bytes > 0 {
				// The app counts it for the member's daily budgets (the
				// engine's catalog names its category, as for the event).
				st.Usage = append(st.Usage, quota.Usage{CustomerID: cid, At: at.Time, Bytes: bytes, AppID: app})
				if grant != "" {
					stepUsage[id] = len(st.Usage) - 1
				}
			}
			if inMonths && len(cs) > 0 {
				month := policy.MomentOf(at.Time, w.Location()).Month
				for _, c := range cs {
					if st.Arms[month] == nil {
						st.Arms[month] = map[int]int{}
					}
					st.Arms[month][c.Percent] = max(st.Arms[month][c.Percent], c.Arm)
				}
			}
			if !created.Time.Before(since) && grant != "" {
				r := quota.GrantResult{Decision: policy.Decision(decision), Rule: rule, Charged: bytes, ChargedAt: at.Time,
					Remaining: remaining, Total: total, DailyUsed: daily, MonthlyUsed: monthly, ThrottleKbps: throttle}
				for _, c := range cs {
					r.Crossed, r.Arms = append(r.Crossed, c.Percent), append(r.Arms, c.Arm)
				}
				charges[id] = r
			} else if !created.Time.Before(since) {
				r := quota.Result{Decision: policy.Decision(decision), Rule: rule, Remaining: remaining, Total: total,
					DailyUsed: daily, MonthlyUsed: monthly, ThrottleKbps: throttle}
				for _, c := range cs {
					r.Crossed, r.Arms = append(r.Crossed, c.Percent), append(r.Arms, c.Arm)
				}
				st.Judged = append(st.Judged, quota.JudgedEvent{ID: id, Result: r})
			}
			states[fid] = st
			return nil
		})
		if err != nil {
			return dbErr("rebuild: usage", err)
		}
		return s.readGrants(ctx, byFamily, famArgs, lo, from, to, since, created, states, charges, stepUsage)
	}
	for chunk := range slices.Chunk(ids, readChunk) {
		famArgs := make([]any, len(chunk))
		for i, id := range chunk {
			famArgs[i] = id
		}
		if err := read("family_id IN ("+strings.TrimSuffix(strings.Repeat("?,", len(chunk)), ",")+")", famArgs); err != nil {
			return nil, nil, err
		}
	}
	if err := s.budgetCategories(ctx, states); err != nil {
		return nil, nil, err
	}
	return states, bad, nil
}

// readChunk is how many families ReadFamilies reads the usage and the
// grant steps of with one query (see there).
const readChunk = 500

// budgetCategories names the category of the usage of families with a
// category's daily budget (LIMIT:DATA:CATEGORY:<c>) from the app catalog
// the judges name events' categories with (AppCatalog), so that the
// engine's restore counts it for the budget; the catalog is read only
// when a family has one.
func (s *Store) budgetCategories(ctx context.Context, states map[int64]quota.FamilyState) error {
	var cat policy.Catalog
	for fid, st := range states {
		if !slices.ContainsFunc(st.Members, func(m quota.MemberState) bool {
			for k := range m.Constraints {
				if strings.HasPrefix(k, policy.KeyLimitCatPrefix) {
					return true
				}
			}
			return false
		}) {
			continue
		}
		if cat == nil {
			c, err := AppCatalog(ctx, s.db)
			if err != nil {
				return dbErr("rebuild: app catalog", err)
			}
			cat = c
		}
		for i, u := range st.Usage {
			if u.Category == "" {
				st.Usage[i].Category = cat.Category(u.AppID)
			}
		}
		states[fid] = st
	}
	return nil
}

// readGrants adds to states, from grant_step, each family's open grants
// of the accepted months [from, to) — the latest step of each grant, the
// open row no other row names as its previous step (the records may have
// arrived in any order) — and the answers of the steps written since
// since (charges holds their usage_record halves). which selects the
// families' rows with args; it reads the steps of [lo, to) as
// ReadFamilies reads usage_record, and created converts created_at as
// ReadFamilies does. A step's charge read into its family's Usage (at
// stepUsage's index) gets the step's time as its BudgetAt and the step's
// category: grant.lua counted it for the budgets of that day and category.
func (s *Store) readGrants(ctx context.Context, which string, args []any, lo, from, to, since time.Time, created string,
	states map[int64]quota.FamilyState, charges map[string]quota.GrantResult, stepUsage map[string]int) error {
	gargs := append(append([]any{}, args...), s.t(lo), s.t(to))
	rows, err := s.db.QueryContext(ctx, fmt.Sprintf(`SELECT family_id, step_id, customer_id, grant_id, previous_step, granted,
		is_open, is_final, overage, reserved, valid_until, reclaim, step_time, category, %s
		FROM grant_step WHERE %s AND step_time >= ? AND step_time < ? ORDER BY id`, created, which), gargs...)
	if err != nil {
		return dbErr("rebuild: grant steps", err)
	}
	type step struct {
		fid      int64
		grant    quota.GrantState
		open     bool
		created  time.Time
		result   quota.GrantResult
		category string
	}
	var steps []step
	replaced := map[string]bool{}
	err = scanAll(rows, func(sc scanner) error {
		var st step
		var reclaim, previous string
		var open, final int
		var until, at, createdAt sqldialect.NullTime
		if err := sc.Scan(&st.fid, &st.grant.Step, &st.grant.CustomerID, &st.grant.GrantID, &previous, &st.grant.Reserved,
			&open, &final, &st.result.Overage, &st.result.Reserved, &until, &reclaim, &at, &st.category, &createdAt); err != nil {
			return err
		}
		st.grant.At, st.open, st.created = at.Time, open != 0, createdAt.Time
		st.result.Granted, st.result.Final, st.result.Previous, st.result.ValidUntil = st.grant.Reserved, final != 0, previous, until.Time
		if reclaim != "" {
			st.result.Reclaim = strings.Split(reclaim, ",")
		}
		if previous != "" {
			replaced[previous] = true
		}
		steps = append(steps, st)
		return nil
	})
	if err != nil {
		return dbErr("rebuild: grant steps", err)
	}
	// A step's charge is written just before it (one batch): one written
	// a moment before since, of a month not accepted, is read here.
	var missing []any
	for _, st := range steps {
		if _, ok := charges[st.grant.Step]; !ok && !st.created.Before(since) {
			missing = append(missing, st.grant.Step)
		}
	}
	if len(missing) > 0 {
		if err := s.readCharges(ctx, missing, charges); err != nil {
			return err
		}
	}
	for _, st := range steps {
		fs, ok := states[st.fid]
		if !ok {
			continue
		}
		if i, ok := stepUsage[st.grant.Step]; ok && i < len(fs.Usage) {
			fs.Usage[i].BudgetAt = st.grant.At
			if st.category != "" {
				fs.Usage[i].Category = policy.Category(st.category)
			}
		}
		if st.open && !replaced[st.grant.Step] && !st.grant.At.Before(from) && st.grant.At.Before(to) {
			fs.Grants = append(fs.Grants, st.grant)
		}
		if !st.created.Before(since) {
			r, ok := charges[st.grant.Step]
			if !ok {
				// Not written (the write-behind writes it first): no
				// answer to give a retry, which is judged again.
				states[st.fid] = fs
				continue
			}
			r.Granted, r.Final, r.Overage, r.Reserved = st.result.Granted, st.result.Final, st.result.Overage, st.result.Reserved
			r.ValidUntil, r.Previous, r.Reclaim = st.result.ValidUntil, st.result.Previous, st.result.Reclaim
			fs.Steps = append(fs.Steps, quota.JudgedStep{ID: st.grant.Step, Result: r})
		}
		states[st.fid] = fs
	}
	return nil
}

// readCharges adds the usage_record halves of the grant steps ids to charges.
func (s *Store) readCharges(ctx context.Context, ids []any, charges map[string]quota.GrantResult) error {
	rows, err := s.db.QueryContext(ctx, `SELECT event_id, bytes_used, process_result, remaining_after, rule,
		total_bytes, daily_used, monthly_used, throttle_kbps, crossed, event_time
		FROM usage_record WHERE event_id IN (`+strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",")+`)`, ids...)
	if err != nil {
		return dbErr("rebuild: grant charges", err)
	}
	return scanAll(rows, func(sc scanner) error {
		var id, decision, rule, crossed string
		var r quota.GrantResult
		var at sqldialect.NullTime
		if err := sc.Scan(&id, &r.Charged, &decision, &r.Remaining, &rule, &r.Total, &r.DailyUsed, &r.MonthlyUsed,
			&r.ThrottleKbps, &crossed, &at); err != nil {
			return err
		}
		cs, err := ParseCrossed(crossed)
		if err != nil {
			return fmt.Errorf("%w: grant step %s: %w", ErrUnreadable, id, err)
		}
		r.Decision, r.Rule, r.ChargedAt = policy.Decision(decision), rule, at.Time
		for _, c := range cs {
			r.Crossed, r.Arms = append(r.Crossed, c.Percent), append(r.Arms, c.Arm)
		}
		charges[id] = r
		return nil
	})
}

// FamilyChanges returns, for the families of ids that have any, how many
// changes the store recorded for each (its audit rows: every change of a
// family's plan, thresholds, top-ups, members and policies writes one in
// its transaction). A restore compares the counts taken before reading a
// family with those after restoring it: a change committed in between may
// have been written to Redis and then overwritten by the older state read,
// so the family is read and restored again. span: see ReadFamilies.
func (s *Store) FamilyChanges(ctx context.Context, ids []int64, span bool) (map[int64]int64, error) {
	out := make(map[int64]int64, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	where := "family_id IN (" + strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",") + ")"
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	if span {
		where, args = "family_id BETWEEN ? AND ?", []any{ids[0], ids[len(ids)-1]}
	}
	rows, err := s.db.QueryContext(ctx, `SELECT family_id, COUNT(*) FROM audit_log WHERE `+where+` GROUP BY family_id`, args...)
	if err != nil {
		return nil, dbErr("family changes", err)
	}
	err = scanAll(rows, func(sc scanner) error {
		var fid, n int64
		if err := sc.Scan(&fid, &n); err != nil {
			return err
		}
		out[fid] = n
		return nil
	})
	if err != nil {
		return nil, dbErr("family changes", err)
	}
	return out, nil
}

// ErrUnreadable wraps an error of ReadFamilies caused by the data read (a
// value that does not scan): reading the families one by one finds the one
// at fault. Every other error of ReadFamilies is the database's (a query
// refused, a connection lost) and blames no family.
var ErrUnreadable = errors.New("store: a row cannot be read")

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
