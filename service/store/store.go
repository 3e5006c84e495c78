package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/policy"
)

// Sentinel errors; callers branch on them with errors.Is. Every error the
// store returns about a row wraps one of them or is a database failure.
var (
	// ErrNotFound: the family, member, template, policy or token does not
	// exist (or the member was removed, or belongs to another family).
	ErrNotFound = errors.New("store: not found")
	// ErrConflict: a unique value (member id or phone, family id, template
	// name) is taken, or the change contradicts the row's state (removing
	// the last owner, applying an inactive template); a *FieldError says
	// which and what to do.
	ErrConflict = errors.New("store: conflict")
	// ErrStaleVersion: an update named an expected policy version that is
	// no longer the current one.
	ErrStaleVersion = errors.New("store: stale version")
	// ErrInvalid: a bad argument; the error names the field.
	ErrInvalid = errors.New("store: invalid argument")
	// ErrBadCredentials: unknown login or wrong password (deliberately the
	// same error for both).
	ErrBadCredentials = errors.New("store: bad credentials")
	// ErrTokenReused: a refresh token was presented again after it was
	// rotated or revoked; its whole rotation family is now revoked.
	ErrTokenReused = errors.New("store: refresh token reused")
	// ErrTokenExpired: the refresh token is past its expiry.
	ErrTokenExpired = errors.New("store: refresh token expired")
	// ErrFamilyFull: the family has as many current members as it may
	// (WithMaxFamilyMembers). It comes as the Cause of a *FieldError of
	// kind ErrConflict naming familyId.
	ErrFamilyFull = errors.New("store: family full")
)

// FieldError is a refusal the caller can act on: an argument the store
// refuses (Kind ErrInvalid), a value that conflicts with other rows or the
// row's state (ErrConflict) or a stale expected version (ErrStaleVersion).
// Field names the argument as the HTTP API names it ("phone", "customerId",
// "bytes") and Msg says what is wrong and what to do, in words fit to show
// the caller: never database text, and nothing about rows the caller may not
// see beyond what the API already lets it see. Cause (optional) is the error
// behind it, for logs and errors.Is; its text is not for callers.
type FieldError struct {
	Field string
	Msg   string
	Kind  error
	Cause error
}

func (e *FieldError) Error() string {
	s := e.Kind.Error() + ": " + e.Field + ": " + e.Msg
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Unwrap returns Kind and Cause, so errors.Is matches either.
func (e *FieldError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Cause}
}

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...), Kind: ErrInvalid}
}

// conflict is a FieldError of kind ErrConflict; cause may be nil.
func conflict(field, msg string, cause error) error {
	return &FieldError{Field: field, Msg: msg, Kind: ErrConflict, Cause: cause}
}

// Option configures a Store.
type Option func(*Store) error

// WithLocation sets the service time zone, which decides the month a top-up
// counts for and the hour buckets of usage reports. It must be the quota
// engine's zone. Default: Asia/Seoul.
func WithLocation(loc *time.Location) Option {
	return func(s *Store) error {
		if loc == nil {
			return invalid("location", "nil")
		}
		s.loc = loc
		return nil
	}
}

// WithClock sets the store's clock (row timestamps, token expiry). Default: time.Now.
func WithClock(now func() time.Time) Option {
	return func(s *Store) error {
		if now == nil {
			return invalid("clock", "nil")
		}
		s.now = now
		return nil
	}
}

// WithBcryptCost sets the bcrypt cost of password hashes (4..31). Default:
// bcrypt.DefaultCost (10).
func WithBcryptCost(cost int) Option {
	return func(s *Store) error {
		if cost < bcrypt.MinCost || cost > bcrypt.MaxCost {
			return invalid("bcryptCost", "must be %d..%d", bcrypt.MinCost, bcrypt.MaxCost)
		}
		s.cost = cost
		return nil
	}
}

// WithRandom sets the source of refresh tokens. Default: crypto/rand.Reader.
func WithRandom(r io.Reader) Option {
	return func(s *Store) error {
		if r == nil {
			return invalid("random", "nil")
		}
		s.rand = r
		return nil
	}
}

// WithLogger sets the logger. Default: a logger discarding everything.
func WithLogger(l *slog.Logger) Option {
	return func(s *Store) error {
		if l == nil {
			return invalid("logger", "nil")
		}
		s.log = l
		return nil
	}
}

// The largest ids a caller may choose (NewFamily.ID, NewMember.ID; 0 lets
// the database choose). A generated id is one more than the largest id of
// its table, so a chosen id near the top of BIGINT would leave no room for
// the ids generated after it: every later insert without an id would fail.
// The chosen ranges end far below: member ids at 10^15 − 1, ten times the
// family ids' 10^14 − 1, so the simulator's scheme (member i of family f is
// f×10 + i, simulate.CustomerID) fits any chosen family. Above them, ids
// are generated for 8×10^15 more rows before they leave the integers a
// JavaScript number holds exactly (2^53, the web front-ends') and far
// before BIGINT's end (doc/security.md, "Limits").
const (
	MaxFamilyID = 99_999_999_999_999
	MaxMemberID = 999_999_999_999_999
)

// DefaultMaxFamilyMembers is how many current members a family may have
// unless WithMaxFamilyMembers says otherwise: carriers' family plans hold
// at most 10 lines.
const DefaultMaxFamilyMembers = 10

// WithMaxFamilyMembers sets how many current members (removed ones do not
// count) a family may have, at least 1; AddMember beyond it is
// ErrFamilyFull. Default: DefaultMaxFamilyMembers.
func WithMaxFamilyMembers(n int) Option {
	return func(s *Store) error {
		if n < 1 {
			return invalid("maxFamilyMembers", "must be ≥ 1")
		}
		s.maxMembers = n
		return nil
	}
}

// DefaultMaxFamilyNotes is how many care agents' notes a family may have
// unless WithMaxFamilyNotes says otherwise.
const DefaultMaxFamilyNotes = 1000

// WithMaxFamilyNotes sets how many notes one family may have, at least 1
// (AddFamilyNote beyond it is ErrConflict at familyId): notes are never
// deleted, and a care agent's tool that loops must not fill the table.
// Default: DefaultMaxFamilyNotes.
func WithMaxFamilyNotes(n int) Option {
	return func(s *Store) error {
		if n < 1 {
			return invalid("maxFamilyNotes", "must be ≥ 1")
		}
		s.maxNotes = n
		return nil
	}
}

// WithDialect names the SQL dialect ("mysql" or "sqlite") instead of
// detecting it from db's driver. Default: detected.
func WithDialect(name string) Option {
	return func(s *Store) error {
		d, err := sqldialect.Parse(name)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		s.d = d
		return nil
	}
}

// Store is DPCS's SQL store: families, members, policies, templates, top-ups,
// the audit log, the outbox, refresh tokens and usage reports, on MySQL /
// MariaDB or SQLite. It is safe for concurrent use. Run Migrate first.
type Store struct {
	db   *sql.DB
	d    sqldialect.Dialect
	loc  *time.Location
	now  func() time.Time
	cost int
	rand io.Reader
	log  *slog.Logger
	// maxMembers bounds a family's current members (WithMaxFamilyMembers).
	maxMembers int
	// maxNotes bounds a family's notes (WithMaxFamilyNotes).
	maxNotes int

	dummyOnce sync.Once
	dummy     []byte // a hash compared against for unknown logins

	stmtMu      sync.Mutex
	recordSteps map[int]*sql.Stmt // the write of n charging steps (recordStmt)
}

// New returns a store on db. It does not contact the database.
func New(db *sql.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, invalid("db", "nil")
	}
	loc, err := policy.LoadZone(policy.DefaultZone)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, loc: loc, now: time.Now, cost: bcrypt.DefaultCost, rand: rand.Reader,
		log: slog.New(slog.DiscardHandler), maxMembers: DefaultMaxFamilyMembers, maxNotes: DefaultMaxFamilyNotes}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.d == sqldialect.Unknown {
		if s.d, err = sqldialect.Detect(db); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return s, nil
}

// DB returns the store's database handle.
func (s *Store) DB() *sql.DB { return s.db }

// Location returns the store's service time zone.
func (s *Store) Location() *time.Location { return s.loc }

// Actor is who makes a change: a member (owner), an admin, or the system
// (ID 0). Every change is written to the audit log with it.
type Actor struct {
	ID   int64
	Role policy.Role
}

// RoleSystem is the audit role of System: no member's role, so an audit
// row of the service itself (seeding, rebuilds, a login locked by
// anonymous attempts) is never read as an ADMIN's act.
const RoleSystem policy.Role = "SYSTEM"

// System is the actor of changes nobody asked for (seeding, rebuilds) and
// of anonymous events (login lockouts).
var System = Actor{ID: 0, Role: RoleSystem}

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// txAttempts is how often inTx runs a transaction that loses a race
// (sqldialect.IsTxConflict) before giving up.
const txAttempts = 4

// inTx runs fn in a transaction, committing when it returns nil. With
// SQLite and one open connection every query of fn must go through tx.
//
// A transaction that loses a race with another (a MySQL deadlock or lock
// wait timeout, SQLite busy) is rolled back and run again from the start,
// up to txAttempts times with a short randomised backoff: fn may therefore
// run more than once and must only set, never accumulate, state outside tx.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return s.retryConflicts(ctx, func() error { return s.tryTx(ctx, fn) })
}

// retryConflicts runs fn, a transaction or an autocommitted statement,
// again when it loses a race as inTx does.
func (s *Store) retryConflicts(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 1; ; attempt++ {
		if err = fn(); err == nil || !sqldialect.IsTxConflict(err) || attempt == txAttempts {
			return err
		}
		backoff := time.Duration(attempt) * (5*time.Millisecond + time.Duration(mrand.Int64N(int64(10*time.Millisecond))))
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
	}
}

func (s *Store) tryTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	return nil
}

// t returns a time argument for the dialect.
func (s *Store) t(at time.Time) any { return s.d.Time(at) }

// audit writes one audit row; before and after are JSON-encoded (nil: NULL).
func (s *Store) audit(ctx context.Context, q querier, familyID int64, a Actor, action, target string, before, after any) error {
	enc := func(v any) (any, error) {
		if v == nil {
			return nil, nil
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		return string(b), nil
	}
	b, err := enc(before)
	if err != nil {
		return fmt.Errorf("store: audit: %w", err)
	}
	af, err := enc(after)
	if err != nil {
		return fmt.Errorf("store: audit: %w", err)
	}
	var fid any
	if familyID > 0 {
		fid = familyID
	}
	role := a.Role
	if role == "" {
		role = policy.RoleMember
	}
	_, err = q.ExecContext(ctx, `INSERT INTO audit_log (family_id, actor_id, actor_role, action, target, before_json, after_json, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, fid, a.ID, string(role), action, target, b, af, s.t(s.now()))
	if err != nil {
		return fmt.Errorf("store: audit: %w", err)
	}
	return nil
}

// dbErr wraps a database error, mapping unique violations to ErrConflict.
func dbErr(op string, err error) error {
	if sqldialect.IsDuplicate(err) {
		return fmt.Errorf("store: %s: %w: %w", op, ErrConflict, err)
	}
	return fmt.Errorf("store: %s: %w", op, err)
}

func notFound(what string, id any) error { return fmt.Errorf("%w: %s %v", ErrNotFound, what, id) }
