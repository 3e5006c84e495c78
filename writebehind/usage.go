package writebehind

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strings"
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
	//go:embed migrations/mysql/usage_record_columns.sql
	usageColumnsMySQL string
	//go:embed migrations/sqlite/usage_record_columns.sql
	usageColumnsSQLite string
)

// UsageRecord is one row of usage_record: the processor's decision on one
// usage event. TotalBytes through Crossed are the rest of the engine's
// result (zero in rows of records written before they existed), kept so
// Redis can be rebuilt from this table.
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
		ThrottleKbps: p.ThrottleKbps, Crossed: p.Crossed,
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

// UsageColumns are the columns a usage writer fills (id and created_at are
// left to the database).
var usageColumns = []string{"event_id", "family_id", "customer_id", "app_id", "bytes_used",
	"process_result", "remaining_after", "rule", "event_time",
	"total_bytes", "daily_used", "monthly_used", "throttle_kbps", "crossed"}

// UsageTable is the usage history table.
const UsageTable = "usage_record"

// NewUsageWriter returns the SQLWriter of usage_record.
func NewUsageWriter(db *sql.DB, opts ...SQLOption) (*SQLWriter[UsageRecord], error) {
	return NewSQLWriter(db, UsageTable, usageColumns, func(u UsageRecord) ([]any, error) {
		if err := u.Validate(); err != nil {
			return nil, err
		}
		return []any{u.EventID, u.FamilyID, u.CustomerID, u.AppID, u.BytesUsed,
			u.ProcessResult, u.RemainingAfter, u.Rule, u.EventTime,
			u.TotalBytes, u.DailyUsed, u.MonthlyUsed, u.ThrottleKbps, FormatCrossed(u.Crossed)}, nil
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
// exist, in db's dialect (detected from its driver unless given), and adds
// to an existing table the columns it lacks (those of
// migrations/<dialect>/usage_record_columns.sql, each added only when
// missing). Running it again changes nothing.
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
	if err := addUsageColumns(ctx, db, c.dialect); err != nil {
		return fmt.Errorf("writebehind: migrate usage_record: %w", err)
	}
	return nil
}

// addColumn matches the statements of usage_record_columns.sql.
var addColumn = regexp.MustCompile(`(?is)^ALTER TABLE usage_record ADD COLUMN ([a-z_]+) `)

// addUsageColumns runs each ALTER TABLE … ADD COLUMN of
// usage_record_columns.sql whose column usage_record lacks. Two processes
// migrating at once may both try to add a column: the loser's error is
// ignored when the column is there afterwards.
func addUsageColumns(ctx context.Context, db *sql.DB, d sqldialect.Dialect) error {
	script := usageColumnsMySQL
	if d == sqldialect.SQLite {
		script = usageColumnsSQLite
	}
	have, err := usageColumnSet(ctx, db, d)
	if err != nil {
		return err
	}
	for _, stmt := range sqldialect.Statements(script) {
		m := addColumn.FindStringSubmatch(stmt)
		if m == nil {
			return fmt.Errorf("usage_record_columns.sql: not an ADD COLUMN of usage_record: %.60q", stmt)
		}
		if have[m[1]] {
			continue
		}
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			if now, err2 := usageColumnSet(ctx, db, d); err2 == nil && now[m[1]] {
				continue
			}
			return fmt.Errorf("add column %s: %w", m[1], err)
		}
	}
	return nil
}

// usageColumnSet returns the names of usage_record's columns, lower case.
func usageColumnSet(ctx context.Context, db *sql.DB, d sqldialect.Dialect) (map[string]bool, error) {
	q := `SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'usage_record'`
	if d == sqldialect.SQLite {
		q = `SELECT name FROM pragma_table_info('usage_record')`
	}
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list columns: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("list columns: %w", err)
		}
		out[strings.ToLower(name)] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list columns: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("list columns: usage_record not found")
	}
	return out, nil
}
