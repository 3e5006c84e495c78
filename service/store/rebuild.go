package store

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// Rebuild recomputes the Redis state of the given families (every family
// when none is given) from SQL after Redis lost data (SPEC §6): plan,
// thresholds, current members, each member's constraints and version, the
// current month's top-ups, and the month's allowed usage from usage_record —
// the month of the engine's clock in the engine's zone. Each family is
// written atomically with quota.Engine.Restore. Run it after the
// write-behind drained usage-persist, so usage_record holds every judged
// event. It stops at the first error.
func Rebuild(ctx context.Context, db *sql.DB, eng *quota.Engine, families ...int64) error {
	if db == nil || eng == nil {
		return invalid("rebuild", "db and engine are required")
	}
	s, err := New(db, WithLocation(eng.Location()))
	if err != nil {
		return err
	}
	if len(families) > 0 {
		for _, fid := range families {
			if err := s.rebuildFamily(ctx, eng, fid); err != nil {
				return err
			}
		}
		return nil
	}
	var after int64
	for {
		ids, err := s.FamilyIDs(ctx, after, 1000)
		if err != nil {
			return err
		}
		for _, fid := range ids {
			if err := s.rebuildFamily(ctx, eng, fid); err != nil {
				return err
			}
		}
		if len(ids) < 1000 {
			return nil
		}
		after = ids[len(ids)-1]
	}
}

func (s *Store) rebuildFamily(ctx context.Context, eng *quota.Engine, fid int64) error {
	f, err := s.GetFamily(ctx, fid)
	if err != nil {
		return fmt.Errorf("store: rebuild family %d: %w", fid, err)
	}
	month, from, to := eng.CurrentMonth()
	st := quota.FamilyState{FamilyID: fid, Provisioned: true, Plan: f.PlanBytes, Thresholds: f.Thresholds}
	if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(bytes), 0) FROM topups WHERE family_id = ? AND month = ?`, fid, month).
		Scan(&st.TopUps); err != nil {
		return dbErr("rebuild: top-ups", err)
	}
	ps, err := s.Policies(ctx, fid)
	if err != nil {
		return fmt.Errorf("store: rebuild family %d: %w", fid, err)
	}
	for _, p := range ps {
		st.Members = append(st.Members, quota.MemberState{CustomerID: p.CustomerID, Constraints: p.Rules, Version: p.Version})
	}
	rows, err := s.db.QueryContext(ctx, `SELECT customer_id, bytes_used, event_time FROM usage_record
		WHERE family_id = ? AND event_time >= ? AND event_time < ? AND process_result = ?`,
		fid, s.t(from), s.t(to), string(policy.Allowed))
	if err != nil {
		return dbErr("rebuild: usage", err)
	}
	defer rows.Close()
	for rows.Next() {
		var u quota.Usage
		var at sqldialect.NullTime
		if err := rows.Scan(&u.CustomerID, &u.Bytes, &at); err != nil {
			return dbErr("rebuild: usage", err)
		}
		u.At = at.Time
		st.Usage = append(st.Usage, u)
	}
	if err := rows.Err(); err != nil {
		return dbErr("rebuild: usage", err)
	}
	if err := eng.Restore(ctx, st); err != nil {
		return fmt.Errorf("store: rebuild family %d: %w", fid, err)
	}
	return nil
}
