//go:build integration

package store_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// openMySQL creates a fresh database dpcs_store_<random> on the server of
// DPCS_TEST_MYSQL_DSN (set by scripts/servers.sh) and drops it afterwards.
func openMySQL(t *testing.T) *sql.DB { return mysqlDB(t) }

// mysqlDB is openMySQL for tests and benchmarks.
func mysqlDB(t testing.TB) *sql.DB {
	t.Helper()
	dsn := os.Getenv("DPCS_TEST_MYSQL_DSN")
	if dsn == "" {
		t.Fatal("DPCS_TEST_MYSQL_DSN is not set (run through make integration)")
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "dpcs_store_" + hex.EncodeToString(b)
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.ExecContext(context.Background(), "DROP DATABASE "+name) })
	cfg.DBName = name
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestMariaDB(t *testing.T) { runSuite(t, openMySQL) }
