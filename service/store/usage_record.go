package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
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
	// Grant is set on a grant step's row (column grant_id its GrantID;
	// the step itself goes to grant_step): BytesUsed is what the step
	// charged, used whatever ProcessResult says, and EventTime when the
	// charge counts. nil for a usage event.
	Grant *GrantStepRow
	// Generation is the state generation the event was judged under (the
	// payload's; no column): what the write-behind checks for late records
	// (recovery.LateRecords).
	Generation string
}

// GrantStepRow is one row of grant_step: a judged grant step (doc/store.md),
// written beside its charge in usage_record (the same event id).
type GrantStepRow struct {
	StepID       string // the step's id; UNIQUE
	FamilyID     int64
	CustomerID   int64
	GrantID      string
	PreviousStep string // the step whose reservation this one returned; "" when none
	Granted      int64  // what the grant holds after the step
	Open         bool   // the grant is open after the step
	Final        bool
	Overage      int64
	Reserved     int64     // what the family's grants reserve of the step's month after it
	ValidUntil   time.Time // zero on a release (NULL)
	Reclaim      []string
	StepTime     time.Time // the step's time: its reservation's day and month
	Category     string    // the app category it was judged as ("" before it was kept)
}

// maxReclaimLen bounds grant_step.reclaim (a TEXT column).
const maxReclaimLen = 65535

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
		Grant: grantStepRowOf(e),
	}
}

// grantStepRowOf is the grant_step row of a grant step's usage-persist
// record (the envelope's timestamp is the step's time), nil for an event's.
func grantStepRowOf(e envelope.Envelope[envelope.UsagePersistPayload]) *GrantStepRow {
	p, g := e.Payload, e.Payload.Grant
	if g == nil {
		return nil
	}
	return &GrantStepRow{StepID: p.OriginEventID, FamilyID: p.FamilyID, CustomerID: p.CustomerID, GrantID: g.GrantID,
		PreviousStep: g.PreviousStep, Granted: g.GrantedBytes, Open: g.Open, Final: g.Final, Overage: g.OverageBytes,
		Reserved: g.ReservedBytes, ValidUntil: g.ValidUntil, Reclaim: g.Reclaim, StepTime: e.Timestamp, Category: g.Category}
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
	if g := u.Grant; g != nil {
		str("grant.grantId", g.GrantID, 255, true)
		str("grant.previousStep", g.PreviousStep, 255, false)
		str("grant.category", g.Category, envelope.MaxCategoryLen, false)
		for _, n := range []struct {
			field string
			v     int64
		}{{"grant.grantedBytes", g.Granted}, {"grant.overageBytes", g.Overage}, {"grant.reservedBytes", g.Reserved}} {
			if n.v < 0 {
				errs = append(errs, &envelope.FieldError{Field: "payload." + n.field, Msg: "must be ≥ 0"})
			}
		}
		if n := len(strings.Join(g.Reclaim, ",")); n > maxReclaimLen || slices.ContainsFunc(g.Reclaim, func(id string) bool {
			return id == "" || strings.Contains(id, ",") || !utf8.ValidString(id)
		}) {
			errs = append(errs, &envelope.FieldError{Field: "payload.grant.reclaim", Msg: fmt.Sprintf("must be non-empty UTF-8 ids without ',', %d bytes in all at most", maxReclaimLen)})
		}
		for _, t := range []struct {
			field string
			v     time.Time
			opt   bool
		}{{"timestamp", g.StepTime, false}, {"payload.grant.validUntil", g.ValidUntil, true}} {
			if y := t.v.UTC().Year(); (t.v.IsZero() && !t.opt) || (!t.v.IsZero() && (y < 1000 || y > 9999)) {
				errs = append(errs, &envelope.FieldError{Field: t.field, Msg: "must be a time in years 1000..9999"})
			}
		}
	}
	return errors.Join(errs...)
}

// usageColumns are the columns a usage writer fills (id and created_at are
// left to the database).
var usageColumns = []string{"event_id", "family_id", "customer_id", "app_id", "bytes_used",
	"process_result", "remaining_after", "rule", "event_time",
	"total_bytes", "daily_used", "monthly_used", "throttle_kbps", "crossed", "grant_id"}

// grantStepColumns are the columns of grant_step a usage writer fills.
var grantStepColumns = []string{"step_id", "family_id", "customer_id", "grant_id", "previous_step", "granted",
	"is_open", "is_final", "overage", "reserved", "valid_until", "reclaim", "step_time", "category"}

// UsageWriter is the write-behind's writer of usage-persist records: each
// record's row of usage_record, and a grant step's row of grant_step
// (writebehind.SQLWriters: multi-row insert-ignore on event_id and
// step_id, so replays are skipped). A batch's usage rows are written
// first, then its steps' rows; a failure between them is retried whole
// (the usage rows are skipped then).
type UsageWriter struct {
	usage *writebehind.SQLWriter[UsageRecord]
	steps *writebehind.SQLWriter[GrantStepRow]
}

var _ writebehind.Writer[UsageRecord] = (*UsageWriter)(nil)

// NewUsageWriter returns the write-behind's writer of usage-persist
// records (UsageWriter). A record that fails Validate is a
// *writebehind.ItemError, which a writebehind.Runner dead-letters. opts are
// the SQL writers' (writebehind.WithDialect, writebehind.WithMaxRows).
func NewUsageWriter(db *sql.DB, opts ...writebehind.SQLOption) (*UsageWriter, error) {
	usage, err := writebehind.NewSQLWriter(db, "usage_record", usageColumns, func(u UsageRecord) ([]any, error) {
		if err := u.Validate(); err != nil {
			return nil, err
		}
		grant := ""
		if u.Grant != nil {
			grant = u.Grant.GrantID
		}
		return []any{u.EventID, u.FamilyID, u.CustomerID, u.AppID, u.BytesUsed,
			u.ProcessResult, u.RemainingAfter, u.Rule, u.EventTime,
			u.TotalBytes, u.DailyUsed, u.MonthlyUsed, u.ThrottleKbps, FormatCrossed(u.Crossed), grant}, nil
	}, opts...)
	if err != nil {
		return nil, err
	}
	steps, err := writebehind.NewSQLWriter(db, "grant_step", grantStepColumns, func(g GrantStepRow) ([]any, error) {
		var until any // NULL on a release
		if !g.ValidUntil.IsZero() {
			until = g.ValidUntil
		}
		return []any{g.StepID, g.FamilyID, g.CustomerID, g.GrantID, g.PreviousStep, g.Granted,
			boolInt(g.Open), boolInt(g.Final), g.Overage, g.Reserved, until, strings.Join(g.Reclaim, ","), g.StepTime, g.Category}, nil
	}, opts...)
	if err != nil {
		usage.Close()
		return nil, err
	}
	return &UsageWriter{usage: usage, steps: steps}, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Write writes batch: every record's usage_record row, then the grant
// steps' grant_step rows (validated with the first: an *ItemError names
// the record's index in batch).
func (w *UsageWriter) Write(ctx context.Context, batch []UsageRecord) error {
	if err := w.usage.Write(ctx, batch); err != nil {
		return err
	}
	var rows []GrantStepRow
	var at []int
	for i, u := range batch {
		if u.Grant != nil {
			rows, at = append(rows, *u.Grant), append(at, i)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	err := w.steps.Write(ctx, rows)
	if err == nil {
		return nil
	}
	// Item errors name the batch's records, not the steps' rows.
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	for i, e := range errs {
		var ie *writebehind.ItemError
		if errors.As(e, &ie) && ie.Index >= 0 && ie.Index < len(at) {
			errs[i] = &writebehind.ItemError{Index: at[ie.Index], Err: ie.Err}
		}
	}
	return errors.Join(errs...)
}

// Inserted is how many usage_record rows the writer inserted (replays
// skipped).
func (w *UsageWriter) Inserted() int64 { return w.usage.Inserted() }

// Close closes both writers' statements.
func (w *UsageWriter) Close() error { return errors.Join(w.usage.Close(), w.steps.Close()) }

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
