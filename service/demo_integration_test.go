//go:build integration

package service

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/http"
	"os"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// freshDatabase creates an empty database on the MariaDB of
// DPCS_TEST_MYSQL_DSN, dropped after the test, and returns its DSN.
func freshDatabase(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("DPCS_TEST_MYSQL_DSN")
	if dsn == "" {
		t.Fatal("DPCS_TEST_MYSQL_DSN is not set (run `make integration`)")
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "dpcs_demo_" + hex.EncodeToString(b)
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("mariadb: %v", err)
	}
	t.Cleanup(func() {
		if a, err := sql.Open("mysql", dsn); err == nil {
			a.Exec("DROP DATABASE " + name)
			a.Close()
		}
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

// The all-in-one pointed at a real (empty) database seeds no demo and no
// published password; with DPCS_DEMO=1 it does.
func TestSystemOnMariaDBSeedsDemoOnlyWhenAsked(t *testing.T) {
	for _, c := range []struct {
		demo string
		want int
	}{{"", http.StatusUnauthorized}, {"1", http.StatusOK}} {
		t.Run("DPCS_DEMO="+c.demo, func(t *testing.T) {
			ctx := context.Background()
			cfg, err := LoadSystemConfig(env(map[string]string{
				"DPCS_DATA_DIR": t.TempDir(), "DPCS_EMBEDDED_KAFKA_PORT": "0", "DPCS_HTTP_ADDR": "127.0.0.1:0",
				"DPCS_SIMULATOR_ADDR": "127.0.0.1:0", "DPCS_DEMO_FAMILIES": "5", "DPCS_SIMULATOR_RATE": "0",
				"DPCS_MYSQL_DSN": freshDatabase(t), "DPCS_DEMO": c.demo,
			}))
			if err != nil {
				t.Fatal(err)
			}
			s, err := StartSystem(ctx, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			do(t, http.MethodPost, "http://"+s.HTTPAddr+"/auth/token", "", `{"login":"1","password":"`+DemoPassword+`"}`, c.want)
		})
	}
}
