//go:build integration

package store_test

import (
	"database/sql"
	"os"
	"testing"

	"github.com/go-sql-driver/mysql"
)

func TestJudgedSinceMariaDB(t *testing.T) {
	t.Run("default zone", func(t *testing.T) { testJudgedSince(t, newEnv(t, openMySQL)) })
	// created_at is CURRENT_TIMESTAMP(3) in the session's zone: a session
	// west of UTC would miss recent rows if it were compared as UTC.
	t.Run("session zone -05:00", func(t *testing.T) { testJudgedSince(t, newEnv(t, openMySQLInZone("'-05:00'"))) })
}

// openMySQLInZone is openMySQL with every session in time zone tz.
func openMySQLInZone(tz string) opener {
	return func(t *testing.T) *sql.DB {
		t.Helper()
		var name string
		if err := openMySQL(t).QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		cfg, err := mysql.ParseDSN(os.Getenv("DPCS_TEST_MYSQL_DSN"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.DBName = name
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["time_zone"] = tz
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		var got string
		if err := db.QueryRow("SELECT @@session.time_zone").Scan(&got); err != nil || "'"+got+"'" != tz {
			t.Fatalf("session time zone %q, %v", got, err)
		}
		return db
	}
}
