//go:build integration

package store_test

import (
	"context"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/service/store"
	"github.com/dabom/dpcs/writebehind"
)

func TestMigrateOldTableMariaDB(t *testing.T) {
	for name, migrate := range migrations {
		t.Run(name, func(t *testing.T) { testMigrateOldTable(t, openMySQL(t), "mysql", migrate) })
	}
}

// Several deployables starting at once all migrate an old table (servers
// the whole store, processors usage_record alone): each column is added
// once, and every migration succeeds.
func TestMigrateConcurrentlyMariaDB(t *testing.T) {
	db := openMySQL(t)
	ctx := context.Background()
	old, err := os.ReadFile("testdata/usage_record_v1_mysql.sql")
	if err != nil {
		t.Fatal(err)
	}
	if err := sqldialect.Exec(ctx, db, string(old)); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for i := range cap(errs) {
		migrate := store.MigrateUsage
		if i%2 == 1 {
			migrate = store.Migrate
		}
		go func() { errs <- migrate(ctx, db) }()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	cols := columnsOf(t, db, sqldialect.MySQL)
	for _, c := range store.UsageColumns {
		if !cols[c] {
			t.Errorf("column %s missing", c)
		}
	}
	if hasIndex(t, db, sqldialect.MySQL, retiredIndex) {
		t.Errorf("%s is still there", retiredIndex)
	}
}

// A fresh usage_record on MariaDB has none of the retired indexes.
func TestMigrateFreshTableMariaDB(t *testing.T) {
	db := openMySQL(t)
	ctx := context.Background()
	if err := store.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if hasIndex(t, db, sqldialect.MySQL, retiredIndex) {
		t.Errorf("a fresh usage_record has %s", retiredIndex)
	}
}

func TestUsageWriterMariaDB(t *testing.T) {
	db := openMySQL(t)
	ctx := context.Background()
	if err := store.MigrateUsage(ctx, db); err != nil {
		t.Fatal(err)
	}
	w, err := store.NewUsageWriter(db, writebehind.WithMaxRows(7))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rows := usageRows(30, 0)
	rows[3].Rule = "BLOCK:APP:com.youtube.app"
	for _, b := range [][]store.UsageRecord{rows[:20], rows[10:], rows[:3]} {
		if err := w.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if w.Inserted() != 30 {
		t.Errorf("Inserted() = %d, want 30", w.Inserted())
	}
	if diff := cmp.Diff(rows, readUsage(t, db)); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
}
