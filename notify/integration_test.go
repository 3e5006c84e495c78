//go:build integration

package notify

import (
	"database/sql"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope/consumer"
	"github.com/dabom/dpcs/idempotency"
	"github.com/dabom/dpcs/internal/testenv"
)

// The integration tag runs the inbox suite and the notifier on MariaDB
// (DPCS_TEST_MYSQL_DSN) with the guard on a real redis-server
// (DPCS_TEST_REDIS_ADDR), as started by `make integration`. A missing
// address fails the test: it never skips.
func env(tb testing.TB, name string) string {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		tb.Fatalf("%s is not set (run `make integration`)", name)
	}
	return v
}

// openMariaDB returns a connection to a database of its own, dropped after
// the test; parseTime as given, to cover both ways times come back.
func openMariaDB(tb testing.TB, parseTime bool) *sql.DB {
	tb.Helper()
	cfg, err := mysql.ParseDSN(env(tb, "DPCS_TEST_MYSQL_DSN"))
	if err != nil {
		tb.Fatal(err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		tb.Fatal(err)
	}
	defer admin.Close()
	name := fmt.Sprintf("notify_test_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		tb.Fatal(err)
	}
	cfg.DBName, cfg.ParseTime = name, parseTime
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		db.Close()
		if a, err := sql.Open("mysql", env(tb, "DPCS_TEST_MYSQL_DSN")); err == nil {
			a.Exec("DROP DATABASE " + name)
			a.Close()
		}
	})
	return db
}

func TestSQLInboxMariaDB(t *testing.T) {
	for _, parseTime := range []bool{true, false} {
		t.Run(fmt.Sprint("parseTime=", parseTime), func(t *testing.T) {
			inboxSuite(t, newInbox(t, openMariaDB(t, parseTime)))
			askForMoreAudience(t, newInbox(t, openMariaDB(t, parseTime)))
		})
	}
}

func TestSQLInboxBatchMariaDB(t *testing.T) {
	for _, parseTime := range []bool{true, false} {
		t.Run(fmt.Sprint("parseTime=", parseTime), func(t *testing.T) {
			inboxBatchSuite(t, newInbox(t, openMariaDB(t, parseTime)))
		})
	}
}

// Story 5 on real servers: each notification delivered 3 times is stored
// once and pushed once, the guard on redis-server.
func TestNotifierMariaDBRedis(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: env(t, "DPCS_TEST_REDIS_ADDR")})
	defer rdb.Close()
	st, err := idempotency.NewRedisStore(rdb)
	if err != nil {
		t.Fatal(err)
	}
	guard, err := idempotency.New(st)
	if err != nil {
		t.Fatal(err)
	}
	c := newFake(t)
	inbox := newInbox(t, openMariaDB(t, true))
	hub, sub := newHubSub(t, 100, Filter{MemberID: 1, Role: RoleOwner})
	var handled atomic.Int32
	group := fmt.Sprintf("notification-group-it-%d", time.Now().UnixNano())
	n, errc := startNotifier(t, c, inbox, hub, WithGuard(guard), WithConsumer(consumer.WithGroup(group)),
		WithHooks(Hooks{OnNotify: func(NotifyInfo) { handled.Add(1) }}))
	suffix := fmt.Sprint(time.Now().UnixNano())
	recs := []*kgo.Record{
		blockedRec(t, "ntf_b"+suffix, 100, 3),
		thresholdRec(t, "ntf_t"+suffix, 100, 10, "2026-02"),
		thresholdRec(t, "ntf_t2"+suffix, 100, 10, "2026-02"),
	}
	p := testenv.Producer(t, c)
	for range 3 {
		produce(t, p, recs...)
	}
	testenv.Eventually(t, "9 handled", 20*time.Second, func() bool { return handled.Load() == 9 })
	stopNotifier(t, n, errc)
	if got := len(rows(t, inbox, 100)); got != 2 {
		t.Errorf("rows = %d, want 2", got)
	}
	if got := drainSub(sub); len(got) != 2 {
		t.Errorf("pushed %d, want 2", len(got))
	}
}
