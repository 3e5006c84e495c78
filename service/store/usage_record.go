package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/writebehind"
)

// UsageRecord is one row of usage_record, the usage history: the
// processor's decision on one usage event. The table is the store's
// (migrations/<dialect>/000_usage_record.sql, created by Migrate and
// MigrateUsage); the write-behind writes it (DecodeUsageRecord,
// NewUsageWriter) and Usage, JudgedSince and ReadFamilies read it.
// TotalBytes through Crossed are the rest of the engine's result (zero in
// rows of records written before they existed), kept so Redis can be
// rebuilt from this table.
type UsageRecord struct {
	EventID        string // the usage event's id (originEventId); UNIQUE
	FamilyID       int64
	CustomerID     int64
	AppID          string
	BytesUsed      int64
	ProcessResult  string // e.g. "ALLOWED", "BLOCKED_TIME"
	RemainingAfter int64
	Rule           string // the constraint key that decided a block; "" when allowed
	EventTime      time.Time
	TotalBytes     int64               // the month's pool (plan + top-ups) at the decision
	DailyUsed      int64               // the member's usage of the event's day, after it
	MonthlyUsed    int64               // the member's usage of the event's month, after it
	ThrottleKbps   int64               // the member's THROTTLE:SPEED, with ALLOWED only
	Crossed        []envelope.Crossing // thresholds crossed, with their arms; column crossed as FormatCrossed writes it
	// Generation is the state generation the event was judged under (the
	// payload's; no column): what the write-behind checks for late records
	// (recovery.LateRecords).
	Generation string
}

// UsageRecordOf returns the row of a usage-persist event. The row's event_id
// is the origin usage event's id, which every replay of that event shares.
func UsageRecordOf(e envelope.Envelope[envelope.UsagePersistPayload]) UsageRecord {
	p := e.Payload
	return UsageRecord{
		EventID: p.OriginEventID, FamilyID: p.FamilyID, CustomerID: p.CustomerID, AppID: p.AppID,
		BytesUsed: p.BytesUsed, ProcessResult: p.ProcessResult, RemainingAfter: p.RemainingAfter,
		Rule: p.Rule, EventTime: p.EventTime,
		TotalBytes: p.TotalBytes, DailyUsed: p.DailyUsedBytes, MonthlyUsed: p.MonthlyUsedBytes,
		ThrottleKbps: p.ThrottleKbps, Crossed: p.Crossed, Generation: p.Generation,
	}
}

// DecodeUsageRecord is the write-behind's writebehind.Decoder of
// usage-persist records: a valid USAGE_PERSIST envelope (envelope.DecodeAs)
// whose fields fit the table. Errors name the field (*envelope.FieldError).
func DecodeUsageRecord(r *kgo.Record) (UsageRecord, error) {
	if r == nil {
		return UsageRecord{}, fmt.Errorf("%w: nil record", envelope.ErrMalformed)
	}
	e, err := envelope.DecodeAs[envelope.UsagePersistPayload](r.Value)
	if err != nil {
		return UsageRecord{}, err
	}
	u := UsageRecordOf(e)
	if err := u.Validate(); err != nil {
		return UsageRecord{}, err
	}
	return u, nil
}

// Validate checks that u fits usage_record: ids and the result non-empty,
// byte counts and the throttle ≥ 0, strings within their columns, an event
// time, crossings with thresholds 1–100 and arms ≥ 1 that fit the crossed
// column. Fields are named as in the persist payload.
func (u UsageRecord) Validate() error {
	var errs []error
	str := func(field, v string, maxLen int, required bool) {
		switch {
		case required && v == "":
			errs = append(errs, &envelope.FieldError{Field: "payload." + field, Msg: "required"})
		case !utf8.ValidString(v) || utf8.RuneCountInString(v) > maxLen:
			errs = append(errs, &envelope.FieldError{Field: "payload." + field, Msg: fmt.Sprintf("must be valid UTF-8 of at most %d characters", maxLen)})
		}
	}
	str("originEventId", u.EventID, 255, true)
	str("appId", u.AppID, 255, false)
	str("processResult", u.ProcessResult, 64, true)
	str("rule", u.Rule, 255, false)
	if u.FamilyID <= 0 {
		errs = append(errs, &envelope.FieldError{Field: "payload.familyId", Msg: "must be > 0"})
	}
	if u.CustomerID <= 0 {
		errs = append(errs, &envelope.FieldError{Field: "payload.customerId", Msg: "must be > 0"})
	}
	for _, n := range []struct {
		field string
		v     int64
	}{
		{"bytesUsed", u.BytesUsed}, {"remainingAfter", u.RemainingAfter}, {"totalBytes", u.TotalBytes},
		{"dailyUsedBytes", u.DailyUsed}, {"monthlyUsedBytes", u.MonthlyUsed}, {"throttleKbps", u.ThrottleKbps},
	} {
		if n.v < 0 {
			errs = append(errs, &envelope.FieldError{Field: "payload." + n.field, Msg: "must be ≥ 0"})
		}
	}
	if err := validCrossed(u.Crossed); err != nil {
		errs = append(errs, err)
	} else if n := len(FormatCrossed(u.Crossed)); n > maxCrossedLen {
		errs = append(errs, &envelope.FieldError{Field: "payload.crossed", Msg: fmt.Sprintf("too many crossings: %d characters, at most %d", n, maxCrossedLen)})
	}
	if y := u.EventTime.UTC().Year(); u.EventTime.IsZero() || y < 1000 || y > 9999 {
		errs = append(errs, &envelope.FieldError{Field: "payload.eventTime", Msg: "must be a time in years 1000..9999"})
	}
	return errors.Join(errs...)
}

// usageColumns are the columns a usage writer fills (id and created_at are
// left to the database).
var usageColumns = []string{"event_id", "family_id", "customer_id", "app_id", "bytes_used",
	"process_result", "remaining_after", "rule", "event_time",
	"total_bytes", "daily_used", "monthly_used", "throttle_kbps", "crossed"}

// NewUsageWriter returns the write-behind's writer of usage_record
// (writebehind.SQLWriter: multi-row insert-ignore on event_id, so replays
// are skipped). A record that fails Validate is a *writebehind.ItemError,
// which a writebehind.Runner dead-letters. opts are the SQL writer's
// (writebehind.WithDialect, writebehind.WithMaxRows).
func NewUsageWriter(db *sql.DB, opts ...writebehind.SQLOption) (*writebehind.SQLWriter[UsageRecord], error) {
	return writebehind.NewSQLWriter(db, "usage_record", usageColumns, func(u UsageRecord) ([]any, error) {
		if err := u.Validate(); err != nil {
			return nil, err
		}
		return []any{u.EventID, u.FamilyID, u.CustomerID, u.AppID, u.BytesUsed,
			u.ProcessResult, u.RemainingAfter, u.Rule, u.EventTime,
			u.TotalBytes, u.DailyUsed, u.MonthlyUsed, u.ThrottleKbps, FormatCrossed(u.Crossed)}, nil
	}, opts...)
}

// KnownEvents returns which of ids usage_record holds already.
func (s *Store) KnownEvents(ctx context.Context, ids []string) (map[string]bool, error) {
	known := map[string]bool{}
	for len(ids) > 0 {
		n := min(len(ids), 500)
		args := make([]any, n)
		for i, id := range ids[:n] {
			args[i] = id
		}
		rows, err := s.db.QueryContext(ctx, `SELECT event_id FROM usage_record WHERE event_id IN (`+
			strings.TrimSuffix(strings.Repeat("?,", n), ",")+`)`, args...)
		if err != nil {
			return nil, dbErr("known events", err)
		}
		err = scanRows(rows, "known events", func(sc scanner) error {
			var id string
			if err := sc.Scan(&id); err != nil {
				return err
			}
			known[id] = true
			return nil
		})
		if err != nil {
			return nil, err
		}
		ids = ids[n:]
	}
	return known, nil
}
