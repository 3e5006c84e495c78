//go:build integration

package writebehind

import (
	"context"
	"database/sql"
	"os"
	"testing"

	"github.com/dabom/dpcs/internal/sqldialect"
)

// usageMariaDB is mariaDB with usage_record.
func usageMariaDB(tb testing.TB) *sql.DB {
	tb.Helper()
	_, db, _ := emptyMariaDB(tb, false)
	if err := MigrateUsage(context.Background(), db); err != nil {
		tb.Fatal(err)
	}
	return db
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

func TestUsageWriterMariaDB(t *testing.T) {
	db := usageMariaDB(t)
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
