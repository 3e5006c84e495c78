package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

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
	// they were tried. Their Redis state is whatever it was before.
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
func RebuildGeneration(ctx context.Context, db *sql.DB, eng *quota.Engine, gen string, families ...int64) (RebuildReport, error) {
	var rep RebuildReport
	if db == nil || eng == nil {
		return rep, invalid("rebuild", "db and engine are required")
	}
	s, err := New(db, WithLocation(eng.Location()))
	if err != nil {
		return rep, err
	}
	rebuild := func(ids []int64) error {
		for _, fid := range ids {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("store: rebuild: %w", err)
			}
			err := s.rebuildFamily(ctx, eng, fid, gen)
			switch {
			case err == nil:
				rep.Rebuilt++
			case ctx.Err() != nil: // the family is not to blame
				return fmt.Errorf("store: rebuild: %w", ctx.Err())
			default:
				rep.Failed = append(rep.Failed, FamilyError{FamilyID: fid, Err: err})
			}
		}
		return nil
	}
	if len(families) > 0 {
		if err := rebuild(families); err != nil {
			return rep, err
		}
		return rep, rep.err()
	}
	const page = 1000
	for after := int64(0); ; {
		ids, err := s.FamilyIDs(ctx, after, page)
		if err != nil {
			return rep, fmt.Errorf("store: rebuild: list families: %w", err)
		}
		if err := rebuild(ids); err != nil {
			return rep, err
		}
		if len(ids) < page {
			return rep, rep.err()
		}
		after = ids[len(ids)-1]
	}
}

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

func (s *Store) rebuildFamily(ctx context.Context, eng *quota.Engine, fid int64, gen string) error {
	f, err := s.GetFamily(ctx, fid)
	if err != nil {
		return fmt.Errorf("store: rebuild family %d: %w", fid, err)
	}
	months, from, to := eng.AcceptedMonths()
	st := quota.FamilyState{FamilyID: fid, Provisioned: true, Plan: f.PlanBytes, Thresholds: f.Thresholds,
		TopUps: map[string]int64{}, Arms: map[string]map[int]int{}, Generation: gen}
	for _, m := range months {
		var sum int64
		if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(bytes), 0) FROM topups WHERE family_id = ? AND month = ?`, fid, m).
			Scan(&sum); err != nil {
			return dbErr("rebuild: top-ups", err)
		}
		st.TopUps[m] = sum
	}
	ps, err := s.Policies(ctx, fid)
	if err != nil {
		return fmt.Errorf("store: rebuild family %d: %w", fid, err)
	}
	for _, p := range ps {
		st.Members = append(st.Members, quota.MemberState{CustomerID: p.CustomerID, Constraints: p.Rules, Version: p.Version})
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
	rows, err := s.db.QueryContext(ctx, fmt.Sprintf(`SELECT event_id, customer_id, bytes_used, process_result, remaining_after, rule,
		total_bytes, daily_used, monthly_used, throttle_kbps, crossed, event_time, %s
		FROM usage_record WHERE family_id = ? AND (event_time >= ? AND event_time < ? OR created_at >= %s)`, created, createdArg),
		fid, s.t(from), s.t(to), s.t(since))
	if err != nil {
		return dbErr("rebuild: usage", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, decision, rule, crossed string
		var cid, bytes, remaining, total, daily, monthly, throttle int64
		var at, created sqldialect.NullTime
		if err := rows.Scan(&id, &cid, &bytes, &decision, &remaining, &rule, &total, &daily, &monthly, &throttle, &crossed, &at, &created); err != nil {
			return dbErr("rebuild: usage", err)
		}
		cs, err := writebehind.ParseCrossed(crossed)
		if err != nil {
			return fmt.Errorf("store: rebuild family %d: event %s: %w", fid, id, err)
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
	}
	if err := rows.Err(); err != nil {
		return dbErr("rebuild: usage", err)
	}
	if err := eng.Restore(ctx, st); err != nil {
		return fmt.Errorf("store: rebuild family %d: %w", fid, err)
	}
	return nil
}
