package writebehind

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	_ "modernc.org/sqlite"

	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/internal/testenv"
)

// memWriter records every successful batch and fails on demand.
type memWriter[T comparable] struct {
	mu      sync.Mutex
	batches [][]T
	calls   int
	fail    func(call int, batch []T) error // nil: succeed
	block   chan struct{}                   // non-nil: Write waits for it
}

func (w *memWriter[T]) Write(ctx context.Context, batch []T) error {
	if w.block != nil {
		select {
		case <-w.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls++
	if w.fail != nil {
		if err := w.fail(w.calls, batch); err != nil {
			return err
		}
	}
	w.batches = append(w.batches, append([]T{}, batch...))
	return nil
}

func (w *memWriter[T]) all() []T {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []T
	for _, b := range w.batches {
		out = append(out, b...)
	}
	return out
}

func (w *memWriter[T]) sizes() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int
	for _, b := range w.batches {
		out = append(out, len(b))
	}
	return out
}

func openSQLite(tb testing.TB) *sql.DB {
	tb.Helper()
	return testenv.SQLitePool(tb)
}

// newFake is a one-broker kfake cluster with testTopic (10 partitions), its
// dead-letter topic (1) and topics (10 each).
func newFake(tb testing.TB, topics ...string) *kfake.Cluster {
	tb.Helper()
	opts := []kfake.Opt{kfake.SeedTopics(10, testTopic), kfake.SeedTopics(1, testTopic+".DLT")}
	for _, t := range topics {
		opts = append(opts, kfake.SeedTopics(10, t))
	}
	return testenv.KafkaOf(tb, opts...)
}

func clientOpts(c *kfake.Cluster) []kgo.Opt {
	return append(testenv.ConsumerOpts(c), kgo.SessionTimeout(3*time.Second))
}

var t0 = time.Date(2026, 2, 6, 14, 30, 0, 0, time.UTC)

// The tests' own table and row type: what the package does for any table,
// shown on one it does not know.

// testTopic is the topic the tests' runners consume (consumer.WithTopics):
// a Runner's topic is the caller's.
const testTopic = "wb-items"

// item is a row of wb_item: a unique id (the insert-ignore key), a family
// (the record key), a count, a time and a note.
type item struct {
	ID     string    `json:"id"`
	Family int64     `json:"family"`
	N      int64     `json:"n"`
	At     time.Time `json:"at"`
	Note   string    `json:"note,omitempty"`
}

// itemSchema is wb_item in each dialect: UNIQUE item_id, an index on
// (family, made_at). The SQLite table is STRICT, so a value of the wrong type is
// an error the database reports instead of storing it.
var itemSchema = map[sqldialect.Dialect]string{
	sqldialect.MySQL: `CREATE TABLE wb_item (
		id      BIGINT      NOT NULL AUTO_INCREMENT,
		item_id VARCHAR(64) NOT NULL,
		family  BIGINT      NOT NULL,
		n       BIGINT      NOT NULL,
		made_at DATETIME(3) NOT NULL,
		note    VARCHAR(16) NOT NULL DEFAULT '',
		PRIMARY KEY (id),
		UNIQUE KEY uk_wb_item_item_id (item_id),
		KEY idx_wb_item_family_made_at (family, made_at)
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
	`,
	sqldialect.SQLite: `CREATE TABLE wb_item (
		id      INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
		item_id TEXT    NOT NULL UNIQUE,
		family  INTEGER NOT NULL,
		n       INTEGER NOT NULL,
		made_at TEXT    NOT NULL,
		note    TEXT    NOT NULL DEFAULT ''
	) STRICT;
	CREATE INDEX idx_wb_item_family_made_at ON wb_item (family, made_at);
	`,
}

// itemColumns are the columns an item writer fills.
var itemColumns = []string{"item_id", "family", "n", "made_at", "note"}

// createItems creates wb_item on db in dialect d.
func createItems(tb testing.TB, db *sql.DB, d sqldialect.Dialect) {
	tb.Helper()
	if err := sqldialect.Exec(context.Background(), db, itemSchema[d]); err != nil {
		tb.Fatal(err)
	}
}

// itemRow is the RowFunc of wb_item. It refuses what the table would not
// hold (an empty id, a negative count, a note over 16 characters), as a
// writer must before MySQL's INSERT IGNORE truncates it. A note "poison"
// sends the count as text, a value only the database refuses (STRICT
// SQLite, a data error): a permanent error the writer cannot pin on an item.
func itemRow(it item) ([]any, error) {
	var errs []error
	if it.ID == "" || len(it.ID) > 64 {
		errs = append(errs, errors.New("id: must be 1..64 bytes"))
	}
	if it.N < 0 {
		errs = append(errs, errors.New("n: must be ≥ 0"))
	}
	if !utf8.ValidString(it.Note) || utf8.RuneCountInString(it.Note) > 16 {
		errs = append(errs, errors.New("note: at most 16 characters"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	n := any(it.N)
	if it.Note == "poison" {
		n = fmt.Sprint("n=", it.N)
	}
	return []any{it.ID, it.Family, n, it.At, it.Note}, nil
}

// newItemWriter is a SQLWriter of wb_item.
func newItemWriter(tb testing.TB, db *sql.DB, opts ...SQLOption) *SQLWriter[item] {
	tb.Helper()
	w, err := NewSQLWriter(db, "wb_item", itemColumns, itemRow, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { w.Close() })
	return w
}

// items returns n items with ids item_<from…>, a tenth of them with a note.
func items(n, from int) []item {
	out := make([]item, n)
	for i := range out {
		k := from + i
		out[i] = item{ID: fmt.Sprintf("item_%06d", k), Family: int64(k%7 + 1), N: int64(k),
			At: t0.Add(time.Duration(k) * time.Millisecond)}
		if k%10 == 3 {
			out[i].Note = fmt.Sprint("note ", k)
		}
	}
	return out
}

// readItems returns wb_item's rows by item id.
func readItems(tb testing.TB, db *sql.DB) []item {
	tb.Helper()
	rows, err := db.Query(`SELECT item_id, family, n, made_at, note FROM wb_item ORDER BY item_id`)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	var out []item
	for rows.Next() {
		var it item
		var at sqldialect.NullTime
		if err := rows.Scan(&it.ID, &it.Family, &it.N, &at, &it.Note); err != nil {
			tb.Fatal(err)
		}
		it.At = at.Time
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// decodeItem is the tests' Decoder: a record's value is an item as JSON
// with an id; anything else can never be written.
func decodeItem(r *kgo.Record) (item, error) {
	var it item
	if err := json.Unmarshal(r.Value, &it); err != nil {
		return item{}, fmt.Errorf("malformed item: %w", err)
	}
	if it.ID == "" {
		return item{}, errors.New("item: id required")
	}
	return it, nil
}

// itemRecord is the record of item id of family, counting 1024.
func itemRecord(tb testing.TB, id string, family int64) *kgo.Record {
	tb.Helper()
	return record(tb, item{ID: id, Family: family, N: 1024, At: t0})
}

// record is the record of it on testTopic, keyed by its family (one family,
// one partition, in order).
func record(tb testing.TB, it item) *kgo.Record {
	tb.Helper()
	v, err := json.Marshal(it)
	if err != nil {
		tb.Fatal(err)
	}
	return &kgo.Record{Topic: testTopic, Key: []byte(strconv.FormatInt(it.Family, 10)), Value: v}
}
