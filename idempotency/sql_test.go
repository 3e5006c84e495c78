package idempotency

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// newSQLiteStore is a migrated SQLStore on a fresh SQLite file with the
// given clock.
func newSQLiteStore(tb testing.TB, now func() time.Time) (*sql.DB, *SQLStore) {
	tb.Helper()
	db := openSQLite(tb)
	s, err := NewSQLStore(db, WithClock(now))
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return db, s
}

// scriptedClock returns each of times in turn, then the last one for ever.
func scriptedClock(times ...time.Time) func() time.Time {
	var mu sync.Mutex
	i := 0
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t := times[min(i, len(times)-1)]
		i++
		return t
	}
}

var t0 = time.Date(2026, 2, 6, 14, 30, 0, 0, time.UTC)

// A claim that expires between the store's statements (the insert and the
// take-over saw it live, the read after them sees it expired) is taken over
// in the next round, and the expired owner can no longer complete it.
func TestSQLStoreClaimExpiresBetweenStatements(t *testing.T) {
	ctx := context.Background()
	now := t0
	_, s := newSQLiteStore(t, func() time.Time { return now })
	mustClaim(t, s, "k", "a", 10*time.Second, Acquired)

	// Round 1 starts 1 s later (insert ignored, take-over refused: the
	// lease runs to t0+10s); the read after it is at t0+11s: expired.
	// Round 2 at t0+11s takes it over.
	s.now = scriptedClock(t0.Add(time.Second), t0.Add(11*time.Second))
	c := mustClaim(t, s, "k", "b", 10*time.Second, Acquired)
	if c.RetryAfter != 0 || c.Result != nil {
		t.Errorf("claim = %+v", c)
	}
	if err := s.Complete(ctx, "k", "a", []byte("stale"), time.Hour); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Complete by the expired owner = %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(ctx, "k", "b", []byte("fresh"), time.Hour); err != nil {
		t.Fatalf("Complete by the new owner: %v", err)
	}
	if d := mustClaim(t, s, "k", "c", time.Second, Done); string(d.Result) != "fresh" {
		t.Errorf("result %q, want fresh", d.Result)
	}
}

// A key that changes under every round gives up after a few with an error
// instead of looping or answering a wrong outcome: here a claim that is
// live when tried and expired when read, round after round.
func TestSQLStoreClaimGivesUp(t *testing.T) {
	ctx := context.Background()
	now := t0
	_, s := newSQLiteStore(t, func() time.Time { return now })
	mustClaim(t, s, "k", "a", time.Hour, Acquired)
	flip := false
	s.now = func() time.Time { // live at the statements, expired at the read
		flip = !flip
		if flip {
			return t0
		}
		return t0.Add(2 * time.Hour)
	}
	c, err := s.Claim(ctx, "k", "b", time.Minute)
	if err == nil || err.Error() != `key "k" changed under every attempt to claim it` {
		t.Fatalf("Claim = %+v, %v; want the give-up error", c, err)
	}
	s.now = func() time.Time { return t0 }
	if err := s.Complete(ctx, "k", "a", nil, time.Hour); err != nil {
		t.Errorf("the owner's claim was disturbed: %v", err)
	}
}

// A key whose row vanishes between the insert and the read every round (a
// trigger drops its insert, as a release racing each round would) gives up
// too, and claims nothing.
func TestSQLStoreClaimVanishingRow(t *testing.T) {
	ctx := context.Background()
	db, s := newSQLiteStore(t, func() time.Time { return t0 })
	if _, err := db.ExecContext(ctx, `CREATE TRIGGER ghost BEFORE INSERT ON processed_events
		WHEN NEW.idempotency_key = 'ghost' BEGIN SELECT RAISE(IGNORE); END`); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Claim(ctx, "ghost", "a", time.Minute); err == nil || !strings.Contains(err.Error(), "changed under every attempt") {
		t.Fatalf("Claim = %+v, %v; want the give-up error", c, err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM processed_events").Scan(&n); err != nil || n != 0 {
		t.Errorf("%d rows, %v; want none", n, err)
	}
	mustClaim(t, s, "other", "a", time.Minute, Acquired)
}

// A row the store cannot read (done is neither 0 nor 1) is an error.
func TestSQLStoreClaimUnreadableRow(t *testing.T) {
	ctx := context.Background()
	db, s := newSQLiteStore(t, func() time.Time { return t0 })
	if _, err := db.ExecContext(ctx, "INSERT INTO processed_events VALUES ('k', 't', 7, NULL, ?, ?)",
		t0.Add(time.Hour).UnixMilli(), t0.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Claim(ctx, "k", "a", time.Minute); err == nil || c.Outcome != 0 {
		t.Errorf("Claim = %+v, %v; want an error", c, err)
	}
}

// A done row without a result (NULL, as another writer may leave it) reads
// as an empty result, not a missing one.
func TestSQLStoreNullResult(t *testing.T) {
	ctx := context.Background()
	db, s := newSQLiteStore(t, func() time.Time { return t0 })
	if _, err := db.ExecContext(ctx, "INSERT INTO processed_events VALUES ('k', 't', 1, NULL, ?, ?)",
		t0.Add(time.Hour).UnixMilli(), t0.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if c := mustClaim(t, s, "k", "a", time.Minute, Done); c.Result == nil || len(c.Result) != 0 {
		t.Errorf("result %#v, want empty and not nil", c.Result)
	}
}

// Every operation on a closed database fails with the database's error.
func TestSQLStoreClosedDatabase(t *testing.T) {
	ctx := context.Background()
	db, s := newSQLiteStore(t, func() time.Time { return t0 })
	mustClaim(t, s, "k", "a", time.Minute, Acquired)
	db.Close()
	for name, op := range map[string]func() error{
		"Migrate":  func() error { return s.Migrate(ctx) },
		"Claim":    func() error { _, err := s.Claim(ctx, "j", "a", time.Minute); return err },
		"Complete": func() error { return s.Complete(ctx, "k", "a", nil, time.Minute) },
		"Release":  func() error { return s.Release(ctx, "k", "a") },
		"Purge":    func() error { _, err := s.Purge(ctx); return err },
	} {
		err := op()
		if err == nil || !strings.Contains(err.Error(), "database is closed") || errors.Is(err, ErrLeaseLost) {
			t.Errorf("%s: %v, want the closed database's error", name, err)
		}
	}
}

// A database whose driver is neither MySQL nor SQLite needs WithDialect.
func TestSQLStoreDialect(t *testing.T) {
	db := sql.OpenDB(otherConnector{})
	defer db.Close()
	if _, err := NewSQLStore(db); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "otherdriver") {
		t.Errorf("NewSQLStore on an unknown driver: %v, want ErrInvalid naming it", err)
	}
	for dialect, want := range map[string]string{"mariadb": "ENGINE=InnoDB", "sqlite3": "idempotency_key TEXT"} {
		s, err := NewSQLStore(db, WithDialect(dialect), WithTable("handled"))
		if err != nil {
			t.Fatalf("%s: %v", dialect, err)
		}
		schema := s.Schema()
		if !strings.Contains(schema, want) || !strings.Contains(schema, "CREATE TABLE IF NOT EXISTS handled") || strings.Contains(schema, "processed_events") {
			t.Errorf("%s schema:\n%s", dialect, schema)
		}
	}
}

// otherConnector opens connections of a driver no dialect is known for; it
// is never asked for one.
type otherConnector struct{}

type otherdriver struct{}

func (otherConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("otherdriver: no connections")
}
func (otherConnector) Driver() driver.Driver { return otherdriver{} }
func (otherdriver) Open(string) (driver.Conn, error) {
	return nil, errors.New("otherdriver: no connections")
}
