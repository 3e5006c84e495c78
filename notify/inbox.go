package notify

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/sqldialect"
)

// Store is what the Notifier needs of an inbox.
type Store interface {
	// Add stores n unless a row with its EventID or its DedupeKey exists. It
	// returns the stored row (with ID and DeliveredAt; the existing one when
	// not inserted) and whether n was inserted. Safe to repeat.
	Add(ctx context.Context, n Notification) (stored Notification, inserted bool, err error)
	// MarkDelivered records that row id was handed to the hub and channels.
	MarkDelivered(ctx context.Context, id int64, at time.Time) error
}

// BatchStore is a Store that also stores a poll's notifications at once.
// The Notifier uses it when its store has it (SQLInbox does) and falls back
// to one Add and MarkDelivered per notification otherwise.
type BatchStore interface {
	Store
	// AddBatch stores ns as Add does each, in order, atomically: all or
	// none. stored lines up with ns: the row holding each one's event id,
	// else the row holding its dedupe key (inserted now or before).
	AddBatch(ctx context.Context, ns []Notification) (stored []Notification, err error)
	// MarkDeliveredBatch is MarkDelivered of every id.
	MarkDeliveredBatch(ctx context.Context, ids []int64, at time.Time) error
}

var _ BatchStore = (*SQLInbox)(nil)

var (
	//go:embed migrations/mysql.sql
	mysqlSchema string
	//go:embed migrations/sqlite.sql
	sqliteSchema string
)

// Query selects inbox rows of one family as seen by Viewer.
type Query struct {
	FamilyID int64
	Viewer   Filter
	// Before pages newest first: rows with ID < Before (0: from the newest).
	Before int64
	// After resumes oldest first: rows with ID > After (an SSE
	// Last-Event-ID). When set, Before is ignored and the order is ascending.
	After int64
	// Limit caps the rows returned: 1..1000, 0 means 50.
	Limit int
	// Unread leaves out rows the viewer marked read.
	Unread bool
}

// InboxOption configures a SQLInbox.
type InboxOption func(*SQLInbox) error

// WithInboxDialect names the SQL dialect, "mysql" (also MariaDB) or
// "sqlite". Default: detected from the driver of the *sql.DB.
func WithInboxDialect(name string) InboxOption {
	return func(s *SQLInbox) error {
		d, err := sqldialect.Parse(name)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		s.dialect = d
		return nil
	}
}

// SQLInbox is the inbox in MySQL/MariaDB or SQLite: table notification
// (event_id and dedupe_key UNIQUE; member_id NULL for family-wide rows) and
// notification_read (per-viewer read marks). See migrations/*.sql.
//
// Times are read back from MySQL DATETIME(3) with or without the driver's
// parseTime; with SQLite, open the database with a busy timeout
// (`?_pragma=busy_timeout(5000)`) as for the other DPCS stores.
type SQLInbox struct {
	db      *sql.DB
	dialect sqldialect.Dialect
	qInsert string
}

const inboxCols = "id, event_id, dedupe_key, family_id, member_id, kind, title, body, payload, created_at, delivered_at"

// NewSQLInbox returns an inbox on db. It does not create the tables: call
// Migrate (or run Schema in your own migrations).
func NewSQLInbox(db *sql.DB, opts ...InboxOption) (*SQLInbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrInvalid)
	}
	s := &SQLInbox{db: db}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.dialect == sqldialect.Unknown {
		d, err := sqldialect.Detect(db)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		s.dialect = d
	}
	s.qInsert = s.dialect.InsertIgnore("notification", strings.Split(inboxCols, ", ")[1:], 1)
	return s, nil
}

// Schema returns the CREATE TABLE script for the inbox's dialect.
func (s *SQLInbox) Schema() string {
	if s.dialect == sqldialect.SQLite {
		return sqliteSchema
	}
	return mysqlSchema
}

// Migrate creates the tables and indexes if they do not exist.
func (s *SQLInbox) Migrate(ctx context.Context) error {
	if err := sqldialect.Exec(ctx, s.db, s.Schema()); err != nil {
		return fmt.Errorf("notify: migrate inbox: %w", err)
	}
	return nil
}

func validNote(n Notification) error {
	if n.EventID == "" || n.DedupeKey == "" || n.FamilyID <= 0 || n.MemberID < 0 {
		return fmt.Errorf("%w: notification needs an event id, a dedupe key and a family id", ErrInvalid)
	}
	return nil
}

// rowArgs appends n's values in the order of inboxCols (without id).
func (s *SQLInbox) rowArgs(args []any, n Notification) []any {
	var member any
	if n.MemberID > 0 {
		member = n.MemberID
	}
	var delivered any
	if n.DeliveredAt != nil {
		delivered = s.dialect.Time(*n.DeliveredAt)
	}
	payload := string(n.Payload)
	if payload == "" {
		payload = "{}"
	}
	return append(args, n.EventID, n.DedupeKey, n.FamilyID, member, string(n.Kind),
		n.Title, n.Body, payload, s.dialect.Time(n.CreatedAt), delivered)
}

// Add implements Store with an insert-ignore on the unique event_id and
// dedupe_key.
func (s *SQLInbox) Add(ctx context.Context, n Notification) (Notification, bool, error) {
	if err := validNote(n); err != nil {
		return Notification{}, false, err
	}
	res, err := s.db.ExecContext(ctx, s.qInsert, s.rowArgs(nil, n)...)
	if err != nil {
		return Notification{}, false, fmt.Errorf("notify: inbox add %s: %w", n.EventID, err)
	}
	if k, err := res.RowsAffected(); err == nil && k == 1 {
		id, err := res.LastInsertId()
		if err != nil {
			return Notification{}, false, fmt.Errorf("notify: inbox add %s: %w", n.EventID, err)
		}
		n.ID = id
		n.ReadAt = nil
		return n, true, nil
	}
	// Not inserted: the row with this event id, else the one holding the
	// dedupe key (a threshold alert of the same family/threshold/period).
	for _, q := range []struct{ col, v string }{{"event_id", n.EventID}, {"dedupe_key", n.DedupeKey}} {
		rows, err := s.db.QueryContext(ctx, "SELECT "+inboxCols+", NULL FROM notification WHERE "+q.col+" = ?", q.v)
		if err != nil {
			return Notification{}, false, fmt.Errorf("notify: inbox add %s: %w", n.EventID, err)
		}
		got, err := scanAll(rows)
		if err != nil {
			return Notification{}, false, fmt.Errorf("notify: inbox add %s: %w", n.EventID, err)
		}
		if len(got) == 1 {
			return got[0], false, nil
		}
	}
	return Notification{}, false, fmt.Errorf("notify: inbox add %s: not inserted and not found", n.EventID)
}

// batchRows caps the rows of one multi-row statement (10 parameters each,
// well under either dialect's limit).
const batchRows = 500

// AddBatch implements BatchStore in one transaction: a multi-row
// insert-ignore per batchRows notifications, then one select of the rows
// holding their event ids or dedupe keys.
func (s *SQLInbox) AddBatch(ctx context.Context, ns []Notification) (stored []Notification, err error) {
	if len(ns) == 0 {
		return nil, nil
	}
	for _, n := range ns {
		if err := validNote(n); err != nil {
			return nil, err
		}
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("notify: inbox add %d: %w", len(ns), err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback() // the error that ended the transaction is reported
		}
	}()
	byEvent := make(map[string]Notification, len(ns))
	byKey := make(map[string]Notification, len(ns))
	cols := strings.Split(inboxCols, ", ")[1:]
	for start := 0; start < len(ns); start += batchRows {
		chunk := ns[start:min(start+batchRows, len(ns))]
		args := make([]any, 0, len(chunk)*len(cols))
		for _, n := range chunk {
			args = s.rowArgs(args, n)
		}
		if _, err := tx.ExecContext(ctx, s.dialect.InsertIgnore("notification", cols, len(chunk)), args...); err != nil {
			return nil, fmt.Errorf("notify: inbox add %d: %w", len(ns), err)
		}
		in := strings.TrimSuffix(strings.Repeat("?, ", len(chunk)), ", ")
		args = args[:0]
		for _, n := range chunk {
			args = append(args, n.EventID)
		}
		for _, n := range chunk {
			args = append(args, n.DedupeKey)
		}
		rows, err := tx.QueryContext(ctx, "SELECT "+inboxCols+", NULL FROM notification WHERE event_id IN ("+in+") OR dedupe_key IN ("+in+")", args...)
		if err != nil {
			return nil, fmt.Errorf("notify: inbox add %d: %w", len(ns), err)
		}
		got, err := scanAll(rows)
		if err != nil {
			return nil, fmt.Errorf("notify: inbox add %d: %w", len(ns), err)
		}
		for _, r := range got {
			byEvent[r.EventID], byKey[r.DedupeKey] = r, r
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("notify: inbox add %d: %w", len(ns), err)
	}
	stored = make([]Notification, len(ns))
	for i, n := range ns {
		r, ok := byEvent[n.EventID]
		if !ok {
			if r, ok = byKey[n.DedupeKey]; !ok {
				return nil, fmt.Errorf("notify: inbox add %s: not inserted and not found", n.EventID)
			}
		}
		stored[i] = r
	}
	return stored, nil
}

// MarkDeliveredBatch implements BatchStore with one UPDATE per batchRows
// ids.
func (s *SQLInbox) MarkDeliveredBatch(ctx context.Context, ids []int64, at time.Time) error {
	for start := 0; start < len(ids); start += batchRows {
		chunk := ids[start:min(start+batchRows, len(ids))]
		args := make([]any, 0, len(chunk)+1)
		args = append(args, s.dialect.Time(at))
		for _, id := range chunk {
			args = append(args, id)
		}
		q := "UPDATE notification SET delivered_at = ? WHERE id IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(chunk)), ", ") + ")"
		if _, err := s.db.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("notify: inbox mark delivered %d rows: %w", len(chunk), err)
		}
	}
	return nil
}

// MarkDelivered implements Store.
func (s *SQLInbox) MarkDelivered(ctx context.Context, id int64, at time.Time) error {
	if _, err := s.db.ExecContext(ctx, "UPDATE notification SET delivered_at = ? WHERE id = ?", s.dialect.Time(at), id); err != nil {
		return fmt.Errorf("notify: inbox mark delivered %d: %w", id, err)
	}
	return nil
}

// List returns the family's rows the viewer may see (Filter.Sees: owners
// everything, members family-wide rows and their own), with ReadAt set from
// the viewer's read marks: newest first below q.Before, or oldest first
// above q.After.
func (s *SQLInbox) List(ctx context.Context, q Query) ([]Notification, error) {
	if q.FamilyID <= 0 {
		return nil, fmt.Errorf("%w: family id must be > 0", ErrInvalid)
	}
	if err := q.Viewer.validate(); err != nil {
		return nil, err
	}
	if q.Limit < 0 || q.Limit > 1000 || q.Before < 0 || q.After < 0 {
		return nil, fmt.Errorf("%w: limit must be 0..1000 and cursors ≥ 0", ErrInvalid)
	}
	if q.Limit == 0 {
		q.Limit = 50
	}
	var b strings.Builder
	b.WriteString("SELECT n.id, n.event_id, n.dedupe_key, n.family_id, n.member_id, n.kind, n.title, n.body, n.payload, n.created_at, n.delivered_at, r.read_at")
	b.WriteString(" FROM notification n LEFT JOIN notification_read r ON r.notification_id = n.id AND r.member_id = ?")
	b.WriteString(" WHERE n.family_id = ?")
	args := []any{q.Viewer.MemberID, q.FamilyID}
	if q.Viewer.Role == RoleMember {
		b.WriteString(" AND (n.member_id IS NULL OR n.member_id = ?) AND n.kind NOT IN (?, ?)")
		args = append(args, q.Viewer.MemberID, string(OwnersOnlyKind), string(KindWeeklySummary))
	}
	if q.Unread {
		b.WriteString(" AND r.read_at IS NULL")
	}
	switch {
	case q.After > 0:
		b.WriteString(" AND n.id > ? ORDER BY n.id ASC")
		args = append(args, q.After)
	case q.Before > 0:
		b.WriteString(" AND n.id < ? ORDER BY n.id DESC")
		args = append(args, q.Before)
	default:
		b.WriteString(" ORDER BY n.id DESC")
	}
	b.WriteString(" LIMIT ?")
	args = append(args, q.Limit)
	rows, err := s.db.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("notify: inbox list: %w", err)
	}
	out, err := scanAll(rows)
	if err != nil {
		return nil, fmt.Errorf("notify: inbox list: %w", err)
	}
	return out, nil
}

// HasDedupeKey reports whether a row with dedupe key key is stored: a job
// that stores one notification per key (a weekly summary) skips its work
// for a key stored before.
func (s *SQLInbox) HasDedupeKey(ctx context.Context, key string) (bool, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM notification WHERE dedupe_key = ?", key).Scan(&n); err != nil {
		return false, fmt.Errorf("notify: inbox has %q: %w", key, err)
	}
	return n > 0, nil
}

// MarkRead marks row id read for the viewer at at; marking again keeps the
// first time. ErrNotFound when the row is not the family's or the viewer may
// not see it. The viewer needs a member id.
func (s *SQLInbox) MarkRead(ctx context.Context, familyID int64, viewer Filter, id int64, at time.Time) error {
	if err := viewer.validate(); err != nil {
		return err
	}
	if viewer.MemberID <= 0 {
		return fmt.Errorf("%w: marking read needs the viewer's member id", ErrInvalid)
	}
	var member sql.NullInt64
	var kind string
	err := s.db.QueryRowContext(ctx, "SELECT member_id, kind FROM notification WHERE id = ? AND family_id = ?", id, familyID).Scan(&member, &kind)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("notify: inbox mark read %d: %w", id, err)
	}
	if !viewer.Sees(Notification{MemberID: member.Int64, Kind: envelope.SubType(kind)}) {
		return ErrNotFound
	}
	q := s.dialect.InsertIgnore("notification_read", []string{"notification_id", "member_id", "read_at"}, 1)
	if _, err := s.db.ExecContext(ctx, q, id, viewer.MemberID, s.dialect.Time(at)); err != nil {
		return fmt.Errorf("notify: inbox mark read %d: %w", id, err)
	}
	return nil
}

func scanAll(rows *sql.Rows) ([]Notification, error) {
	defer rows.Close()
	var out []Notification
	for rows.Next() {
		var (
			n                          Notification
			member                     sql.NullInt64
			kind, payload              string
			created, delivered, readAt any
		)
		if err := rows.Scan(&n.ID, &n.EventID, &n.DedupeKey, &n.FamilyID, &member, &kind, &n.Title, &n.Body,
			&payload, &created, &delivered, &readAt); err != nil {
			return nil, err
		}
		n.MemberID = member.Int64
		n.Kind = envelope.SubType(kind)
		n.Payload = []byte(payload)
		var err error
		if n.CreatedAt, err = dbTime(created); err != nil {
			return nil, err
		}
		if n.DeliveredAt, err = dbTimePtr(delivered); err != nil {
			return nil, err
		}
		if n.ReadAt, err = dbTimePtr(readAt); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

func dbTimePtr(v any) (*time.Time, error) {
	if v == nil {
		return nil, nil
	}
	t, err := dbTime(v)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// dbTime reads a time column: time.Time (MySQL with parseTime), or text in
// sqldialect.SQLiteTimeLayout (SQLite; MySQL without parseTime), all UTC.
func dbTime(v any) (time.Time, error) {
	switch v := v.(type) {
	case time.Time:
		return v.UTC(), nil
	case []byte:
		return parseDBTime(string(v))
	case string:
		return parseDBTime(v)
	}
	return time.Time{}, fmt.Errorf("notify: unexpected time value %T", v)
}

func parseDBTime(s string) (time.Time, error) {
	t, err := time.ParseInLocation("2006-01-02 15:04:05.999999999", s, time.UTC)
	if err != nil {
		return time.Time{}, fmt.Errorf("notify: time %q: %w", s, err)
	}
	return t, nil
}
