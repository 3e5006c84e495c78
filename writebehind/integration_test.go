//go:build integration

package writebehind

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/outageproxy"
	"github.com/dabom/dpcs/internal/sqldialect"
)

// mariaDB opens a fresh database on the MariaDB of `make integration`
// (DPCS_TEST_MYSQL_DSN; a missing variable fails, never skips), reached
// through addr if not empty (an outageproxy.Proxy). It is dropped afterwards, so
// tests of other packages running at the same time are not disturbed.
func mariaDB(tb testing.TB, proxy bool) (db, direct *sql.DB, _ *outageproxy.Proxy) {
	tb.Helper()
	db, direct, p := emptyMariaDB(tb, proxy)
	if err := MigrateUsage(context.Background(), direct); err != nil {
		tb.Fatal(err)
	}
	return db, direct, p
}

// emptyMariaDB is mariaDB without the migration: a database with no tables.
func emptyMariaDB(tb testing.TB, proxy bool) (db, direct *sql.DB, _ *outageproxy.Proxy) {
	tb.Helper()
	dsn := os.Getenv("DPCS_TEST_MYSQL_DSN")
	if dsn == "" {
		tb.Fatal("DPCS_TEST_MYSQL_DSN is not set (run `make integration`)")
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	defer admin.Close()
	name := fmt.Sprintf("dpcs_wb_%d", time.Now().UnixNano())
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		tb.Fatalf("mariadb: %v", err)
	}
	tb.Cleanup(func() {
		if a, err := sql.Open("mysql", dsn); err == nil {
			a.Exec("DROP DATABASE " + name)
			a.Close()
		}
	})
	cfg.DBName = name
	direct, err = sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { direct.Close() })
	var p *outageproxy.Proxy
	if proxy {
		p = outageproxy.New(tb, cfg.Addr)
		cfg.Addr = p.Addr()
		cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = time.Second, 5*time.Second, 5*time.Second
	}
	db, err = sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		tb.Fatal(err)
	}
	db.SetMaxIdleConns(8)
	tb.Cleanup(func() { db.Close() })
	return db, direct, p
}

func TestMigrateOldTableMariaDB(t *testing.T) {
	_, db, _ := emptyMariaDB(t, false)
	testMigrateOldTable(t, db, "mysql")
}

// Several services starting at once all migrate an old table: each column
// is added once, and every MigrateUsage succeeds.
func TestMigrateConcurrentlyMariaDB(t *testing.T) {
	_, db, _ := emptyMariaDB(t, false)
	ctx := context.Background()
	old, err := os.ReadFile("testdata/usage_record_v1_mysql.sql")
	if err != nil {
		t.Fatal(err)
	}
	if err := sqldialect.Exec(ctx, db, string(old)); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for range cap(errs) {
		go func() { errs <- MigrateUsage(ctx, db) }()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	cols := columnsOf(t, db, sqldialect.MySQL)
	for _, c := range usageColumns {
		if !cols[c] {
			t.Errorf("column %s missing", c)
		}
	}
}

func eventIDs(tb testing.TB, db *sql.DB) map[string]bool {
	tb.Helper()
	rows, err := db.Query("SELECT event_id FROM usage_record")
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			tb.Fatal(err)
		}
		out[id] = true
	}
	return out
}

func TestUsageWriterMariaDB(t *testing.T) {
	db, _, _ := mariaDB(t, false)
	ctx := context.Background()
	w, err := NewUsageWriter(db, WithMaxRows(7))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rows := usageRows(30, 0)
	rows[3].Rule = "BLOCK:APP:com.youtube.app"
	for _, b := range [][]UsageRecord{rows[:20], rows[10:], rows[:3]} {
		if err := w.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if w.Inserted() != 30 {
		t.Errorf("Inserted() = %d, want 30", w.Inserted())
	}
	got := readUsage(t, db)
	if len(got) != 30 || got[3].Rule != rows[3].Rule || !got[29].EventTime.Equal(rows[29].EventTime) {
		t.Errorf("rows: %d, %+v", len(got), got[29])
	}
}

// The outage test (issue 4): 100k usage-persist records, 5 % of them
// redelivered duplicates, through kfake and the Runner into MariaDB; the
// database goes away for 10 s mid-run; the first runner is then stopped
// without draining (a crash) and a second one resumes from the committed
// offsets. Every unique record must end up in usage_record exactly once, and
// at every moment sampled the committed offsets cover only records whose
// rows exist.
func TestOutageMariaDB(t *testing.T) {
	db, direct, proxy := mariaDB(t, true)
	c := newFake(t)
	p := producer(t, c)

	const total, unique = 100_000, 95_000
	run := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(1, 2))
	type pos struct {
		part int32
		off  int64
	}
	var (
		mu     sync.Mutex
		origin = map[pos]string{}
	)
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		var wg sync.WaitGroup
		next := 0
		for i := range total {
			var id string
			if next > 0 && rng.IntN(20) == 0 && i-next < total-unique { // a redelivery of an earlier record
				id = fmt.Sprintf("evt_%d_%d", run, rng.IntN(next))
			} else {
				id = fmt.Sprintf("evt_%d_%d", run, next)
				next++
			}
			wg.Add(1)
			p.Produce(context.Background(), persistRecord(t, id, int64(i%997+1)), func(r *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					t.Errorf("produce: %v", err)
					return
				}
				mu.Lock()
				origin[pos{r.Partition, r.Offset}] = id
				mu.Unlock()
			})
		}
		wg.Wait()
		if next != unique {
			t.Errorf("produced %d unique records, want %d", next, unique)
		}
	}()

	// checkCommitted: every record below a committed offset has its row.
	checkCommitted := func(when string) int64 {
		offs := committed(t, c, DefaultGroup, envelope.TopicUsagePersist)
		ids := eventIDs(t, direct)
		mu.Lock()
		defer mu.Unlock()
		var n int64
		for ps, id := range origin {
			if o, ok := offs[ps.part]; ok && ps.off < o {
				n++
				if !ids[id] {
					t.Fatalf("%s: partition %d offset %d committed (< %d) but %s is not in usage_record", when, ps.part, ps.off, o, id)
				}
			}
		}
		return n
	}

	var errs, pauses atomic.Int64
	w1, _ := NewUsageWriter(db)
	r1 := newRunner(t, c, w1, WithBatchSize(100), WithInterval(100*time.Millisecond),
		WithBackoff(100*time.Millisecond, 2*time.Second),
		WithHooks(Hooks{OnError: func(ErrorInfo) { errs.Add(1) }, OnPause: func(PauseInfo) { pauses.Add(1) }}))
	done1 := make(chan error, 1)
	go func() { done1 <- r1.Run(context.Background()) }()

	waitFor(t, "30k rows before the outage", 60*time.Second, func() bool { return w1.Inserted() >= 30_000 })
	proxy.Down()
	t.Logf("database down at %d rows", w1.Inserted())
	time.Sleep(5 * time.Second)
	before := w1.Inserted()
	n := checkCommitted("during the outage")
	time.Sleep(5 * time.Second)
	if w1.Inserted() != before {
		t.Errorf("rows inserted while the database was down: %d → %d", before, w1.Inserted())
	}
	proxy.Up(t)
	t.Logf("database up; %d committed records verified during the outage; %d write errors, %d pauses", n, errs.Load(), pauses.Load())
	if errs.Load() == 0 || pauses.Load() == 0 {
		t.Errorf("no write errors (%d) or pauses (%d) during the outage", errs.Load(), pauses.Load())
	}
	waitFor(t, "70k rows after the outage", 60*time.Second, func() bool { return w1.Inserted() >= 70_000 })

	// Crash: stop without draining.
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	_ = r1.Close(dead)
	<-done1
	n = checkCommitted("after the crash")
	t.Logf("runner 1 inserted %d rows; %d records committed", w1.Inserted(), n)

	<-produced
	w2, _ := NewUsageWriter(db)
	r2 := newRunner(t, c, w2, WithBatchSize(100), WithInterval(100*time.Millisecond))
	stop2 := start(t, r2)
	// Wait on the table, not on the writers' counters: a batch whose COMMIT
	// reached the server while the proxy cut the reply (the driver's
	// "unexpected EOF") is in the table but was counted by neither writer,
	// because its retry found every row already there.
	countRows := func() (rows, distinct int64) {
		if err := direct.QueryRow("SELECT COUNT(*), COUNT(DISTINCT event_id) FROM usage_record").Scan(&rows, &distinct); err != nil {
			t.Fatal(err)
		}
		return rows, distinct
	}
	waitFor(t, "all unique rows", 90*time.Second, func() bool { _, d := countRows(); return d >= unique })
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	if n := checkCommitted("at the end"); n != total {
		t.Errorf("%d of %d records committed at the end", n, total)
	}

	rows, distinct := countRows()
	ids := eventIDs(t, direct)
	missing := 0
	for i := range unique {
		if !ids[fmt.Sprintf("evt_%d_%d", run, i)] {
			missing++
		}
	}
	t.Logf("usage_record: %d rows, %d distinct; missing %d; inserted by runner 1 %d, runner 2 %d",
		rows, distinct, missing, w1.Inserted(), w2.Inserted())
	// The counters may fall short of unique by ambiguous commits (above) but
	// can never exceed it: a row counted twice would be a double insert.
	if rows != unique || distinct != unique || missing != 0 || w1.Inserted()+w2.Inserted() > unique {
		t.Errorf("want %d rows exactly once: %d rows, %d distinct, %d missing, %d inserted",
			unique, rows, distinct, missing, w1.Inserted()+w2.Inserted())
	}
}
