package store_test

import (
	"database/sql"
	"io"
	"log/slog"
	"testing"

	"github.com/dabom/dpcs/internal/testenv"
)

// openSQLite opens a fresh SQLite file as service.Config.SQL does (one
// connection: SQLite has a single writer).
func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	return testenv.SQLite(t)
}

func TestSQLite(t *testing.T) { runSuite(t, openSQLite) }

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
