package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dabom/dpcs/envelope"
)

// AlertKey names one announcement a family may get once: a threshold
// (percent of the pool remaining) in a period. Period is the alert's period,
// "2026-02", or "2026-02#2" for the second arm after a top-up re-armed the
// threshold (doc/wire-format.md, THRESHOLD_ALERT's period).
type AlertKey struct {
	FamilyID int64
	Percent  int
	Period   string
}

func (k AlertKey) String() string {
	return fmt.Sprintf("family %d %d%% %s", k.FamilyID, k.Percent, k.Period)
}

// ThresholdAlerts counts the THRESHOLD_ALERT notifications in the inbox
// (table notification of notify.SQLInbox, MySQL or SQLite) of the given
// families by family, threshold and period. The period is read from the
// stored payload (falling back to the row's dedupe key), so the count does
// not rest on the inbox's own unique key.
func ThresholdAlerts(ctx context.Context, db *sql.DB, families []int64) (map[AlertKey]int, error) {
	out := map[AlertKey]int{}
	if len(families) == 0 {
		return out, nil
	}
	args := make([]any, 0, len(families)+1)
	args = append(args, string(envelope.SubThresholdAlert))
	for _, f := range families {
		args = append(args, f)
	}
	q := `SELECT family_id, dedupe_key, payload FROM notification WHERE kind = ? AND family_id IN (?` +
		strings.Repeat(", ?", len(families)-1) + `)`
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("e2e: read threshold alerts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var fid int64
		var key, payload string
		if err := rows.Scan(&fid, &key, &payload); err != nil {
			return nil, fmt.Errorf("e2e: read threshold alerts: %w", err)
		}
		var p envelope.ThresholdAlert
		if err := json.Unmarshal([]byte(payload), &p); err != nil {
			return nil, fmt.Errorf("e2e: family %d: threshold alert payload %q: %w", fid, payload, err)
		}
		period := p.Period
		if period == "" { // notify.ThresholdKey: threshold:{family}:{percent}:{period}
			if parts := strings.SplitN(key, ":", 4); len(parts) == 4 {
				period = parts[3]
			}
		}
		out[AlertKey{FamilyID: fid, Percent: p.ThresholdPercent, Period: period}]++
	}
	return out, rows.Err()
}

// CheckThresholdAlertsOnce checks acceptance story 4 (doc/testing.md) in the
// inbox: each threshold of each given family was announced at most once per
// period. It returns every violation, joined.
func CheckThresholdAlertsOnce(ctx context.Context, db *sql.DB, families []int64) error {
	counts, err := ThresholdAlerts(ctx, db, families)
	if err != nil {
		return err
	}
	var errs []error
	for k, n := range counts {
		if n > 1 {
			errs = append(errs, fmt.Errorf("%v: announced %d times, want once", k, n))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}
