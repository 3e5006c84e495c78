package idempotency

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"
)

// harness is a store plus a way to move its time forward.
type harness struct {
	store   Store
	advance func(time.Duration)
}

type backend struct {
	name string
	open func(testing.TB) harness
}

// eachStore runs fn on every store: miniredis and SQLite, and under the
// integration tag a real redis-server, a 3-node Redis Cluster and MariaDB.
func eachStore(t *testing.T, fn func(t *testing.T, h harness)) {
	t.Helper()
	for _, b := range append([]backend{{"miniredis", miniredisHarness}, {"sqlite", sqliteHarness}}, realBackends()...) {
		t.Run(b.name, func(t *testing.T) { fn(t, b.open(t)) })
	}
}

func miniredisHarness(tb testing.TB) harness {
	tb.Helper()
	m := miniredis.RunT(tb)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	tb.Cleanup(func() { rdb.Close() })
	s, err := NewRedisStore(rdb)
	if err != nil {
		tb.Fatal(err)
	}
	return harness{store: s, advance: m.FastForward}
}

// fakeClock is a settable clock for the SQL store.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 2, 6, 14, 30, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func openSQLite(tb testing.TB) *sql.DB {
	tb.Helper()
	return testenv.SQLitePool(tb)
}

func sqliteHarness(tb testing.TB) harness {
	tb.Helper()
	return sqlHarness(tb, openSQLite(tb))
}

func sqlHarness(tb testing.TB, db *sql.DB, opts ...SQLOption) harness {
	tb.Helper()
	clk := newFakeClock()
	s, err := NewSQLStore(db, append([]SQLOption{WithClock(clk.Now)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return harness{store: s, advance: clk.Advance}
}

var keySeq atomic.Int64

// uniqueKey returns a key no other test uses (real servers are shared).
func uniqueKey(tb testing.TB) string {
	name := tb.Name()
	if len(name) > 100 {
		name = name[len(name)-100:]
	}
	return fmt.Sprintf("test-%d-%d:%s", time.Now().UnixNano(), keySeq.Add(1), name)
}
