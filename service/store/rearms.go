package store

import (
	"context"
	"database/sql"
	"maps"
	"slices"
	"time"

	"github.com/dabom/dpcs/internal/sqldialect"
)

// RecordRearms records that a pool change of family fid in month (YYYYMM)
// re-armed the thresholds of rearmed (percent → the arm after which it was
// re-armed, quota.PoolState.Rearmed), keeping the highest arm recorded per
// threshold. ReadFamilies reads them back (quota.FamilyState.Rearmed): a
// rebuild cannot tell a re-armed threshold from a fired one otherwise.
func (s *Store) RecordRearms(ctx context.Context, fid int64, month string, rearmed map[int]int) error {
	if len(rearmed) == 0 {
		return nil
	}
	if _, err := time.Parse("200601", month); err != nil || len(month) != 6 {
		return invalid("month", "must be YYYYMM")
	}
	q := `INSERT INTO threshold_rearms (family_id, month, pct, arm) VALUES (?, ?, ?, ?)
		ON CONFLICT (family_id, month, pct) DO UPDATE SET arm = max(arm, excluded.arm)`
	if s.d == sqldialect.MySQL {
		q = `INSERT INTO threshold_rearms (family_id, month, pct, arm) VALUES (?, ?, ?, ?)
		ON DUPLICATE KEY UPDATE arm = GREATEST(arm, VALUES(arm))`
	}
	for _, pct := range slices.Sorted(maps.Keys(rearmed)) {
		if pct < 1 || pct > 99 || rearmed[pct] < 1 {
			return invalid("rearmed", "thresholds must be 1..99 and arms ≥ 1")
		}
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		for _, pct := range slices.Sorted(maps.Keys(rearmed)) {
			if _, err := tx.ExecContext(ctx, q, fid, month, pct, rearmed[pct]); err != nil {
				return dbErr("record threshold re-arms", err)
			}
		}
		return nil
	})
}
