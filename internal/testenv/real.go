package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// The real servers `make integration` starts (scripts/servers.sh) and names
// in the environment. Each helper fails the test when its variable is not
// set: integration tests are asked for, not skipped.

// RealRedis is a client on the redis-server at DPCS_TEST_REDIS_ADDR.
func RealRedis(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: need(tb, "DPCS_TEST_REDIS_ADDR")})
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

// RealCluster is a client on the Redis Cluster at DPCS_TEST_REDIS_CLUSTER
// (comma-separated addresses).
func RealCluster(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(need(tb, "DPCS_TEST_REDIS_CLUSTER"), ",")})
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

// MySQL creates a fresh database dpcs_test_<random> on the server of
// DPCS_TEST_MYSQL_DSN, opens it and drops it when the test ends.
func MySQL(tb testing.TB) *sql.DB {
	tb.Helper()
	dsn := need(tb, "DPCS_TEST_MYSQL_DSN")
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { admin.Close() })
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "dpcs_test_" + hex.EncodeToString(b)
	if _, err := admin.ExecContext(context.Background(), "CREATE DATABASE "+name); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { admin.ExecContext(context.Background(), "DROP DATABASE "+name) })
	cfg.DBName = name
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

func need(tb testing.TB, key string) string {
	tb.Helper()
	v := os.Getenv(key)
	if v == "" {
		tb.Fatalf("%s is not set (run `make integration`)", key)
	}
	return v
}
