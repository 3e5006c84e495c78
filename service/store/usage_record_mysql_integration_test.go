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

// usage_record's CREATE script on MariaDB makes none of the retired
// indexes.
func TestMigrateFreshTableMariaDB(t *testing.T) {
	db := openMySQL(t)
	if err := store.RunUsageScript(context.Background(), db, "mysql"); err != nil {
		t.Fatal(err)
	}
	if hasIndex(t, db, sqldialect.MySQL, retiredIndex) {
		t.Errorf("usage_record's CREATE script makes %s", retiredIndex)
	}
	if !hasIndex(t, db, sqldialect.MySQL, "idx_usage_record_family_time") {
		t.Error("usage_record's CREATE script lacks idx_usage_record_family_time")
	}
}

// A retired index on a table a transaction holds is left for a later
// migration after dropLockWait, instead of queueing the inserts behind a
// DDL that waits for it; the next migration, the table free, drops it.
func TestMigrateLeavesIndexOfBusyTableMariaDB(t *testing.T) {
	db := openMySQL(t)
	ctx := context.Background()
	if err := store.MigrateUsage(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE INDEX " + retiredIndex + " ON usage_record (customer_id, event_time)"); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRow("SELECT COUNT(*) FROM usage_record").Scan(&n); err != nil { // holds the table's metadata lock
		t.Fatal(err)
	}
	if err := store.MigrateUsage(ctx, db); err != nil {
		t.Fatalf("migration with the table busy: %v", err)
	}
	if !hasIndex(t, db, sqldialect.MySQL, retiredIndex) {
		t.Fatal("the index went while a transaction held the table")
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := store.MigrateUsage(ctx, db); err != nil {
		t.Fatal(err)
	}
	if hasIndex(t, db, sqldialect.MySQL, retiredIndex) {
		t.Errorf("%s is still there with the table free", retiredIndex)
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
