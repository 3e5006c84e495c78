package store_test

import (
	"database/sql"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"
)

// openSQLite opens a fresh SQLite file as service.Config.SQL does (one
// connection: SQLite has a single writer).
func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "dpcs.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func TestSQLite(t *testing.T) { runSuite(t, openSQLite) }

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
