package store_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/service/store"
	"github.com/dabom/dpcs/writebehind"
)

// t0 is the event time of the usage rows of these tests.
var t0 = time.Date(2026, 2, 6, 14, 30, 0, 0, time.UTC)

// persistRecord is the usage-persist record of usage event origin.
func persistRecord(tb testing.TB, origin string, family int64) *kgo.Record {
	tb.Helper()
	p := envelope.UsagePersistPayload{OriginEventID: origin, FamilyID: family, CustomerID: family*10 + 1,
		BytesUsed: 1024, AppID: "com.youtube.app", ProcessResult: "ALLOWED", RemainingAfter: 1 << 30, EventTime: t0}
	e := envelope.New(envelope.DerivedID(envelope.PrefixPersist, origin, "persist"), t0, p)
	r, err := kafkarecord.New(envelope.TopicUsagePersist, e)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// The usage writer takes the SQL writer's options and refuses bad ones; the
// migrations refuse a database whose dialect they cannot tell.
func TestUsageErrors(t *testing.T) {
	db := openSQLite(t)
	ctx := context.Background()
	for name, f := range map[string]func() error{
		"dialect": func() error { _, err := store.NewUsageWriter(db, writebehind.WithDialect("pg")); return err },
		"rows":    func() error { _, err := store.NewUsageWriter(db, writebehind.WithMaxRows(0)); return err },
	} {
		if err := f(); !errors.Is(err, writebehind.ErrInvalid) {
			t.Errorf("%s: %v, want writebehind.ErrInvalid", name, err)
		}
	}
	unknown := sql.OpenDB(noConnector{})
	defer unknown.Close()
	for name, f := range map[string]func() error{
		"MigrateUsage": func() error { return store.MigrateUsage(ctx, unknown) },
		"Migrate":      func() error { return store.Migrate(ctx, unknown) },
	} {
		if err := f(); !errors.Is(err, sqldialect.ErrUnknown) {
			t.Errorf("%s on an unknown driver: %v, want sqldialect.ErrUnknown", name, err)
		}
	}
}

// noConnector is a database/sql driver of no known dialect that never
// connects.
type noConnector struct{}

func (noConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("no database")
}
func (noConnector) Driver() driver.Driver            { return noConnector{} }
func (noConnector) Open(string) (driver.Conn, error) { return nil, errors.New("no database") }

func usageRows(n, from int) []store.UsageRecord {
	out := make([]store.UsageRecord, n)
	for i := range out {
		k := from + i
		out[i] = store.UsageRecord{EventID: fmt.Sprintf("evt_%06d", k), FamilyID: int64(k%7 + 1), CustomerID: int64(k%7+1)*10 + 1,
			AppID: "com.youtube.app", BytesUsed: int64(k), ProcessResult: "ALLOWED", RemainingAfter: 1000,
			EventTime: t0.Add(time.Duration(k) * time.Millisecond)}
		if k%3 != 0 { // the engine's result; rows of older records have none
			out[i].TotalBytes, out[i].DailyUsed, out[i].MonthlyUsed, out[i].ThrottleKbps = 1<<40+int64(k), int64(k), int64(2*k), int64(k%2)*512
		}
		if k%5 == 1 {
			out[i].Crossed = []envelope.Crossing{{Percent: 50, Arm: 1}, {Percent: 30, Arm: k}}
		}
	}
	return out
}

func readUsage(tb testing.TB, db *sql.DB) []store.UsageRecord {
	tb.Helper()
	rows, err := db.Query(`SELECT event_id, family_id, customer_id, app_id, bytes_used, process_result, remaining_after, rule, event_time,
		total_bytes, daily_used, monthly_used, throttle_kbps, crossed FROM usage_record ORDER BY event_id`)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	var out []store.UsageRecord
	for rows.Next() {
		var u store.UsageRecord
		var et any
		var crossed string
		if err := rows.Scan(&u.EventID, &u.FamilyID, &u.CustomerID, &u.AppID, &u.BytesUsed, &u.ProcessResult, &u.RemainingAfter, &u.Rule, &et,
			&u.TotalBytes, &u.DailyUsed, &u.MonthlyUsed, &u.ThrottleKbps, &crossed); err != nil {
			tb.Fatal(err)
		}
		if u.Crossed, err = store.ParseCrossed(crossed); err != nil {
			tb.Fatal(err)
		}
		switch v := et.(type) {
		case time.Time:
			u.EventTime = v.UTC()
		case string:
			u.EventTime, err = time.Parse("2006-01-02 15:04:05.000", v)
		case []byte:
			u.EventTime, err = time.Parse("2006-01-02 15:04:05.000", string(v))
		}
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

func TestUsageWriterSQLite(t *testing.T) {
	db := openSQLite(t)
	ctx := context.Background()
	if err := store.MigrateUsage(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := store.MigrateUsage(ctx, db); err != nil { // idempotent
		t.Fatal(err)
	}
	w, err := store.NewUsageWriter(db, writebehind.WithMaxRows(7))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rows := usageRows(30, 0)
	rows[3].Rule = "BLOCK:APP:com.youtube.app"
	if err := w.Write(ctx, rows[:20]); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, rows[10:]); err != nil { // 10 duplicates
		t.Fatal(err)
	}
	if err := w.Write(ctx, rows[:3]); err != nil {
		t.Fatal(err)
	}
	if w.Inserted() != 30 {
		t.Errorf("Inserted() = %d, want 30", w.Inserted())
	}
	if diff := cmp.Diff(rows, readUsage(t, db)); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	// The index serves family + time queries.
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM usage_record WHERE family_id = ? AND event_time >= ?", 1, "2026-02-06 14:30:00.007").Scan(&n); err != nil || n != 4 {
		t.Errorf("family/time query: %d %v, want 4", n, err)
	}

	bad := usageRows(3, 100)
	bad[1].ProcessResult = ""
	err = w.Write(ctx, bad)
	var ie *writebehind.ItemError
	if !errors.As(err, &ie) || ie.Index != 1 || !errors.Is(err, writebehind.ErrPermanent) {
		t.Errorf("invalid row: %v", err)
	}
	if len(readUsage(t, db)) != 30 {
		t.Error("a batch with an invalid row was partly written")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// migrations are the two ways to migrate usage_record: alone (the
// processor's) or with the rest of the store (the server's).
var migrations = map[string]func(context.Context, *sql.DB) error{
	"MigrateUsage": store.MigrateUsage,
	"Migrate":      store.Migrate,
}

// testMigrateOldTable checks migrate on a usage_record created by v0.1.x,
// before total_bytes … crossed existed (testdata/usage_record_v1_<dialect>.sql,
// holding one row): the columns are added with their defaults, the old row
// reads with zeros, a new row keeps the engine's result, the retired
// (customer_id, event_time) index is dropped, and migrating again changes
// nothing.
func testMigrateOldTable(t *testing.T, db *sql.DB, dialect string, migrate func(context.Context, *sql.DB) error) {
	ctx := context.Background()
	old, err := os.ReadFile(filepath.Join("testdata", "usage_record_v1_"+dialect+".sql"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sqldialect.Exec(ctx, db, string(old)); err != nil {
		t.Fatal(err)
	}
	d, err := sqldialect.Parse(dialect)
	if err != nil {
		t.Fatal(err)
	}
	before := columnsOf(t, db, d)
	if before["crossed"] || before["total_bytes"] {
		t.Fatalf("test setup: the old table has the new columns: %v", before)
	}
	if !hasIndex(t, db, d, retiredIndex) {
		t.Fatalf("test setup: the old table lacks %s", retiredIndex)
	}
	rows := usageRows(2, 0)
	rows[1].TotalBytes, rows[1].DailyUsed, rows[1].MonthlyUsed, rows[1].ThrottleKbps = 10<<30, 3<<20, 9<<20, 1024
	rows[1].Crossed = []envelope.Crossing{{Percent: 50, Arm: 1}, {Percent: 30, Arm: 2}}
	r := rows[0]
	if _, err := db.ExecContext(ctx, `INSERT INTO usage_record (event_id, family_id, customer_id, app_id, bytes_used, process_result, remaining_after, rule, event_time)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, r.EventID, r.FamilyID, r.CustomerID, r.AppID, r.BytesUsed, r.ProcessResult, r.RemainingAfter, r.Rule, d.Time(r.EventTime)); err != nil {
		t.Fatal(err)
	}
	rows[0].TotalBytes, rows[0].DailyUsed, rows[0].MonthlyUsed, rows[0].ThrottleKbps, rows[0].Crossed = 0, 0, 0, 0, nil

	for i := range 2 { // the second run finds nothing to do
		if err := migrate(ctx, db); err != nil {
			t.Fatalf("migration #%d: %v", i+1, err)
		}
	}
	after := columnsOf(t, db, d)
	for _, c := range store.UsageColumns {
		if !after[c] {
			t.Errorf("column %s missing after the migration", c)
		}
	}
	if len(after) != len(before)+6 {
		t.Errorf("columns: %d before, %d after, want 6 more", len(before), len(after))
	}
	if hasIndex(t, db, d, retiredIndex) {
		t.Errorf("%s is still there after the migration", retiredIndex)
	}
	if !hasIndex(t, db, d, "idx_usage_record_family_time") {
		t.Error("idx_usage_record_family_time is gone after the migration")
	}
	w, err := store.NewUsageWriter(db)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Write(ctx, rows); err != nil { // rows[0] is there already
		t.Fatal(err)
	}
	if w.Inserted() != 1 {
		t.Errorf("inserted %d rows, want 1", w.Inserted())
	}
	if diff := cmp.Diff(rows, readUsage(t, db)); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
}

// retiredIndex is the index of usage_record that releases before it was
// retired created (store.retiredIndexes).
const retiredIndex = "idx_usage_record_customer_time"

// hasIndex says whether usage_record has index, failing the test on errors.
func hasIndex(tb testing.TB, db *sql.DB, d sqldialect.Dialect, index string) bool {
	tb.Helper()
	has, err := store.HasIndex(context.Background(), db, d, "usage_record", index)
	if err != nil {
		tb.Fatal(err)
	}
	return has
}

// columnsOf returns usage_record's columns, failing the test on errors.
func columnsOf(tb testing.TB, db *sql.DB, d sqldialect.Dialect) map[string]bool {
	tb.Helper()
	cols, err := store.ColumnSet(context.Background(), db, d, "usage_record")
	if err != nil {
		tb.Fatal(err)
	}
	return cols
}

func TestMigrateOldTableSQLite(t *testing.T) {
	for name, migrate := range migrations {
		t.Run(name, func(t *testing.T) { testMigrateOldTable(t, openSQLite(t), "sqlite", migrate) })
	}
}

// A fresh table already has every column and none of the retired indexes
// (its CREATE script makes none): nothing is altered.
func TestMigrateFreshTableSQLite(t *testing.T) {
	ctx := context.Background()
	created := openSQLite(t)
	if err := store.RunUsageScript(ctx, created, "sqlite"); err != nil {
		t.Fatal(err)
	}
	if hasIndex(t, created, sqldialect.SQLite, retiredIndex) {
		t.Errorf("usage_record's CREATE script makes %s", retiredIndex)
	}
	db := openSQLite(t)
	if err := store.MigrateUsage(ctx, db); err != nil {
		t.Fatal(err)
	}
	var ddl string
	if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE name = 'usage_record'`).Scan(&ddl); err != nil {
		t.Fatal(err)
	}
	if err := store.MigrateUsage(ctx, db); err != nil {
		t.Fatal(err)
	}
	var again string
	if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE name = 'usage_record'`).Scan(&again); err != nil {
		t.Fatal(err)
	}
	if ddl != again {
		t.Errorf("the table changed on the second migration:\n%s\n%s", ddl, again)
	}
	if _, err := store.ColumnSet(ctx, openSQLite(t), sqldialect.SQLite, "usage_record"); err == nil {
		t.Error("columnSet on a database without usage_record succeeded")
	}
}

func TestDecodeUsageRecord(t *testing.T) {
	r := persistRecord(t, "evt_x", 3)
	got, err := store.DecodeUsageRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	want := store.UsageRecord{EventID: "evt_x", FamilyID: 3, CustomerID: 31, AppID: "com.youtube.app", BytesUsed: 1024,
		ProcessResult: "ALLOWED", RemainingAfter: 1 << 30, EventTime: t0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// The engine's result comes along.
	full := envelope.UsagePersistPayload{OriginEventID: "evt_y", FamilyID: 3, CustomerID: 31, BytesUsed: 1024, AppID: "a",
		ProcessResult: "ALLOWED", RemainingAfter: 1 << 30, EventTime: t0, TotalBytes: 10 << 30, DailyUsedBytes: 4096,
		MonthlyUsedBytes: 8192, ThrottleKbps: 512, Crossed: []envelope.Crossing{{Percent: 50, Arm: 1}, {Percent: 30, Arm: 2}}}
	fr, err := kafkarecord.New(envelope.TopicUsagePersist, envelope.New("persist_y", t0, full))
	if err != nil {
		t.Fatal(err)
	}
	if got, err = store.DecodeUsageRecord(fr); err != nil {
		t.Fatal(err)
	}
	want = store.UsageRecord{EventID: "evt_y", FamilyID: 3, CustomerID: 31, AppID: "a", BytesUsed: 1024,
		ProcessResult: "ALLOWED", RemainingAfter: 1 << 30, EventTime: t0, TotalBytes: 10 << 30, DailyUsed: 4096,
		MonthlyUsed: 8192, ThrottleKbps: 512, Crossed: []envelope.Crossing{{Percent: 50, Arm: 1}, {Percent: 30, Arm: 2}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("with the result (-want +got):\n%s", diff)
	}
	if _, err := store.DecodeUsageRecord(nil); !errors.Is(err, envelope.ErrMalformed) {
		t.Errorf("nil record: %v", err)
	}
	long := want
	long.ProcessResult = string(make([]byte, 65))
	long.AppID = "\xff"
	long.FamilyID, long.CustomerID, long.BytesUsed, long.RemainingAfter = 0, 0, -1, -1
	long.EventTime = time.Time{}
	var fe *envelope.FieldError
	if err := long.Validate(); !errors.As(err, &fe) {
		t.Errorf("Validate: %v", err)
	}
	e := envelope.New("persist_1", t0, envelope.UsagePersistPayload{OriginEventID: string(make([]byte, 300)),
		FamilyID: 1, CustomerID: 1, ProcessResult: "ALLOWED", EventTime: t0})
	rec, _ := kafkarecord.New(envelope.TopicUsagePersist, e)
	if _, err := store.DecodeUsageRecord(rec); !errors.As(err, &fe) || fe.Field != "payload.originEventId" {
		t.Errorf("long id: %v", err)
	}
}

// A grant_step created before its category column (the CREATE of
// 2026-11-27) gains it by either migration, its rows read an empty one, and a
// step's category is written and read back after.
func TestMigrateOldGrantStepSQLite(t *testing.T) {
	for name, migrate := range migrations {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db := openSQLite(t)
			if _, err := db.ExecContext(ctx, `CREATE TABLE grant_step (
  id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, step_id TEXT NOT NULL, family_id INTEGER NOT NULL,
  customer_id INTEGER NOT NULL, grant_id TEXT NOT NULL, previous_step TEXT NOT NULL DEFAULT '',
  granted INTEGER NOT NULL, is_open INTEGER NOT NULL, is_final INTEGER NOT NULL DEFAULT 0,
  overage INTEGER NOT NULL DEFAULT 0, reserved INTEGER NOT NULL DEFAULT 0, valid_until TEXT NULL,
  reclaim TEXT NOT NULL DEFAULT '', step_time TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')))`); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, `INSERT INTO grant_step (step_id, family_id, customer_id, grant_id, granted, is_open, step_time)
				VALUES ('old', 1, 11, 'g', 5, 1, '2026-11-27 10:00:00.000')`); err != nil {
				t.Fatal(err)
			}
			for range 2 { // the second changes nothing
				if err := migrate(ctx, db); err != nil {
					t.Fatal(err)
				}
			}
			cols, err := store.ColumnSet(ctx, db, sqldialect.SQLite, "grant_step")
			if err != nil || !cols["category"] {
				t.Fatalf("grant_step's columns after the migration: %v, %v", cols, err)
			}
			w, err := store.NewUsageWriter(db)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			at := time.Date(2026, 11, 27, 11, 0, 0, 0, time.UTC)
			if err := w.Write(ctx, []store.UsageRecord{{EventID: "new", FamilyID: 1, CustomerID: 11, BytesUsed: 1,
				ProcessResult: "ALLOWED", EventTime: at, Grant: &store.GrantStepRow{StepID: "new", FamilyID: 1, CustomerID: 11,
					GrantID: "g", PreviousStep: "old", Open: true, StepTime: at, Category: "VIDEO"}}}); err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			rows, err := db.QueryContext(ctx, `SELECT step_id, category FROM grant_step`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var id, c string
				if err := rows.Scan(&id, &c); err != nil {
					t.Fatal(err)
				}
				got[id] = c
			}
			if want := map[string]string{"old": "", "new": "VIDEO"}; !cmp.Equal(want, got) {
				t.Errorf("categories = %v, want %v", got, want)
			}
		})
	}
}
