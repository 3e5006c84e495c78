package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/dabom/dpcs/internal/sqldialect"
)

// RedisState is the row of redis_state: the Redis state generation SQL
// knows, the rebuild lease, and the last rebuild's figures.
type RedisState struct {
	// Generation is the generation the last rebuild wrote to Redis and SQL;
	// "" when Redis was never rebuilt from SQL.
	Generation string
	// Owner holds the rebuild lease until LeaseUntil ("" when free).
	Owner      string
	LeaseUntil time.Time
	// RebuiltAt, Reason, Families, Failed and Duration describe the last rebuild.
	RebuiltAt time.Time
	Reason    string
	Families  int64
	Failed    int64
	Duration  time.Duration
}

// RedisState reads the redis_state row.
func (s *Store) RedisState(ctx context.Context) (RedisState, error) {
	var st RedisState
	var until, at sqldialect.NullTime
	var ms int64
	err := s.db.QueryRowContext(ctx, `SELECT generation, owner, lease_until, rebuilt_at, reason, families, failed, duration_ms
		FROM redis_state WHERE id = 1`).Scan(&st.Generation, &st.Owner, &until, &at, &st.Reason, &st.Families, &st.Failed, &ms)
	if err != nil {
		return RedisState{}, dbErr("redis state", err)
	}
	st.LeaseUntil, st.RebuiltAt, st.Duration = until.Time, at.Time, time.Duration(ms)*time.Millisecond
	return st, nil
}

// AcquireRebuild takes (or renews) the rebuild lease for owner until now +
// lease, provided the generation is still gen (a rebuild that already
// finished is not run again). It reports whether owner holds the lease.
func (s *Store) AcquireRebuild(ctx context.Context, owner, gen string, lease time.Duration) (bool, error) {
	if owner == "" || len(owner) > 128 {
		return false, invalid("owner", "must be 1..128 bytes")
	}
	now := s.now()
	res, err := s.db.ExecContext(ctx, `UPDATE redis_state SET owner = ?, lease_until = ?, lease_seq = lease_seq + 1
		WHERE id = 1 AND generation = ? AND (owner = ? OR owner = '' OR lease_until < ?)`,
		owner, s.t(now.Add(lease)), gen, owner, s.t(now))
	if err != nil {
		return false, dbErr("acquire rebuild lease", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, dbErr("acquire rebuild lease", err)
	}
	return n == 1, nil
}

// RebuildDone records a finished rebuild by the lease holder: the new
// generation and its figures; the lease is released. It fails when owner no
// longer holds the lease.
func (s *Store) RebuildDone(ctx context.Context, owner, gen string, done RedisState) error {
	res, err := s.db.ExecContext(ctx, `UPDATE redis_state SET generation = ?, owner = '', lease_until = ?, lease_seq = lease_seq + 1,
		rebuilt_at = ?, reason = ?, families = ?, failed = ?, duration_ms = ? WHERE id = 1 AND owner = ?`,
		gen, s.t(time.Unix(0, 0)), s.t(s.now()), reasonText(done.Reason), done.Families, done.Failed,
		done.Duration.Milliseconds(), owner)
	if err != nil {
		return dbErr("record rebuild", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("store: record rebuild: the lease of %s was lost (%d rows, %v)", owner, n, err)
	}
	return nil
}

// SweepDone records, for generation gen (restored on touch, named by
// RebuildDone before its families were restored), how many families the
// rebuild's sweep restored and failed to and how long the whole rebuild
// took. A newer generation named meanwhile is left alone.
func (s *Store) SweepDone(ctx context.Context, gen string, done RedisState) error {
	_, err := s.db.ExecContext(ctx, `UPDATE redis_state SET families = ?, failed = ?, duration_ms = ? WHERE id = 1 AND generation = ?`,
		done.Families, done.Failed, done.Duration.Milliseconds(), gen)
	return dbErrOrNil("record rebuild sweep", err)
}

// ReleaseRebuild gives the lease up without a new generation (a failed rebuild).
func (s *Store) ReleaseRebuild(ctx context.Context, owner string) error {
	_, err := s.db.ExecContext(ctx, `UPDATE redis_state SET owner = '', lease_until = ?, lease_seq = lease_seq + 1 WHERE id = 1 AND owner = ?`,
		s.t(time.Unix(0, 0)), owner)
	return dbErrOrNil("release rebuild lease", err)
}

func dbErrOrNil(op string, err error) error {
	if err == nil || err == sql.ErrNoRows {
		return nil
	}
	return dbErr(op, err)
}

func reasonText(s string) string {
	if len(s) > 512 {
		return s[:512]
	}
	return s
}

// RedisMark is a row of redis_marks: stream Stream of marks reached N on
// the Redis node whose marker key is Node ("": on every node, as the
// synchronous decisions' batches mark), under a state generation.
type RedisMark struct {
	Node, Stream string
	N            int64
}

// RecordMark records that stream reached n on node under generation gen,
// keeping the highest n recorded (a late or repeated record lowers nothing).
func (s *Store) RecordMark(ctx context.Context, gen string, m RedisMark) error {
	switch {
	case gen == "" || len(gen) > 64:
		return invalid("generation", "must be 1..64 bytes")
	case len(m.Node) > 191:
		return invalid("node", "must be at most 191 bytes (\"\": every node)")
	case m.Stream == "" || len(m.Stream) > 191:
		return invalid("stream", "must be 1..191 bytes")
	case m.N < 0:
		return invalid("n", "must be ≥ 0")
	}
	q := `INSERT INTO redis_marks (generation, node, stream, n) VALUES (?, ?, ?, ?)
		ON CONFLICT (generation, node, stream) DO UPDATE SET n = max(n, excluded.n)`
	if s.d == sqldialect.MySQL {
		q = `INSERT INTO redis_marks (generation, node, stream, n) VALUES (?, ?, ?, ?)
		ON DUPLICATE KEY UPDATE n = GREATEST(n, VALUES(n))`
	}
	_, err := s.db.ExecContext(ctx, q, gen, m.Node, m.Stream, m.N)
	return dbErrOrNil("record redis mark", err)
}

// RedisMarks returns the marks recorded under generation gen.
func (s *Store) RedisMarks(ctx context.Context, gen string) ([]RedisMark, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT node, stream, n FROM redis_marks WHERE generation = ? ORDER BY node, stream`, gen)
	if err != nil {
		return nil, dbErr("redis marks", err)
	}
	return collect(rows, "redis marks", func(sc scanner) (m RedisMark, err error) {
		err = sc.Scan(&m.Node, &m.Stream, &m.N)
		return m, err
	})
}

// DropRedisMarks deletes the marks of every generation but gen: a rebuild
// to gen starts the counts again.
func (s *Store) DropRedisMarks(ctx context.Context, gen string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM redis_marks WHERE generation <> ?`, gen)
	return dbErrOrNil("drop redis marks", err)
}
