package recovery

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// Families reads families' pools and members: a *judge.State or a
// *quota.Engine.
type Families interface {
	Family(ctx context.Context, fid int64) (quota.FamilyStatus, error)
}

// CheckInvariants checks the promises of acceptance story 6 (doc/testing.md) for the given
// families and returns every violation, joined:
//
//   - usage_record holds one row per event id;
//   - Σ allowed bytes in usage_record equals the engine's pool usage of the
//     family and each member's usage (for histories inside the engine clock's
//     month — the check compares with the current month's counters);
//   - no pool is overdrawn: used ≤ plan + top-ups;
//   - no member is over a limit, as raised by its extra allowances (which
//     holds unless an owner lowered a limit below usage that already
//     happened: acceptance story 2).
//
// The end-to-end, chaos and benchmark harnesses run it after every run.
func CheckInvariants(ctx context.Context, qs Families, db *sql.DB, families []int64) error {
	var errs []error
	var rows, ids int64
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT event_id) FROM usage_record`).Scan(&rows, &ids); err != nil {
		return fmt.Errorf("invariants: count usage_record: %w", err)
	}
	if rows != ids {
		errs = append(errs, fmt.Errorf("usage_record: %d rows for %d event ids", rows, ids))
	}
	for _, fid := range families {
		fs, err := qs.Family(ctx, fid)
		if err != nil {
			return fmt.Errorf("invariants: family %d: %w", fid, err)
		}
		sums, err := allowedBytes(ctx, db, fid)
		if err != nil {
			return err
		}
		var total int64
		for _, n := range sums {
			total += n
		}
		if total != fs.Used {
			errs = append(errs, fmt.Errorf("family %d: usage_record allows %d bytes, Redis pool used %d", fid, total, fs.Used))
		}
		if fs.Provisioned && fs.Used+fs.Reserved > fs.Total {
			errs = append(errs, fmt.Errorf("family %d: pool overdrawn: used %d and reserved %d of %d", fid, fs.Used, fs.Reserved, fs.Total))
		}
		for _, m := range fs.Members {
			if sums[m.CustomerID] != m.MonthlyUsed {
				errs = append(errs, fmt.Errorf("family %d member %d: usage_record allows %d bytes, Redis month usage %d",
					fid, m.CustomerID, sums[m.CustomerID], m.MonthlyUsed))
			}
			c, err := policy.ParseConstraints(m.Constraints)
			if err != nil {
				errs = append(errs, fmt.Errorf("family %d member %d: %w", fid, m.CustomerID, err))
				continue
			}
			// Limits as raised by extra allowances: the month's and, as the
			// engine's day is not known here, the largest of its days'.
			at := policy.Moment{Month: fs.Month}
			for p, n := range c.Extras {
				if len(p) == 8 && strings.HasPrefix(p, fs.Month) && (at.Day == "" || n > c.Extras[at.Day]) {
					at.Day = p
				}
			}
			daily, monthly := c.EffectiveLimits(at)
			if daily != nil && m.DailyUsed > *daily {
				errs = append(errs, fmt.Errorf("family %d member %d: day usage %d over limit %d", fid, m.CustomerID, m.DailyUsed, *daily))
			}
			if monthly != nil && m.MonthlyUsed > *monthly {
				errs = append(errs, fmt.Errorf("family %d member %d: month usage %d over limit %d", fid, m.CustomerID, m.MonthlyUsed, *monthly))
			}
		}
	}
	return errors.Join(errs...)
}

func allowedBytes(ctx context.Context, db *sql.DB, fid int64) (map[int64]int64, error) {
	rs, err := db.QueryContext(ctx, `SELECT customer_id, SUM(bytes_used) FROM usage_record
		WHERE family_id = ? AND (process_result = ? OR grant_id <> '') GROUP BY customer_id`, fid, string(policy.Allowed))
	if err != nil {
		return nil, fmt.Errorf("invariants: sum usage_record: %w", err)
	}
	defer rs.Close()
	sums := map[int64]int64{}
	for rs.Next() {
		var cid, n int64
		if err := rs.Scan(&cid, &n); err != nil {
			return nil, fmt.Errorf("invariants: sum usage_record: %w", err)
		}
		sums[cid] = n
	}
	return sums, rs.Err()
}
