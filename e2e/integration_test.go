//go:build integration

package e2e

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/internal/outageproxy"
)

// The integration build adds the real servers `make integration` starts: a
// redis-server (DPCS_TEST_REDIS_ADDR) and a 3-node Redis Cluster
// (DPCS_TEST_REDIS_CLUSTER, comma-separated), each with MariaDB
// (DPCS_TEST_MYSQL_DSN); Kafka stays kfake. A missing variable fails the
// test: it never skips. Each test gets a database of its own, dropped
// afterwards, and family ids from a random base (Redis outlives the test).
func realBackends() []backend {
	return []backend{
		{
			name: "redis",
			env: func(t *testing.T) map[string]string {
				return map[string]string{"DPCS_REDIS_ADDR": need(t, "DPCS_TEST_REDIS_ADDR"), "DPCS_MYSQL_DSN": database(t)}
			},
			open: func(t *testing.T) *infra {
				p := outageproxy.New(t, need(t, "DPCS_TEST_REDIS_ADDR"))
				rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), DialTimeout: time.Second})
				t.Cleanup(func() { rdb.Close() })
				return withMariaDB(t, &infra{rdb: rdb, redisDown: p.Down, redisUp: func() { p.Up(t) }})
			},
		},
		{
			name: "cluster",
			env: func(t *testing.T) map[string]string {
				return map[string]string{"DPCS_REDIS_CLUSTER": need(t, "DPCS_TEST_REDIS_CLUSTER"), "DPCS_MYSQL_DSN": database(t)}
			},
			open: func(t *testing.T) *infra {
				// Every node behind its own proxy: the client learns the
				// nodes' own addresses from the cluster and dials them
				// through the proxies.
				addrs := strings.Split(need(t, "DPCS_TEST_REDIS_CLUSTER"), ",")
				proxies := map[string]*outageproxy.Proxy{}
				for _, a := range addrs {
					proxies[a] = outageproxy.New(t, a)
				}
				rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, DialTimeout: time.Second,
					Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
						if p, ok := proxies[addr]; ok {
							addr = p.Addr()
						}
						var d net.Dialer
						return d.DialContext(ctx, network, addr)
					}})
				t.Cleanup(func() { rdb.Close() })
				return withMariaDB(t, &infra{rdb: rdb,
					redisDown: func() {
						for _, p := range proxies {
							p.Down()
						}
					},
					redisUp: func() {
						for _, p := range proxies {
							p.Up(t)
						}
					}})
			},
		},
	}
}

func need(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set (run `make integration`)", name)
	}
	return v
}

// database creates a fresh database on the MariaDB of DPCS_TEST_MYSQL_DSN,
// dropped when the test ends, and returns its DSN.
func database(t *testing.T) string {
	t.Helper()
	dsn := need(t, "DPCS_TEST_MYSQL_DSN")
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
	name := "dpcs_e2e_" + hex.EncodeToString(b)
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

// withMariaDB adds a fresh database to inf, reached by the workers through
// an outage proxy and by the checks directly.
func withMariaDB(t *testing.T, inf *infra) *infra {
	t.Helper()
	cfg, err := mysql.ParseDSN(database(t))
	if err != nil {
		t.Fatal(err)
	}
	if inf.direct, err = sql.Open("mysql", cfg.FormatDSN()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inf.direct.Close() })
	p := outageproxy.New(t, cfg.Addr)
	cfg.Addr = p.Addr()
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = time.Second, 5*time.Second, 5*time.Second
	if inf.db, err = sql.Open("mysql", cfg.FormatDSN()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inf.db.Close() })
	inf.sqlDown, inf.sqlUp = p.Down, func() { p.Up(t) }
	return inf
}
