package e2e

import (
	"context"
	"database/sql"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/internal/miniclock"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service"
)

// backend is the infrastructure the stories run on. The embedded backend
// needs nothing installed; the integration build adds a real redis-server,
// a 3-node Redis Cluster and MariaDB (integration_test.go).
type backend struct {
	name string
	// env returns the DPCS_* variables that point a system at the backend's
	// Redis and SQL for test t (none: service.StartSystem embeds them).
	env func(t *testing.T) map[string]string
	// open returns Redis and SQL for a system composed from its parts
	// (story 6), each behind a switch that takes it away for a while.
	open func(t *testing.T) *infra
}

// infra is Redis and SQL with outage switches.
type infra struct {
	rdb redis.UniversalClient
	// redisDown makes Redis unreachable (connections cut, new ones refused)
	// and redisUp brings it back with its data.
	redisDown, redisUp func()
	// db is what the workers use (through the SQL switch when there is one);
	// direct reaches the same database around the switch, for checks.
	db, direct *sql.DB
	// sqlDown and sqlUp are nil when the backend cannot take SQL away (the
	// embedded SQLite is a file in the process).
	sqlDown, sqlUp func()
}

func backends() []backend { return append([]backend{embedded()}, realBackends()...) }

// embedded is kfake + miniredis + SQLite: what make run starts.
func embedded() backend {
	return backend{
		name: "embedded",
		env:  func(*testing.T) map[string]string { return nil },
		open: func(t *testing.T) *infra {
			t.Helper()
			m := miniredis.NewMiniRedis()
			if err := m.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(m.Close)
			t.Cleanup(miniclock.Follow(m, time.Second)) // as the all-in-one: leases and TTLs end
			rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), DialTimeout: time.Second})
			t.Cleanup(func() { rdb.Close() })
			db, err := service.Config{SQLitePath: filepath.Join(t.TempDir(), "dpcs.db")}.SQL(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return &infra{rdb: rdb, db: db, direct: db,
				redisDown: m.Close,
				redisUp: func() {
					// Restart keeps the data, on the same address.
					if err := m.Restart(); err != nil {
						t.Errorf("miniredis restart: %v", err)
					}
				}}
		},
	}
}

// storyZone is the service time zone the stories run in: Asia/Seoul, the
// default — unless it is the 1st of the month there. The night-block story
// sends events at the latest 21:59 before now, which on the 1st is last
// month, and the invariants compare the SQL history with this month's Redis
// counters; then a zone where it is not the 1st (one of the three always is
// not: they span 26 hours).
func storyZone(now time.Time) *time.Location {
	seoul, _ := policy.LoadZone(policy.DefaultZone)
	for _, z := range []*time.Location{seoul, time.FixedZone("UTC-12", -12*3600), time.FixedZone("UTC+14", 14*3600)} {
		if now.In(z).Day() != 1 {
			return z
		}
	}
	return seoul
}

// familyBase returns the first of 100 family ids for one test, random per
// run: real Redis servers outlive a test run, and two runs must not meet in
// the same family keys.
func familyBase() int64 { return 1_000_000 + rand.Int64N(1<<30)*100 }

// logger is a discard logger, or debug output on stderr with DPCS_TEST_DEBUG set.
func logger() *slog.Logger {
	if os.Getenv("DPCS_TEST_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}
