package store

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/go-sql-driver/mysql"
	_ "modernc.org/sqlite"
)

// A transaction that loses a race (a MariaDB deadlock, 1213) is rolled back
// and run again: before, UpdatePolicy and every other write answered the
// deadlock as a 500. Other errors are not retried, and a conflict that
// persists gives up after txAttempts.
func TestInTxRetriesConflicts(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "dpcs.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	defer db.Close()
	s, err := New(db)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := db.Exec(`CREATE TABLE tx_probe (n INTEGER)`); err != nil {
		t.Fatal(err)
	}
	deadlock := &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}
	count := func() (n int) {
		if err := db.QueryRow(`SELECT COUNT(*) FROM tx_probe`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	calls := 0
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		calls++
		if _, err := tx.Exec(`INSERT INTO tx_probe (n) VALUES (?)`, calls); err != nil {
			return err
		}
		if calls < 3 {
			return deadlock // rolled back with its insert
		}
		return nil
	})
	if err != nil || calls != 3 || count() != 1 {
		t.Fatalf("deadlocked twice then committed: err %v, %d calls, %d rows; want nil, 3, 1", err, calls, count())
	}

	calls = 0
	err = s.inTx(ctx, func(*sql.Tx) error { calls++; return deadlock })
	if !errors.Is(err, deadlock) || calls != txAttempts {
		t.Fatalf("always deadlocked: err %v after %d calls; want the deadlock after %d", err, calls, txAttempts)
	}

	calls = 0
	other := errors.New("not a conflict")
	if err := s.inTx(ctx, func(*sql.Tx) error { calls++; return other }); !errors.Is(err, other) || calls != 1 {
		t.Fatalf("other error: %v after %d calls; want it after 1", err, calls)
	}
}
