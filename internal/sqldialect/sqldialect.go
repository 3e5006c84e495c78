// Package sqldialect is the one place where DPCS's SQL differs between MySQL
// (MariaDB) and SQLite: the insert-ignore statement, time values, parameter
// limits, which driver errors retrying cannot fix, and running a migration
// script. Everything else DPCS writes is plain SQL both accept with `?`
// placeholders.
//
// It imports no driver: the caller opens the *sql.DB with the driver of its
// choice, Detect names the dialect from the driver's type, and driver errors
// are recognised by their type's name (MySQL) or their Code method (SQLite),
// so that a program using only SQLite, or only Redis, links no MySQL driver.
package sqldialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Dialect is a SQL dialect.
type Dialect int

// The dialects DPCS speaks.
const (
	Unknown Dialect = iota
	MySQL           // MySQL 8 / MariaDB 10.6+ (github.com/go-sql-driver/mysql)
	SQLite          // SQLite 3.35+ (modernc.org/sqlite)
)

// ErrUnknown is returned when a dialect cannot be named or detected.
var ErrUnknown = errors.New("sqldialect: unknown SQL dialect")

// String returns "mysql", "sqlite" or "unknown".
func (d Dialect) String() string {
	switch d {
	case MySQL:
		return "mysql"
	case SQLite:
		return "sqlite"
	}
	return "unknown"
}

// Parse returns the dialect called name: "mysql"/"mariadb" or "sqlite"/"sqlite3".
func Parse(name string) (Dialect, error) {
	switch strings.ToLower(name) {
	case "mysql", "mariadb":
		return MySQL, nil
	case "sqlite", "sqlite3":
		return SQLite, nil
	}
	return Unknown, fmt.Errorf("%w: %q", ErrUnknown, name)
}

// Detect returns the dialect of db from the type of its driver.
func Detect(db *sql.DB) (Dialect, error) {
	if db == nil {
		return Unknown, fmt.Errorf("%w: nil *sql.DB", ErrUnknown)
	}
	t := reflect.TypeOf(db.Driver())
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	path := strings.ToLower(t.PkgPath() + "." + t.Name())
	switch {
	case strings.Contains(path, "mysql"):
		return MySQL, nil
	case strings.Contains(path, "sqlite"):
		return SQLite, nil
	}
	return Unknown, fmt.Errorf("%w: driver %s (set the dialect explicitly)", ErrUnknown, path)
}

// InsertIgnore returns a multi-row insert of rows rows into table that skips
// rows whose unique key already exists: `INSERT IGNORE INTO` on MySQL,
// `INSERT OR IGNORE INTO` on SQLite. Placeholders are `?`, row by row.
// Names are not quoted: check them with ValidIdent.
func (d Dialect) InsertIgnore(table string, cols []string, rows int) string {
	var b strings.Builder
	if d == SQLite {
		b.WriteString("INSERT OR IGNORE INTO ")
	} else {
		b.WriteString("INSERT IGNORE INTO ")
	}
	b.WriteString(table)
	b.WriteString(" (")
	b.WriteString(strings.Join(cols, ", "))
	b.WriteString(") VALUES ")
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ") + ")"
	b.Grow(rows * (len(row) + 2))
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	return b.String()
}

// MaxParams is the number of placeholders one statement may carry (MySQL's
// protocol limit 65535; SQLite's default SQLITE_MAX_VARIABLE_NUMBER 32766).
func (d Dialect) MaxParams() int {
	if d == SQLite {
		return 32766
	}
	return 65535
}

// SQLiteTimeLayout is how times are stored in SQLite: UTC, fixed width, so
// that text order is time order and SQLite's date functions read them.
const SQLiteTimeLayout = "2006-01-02 15:04:05.000"

// Time returns t as a statement argument for a DATETIME(3) column: a UTC
// time.Time for MySQL (the driver writes it in the connection's loc, UTC by
// default), SQLiteTimeLayout text for SQLite.
func (d Dialect) Time(t time.Time) any {
	if d == SQLite {
		return t.UTC().Format(SQLiteTimeLayout)
	}
	return t.UTC()
}

// IsPermanent reports whether err is a database error about the data itself
// (a value out of range, too long, of the wrong type, a NOT NULL column left
// empty) that fails again however often the same statement is retried.
// Connection, lock, timeout and schema errors are not permanent: they heal
// when the database (or its operator) does.
func IsPermanent(err error) bool {
	if n, ok := mysqlNumber(err); ok {
		switch n {
		case 1048, // column cannot be null
			1264, // out of range value
			1265, // data truncated
			1292, // incorrect datetime value
			1366, // incorrect integer/string value
			1406, // data too long
			3140: // invalid JSON text
			return true
		}
		return false
	}
	var se interface{ Code() int }
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // primary result code
		case 18, // SQLITE_TOOBIG
			19, // SQLITE_CONSTRAINT (not ignored: CHECK / NOT NULL under plain INSERT)
			20, // SQLITE_MISMATCH
			25: // SQLITE_RANGE
			return true
		}
	}
	return false
}

// ValidIdent checks that name is a plain SQL identifier both dialects accept
// unquoted: a letter or underscore, then letters, digits or underscores, at
// most 64 bytes.
func ValidIdent(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("sqldialect: identifier %q must be 1..64 bytes", name)
	}
	for i, r := range name {
		ok := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9')
		if !ok {
			return fmt.Errorf("sqldialect: identifier %q: only letters, digits and '_' allowed", name)
		}
	}
	return nil
}

// Exec runs a migration script: statements separated by a `;` at the end of
// a line. Lines starting with `--` are comments. It needs no
// multiStatements support from the driver.
func Exec(ctx context.Context, db *sql.DB, script string) error {
	for _, stmt := range Statements(script) {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("sqldialect: %w (in %.60q)", err, stmt)
		}
	}
	return nil
}

// Statements splits script as Exec does.
func Statements(script string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.Lines(script) {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line)
		if strings.HasSuffix(t, ";") {
			if s := strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"); s != "" {
				out = append(out, s)
			}
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// ForUpdate returns the row-locking suffix of a SELECT inside a transaction:
// " FOR UPDATE" on MySQL, "" on SQLite, whose single writer already
// serialises transactions.
func (d Dialect) ForUpdate() string {
	if d == SQLite {
		return ""
	}
	return " FOR UPDATE"
}

// IsDuplicate reports whether err is a unique or primary key violation
// (MySQL 1062, SQLite SQLITE_CONSTRAINT_UNIQUE / _PRIMARYKEY).
func IsDuplicate(err error) bool {
	if n, ok := mysqlNumber(err); ok {
		return n == 1062
	}
	var se interface{ Code() int }
	if errors.As(err, &se) {
		c := se.Code()
		return c == 2067 || c == 1555 // SQLITE_CONSTRAINT_UNIQUE, SQLITE_CONSTRAINT_PRIMARYKEY
	}
	return false
}

// IsTxConflict reports whether err ended a transaction that lost a race with
// another one and may be run again from the start: MySQL's deadlock (1213,
// the transaction was rolled back) and lock wait timeout (1205), SQLite's
// SQLITE_BUSY and SQLITE_LOCKED.
func IsTxConflict(err error) bool {
	if n, ok := mysqlNumber(err); ok {
		return n == 1213 || n == 1205
	}
	var se interface{ Code() int }
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // primary result code
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
			return true
		}
	}
	return false
}

// NullTime scans a DATETIME(3) column of either dialect: a time.Time
// (MySQL with parseTime=true), or text in SQLiteTimeLayout or MySQL's
// "2006-01-02 15:04:05[.fff]" form (MySQL without parseTime, SQLite), read
// as UTC. NULL leaves Valid false.
type NullTime struct {
	Time  time.Time
	Valid bool
}

// Scan implements sql.Scanner.
func (n *NullTime) Scan(v any) error {
	n.Time, n.Valid = time.Time{}, false
	var s string
	switch x := v.(type) {
	case nil:
		return nil
	case time.Time:
		n.Time, n.Valid = x.UTC(), true
		return nil
	case string:
		s = x
	case []byte:
		s = string(x)
	default:
		return fmt.Errorf("sqldialect: cannot scan %T into a time", v)
	}
	for _, layout := range []string{"2006-01-02 15:04:05.999999999", time.RFC3339Nano, "2006-01-02T15:04:05.999999999"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			n.Time, n.Valid = t.UTC(), true
			return nil
		}
	}
	return fmt.Errorf("sqldialect: cannot parse time %q", s)
}

// mysqlPkg is the import path of the MySQL driver whose *MySQLError values
// mysqlNumber reads, without importing it.
const mysqlPkg = "github.com/go-sql-driver/mysql"

// mysqlNumber returns the server error number of the first
// *mysql.MySQLError in err's tree (as errors.As walks it). The driver is
// recognised by the error's type name and its Number field read by
// reflection, so this package does not link the driver.
func mysqlNumber(err error) (uint16, bool) {
	if err == nil {
		return 0, false
	}
	v := reflect.ValueOf(err)
	if v.Kind() == reflect.Pointer && !v.IsNil() {
		if e := v.Elem(); e.Kind() == reflect.Struct && e.Type().Name() == "MySQLError" &&
			strings.HasSuffix(e.Type().PkgPath(), mysqlPkg) {
			if f := e.FieldByName("Number"); f.IsValid() && f.Kind() == reflect.Uint16 {
				return uint16(f.Uint()), true
			}
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return mysqlNumber(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if n, ok := mysqlNumber(e); ok {
				return n, true
			}
		}
	}
	return 0, false
}
