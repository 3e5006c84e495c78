package outbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/internal/backoff"
	"github.com/dabom/dpcs/internal/sqldialect"
)

// Producer publishes records synchronously; *kgo.Client satisfies it.
// ProduceSync must return one result per record, in order.
type Producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

var _ Producer = (*kgo.Client)(nil)

// PublishedInfo is passed to Hooks.OnPublished for each published row.
type PublishedInfo struct {
	OutboxID int64
	EventID  string
	Topic    string
	Key      string
	Attempts int // failed attempts before this one
	// Lag is how long the row waited in the outbox.
	Lag time.Duration
}

// FailedInfo is passed to Hooks.OnFailed for each failed publication.
type FailedInfo struct {
	OutboxID int64
	EventID  string
	Attempts int // failed attempts including this one
	Err      error
	// Expired is true when the row was older than the max age and moved to
	// outbox_failed; false when it will be retried at NextRetryAt.
	Expired     bool
	NextRetryAt time.Time
}

// Hooks are optional callbacks; nil funcs are skipped.
type Hooks struct {
	OnPublished func(PublishedInfo)
	OnFailed    func(FailedInfo)
}

// Option configures a Relay.
type Option func(*Relay) error

// WithClock sets the relay's clock (leases, retry times, max age).
// Default: time.Now.
func WithClock(now func() time.Time) Option {
	return func(r *Relay) error {
		if now == nil {
			return invalid("clock", "nil")
		}
		r.now = now
		return nil
	}
}

// WithBatchSize sets how many rows one poll reads (1..10000). Default: 100.
func WithBatchSize(n int) Option {
	return func(r *Relay) error {
		if n < 1 || n > 10000 {
			return invalid("batchSize", "must be 1..10000")
		}
		r.batch = n
		return nil
	}
}

// WithPollInterval sets how often Run polls when idle. Default: 1 s.
func WithPollInterval(d time.Duration) Option {
	return func(r *Relay) error {
		if d <= 0 {
			return invalid("pollInterval", "must be > 0")
		}
		r.interval = d
		return nil
	}
}

// WithRetryBackoff sets the wait before retrying a failed row: base after the
// first failure, doubling per failure, at most max. Default: 1 s, 30 s.
func WithRetryBackoff(base, max time.Duration) Option {
	return func(r *Relay) error {
		if base <= 0 || max < base {
			return invalid("retryBackoff", "need 0 < base ≤ max")
		}
		r.backoff, r.maxBackoff = base, max
		return nil
	}
}

// WithMaxAge sets how old a row may get before a failed publication moves it
// to outbox_failed instead of retrying (doc/store.md, "Outbox relay": releases the head-of-line
// block). Default: 5 min.
func WithMaxAge(d time.Duration) Option {
	return func(r *Relay) error {
		if d <= 0 {
			return invalid("maxAge", "must be > 0")
		}
		r.maxAge = d
		return nil
	}
}

// WithKeep names topics whose rows never expire (WithMaxAge does not apply):
// they are retried until published, holding the rows behind them. For rows
// that must reach their topic whatever the wait, such as the synchronous
// decisions' spooled usage-persist records (a judged event's only way to
// SQL). Default: none.
func WithKeep(topics ...string) Option {
	return func(r *Relay) error {
		for _, t := range topics {
			if t == "" {
				return invalid("keep", "empty topic")
			}
			if r.keep == nil {
				r.keep = map[string]bool{}
			}
			r.keep[t] = true
		}
		return nil
	}
}

// WithSendTimeout bounds one ProduceSync call. Default: 5 s.
func WithSendTimeout(d time.Duration) Option {
	return func(r *Relay) error {
		if d <= 0 {
			return invalid("sendTimeout", "must be > 0")
		}
		r.sendTimeout = d
		return nil
	}
}

// WithLease sets how long the relay's lease lasts without renewal; another
// relay takes over after it lapsed. It must exceed the send timeout.
// Default: 30 s.
func WithLease(d time.Duration) Option {
	return func(r *Relay) error {
		if d <= 0 {
			return invalid("lease", "must be > 0")
		}
		r.lease = d
		return nil
	}
}

// WithOwner names the relay in the lease row (at most 128 bytes). Default: a
// random id.
func WithOwner(id string) Option {
	return func(r *Relay) error {
		if id == "" || len(id) > 128 {
			return invalid("owner", "must be 1..128 bytes")
		}
		r.owner = id
		return nil
	}
}

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Option {
	return func(r *Relay) error {
		if l == nil {
			return invalid("logger", "nil")
		}
		r.log = l
		return nil
	}
}

// WithHooks sets observability callbacks. Default: none.
func WithHooks(h Hooks) Option {
	return func(r *Relay) error { r.hooks = h; return nil }
}

// WithDialect names the SQL dialect instead of detecting it. Default: detected.
func WithDialect(name string) Option {
	return func(r *Relay) error {
		d, err := sqldialect.Parse(name)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		r.d = d
		return nil
	}
}

// Relay publishes the outbox in id order (doc/store.md, "Outbox relay"): it reads the rows
// after the cursor, publishes those whose retry time has come up to the
// first one still waiting, and advances the cursor past every row published
// (or expired); a failed row is retried with backoff and blocks the rows
// behind it (head-of-line), so a family's events are never published out
// of order — until it is older than the max age (unless its topic is kept:
// WithKeep), when it moves to
// outbox_failed. Only the holder of the lease in outbox_cursor publishes, so
// any number of relays may run: one is active at a time. Delivery is at
// least once (a row may be published again after a crash); policy-updated
// consumers apply versions idempotently.
type Relay struct {
	db          *sql.DB
	p           Producer
	d           sqldialect.Dialect
	now         func() time.Time
	batch       int
	interval    time.Duration
	backoff     time.Duration
	maxBackoff  time.Duration
	maxAge      time.Duration
	keep        map[string]bool // topics whose rows never expire
	sendTimeout time.Duration
	lease       time.Duration
	owner       string
	log         *slog.Logger
	hooks       Hooks

	wake      chan struct{}
	stop      chan struct{}
	done      chan struct{}
	mu        sync.Mutex
	started   bool
	closeOnce sync.Once
}

// ErrNotLeader is returned by Poll when another relay holds the lease.
var ErrNotLeader = errors.New("outbox: another relay holds the outbox lease")

// New returns a relay publishing db's outbox through p.
func New(db *sql.DB, p Producer, opts ...Option) (*Relay, error) {
	if db == nil || p == nil {
		return nil, invalid("relay", "db and producer are required")
	}
	r := &Relay{db: db, p: p, now: time.Now, batch: 100, interval: time.Second, backoff: time.Second,
		maxBackoff: 30 * time.Second, maxAge: 5 * time.Minute, sendTimeout: 5 * time.Second, lease: 30 * time.Second,
		log: slog.New(slog.DiscardHandler), wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	for _, o := range opts {
		if err := o(r); err != nil {
			return nil, err
		}
	}
	if r.lease <= r.sendTimeout {
		return nil, invalid("lease", "must exceed the send timeout")
	}
	if r.owner == "" {
		b := make([]byte, 8)
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("outbox: relay owner: %w", err)
		}
		r.owner = "relay-" + hex.EncodeToString(b)
	}
	if r.d == sqldialect.Unknown {
		d, err := sqldialect.Detect(db)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		r.d = d
	}
	return r, nil
}

// Wake makes Run poll at once (after a write to the outbox) instead of at
// the next interval. It never blocks.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run polls until ctx ends or Close is called. Poll errors are logged and
// retried at the next interval. Run may be called once.
func (r *Relay) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return invalid("relay", "Run called twice or after Close")
	}
	r.started = true
	r.mu.Unlock()
	defer close(r.done)
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		res, err := r.Poll(ctx)
		switch {
		case err == nil || errors.Is(err, ErrNotLeader):
		case ctx.Err() != nil:
			return nil
		default:
			r.log.Warn("outbox relay poll failed", "err", err)
		}
		if res.More { // a full batch: go on at once
			select {
			case <-ctx.Done():
				return nil
			case <-r.stop:
				return nil
			default:
				continue
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.stop:
			return nil
		case <-r.wake:
		case <-t.C:
		}
	}
}

// Close stops Run and waits for it (bounded by ctx), then gives up the lease
// so another relay can take over at once.
func (r *Relay) Close(ctx context.Context) error {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		started := r.started
		r.started = true
		r.mu.Unlock()
		close(r.stop)
		if !started {
			close(r.done)
		}
	})
	select {
	case <-r.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	_, err := r.db.ExecContext(ctx, `UPDATE outbox_cursor SET lease_until = ?, lease_seq = lease_seq + 1 WHERE id = 1 AND owner = ?`,
		r.d.Time(time.Unix(0, 0)), r.owner)
	if err != nil {
		return fmt.Errorf("outbox: relay: release lease: %w", err)
	}
	return nil
}

// PollResult is what one Poll did.
type PollResult struct {
	Published int
	Failed    int // moved to outbox_failed
	Retrying  int // failed and scheduled for retry (at most one per poll)
	// More is true when the batch was full and everything in it was handled.
	More bool
}

type outboxRow struct {
	id                   int64
	key, topic, eventID  string
	eventType, payload   string
	createdAt, nextRetry sqldialect.NullTime
	attempts             int
}

// acquire takes or renews the lease and returns the cursor.
func (r *Relay) acquire(ctx context.Context, now time.Time) (int64, error) {
	res, err := r.db.ExecContext(ctx, `UPDATE outbox_cursor SET owner = ?, lease_until = ?, lease_seq = lease_seq + 1
		WHERE id = 1 AND (owner = ? OR lease_until < ?)`, r.owner, r.d.Time(now.Add(r.lease)), r.owner, r.d.Time(now))
	if err != nil {
		return 0, fmt.Errorf("outbox: relay: lease: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, fmt.Errorf("outbox: relay: lease: %w", err)
	} else if n != 1 {
		return 0, ErrNotLeader
	}
	var last int64
	if err := r.db.QueryRowContext(ctx, `SELECT last_id FROM outbox_cursor WHERE id = 1`).Scan(&last); err != nil {
		return 0, fmt.Errorf("outbox: relay: cursor: %w", err)
	}
	return last, nil
}

// Poll runs one relay step: take or renew the lease (ErrNotLeader if another
// relay holds it), publish the sendable rows after the cursor in order, and
// record the outcome in one transaction fenced by the lease.
func (r *Relay) Poll(ctx context.Context) (PollResult, error) {
	now := r.now()
	cursor, err := r.acquire(ctx, now)
	if err != nil {
		return PollResult{}, err
	}
	rows, err := r.read(ctx, cursor)
	if err != nil {
		return PollResult{}, err
	}
	var send []outboxRow
	for _, row := range rows {
		if row.nextRetry.Valid && row.nextRetry.Time.After(now) {
			break // head-of-line: wait for it
		}
		send = append(send, row)
	}
	if len(send) == 0 {
		return PollResult{}, nil
	}
	recs := make([]*kgo.Record, len(send))
	for i, row := range send {
		recs[i] = &kgo.Record{Topic: row.topic, Key: []byte(row.key), Value: []byte(row.payload),
			Headers: headers(row)}
	}
	sctx, cancel := context.WithTimeout(ctx, r.sendTimeout)
	results := r.p.ProduceSync(sctx, recs...)
	cancel()
	done := r.now()

	var res PollResult
	newCursor := cursor
	var published []PublishedInfo
	var failed []FailedInfo
	type expired struct {
		row outboxRow
		err error
	}
	var moves []expired
	var retry *FailedInfo
	for i, row := range send {
		var perr error
		if i < len(results) {
			perr = results[i].Err
		} else {
			perr = errors.New("producer returned no result")
		}
		if perr == nil {
			newCursor = row.id
			res.Published++
			published = append(published, PublishedInfo{OutboxID: row.id, EventID: row.eventID, Topic: row.topic, Key: row.key,
				Attempts: row.attempts, Lag: done.Sub(row.createdAt.Time)})
			continue
		}
		info := FailedInfo{OutboxID: row.id, EventID: row.eventID, Attempts: row.attempts + 1, Err: perr}
		if !r.keep[row.topic] && !done.Before(row.createdAt.Time.Add(r.maxAge)) {
			info.Expired = true
			newCursor = row.id
			res.Failed++
			moves = append(moves, expired{row, perr})
			failed = append(failed, info)
			continue
		}
		info.NextRetryAt = done.Add(r.retryDelay(info.Attempts))
		retry = &info
		res.Retrying++
		failed = append(failed, info)
		break
	}
	err = r.commit(ctx, cursor, newCursor, done, retry, func(tx *sql.Tx) error {
		for _, m := range moves {
			if _, err := tx.ExecContext(ctx, `INSERT INTO outbox_failed (id, aggregate_key, topic, event_id, event_type, payload, created_at, attempts, error_message, failed_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, m.row.id, m.row.key, m.row.topic, m.row.eventID, m.row.eventType, m.row.payload,
				r.d.Time(m.row.createdAt.Time), m.row.attempts+1, truncate(m.err.Error()), r.d.Time(done)); err != nil && !sqldialect.IsDuplicate(err) {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE outbox SET published_at = NULL, attempts = ?, last_error = ? WHERE id = ?`,
				m.row.attempts+1, truncate(m.err.Error()), m.row.id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return PollResult{}, err
	}
	for _, p := range published {
		if r.hooks.OnPublished != nil {
			r.hooks.OnPublished(p)
		}
	}
	for _, f := range failed {
		if f.Expired {
			r.log.Error("outbox row expired; moved to outbox_failed", "outboxId", f.OutboxID, "eventId", f.EventID, "attempts", f.Attempts, "err", f.Err)
		} else {
			r.log.Warn("outbox publish failed; will retry", "outboxId", f.OutboxID, "eventId", f.EventID, "attempts", f.Attempts, "nextRetryAt", f.NextRetryAt, "err", f.Err)
		}
		if r.hooks.OnFailed != nil {
			r.hooks.OnFailed(f)
		}
	}
	res.More = retry == nil && len(send) == r.batch && len(rows) == r.batch
	return res, nil
}

// headers are the record headers kafkarecord.New gives the row's event:
// eventType and, for a notification, its subType (read from the payload,
// whose envelope names it).
func headers(row outboxRow) []kgo.RecordHeader {
	h := []kgo.RecordHeader{{Key: kafkarecord.HeaderEventType, Value: []byte(row.eventType)}}
	if row.eventType != string(envelope.TypeNotification) {
		return h
	}
	var env struct {
		SubType string `json:"subType"`
	}
	if json.Unmarshal([]byte(row.payload), &env) == nil && env.SubType != "" {
		h = append(h, kgo.RecordHeader{Key: kafkarecord.HeaderSubType, Value: []byte(env.SubType)})
	}
	return h
}

func (r *Relay) retryDelay(attempts int) time.Duration {
	return backoff.Policy{Min: r.backoff, Max: r.maxBackoff}.Delay(attempts)
}

func (r *Relay) read(ctx context.Context, cursor int64) ([]outboxRow, error) {
	rs, err := r.db.QueryContext(ctx, `SELECT id, aggregate_key, topic, event_id, event_type, payload, created_at, attempts, next_retry_at
		FROM outbox WHERE id > ? ORDER BY id LIMIT ?`, cursor, r.batch)
	if err != nil {
		return nil, fmt.Errorf("outbox: relay: read outbox: %w", err)
	}
	defer rs.Close()
	var out []outboxRow
	for rs.Next() {
		var o outboxRow
		if err := rs.Scan(&o.id, &o.key, &o.topic, &o.eventID, &o.eventType, &o.payload, &o.createdAt, &o.attempts, &o.nextRetry); err != nil {
			return nil, fmt.Errorf("outbox: relay: read outbox: %w", err)
		}
		out = append(out, o)
	}
	return out, rs.Err()
}

// commit records a poll's outcome in one transaction, only if this relay
// still holds the lease (else ErrNotLeader and nothing changes).
func (r *Relay) commit(ctx context.Context, from, to int64, at time.Time, retry *FailedInfo, moves func(*sql.Tx) error) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outbox: relay: begin: %w", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE outbox_cursor SET last_id = ?, updated_at = ?, lease_seq = lease_seq + 1 WHERE id = 1 AND owner = ? AND last_id = ?`,
		to, r.d.Time(at), r.owner, from)
	if err != nil {
		return fmt.Errorf("outbox: relay: cursor: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return ErrNotLeader
	}
	if to > from {
		if _, err := tx.ExecContext(ctx, `UPDATE outbox SET published_at = ? WHERE id > ? AND id <= ? AND published_at IS NULL`,
			r.d.Time(at), from, to); err != nil {
			return fmt.Errorf("outbox: relay: mark published: %w", err)
		}
	}
	if err := moves(tx); err != nil {
		return fmt.Errorf("outbox: relay: outbox_failed: %w", err)
	}
	if retry != nil {
		msg := truncate(retry.Err.Error())
		if _, err := tx.ExecContext(ctx, `UPDATE outbox SET attempts = ?, next_retry_at = ?, last_error = ? WHERE id = ?`,
			retry.Attempts, r.d.Time(retry.NextRetryAt), msg, retry.OutboxID); err != nil {
			return fmt.Errorf("outbox: relay: schedule retry: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outbox: relay: commit: %w", err)
	}
	return nil
}

// truncate keeps error texts short enough for a TEXT column of either dialect.
func truncate(msg string) string {
	if len(msg) > 2000 {
		return msg[:2000]
	}
	return msg
}
