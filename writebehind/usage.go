package writebehind

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/sqldialect"
)

var (
	//go:embed migrations/mysql/usage_record.sql
	usageMySQL string
	//go:embed migrations/sqlite/usage_record.sql
	usageSQLite string
)

// UsageRecord is one row of usage_record: the processor's decision on one
// usage event.
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
}

// UsageRecordOf returns the row of a usage-persist event. The row's event_id
// is the origin usage event's id, which every replay of that event shares.
func UsageRecordOf(e envelope.Envelope[envelope.UsagePersistPayload]) UsageRecord {
	p := e.Payload
	return UsageRecord{
		EventID: p.OriginEventID, FamilyID: p.FamilyID, CustomerID: p.CustomerID, AppID: p.AppID,
		BytesUsed: p.BytesUsed, ProcessResult: p.ProcessResult, RemainingAfter: p.RemainingAfter,
		Rule: p.Rule, EventTime: p.EventTime,
	}
}

// DecodeUsageRecord is the Decoder of usage-persist records: a valid
// USAGE_PERSIST envelope (envelope.DecodeAs) whose fields fit the table.
// Errors name the field (*envelope.FieldError).
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
// byte counts ≥ 0, strings within their columns, an event time.
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
	if u.BytesUsed < 0 {
		errs = append(errs, &envelope.FieldError{Field: "payload.bytesUsed", Msg: "must be ≥ 0"})
	}
	if u.RemainingAfter < 0 {
		errs = append(errs, &envelope.FieldError{Field: "payload.remainingAfter", Msg: "must be ≥ 0"})
	}
	if y := u.EventTime.UTC().Year(); u.EventTime.IsZero() || y < 1000 || y > 9999 {
		errs = append(errs, &envelope.FieldError{Field: "payload.eventTime", Msg: "must be a time in years 1000..9999"})
	}
	return errors.Join(errs...)
}

// UsageColumns are the columns a usage writer fills (id and created_at are
// left to the database).
var usageColumns = []string{"event_id", "family_id", "customer_id", "app_id", "bytes_used",
	"process_result", "remaining_after", "rule", "event_time"}

// UsageTable is the usage history table.
const UsageTable = "usage_record"

// NewUsageWriter returns the SQLWriter of usage_record.
func NewUsageWriter(db *sql.DB, opts ...SQLOption) (*SQLWriter[UsageRecord], error) {
	return NewSQLWriter(db, UsageTable, usageColumns, func(u UsageRecord) ([]any, error) {
		if err := u.Validate(); err != nil {
			return nil, err
		}
		return []any{u.EventID, u.FamilyID, u.CustomerID, u.AppID, u.BytesUsed,
			u.ProcessResult, u.RemainingAfter, u.Rule, u.EventTime}, nil
	}, opts...)
}

// UsageSchema returns the CREATE script of usage_record for dialect "mysql"
// or "sqlite" (embedded from migrations/<dialect>/usage_record.sql). The
// service's store migrations own the table; this is the same script, for
// them and for standalone users.
func UsageSchema(dialect string) (string, error) {
	d, err := sqldialect.Parse(dialect)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if d == sqldialect.SQLite {
		return usageSQLite, nil
	}
	return usageMySQL, nil
}

// MigrateUsage creates usage_record and its indexes on db if they do not
// exist, in db's dialect (detected from its driver unless given).
func MigrateUsage(ctx context.Context, db *sql.DB, opts ...SQLOption) error {
	c := sqlConfig{}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return err
		}
	}
	if c.dialect == sqldialect.Unknown {
		d, err := sqldialect.Detect(db)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		c.dialect = d
	}
	script, _ := UsageSchema(c.dialect.String())
	if err := sqldialect.Exec(ctx, db, script); err != nil {
		return fmt.Errorf("writebehind: migrate usage_record: %w", err)
	}
	return nil
}
