package e2e

import (
	"context"
	"database/sql"
	"fmt"
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
// default — unless the clock there is where a story's counts would depend
// on when it runs, then the first of a few other zones where it is not:
//   - the 1st of the month: the night-block story sends events at the
//     latest 21:59 before now, which on the 1st is last month, and the
//     invariants compare the SQL history with this month's Redis counters;
//   - within storyMargin of midnight (a day's or a month's counters turn
//     during the run), or of the night block's edges 22:00 and 07:00 (the
//     API's answer to the policy change and the processor's decision on it,
//     a moment later, would see different nights).
//
// The others are the fixed offsets from UTC-12 to UTC+14, half an hour
// apart; one of them is always clear (TestStoryZone).
func storyZone(now time.Time) *time.Location {
	seoul, _ := policy.LoadZone(policy.DefaultZone)
	return storyZoneFrom(now, seoul)
}

// storyZoneFrom is storyZone with the default zone given.
func storyZoneFrom(now time.Time, seoul *time.Location) *time.Location {
	if storySafe(now.In(seoul)) {
		return seoul
	}
	for off := -12 * 60; off <= 14*60; off += 30 {
		sign, a := '+', off
		if off < 0 {
			sign, a = '-', -off
		}
		z := time.FixedZone(fmt.Sprintf("UTC%c%02d%02d", sign, a/60, a%60), off*60)
		if storySafe(now.In(z)) {
			return z
		}
	}
	return seoul
}

// TestStoryZone: at every minute of two years, month turns and leap day
// included, the stories' zone is clear of the turns they depend on, and it
// is Seoul whenever Seoul is.
func TestStoryZone(t *testing.T) {
	seoul, _ := policy.LoadZone(policy.DefaultZone)
	end := time.Date(2028, 3, 2, 0, 0, 0, 0, time.UTC)
	step := time.Minute
	if testing.Short() { // every 7th minute still meets every 10-minute margin
		step = 7 * time.Minute
	}
	for now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC); now.Before(end); now = now.Add(step) {
		z := storyZoneFrom(now, seoul)
		if !storySafe(now.In(z)) {
			t.Fatalf("%s: zone %s at %s", now, z, now.In(z))
		}
		if storySafe(now.In(seoul)) && z.String() != seoul.String() {
			t.Fatalf("%s: zone %s, but Seoul is clear", now, z)
		}
	}
	for _, tc := range []struct {
		local string
		safe  bool
	}{
		{"2026-11-27 01:25", true}, {"2026-11-27 21:50", true}, {"2026-11-27 21:51", false},
		{"2026-11-27 22:09", false}, {"2026-11-27 22:10", true}, {"2026-11-27 06:55", false},
		{"2026-11-27 23:55", false}, {"2026-11-28 00:05", false}, {"2026-12-01 12:00", false},
	} {
		local, err := time.ParseInLocation("2006-01-02 15:04", tc.local, seoul)
		if err != nil {
			t.Fatal(err)
		}
		if got := storySafe(local); got != tc.safe {
			t.Errorf("storySafe(%s) = %v, want %v", tc.local, got, tc.safe)
		}
	}
}

// storyMargin is how far from a turn of the clock the stories start: they
// take well under a minute.
const storyMargin = 10 * time.Minute

// storySafe reports whether local is neither on the 1st of a month nor
// within storyMargin of midnight, 22:00 or 07:00.
func storySafe(local time.Time) bool {
	if local.Day() == 1 {
		return false
	}
	day := time.Date(local.Year(), local.Month(), local.Day(), 0, 0, 0, 0, local.Location())
	for _, edge := range []time.Duration{0, 7 * time.Hour, 22 * time.Hour, 24 * time.Hour} {
		if d := local.Sub(day.Add(edge)); d > -storyMargin && d < storyMargin {
			return false
		}
	}
	return true
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
