package store

import (
	"context"
	"fmt"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/policy"
)

// JudgedRow is one judged usage event of usage_record with the engine's
// whole result, as a rebuild of Redis needs it to restore the event's
// dedupe record and the thresholds' arms. Rows written before the result
// columns existed have zeros there and no crossings.
type JudgedRow struct {
	EventID      string // the usage event's id
	CustomerID   int64
	Bytes        int64
	Decision     policy.Decision
	Rule         string // the constraint key that decided a block; "" when allowed
	Remaining    int64  // the pool's remaining bytes after the event
	Total        int64  // the month's pool (plan + top-ups) at the decision
	DailyUsed    int64  // the member's usage of the event's day, after it
	MonthlyUsed  int64  // the member's usage of the event's month, after it
	ThrottleKbps int64
	Crossed      []envelope.Crossing // thresholds the event crossed, with their arms
	EventTime    time.Time           // the usage event's timestamp, UTC
	CreatedAt    time.Time           // when the write-behind wrote the row, UTC
}

// JudgedSince returns every usage_record row of family fid written at or
// after since, or whose event happened at or after since — so late events
// judged recently are included — in the order they were written (by id).
//
// created_at is the database's CURRENT_TIMESTAMP(3) at insert, which MySQL
// takes in the session's time zone: the comparison and the returned
// CreatedAt are converted from it, so any session time zone works as long
// as the writer and this reader use the same one (SQLite's is UTC).
//
// It reads the family's rows through the (family_id, event_time) index and
// filters the rest: the cost grows with the family's history in the table,
// not with the number of rows returned.
func (s *Store) JudgedSince(ctx context.Context, fid int64, since time.Time) ([]JudgedRow, error) {
	switch {
	case fid <= 0:
		return nil, invalid("familyId", "must be > 0")
	case since.IsZero():
		return nil, invalid("since", "required")
	}
	created, createdArg := "created_at", "?"
	if s.d == sqldialect.MySQL {
		created = "CONVERT_TZ(created_at, @@session.time_zone, '+00:00')"
		createdArg = "CONVERT_TZ(?, '+00:00', @@session.time_zone)"
	}
	q := fmt.Sprintf(`SELECT event_id, customer_id, bytes_used, process_result, rule, remaining_after,
		total_bytes, daily_used, monthly_used, throttle_kbps, crossed, event_time, %s
		FROM usage_record WHERE family_id = ? AND (created_at >= %s OR event_time >= ?) ORDER BY id`, created, createdArg)
	rows, err := s.db.QueryContext(ctx, q, fid, s.t(since), s.t(since))
	if err != nil {
		return nil, dbErr("judged since", err)
	}
	return collect(rows, "judged since", func(sc scanner) (JudgedRow, error) {
		var r JudgedRow
		var decision, crossed string
		var at, createdAt sqldialect.NullTime
		if err := sc.Scan(&r.EventID, &r.CustomerID, &r.Bytes, &decision, &r.Rule, &r.Remaining,
			&r.Total, &r.DailyUsed, &r.MonthlyUsed, &r.ThrottleKbps, &crossed, &at, &createdAt); err != nil {
			return r, err
		}
		r.Decision, r.EventTime, r.CreatedAt = policy.Decision(decision), at.Time, createdAt.Time
		var err error
		if r.Crossed, err = ParseCrossed(crossed); err != nil {
			return r, fmt.Errorf("store: judged since: event %s: %w", r.EventID, err)
		}
		return r, nil
	})
}
