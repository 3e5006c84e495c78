package writebehind

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/internal/sqldialect"
)

// The writer on the tests' own table: multi-row statements of at most
// WithMaxRows rows, duplicates skipped by the insert-ignore, times in the
// dialect's form, an item the RowFunc refuses named by an *ItemError and a
// value the database refuses reported as permanent, with nothing of either
// batch written.
func TestSQLWriterSQLite(t *testing.T) {
	db := openSQLite(t)
	ctx := context.Background()
	createItems(t, db, sqldialect.SQLite)
	w := newItemWriter(t, db, WithMaxRows(7))
	rows := items(30, 0)
	for _, b := range [][]item{rows[:20], rows[10:], rows[:3]} { // 13 duplicates
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
	// Times are written so that the column's order is time order: the index
	// serves family + time queries.
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM wb_item WHERE family = ? AND made_at >= ?", 1, sqldialect.SQLite.Time(t0.Add(7*time.Millisecond))).Scan(&n); err != nil || n != 4 {
		t.Errorf("family/time query: %d %v, want 4", n, err)
	}

	bad := items(3, 100)
	bad[1].N = -1
	err := w.Write(ctx, bad)
	var ie *ItemError
	if !errors.As(err, &ie) || ie.Index != 1 || !errors.Is(err, ErrPermanent) {
		t.Errorf("invalid row: %v", err)
	}
	poison := items(3, 200)
	poison[2].Note = "poison"
	if err := w.Write(ctx, poison); !errors.Is(err, ErrPermanent) || errors.As(err, &ie) {
		t.Errorf("a value the database refuses: %v, want a permanent error naming no item", err)
	}
	if diff := cmp.Diff(rows, readItems(t, db)); diff != "" {
		t.Errorf("a refused batch was partly written (-want +got):\n%s", diff)
	}
	if w.Inserted() != 30 {
		t.Errorf("Inserted() = %d after refused batches, want 30", w.Inserted())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, items(1, 300)); err != nil { // usable after Close: prepared anew
		t.Fatal(err)
	}
	if w.Inserted() != 31 {
		t.Errorf("Inserted() = %d after Close and a write, want 31", w.Inserted())
	}
}

func TestSQLWriterErrors(t *testing.T) {
	db := openSQLite(t)
	ctx := context.Background()
	if _, err := db.Exec("CREATE TABLE t (k TEXT NOT NULL UNIQUE, v INTEGER NOT NULL CHECK (v >= 0))"); err != nil {
		t.Fatal(err)
	}
	type kv struct {
		k string
		v int
	}
	w, err := NewSQLWriter(db, "t", []string{"k", "v"}, func(x kv) ([]any, error) { return []any{x.k, x.v}, nil }, WithDialect("sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	// CHECK violations are skipped by OR IGNORE; a wrong value count is an item error.
	if err := w.Write(ctx, []kv{{"a", 1}, {"b", -1}, {"a", 2}}); err != nil {
		t.Fatal(err)
	}
	if w.Inserted() != 1 {
		t.Errorf("inserted %d, want 1", w.Inserted())
	}
	short, _ := NewSQLWriter(db, "t", []string{"k", "v"}, func(x kv) ([]any, error) { return []any{x.k}, nil })
	var ie *ItemError
	if err := short.Write(ctx, []kv{{"c", 1}}); !errors.As(err, &ie) {
		t.Errorf("short row: %v", err)
	}
	// A missing table is transient (a migration may be coming), not permanent.
	missing, _ := NewSQLWriter(db, "nope", []string{"k"}, func(x kv) ([]any, error) { return []any{x.k}, nil })
	if err := missing.Write(ctx, []kv{{"c", 1}}); err == nil || errors.Is(err, ErrPermanent) {
		t.Errorf("missing table: %v", err)
	}
	for name, f := range map[string]func() error{
		"nil db": func() error { _, err := NewSQLWriter[kv](nil, "t", []string{"k"}, nil); return err },
		"no cols": func() error {
			_, err := NewSQLWriter(db, "t", nil, func(kv) ([]any, error) { return nil, nil })
			return err
		},
		"ident": func() error {
			_, err := NewSQLWriter(db, "t;", []string{"k"}, func(kv) ([]any, error) { return nil, nil })
			return err
		},
		"dialect": func() error {
			_, err := NewSQLWriter(db, "t", []string{"k"}, func(kv) ([]any, error) { return nil, nil }, WithDialect("pg"))
			return err
		},
		"rows": func() error {
			_, err := NewSQLWriter(db, "t", []string{"k"}, func(kv) ([]any, error) { return nil, nil }, WithMaxRows(0))
			return err
		},
	} {
		if err := f(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	// Many odd batch sizes: the statement cache stays bounded.
	for n := 1; n <= 12; n++ {
		batch := make([]kv, n)
		for i := range batch {
			batch[i] = kv{fmt.Sprintf("n%d-%d", n, i), i}
		}
		if err := w.Write(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	if len(w.stmts) > 8 {
		t.Errorf("%d cached statements", len(w.stmts))
	}
}

// The sink, the writer and SQLite together: redeliveries and all.
func TestSinkIntoSQLite(t *testing.T) {
	db := openSQLite(t)
	ctx := context.Background()
	createItems(t, db, sqldialect.SQLite)
	w := newItemWriter(t, db)
	s := newSink[item](t, w, WithBatchSize(64))
	rows := items(500, 0)
	for i, it := range rows {
		_ = s.Add(ctx, it)
		if i%20 == 0 {
			_ = s.Add(ctx, rows[i/2]) // a redelivery
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rows, readItems(t, db)); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if w.Inserted() != 500 {
		t.Errorf("Inserted() = %d, want 500", w.Inserted())
	}
}
