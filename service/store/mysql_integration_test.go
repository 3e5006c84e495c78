//go:build integration

package store_test

import (
	"database/sql"
	"testing"

	"github.com/dabom/dpcs/internal/testenv"
)

// openMySQL creates a fresh database on the server of DPCS_TEST_MYSQL_DSN
// (set by scripts/servers.sh) and drops it afterwards.
func openMySQL(t *testing.T) *sql.DB { return mysqlDB(t) }

// mysqlDB is openMySQL for tests and benchmarks (internal/testenv).
func mysqlDB(t testing.TB) *sql.DB { return testenv.MySQL(t) }

func TestMariaDB(t *testing.T) { runSuite(t, openMySQL) }
