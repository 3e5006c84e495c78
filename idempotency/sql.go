package idempotency

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dabom/dpcs/internal/sqldialect"
)

var (
	//go:embed migrations/mysql.sql
	mysqlSchema string
	//go:embed migrations/sqlite.sql
	sqliteSchema string
)

const defaultTable = "processed_events"

// SQLOption configures a SQLStore.
type SQLOption func(*SQLStore) error

// WithTable sets the processed-events table name (letters, digits, '_').
// Default: processed_events.
func WithTable(name string) SQLOption {
	return func(s *SQLStore) error {
		if err := sqldialect.ValidIdent(name); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		s.table = name
		return nil
	}
}

// WithDialect names the SQL dialect, "mysql" (also MariaDB) or "sqlite".
// Default: detected from the driver of the *sql.DB
// (github.com/go-sql-driver/mysql, modernc.org/sqlite).
func WithDialect(name string) SQLOption {
	return func(s *SQLStore) error {
		d, err := sqldialect.Parse(name)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		s.dialect = d
		return nil
	}
}

// WithClock sets the clock that stamps leases and expiries. Workers sharing
// a table should have synchronised clocks: skew shortens or lengthens
// leases by as much. Default: time.Now.
func WithClock(now func() time.Time) SQLOption {
	return func(s *SQLStore) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalid)
		}
		s.now = now
		return nil
	}
}

// SQLStore keeps claims in a processed-events table whose primary key is
// the idempotency key (`{consumerGroup}:{eventId}`, see Key): the durable
// second line behind Redis, which forgets keys when they expire or when
// Redis is lost. A claim is an insert-ignore of the key (MySQL
// `INSERT IGNORE`, SQLite `INSERT OR IGNORE`); an expired claim or result is
// taken over by a conditional UPDATE; leases and expiries are Unix
// milliseconds from the store's clock.
//
// With SQLite, open the database with a busy timeout (modernc.org/sqlite:
// `?_pragma=busy_timeout(5000)`) or a single connection, so concurrent
// claims wait for the write lock instead of failing with SQLITE_BUSY.
type SQLStore struct {
	db      *sql.DB
	dialect sqldialect.Dialect
	table   string
	now     func() time.Time

	qTakeover, qSelect, qComplete, qRelease, qPurge string
}

var _ Store = (*SQLStore)(nil)

// NewSQLStore returns a store on db. It does not create the table: call
// Migrate (or run Schema in your own migrations).
func NewSQLStore(db *sql.DB, opts ...SQLOption) (*SQLStore, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrInvalid)
	}
	s := &SQLStore{db: db, table: defaultTable, now: time.Now}
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
	t := s.table
	s.qTakeover = "UPDATE " + t + " SET token = ?, done = 0, result = NULL, expires_at = ?, created_at = ? WHERE idempotency_key = ? AND expires_at <= ?"
	s.qSelect = "SELECT done, result, expires_at FROM " + t + " WHERE idempotency_key = ?"
	s.qComplete = "UPDATE " + t + " SET done = 1, result = ?, expires_at = ? WHERE idempotency_key = ? AND token = ? AND done = 0 AND expires_at > ?"
	s.qRelease = "DELETE FROM " + t + " WHERE idempotency_key = ? AND token = ? AND done = 0 AND expires_at > ?"
	s.qPurge = "DELETE FROM " + t + " WHERE expires_at <= ?"
	return s, nil
}

// Schema returns the CREATE TABLE script of the store's table for its
// dialect (embedded from migrations/*.sql).
func (s *SQLStore) Schema() string {
	script := mysqlSchema
	if s.dialect == sqldialect.SQLite {
		script = sqliteSchema
	}
	return strings.ReplaceAll(script, defaultTable, s.table)
}

// Migrate creates the table and its index if they do not exist.
func (s *SQLStore) Migrate(ctx context.Context) error {
	if err := sqldialect.Exec(ctx, s.db, s.Schema()); err != nil {
		return fmt.Errorf("idempotency: migrate: %w", err)
	}
	return nil
}

func (s *SQLStore) nowMs() int64 { return s.now().UnixMilli() }

// Claim implements Store: insert-ignore the claim; if the key exists, take
// it over when it has expired; else report its state. A few rounds cover a
// key released or expiring between the statements.
func (s *SQLStore) Claim(ctx context.Context, key, token string, lease time.Duration) (Claim, error) {
	insert := s.dialect.InsertIgnore(s.table, []string{"idempotency_key", "token", "done", "result", "expires_at", "created_at"}, 1)
	for range 5 {
		now := s.nowMs()
		exp := now + lease.Milliseconds()
		if n, err := s.exec(ctx, insert, key, token, 0, nil, exp, now); err != nil || n == 1 {
			return Claim{Outcome: Acquired}, err
		}
		if n, err := s.exec(ctx, s.qTakeover, token, exp, now, key, now); err != nil || n == 1 {
			return Claim{Outcome: Acquired}, err
		}
		var (
			done      bool
			result    []byte
			expiresAt int64
		)
		err := s.db.QueryRowContext(ctx, s.qSelect, key).Scan(&done, &result, &expiresAt)
		if errors.Is(err, sql.ErrNoRows) {
			continue // released in between: insert again
		}
		if err != nil {
			return Claim{}, err
		}
		left := expiresAt - s.nowMs()
		if left <= 0 {
			continue // expired in between: take over
		}
		if done {
			if result == nil {
				result = []byte{}
			}
			return Claim{Outcome: Done, Result: result}, nil
		}
		return Claim{Outcome: InProgress, RetryAfter: time.Duration(left) * time.Millisecond}, nil
	}
	return Claim{}, fmt.Errorf("key %q changed under every attempt to claim it", key)
}

// Complete implements Store.
func (s *SQLStore) Complete(ctx context.Context, key, token string, result []byte, ttl time.Duration) error {
	now := s.nowMs()
	n, err := s.exec(ctx, s.qComplete, result, now+ttl.Milliseconds(), key, token, now)
	if err != nil {
		return err
	}
	if n != 1 {
		return ErrLeaseLost
	}
	return nil
}

// Release implements Store as a conditional DELETE (compare-and-delete).
func (s *SQLStore) Release(ctx context.Context, key, token string) error {
	n, err := s.exec(ctx, s.qRelease, key, token, s.nowMs())
	if err != nil {
		return err
	}
	if n != 1 {
		return ErrLeaseLost
	}
	return nil
}

// Purge deletes expired claims and results and returns how many. Expired rows
// are harmless (a claim takes them over) but take space: run it now and then,
// e.g. daily.
func (s *SQLStore) Purge(ctx context.Context) (int64, error) {
	n, err := s.exec(ctx, s.qPurge, s.nowMs())
	if err != nil {
		return 0, fmt.Errorf("idempotency: purge: %w", err)
	}
	return n, nil
}

func (s *SQLStore) exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
