//go:build integration

package writebehind

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/internal/outageproxy"
	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/internal/testenv"
)

// mariaDB opens a fresh database with the tests' table (wb_item) on the
// MariaDB of `make integration` (DPCS_TEST_MYSQL_DSN; a missing variable
// fails, never skips): db, reached through an outageproxy.Proxy when proxy
// is set, and direct, never cut. It is dropped afterwards, so tests of other
// packages running at the same time are not disturbed.
func mariaDB(tb testing.TB, proxy bool) (db, direct *sql.DB, _ *outageproxy.Proxy) {
	tb.Helper()
	db, direct, p := emptyMariaDB(tb, proxy)
	createItems(tb, direct, sqldialect.MySQL)
	return db, direct, p
}

// emptyMariaDB is mariaDB without the table: a database with no tables.
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

// itemIDs returns the item ids in wb_item.
func itemIDs(tb testing.TB, db *sql.DB) map[string]bool {
	tb.Helper()
	rows, err := db.Query("SELECT item_id FROM wb_item")
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

// The writer on MariaDB: multi-row statements of at most WithMaxRows rows,
// duplicates skipped, times read back as written.
func TestSQLWriterMariaDB(t *testing.T) {
	db, _, _ := mariaDB(t, false)
	ctx := context.Background()
	w := newItemWriter(t, db, WithMaxRows(7))
	rows := items(30, 0)
	for _, b := range [][]item{rows[:20], rows[10:], rows[:3]} {
		if err := w.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if w.Inserted() != 30 {
		t.Errorf("Inserted() = %d, want 30", w.Inserted())
	}
	if diff := cmp.Diff(rows, readItems(t, db)); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	bad := items(3, 100)
	bad[1].Note = "a note longer than the column"
	var ie *ItemError
	if err := w.Write(ctx, bad); !errors.As(err, &ie) || ie.Index != 1 {
		t.Errorf("a row INSERT IGNORE would truncate: %v, want an *ItemError", err)
	}
	if got := readItems(t, db); len(got) != 30 {
		t.Errorf("%d rows after a refused batch, want 30", len(got))
	}
}

// The outage test (issue 4): 100k records, 5 % of them redelivered
// duplicates, through kfake and the Runner into MariaDB; the database goes
// away for 10 s mid-run; the first runner is then stopped without draining
// (a crash) and a second one resumes from the committed offsets. Every
// unique record must end up in the table exactly once, and at every moment
// sampled the committed offsets cover only records whose rows exist.
func TestOutageMariaDB(t *testing.T) {
	db, direct, proxy := mariaDB(t, true)
	c := newFake(t)
	p := testenv.Producer(t, c)

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
				id = fmt.Sprintf("item_%d_%d", run, rng.IntN(next))
			} else {
				id = fmt.Sprintf("item_%d_%d", run, next)
				next++
			}
			wg.Add(1)
			p.Produce(context.Background(), itemRecord(t, id, int64(i%997+1)), func(r *kgo.Record, err error) {
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
		offs := testenv.Committed(t, c, DefaultGroup, testTopic)
		ids := itemIDs(t, direct)
		mu.Lock()
		defer mu.Unlock()
		var n int64
		for ps, id := range origin {
			if o, ok := offs[ps.part]; ok && ps.off < o {
				n++
				if !ids[id] {
					t.Fatalf("%s: partition %d offset %d committed (< %d) but %s is not in wb_item", when, ps.part, ps.off, o, id)
				}
			}
		}
		return n
	}

	var errs, pauses atomic.Int64
	w1 := newItemWriter(t, db)
	r1 := newRunner(t, c, w1, WithBatchSize(100), WithInterval(100*time.Millisecond),
		WithBackoff(100*time.Millisecond, 2*time.Second),
		WithHooks(Hooks{OnError: func(ErrorInfo) { errs.Add(1) }, OnPause: func(PauseInfo) { pauses.Add(1) }}))
	done1 := make(chan error, 1)
	go func() { done1 <- r1.Run(context.Background()) }()

	testenv.Eventually(t, "30k rows before the outage", 60*time.Second, func() bool { return w1.Inserted() >= 30_000 })
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
	testenv.Eventually(t, "70k rows after the outage", 60*time.Second, func() bool { return w1.Inserted() >= 70_000 })

	// Crash: stop without draining.
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	_ = r1.Close(dead)
	<-done1
	n = checkCommitted("after the crash")
	t.Logf("runner 1 inserted %d rows; %d records committed", w1.Inserted(), n)

	<-produced
	w2 := newItemWriter(t, db)
	r2 := newRunner(t, c, w2, WithBatchSize(100), WithInterval(100*time.Millisecond))
	stop2 := start(t, r2)
	// Wait on the table, not on the writers' counters: a batch whose COMMIT
	// reached the server while the proxy cut the reply (the driver's
	// "unexpected EOF") is in the table but was counted by neither writer,
	// because its retry found every row already there.
	countRows := func() (rows, distinct int64) {
		if err := direct.QueryRow("SELECT COUNT(*), COUNT(DISTINCT item_id) FROM wb_item").Scan(&rows, &distinct); err != nil {
			t.Fatal(err)
		}
		return rows, distinct
	}
	testenv.Eventually(t, "all unique rows", 90*time.Second, func() bool { _, d := countRows(); return d >= unique })
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	if n := checkCommitted("at the end"); n != total {
		t.Errorf("%d of %d records committed at the end", n, total)
	}

	rows, distinct := countRows()
	ids := itemIDs(t, direct)
	missing := 0
	for i := range unique {
		if !ids[fmt.Sprintf("item_%d_%d", run, i)] {
			missing++
		}
	}
	t.Logf("wb_item: %d rows, %d distinct; missing %d; inserted by runner 1 %d, runner 2 %d",
		rows, distinct, missing, w1.Inserted(), w2.Inserted())
	// The counters may fall short of unique by ambiguous commits (above) but
	// can never exceed it: a row counted twice would be a double insert.
	if rows != unique || distinct != unique || missing != 0 || w1.Inserted()+w2.Inserted() > unique {
		t.Errorf("want %d rows exactly once: %d rows, %d distinct, %d missing, %d inserted",
			unique, rows, distinct, missing, w1.Inserted()+w2.Inserted())
	}
}
