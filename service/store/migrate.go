package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/dabom/dpcs/internal/sqldialect"
)

// The store's schema, one directory per dialect:
//
//   - migrations/<dialect>/NNN_*.sql, run in name order, each idempotent
//     (CREATE … IF NOT EXISTS): 000_usage_record.sql, 001_store.sql, …
//   - migrations/<dialect>/columns/<table>.sql: columns added to <table>
//     after its first release, one ALTER TABLE <table> ADD COLUMN per
//     statement, each run only when the column is missing (MySQL 8 has no
//     ADD COLUMN IF NOT EXISTS, nor has SQLite), so a table created by an
//     earlier release is brought up to date.
//   - retiredIndexes: indexes an earlier release created that this one no
//     longer has, dropped where found.
//
//go:embed migrations
var migrations embed.FS

// usageScript and grantStepScript are the CREATE scripts of the tables the
// write-behind writes (usage_record, grant_step), in migrations/<dialect>/.
const (
	usageScript     = "000_usage_record.sql"
	grantStepScript = "013_grant_step.sql"
)

// Migrate creates every table of the store on db if missing and adds the
// columns that tables created by earlier releases lack
// (migrations/<dialect>/), in db's dialect detected from its driver.
// Running it again changes nothing.
func Migrate(ctx context.Context, db *sql.DB) error {
	d, err := sqldialect.Detect(db)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	return migrate(ctx, db, d)
}

// Migrate is the package's Migrate in the store's dialect.
func (s *Store) Migrate(ctx context.Context) error { return migrate(ctx, s.db, s.d) }

// MigrateUsage is Migrate for the tables the write-behind writes,
// usage_record and grant_step: it creates them and their indexes if
// missing and adds the columns a usage_record or grant_step created by an
// earlier release lacks. For a deployable that
// migrates only the tables it writes (service.Migrate, the processor's).
// Running it again changes nothing.
func MigrateUsage(ctx context.Context, db *sql.DB) error {
	d, err := sqldialect.Detect(db)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	dir := "migrations/" + d.String()
	if err := runScript(ctx, db, dir, usageScript); err != nil {
		return err
	}
	if err := runScript(ctx, db, dir, grantStepScript); err != nil {
		return err
	}
	for _, cols := range []string{"usage_record.sql", "grant_step.sql"} {
		if _, err = addColumns(ctx, db, d, dir, cols); err != nil {
			return err
		}
	}
	return dropRetiredIndexes(ctx, db, d, "usage_record")
}

// MigrateRedisState creates redis_state, redis_marks and threshold_rearms
// if missing: the tables every process that judges or rebuilds reads (the
// state generation, the family-write marks, the re-armed thresholds), for a
// deployable that migrates only what it uses
// (service.Migrate, the processor's). Running it again changes nothing.
func MigrateRedisState(ctx context.Context, db *sql.DB) error {
	d, err := sqldialect.Detect(db)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	dir := "migrations/" + d.String()
	for _, script := range []string{"002_redis_state.sql", "006_redis_marks.sql", "007_threshold_rearms.sql"} {
		if err := runScript(ctx, db, dir, script); err != nil {
			return err
		}
	}
	return nil
}

func migrate(ctx context.Context, db *sql.DB, d sqldialect.Dialect) error {
	dir := "migrations/" + d.String()
	entries, err := migrations.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	for _, e := range entries { // ReadDir sorts by name: 000_, 001_, …
		if e.IsDir() {
			continue
		}
		if err := runScript(ctx, db, dir, e.Name()); err != nil {
			return err
		}
	}
	upgrades, err := migrations.ReadDir(dir + "/columns")
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	for _, e := range upgrades {
		added, err := addColumns(ctx, db, d, dir, e.Name())
		if err != nil {
			return err
		}
		for _, col := range added {
			if fill := backfills[strings.TrimSuffix(e.Name(), ".sql")+"."+col]; fill != nil {
				if err := fill(ctx, db); err != nil {
					return fmt.Errorf("store: migrate columns/%s: fill %s: %w", e.Name(), col, err)
				}
			}
		}
	}
	for _, table := range slices.Sorted(maps.Keys(retiredIndexes)) {
		if err := dropRetiredIndexes(ctx, db, d, table); err != nil {
			return err
		}
	}
	return seedApps(ctx, db, d)
}

// backfills fill a column (<table>.<column>) for the rows written before
// it, once, right after the migration added it.
var backfills = map[string]func(context.Context, *sql.DB) error{
	"members.ever_owner": fillEverOwner,
}

// fillEverOwner marks the members who are or were once an owner: the
// current owners and every member a role change was audited for (a
// promotion made it an owner; a demotion says it was one; a change to the
// role it had already, which says neither, marks it too: it is then the
// back office's to reset, which errs on the safe side).
func fillEverOwner(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `UPDATE members SET ever_owner = 1 WHERE role = ?`, "OWNER"); err != nil {
		return err
	}
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT target FROM audit_log WHERE action = ?`, "member.role")
	if err != nil {
		return err
	}
	var ids []int64
	for rows.Next() {
		var target string
		if err := rows.Scan(&target); err != nil {
			rows.Close()
			return err
		}
		if id, err := strconv.ParseInt(strings.TrimPrefix(target, "member:"), 10, 64); err == nil && strings.HasPrefix(target, "member:") {
			ids = append(ids, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, id := range ids {
		if _, err := db.ExecContext(ctx, `UPDATE members SET ever_owner = 1 WHERE id = ?`, id); err != nil {
			return err
		}
	}
	return nil
}

// runScript runs the script dir/name.
func runScript(ctx context.Context, db *sql.DB, dir, name string) error {
	script, err := migrations.ReadFile(dir + "/" + name)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	if err := sqldialect.Exec(ctx, db, string(script)); err != nil {
		return fmt.Errorf("store: migrate %s: %w", name, err)
	}
	return nil
}

// addColumn matches the statements of columns/<table>.sql.
var addColumn = regexp.MustCompile(`(?is)^ALTER TABLE ([a-z_]+) ADD COLUMN ([a-z_]+) `)

// addColumns runs each ALTER TABLE … ADD COLUMN of dir/columns/name (name
// is <table>.sql) whose column the table lacks, and returns the columns it
// added. Two processes migrating at once may both try to add a column: the
// loser's error is ignored when the column is there afterwards (and the
// column is not reported: the winner fills it).
func addColumns(ctx context.Context, db *sql.DB, d sqldialect.Dialect, dir, name string) ([]string, error) {
	table := strings.TrimSuffix(name, ".sql")
	fail := func(err error) ([]string, error) { return nil, fmt.Errorf("store: migrate columns/%s: %w", name, err) }
	var added []string
	script, err := migrations.ReadFile(dir + "/columns/" + name)
	if err != nil {
		return fail(err)
	}
	have, err := columnSet(ctx, db, d, table)
	if err != nil {
		return fail(err)
	}
	for _, stmt := range sqldialect.Statements(string(script)) {
		m := addColumn.FindStringSubmatch(stmt)
		if m == nil || m[1] != table {
			return fail(fmt.Errorf("not an ADD COLUMN of %s: %.60q", table, stmt))
		}
		if have[m[2]] {
			continue
		}
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			if now, err2 := columnSet(ctx, db, d, table); err2 == nil && now[m[2]] {
				continue
			}
			return fail(fmt.Errorf("add column %s: %w", m[2], err))
		}
		added = append(added, m[2])
	}
	return added, nil
}

// retiredIndexes are, per table, the indexes earlier releases created that
// this one drops: every one a cost on each insert that no query needs.
//
// idx_usage_record_customer_time (customer_id, event_time) served a
// member's usage report alone; that report now reads the family's rows of
// the period through idx_usage_record_family_time, as the family's report
// does, and keeps the member's. A carrier's usage_record takes every
// judged event, so the write-behind's inserts pay for each index; MariaDB
// spent 20 % less CPU per inserted row without this one (doc/benchmarks.md,
// "usage_record's indexes").
var retiredIndexes = map[string][]string{
	"usage_record": {"idx_usage_record_customer_time"},
}

// dropLockWait is how long MySQL's DROP INDEX waits for the table's
// metadata lock (lock_wait_timeout): the transactions open on the table
// hold it, and the inserts that come after wait behind the DDL, so a
// migration that finds the table busy this long leaves the index for the
// next one rather than stall the write-behind.
const dropLockWait = 5 // seconds

// dropRetiredIndexes drops those of table's retiredIndexes it has. Two
// processes migrating at once may both try: the loser's error is ignored
// when the index is gone afterwards. On MySQL a drop that waits longer than
// dropLockWait for the table is given up without an error (the index stays
// until a later migration).
func dropRetiredIndexes(ctx context.Context, db *sql.DB, d sqldialect.Dialect, table string) error {
	fail := func(err error) error { return fmt.Errorf("store: migrate: retired indexes of %s: %w", table, err) }
	for _, index := range retiredIndexes[table] {
		has, err := hasIndex(ctx, db, d, table, index)
		if err != nil {
			return fail(err)
		}
		if !has {
			continue
		}
		err = dropIndex(ctx, db, d, table, index)
		if d == sqldialect.MySQL && sqldialect.IsTxConflict(err) { // 1205: the table stayed busy
			continue
		}
		if err != nil {
			if still, err2 := hasIndex(ctx, db, d, table, index); err2 == nil && !still {
				continue
			}
			return fail(fmt.Errorf("drop %s: %w", index, err))
		}
	}
	return nil
}

// dropIndex drops table's index; on MySQL on a connection of its own that
// waits at most dropLockWait for the table's metadata lock.
func dropIndex(ctx context.Context, db *sql.DB, d sqldialect.Dialect, table, index string) error {
	if d == sqldialect.SQLite {
		_, err := db.ExecContext(ctx, "DROP INDEX IF EXISTS "+index)
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION lock_wait_timeout = "+strconv.Itoa(dropLockWait)); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, "ALTER TABLE "+table+" DROP INDEX "+index)
	// The connection goes back to the pool with the server's default.
	if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "SET SESSION lock_wait_timeout = DEFAULT"); rerr != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // discard it instead
	}
	return err
}

// hasIndex says whether table has the index named index.
func hasIndex(ctx context.Context, db *sql.DB, d sqldialect.Dialect, table, index string) (bool, error) {
	q := `SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND INDEX_NAME = ?`
	if d == sqldialect.SQLite {
		q = `SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND name = ?`
	}
	var n int
	if err := db.QueryRowContext(ctx, q, table, index).Scan(&n); err != nil {
		return false, fmt.Errorf("list indexes of %s: %w", table, err)
	}
	return n > 0, nil
}

// columnSet returns the names of table's columns, lower case; an error if
// the table does not exist.
func columnSet(ctx context.Context, db *sql.DB, d sqldialect.Dialect, table string) (map[string]bool, error) {
	q := `SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`
	if d == sqldialect.SQLite {
		q = `SELECT name FROM pragma_table_info(?)`
	}
	rows, err := db.QueryContext(ctx, q, table)
	if err != nil {
		return nil, fmt.Errorf("list columns of %s: %w", table, err)
	}
	out := map[string]bool{}
	wrap := func(err error) error { return fmt.Errorf("list columns of %s: %w", table, err) }
	err = eachRow(rows, wrap, wrap, func(sc scanner) error {
		var name string
		if err := sc.Scan(&name); err != nil {
			return err
		}
		out[strings.ToLower(name)] = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("list columns: " + table + " not found")
	}
	return out, nil
}
