package sqldialect

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/go-cmp/cmp"
)

func TestInsertIgnore(t *testing.T) {
	cols := []string{"a", "b"}
	if got, want := MySQL.InsertIgnore("t", cols, 2), "INSERT IGNORE INTO t (a, b) VALUES (?, ?), (?, ?)"; got != want {
		t.Errorf("mysql: %q", got)
	}
	if got, want := SQLite.InsertIgnore("t", cols, 1), "INSERT OR IGNORE INTO t (a, b) VALUES (?, ?)"; got != want {
		t.Errorf("sqlite: %q", got)
	}
}

func TestParseAndNames(t *testing.T) {
	for name, want := range map[string]Dialect{"mysql": MySQL, "MariaDB": MySQL, "sqlite3": SQLite, "sqlite": SQLite} {
		if d, err := Parse(name); err != nil || d != want {
			t.Errorf("Parse(%q) = %v, %v", name, d, err)
		}
	}
	if _, err := Parse("pg"); !errors.Is(err, ErrUnknown) {
		t.Errorf("Parse(pg): %v", err)
	}
	if _, err := Detect(nil); !errors.Is(err, ErrUnknown) {
		t.Errorf("Detect(nil): %v", err)
	}
	if MySQL.String() != "mysql" || SQLite.String() != "sqlite" || Unknown.String() != "unknown" {
		t.Error("String")
	}
	if MySQL.MaxParams() != 65535 || SQLite.MaxParams() != 32766 {
		t.Error("MaxParams")
	}
	at := time.Date(2026, 2, 6, 23, 30, 0, 5e6, time.FixedZone("KST", 9*3600))
	if got := SQLite.Time(at); got != "2026-02-06 14:30:00.005" {
		t.Errorf("SQLite.Time = %v", got)
	}
	if got := MySQL.Time(at).(time.Time); got.Location() != time.UTC || !got.Equal(at) {
		t.Errorf("MySQL.Time = %v", got)
	}
	for _, ok := range []string{"usage_record", "_x1"} {
		if err := ValidIdent(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "1a", "a-b", "a;drop", string(make([]byte, 65))} {
		if ValidIdent(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

type codeErr int

// MySQLError has the name and fields of the driver's error but lives in
// another package: it is not the driver's.
type MySQLError struct{ Number uint16 }

func (e *MySQLError) Error() string { return fmt.Sprint("look-alike ", e.Number) }

func (c codeErr) Error() string { return fmt.Sprint("sqlite ", int(c)) }
func (c codeErr) Code() int     { return int(c) }

func TestIsPermanent(t *testing.T) {
	for err, want := range map[error]bool{
		&mysql.MySQLError{Number: 1406}:                      true,
		fmt.Errorf("x: %w", &mysql.MySQLError{Number: 1366}): true,
		&mysql.MySQLError{Number: 1205}:                      false, // lock wait timeout
		&mysql.MySQLError{Number: 1146}:                      false, // no such table
		mysql.ErrInvalidConn:                                 false,
		errors.Join(errors.New("a"), fmt.Errorf("b: %w", &mysql.MySQLError{Number: 1406})): true,
		&MySQLError{Number: 1406}:        false, // a look-alike from another package
		codeErr(19 | 5<<8):               true,  // SQLITE_CONSTRAINT_*
		codeErr(5):                       false, // SQLITE_BUSY
		errors.New("connection refused"): false,
	} {
		if got := IsPermanent(err); got != want {
			t.Errorf("IsPermanent(%v) = %v", err, got)
		}
	}
}

func TestStatements(t *testing.T) {
	script := "-- comment\nCREATE TABLE a (\n  x INT\n);\n\nCREATE INDEX i ON a (x);\nSELECT 1"
	want := []string{"CREATE TABLE a (\n  x INT\n)", "CREATE INDEX i ON a (x)", "SELECT 1"}
	if diff := cmp.Diff(want, Statements(script)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestForUpdateAndDuplicate(t *testing.T) {
	if MySQL.ForUpdate() != " FOR UPDATE" || SQLite.ForUpdate() != "" {
		t.Error("ForUpdate")
	}
	for err, want := range map[error]bool{
		&mysql.MySQLError{Number: 1062}:                      true,
		fmt.Errorf("x: %w", &mysql.MySQLError{Number: 1406}): false,
		codeErr(2067):                    true,
		codeErr(1555):                    true,
		codeErr(19):                      false,
		errors.New("duplicate-ish text"): false,
	} {
		if got := IsDuplicate(err); got != want {
			t.Errorf("IsDuplicate(%v) = %v", err, got)
		}
	}
}

func TestIsTxConflict(t *testing.T) {
	for err, want := range map[error]bool{
		&mysql.MySQLError{Number: 1213}:                      true,
		fmt.Errorf("x: %w", &mysql.MySQLError{Number: 1205}): true,
		&mysql.MySQLError{Number: 1062}:                      false,
		codeErr(5):                                           true,
		codeErr(6 | 1<<8):                                    true,
		codeErr(19):                                          false,
		errors.New("deadlock-ish text"):                      false,
		nil:                                                  false,
	} {
		if got := IsTxConflict(err); got != want {
			t.Errorf("IsTxConflict(%v) = %v", err, got)
		}
	}
}

func TestNullTime(t *testing.T) {
	want := time.Date(2026, 2, 6, 14, 30, 0, 5e6, time.UTC)
	for _, v := range []any{want.In(time.FixedZone("KST", 9*3600)), "2026-02-06 14:30:00.005", []byte("2026-02-06 14:30:00.005"), "2026-02-06T14:30:00.005Z"} {
		var n NullTime
		if err := n.Scan(v); err != nil || !n.Valid || !n.Time.Equal(want) || n.Time.Location() != time.UTC {
			t.Errorf("Scan(%v) = %v, %v", v, n, err)
		}
	}
	var n NullTime
	if err := n.Scan(nil); err != nil || n.Valid {
		t.Errorf("Scan(nil) = %v, %v", n, err)
	}
	if err := n.Scan(42); err == nil {
		t.Error("Scan(int) accepted")
	}
	if err := n.Scan("yesterday"); err == nil {
		t.Error("Scan(yesterday) accepted")
	}
}
