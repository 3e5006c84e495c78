package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/writebehind"
)

// ErrRebuildIncomplete: Rebuild restored some families but not all; its
// RebuildReport lists the ones that failed and why.
var ErrRebuildIncomplete = errors.New("store: rebuild incomplete")

// RebuildReport is what Rebuild did.
type RebuildReport struct {
	// Rebuilt counts the families whose Redis state was restored.
	Rebuilt int
	// Failed lists the families that could not be restored, in the order
	// they were tried. Without a generation their Redis state is whatever it
	// was before; in a generation rebuild (RebuildGeneration) each is
	// replaced by an empty family of the new generation, so its members'
	// events are refused (BLOCKED_NOT_MEMBER, never charged) until it is
	// fixed and rebuilt — a state from an older generation would otherwise
	// be refused as stale on every event, and every rebuild would fail on it
	// again.
	Failed []FamilyError
}

// FamilyError is why one family could not be rebuilt: its SQL rows could
// not be read, or the engine refused them (quota.ErrInvalid, e.g. a plan plus
// top-ups over policy.MaxBytes).
type FamilyError struct {
	FamilyID int64
	Err      error
}

func (e FamilyError) Error() string { return fmt.Sprintf("family %d: %v", e.FamilyID, e.Err) }

// Unwrap returns the family's error.
func (e FamilyError) Unwrap() error { return e.Err }

// Rebuild recomputes the Redis state of the given families (every family
// when none is given) from SQL after Redis lost data (SPEC §6): plan,
// thresholds, current members, each member's constraints and version, and
// for every month the engine still accepts events for (quota.Engine.
// AcceptedMonths) the top-ups, the allowed usage and the threshold arms from
// usage_record; and the dedupe records of the events written within the
// dedupe window, with their whole results. Each family is
// written atomically with quota.Engine.Restore. Run it after the
// write-behind drained usage-persist, so usage_record holds every judged
// event.
//
// One family's failure does not stop the others: every family is tried, and
// when some failed the error wraps ErrRebuildIncomplete and every
// FamilyError (so errors.Is sees their causes too), and the report lists
// them. Failing to list the families and a cancelled ctx stop the rebuild at
// once with an error that does not wrap ErrRebuildIncomplete; the report
// then covers what was done before.
func Rebuild(ctx context.Context, db *sql.DB, eng *quota.Engine, families ...int64) (RebuildReport, error) {
	return RebuildGeneration(ctx, db, eng, "", families...)
}

// RebuildGeneration is Rebuild with every family restored by state
// generation gen (quota.FamilyState.Generation; "" for none): the rebuild of
// a recovery, see service.Recovery.
//
// Families are read a page at a time, one query per table for the whole
// page, and restored by rebuildWorkers concurrent quota.Engine.Restore calls:
// one round trip per family and table made the rebuild of 100,000 families
// take ten minutes (doc/benchmarks.md, "Recovery time"). A page of every
// family is an id range (rebuildPage families), which every table reads
// through its family index; named families go rebuildNamed at a time in IN
// lists (MariaDB turns an IN list of 1,000 values into a join it answers by
// scanning the whole of usage_record, and plans even shorter lists that way
// when its statistics say so). When a page cannot be read as a whole, its
// families are read one by one, so the failure is charged to the family that
// causes it.
func RebuildGeneration(ctx context.Context, db *sql.DB, eng *quota.Engine, gen string, families ...int64) (RebuildReport, error) {
	var rep RebuildReport
	if db == nil || eng == nil {
		return rep, invalid("rebuild", "db and engine are required")
	}
	s, err := New(db, WithLocation(eng.Location()))
	if err != nil {
		return rep, err
	}
	if len(families) > 0 {
		for ids := families; len(ids) > 0; {
			n := min(len(ids), rebuildNamed)
			if err := s.rebuildFamilies(ctx, eng, gen, ids[:n], false, &rep); err != nil {
				return rep, err
			}
			ids = ids[n:]
		}
		return rep, rep.err()
	}
	// The next page is listed and read while this one is restored.
	type listed struct {
		p   page
		err error // listing failed
	}
	fetch := func(after int64) chan listed {
		ch := make(chan listed, 1)
		go func() {
			ids, err := s.FamilyIDs(ctx, after, rebuildPage)
			if err != nil || len(ids) == 0 {
				ch <- listed{p: page{ids: ids}, err: err}
				return
			}
			ch <- listed{p: s.readPage(ctx, eng, gen, ids, true)}
		}()
		return ch
	}
	for next := fetch(0); ; {
		l := <-next
		if l.err != nil {
			return rep, fmt.Errorf("store: rebuild: list families: %w", l.err)
		}
		ids := l.p.ids
		full := len(ids) == rebuildPage
		if full {
			next = fetch(ids[len(ids)-1])
		}
		if len(ids) > 0 {
			if err := s.restorePage(ctx, eng, gen, l.p, &rep); err != nil {
				if full {
					<-next // the read ahead ends with ctx
				}
				return rep, err
			}
		}
		if !full {
			return rep, rep.err()
		}
	}
}

const (
	// rebuildPage is how many families one set of queries reads when
	// rebuilding every family; rebuildNamed when rebuilding named ones.
	rebuildPage  = 1000
	rebuildNamed = 100
	// rebuildWorkers is how many quota.Engine.Restore calls run at once:
	// enough to keep Redis busy while each waits for its round trip.
	rebuildWorkers = 4
)

// err is nil when every family was rebuilt, else ErrRebuildIncomplete
// wrapping every failure.
func (r RebuildReport) err() error {
	if len(r.Failed) == 0 {
		return nil
	}
	errs := make([]error, len(r.Failed))
	for i, f := range r.Failed {
		errs[i] = f
	}
	return fmt.Errorf("%w: %d of %d families failed: %w", ErrRebuildIncomplete, len(r.Failed), r.Rebuilt+len(r.Failed), errors.Join(errs...))
}

// rebuildFamilies reads and restores ids, adding to rep in the order of ids.
// span says ids are every family from ids[0] to ids[len(ids)-1], ascending
// (a page of FamilyIDs). It returns an error only when ctx ends; rep then
// counts the families restored before.
func (s *Store) rebuildFamilies(ctx context.Context, eng *quota.Engine, gen string, ids []int64, span bool, rep *RebuildReport) error {
	return s.restorePage(ctx, eng, gen, s.readPage(ctx, eng, gen, ids, span), rep)
}

// page is families read from SQL for restoring (readFamilies).
type page struct {
	ids    []int64
	states map[int64]quota.FamilyState
	bad    map[int64]error
	err    error // the page could not be read as a whole
}

func (s *Store) readPage(ctx context.Context, eng *quota.Engine, gen string, ids []int64, span bool) page {
	if err := ctx.Err(); err != nil {
		return page{ids: ids, err: err}
	}
	states, bad, err := s.readFamilies(ctx, eng, gen, ids, span)
	return page{ids: ids, states: states, bad: bad, err: err}
}

// restorePage restores a page read by readPage, as rebuildFamilies.
func (s *Store) restorePage(ctx context.Context, eng *quota.Engine, gen string, p page, rep *RebuildReport) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: rebuild: %w", err)
	}
	ids, states, bad, err := p.ids, p.states, p.bad, p.err
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("store: rebuild: %w", ctx.Err())
	case err != nil && len(ids) > 1:
		for _, fid := range ids {
			if err := s.rebuildFamilies(ctx, eng, gen, []int64{fid}, false, rep); err != nil {
				return err
			}
		}
		return nil
	case err != nil:
		bad = map[int64]error{ids[0]: fmt.Errorf("store: rebuild family %d: %w", ids[0], err)}
	}

	errs := make([]error, len(ids))
	done := make([]bool, len(ids))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(rebuildWorkers, len(ids)) {
		wg.Go(func() {
			for i := range next {
				fid := ids[i]
				if e, ok := bad[fid]; ok {
					errs[i] = e
				} else if e := eng.Restore(ctx, states[fid]); e != nil {
					errs[i] = fmt.Errorf("store: rebuild family %d: %w", fid, e)
				}
				if errs[i] != nil && gen != "" && ctx.Err() == nil {
					if e := eng.Restore(ctx, quota.FamilyState{FamilyID: fid, Generation: gen}); e != nil {
						errs[i] = errors.Join(errs[i], fmt.Errorf("store: empty family %d of generation %s: %w", fid, gen, e))
					}
				}
				done[i] = true
			}
		})
	}
feed:
	for i := range ids {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	stopped := ctx.Err()
	for i, fid := range ids {
		switch {
		case !done[i]:
		case errs[i] == nil:
			rep.Rebuilt++
		case stopped != nil: // the family is not to blame
		default:
			rep.Failed = append(rep.Failed, FamilyError{FamilyID: fid, Err: errs[i]})
		}
	}
	if stopped != nil {
		return fmt.Errorf("store: rebuild: %w", stopped)
	}
	return nil
}

// readFamilies reads the state of ids from SQL, one query per table: the
// states to restore, and the families whose rows cannot be restored (missing,
// or a value that does not parse) with why. span: see rebuildFamilies. An
// error means a query failed.
func (s *Store) readFamilies(ctx context.Context, eng *quota.Engine, gen string, ids []int64, span bool) (map[int64]quota.FamilyState, map[int64]error, error) {
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
	months, from, to := eng.AcceptedMonths()

	rows, err := s.db.QueryContext(ctx, `SELECT id, plan_bytes, thresholds FROM families WHERE `+which("id"), args...)
	if err != nil {
		return nil, nil, dbErr("rebuild: families", err)
	}
	err = scanAll(rows, func(sc func(...any) error) error {
		var fid, plan int64
		var thr sql.NullString
		if err := sc(&fid, &plan, &thr); err != nil {
			return err
		}
		if _, listed := slices.BinarySearch(ids, fid); span && !listed { // created since the page was listed
			return nil
		}
		st := quota.FamilyState{FamilyID: fid, Provisioned: true, Plan: plan, TopUps: map[string]int64{},
			Arms: map[string]map[int]int{}, Generation: gen}
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
	err = scanAll(rows, func(sc func(...any) error) error {
		var fid, cid int64
		var rules sql.NullString
		var version sql.NullInt64
		if err := sc(&fid, &cid, &rules, &version); err != nil {
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
	err = scanAll(rows, func(sc func(...any) error) error {
		var fid, sum int64
		var month string
		if err := sc(&fid, &month, &sum); err != nil {
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

	// Every judged event of the accepted months: allowed usage, the arms of
	// the thresholds crossed, and — for those written within the dedupe
	// window — the dedupe records (a row is written after its event was
	// judged, so created_at ≥ the judging time).
	since := s.now().Add(-eng.DedupeWindow())
	// created_at is the database's clock in the session's zone (see JudgedSince).
	created, createdArg := "created_at", "?"
	if s.d == sqldialect.MySQL {
		created = "CONVERT_TZ(created_at, @@session.time_zone, '+00:00')"
		createdArg = "CONVERT_TZ(?, '+00:00', @@session.time_zone)"
	}
	uargs := append(append([]any{}, args...), s.t(from), s.t(to), s.t(since))
	rows, err = s.db.QueryContext(ctx, fmt.Sprintf(`SELECT family_id, event_id, customer_id, bytes_used, process_result, remaining_after, rule,
		total_bytes, daily_used, monthly_used, throttle_kbps, crossed, event_time, %s
		FROM usage_record WHERE %s AND (event_time >= ? AND event_time < ? OR created_at >= %s)`, created, which("family_id"), createdArg),
		uargs...)
	if err != nil {
		return nil, nil, dbErr("rebuild: usage", err)
	}
	err = scanAll(rows, func(sc func(...any) error) error {
		var id, decision, rule, crossed string
		var fid, cid, bytes, remaining, total, daily, monthly, throttle int64
		var at, created sqldialect.NullTime
		if err := sc(&fid, &id, &cid, &bytes, &decision, &remaining, &rule, &total, &daily, &monthly, &throttle, &crossed, &at, &created); err != nil {
			return err
		}
		st, ok := states[fid]
		if !ok {
			return nil
		}
		cs, err := writebehind.ParseCrossed(crossed)
		if err != nil {
			fail(fid, fmt.Errorf("event %s: %w", id, err))
			return nil
		}
		inMonths := !at.Time.Before(from) && at.Time.Before(to)
		if inMonths && decision == string(policy.Allowed) {
			st.Usage = append(st.Usage, quota.Usage{CustomerID: cid, At: at.Time, Bytes: bytes})
		}
		if inMonths {
			month := policy.MomentOf(at.Time, eng.Location()).Month
			for _, c := range cs {
				if st.Arms[month] == nil {
					st.Arms[month] = map[int]int{}
				}
				st.Arms[month][c.Percent] = max(st.Arms[month][c.Percent], c.Arm)
			}
		}
		if !created.Time.Before(since) {
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
		return nil, nil, dbErr("rebuild: usage", err)
	}
	return states, bad, nil
}

// scanAll calls row for every row of rows with its Scan, then closes rows.
func scanAll(rows *sql.Rows, row func(scan func(...any) error) error) error {
	defer rows.Close()
	for rows.Next() {
		if err := row(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
