//go:build integration

package idempotency

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/internal/outageproxy"
)

// The integration tag runs the store suite, the Guard tests and the
// concurrency property on a real redis-server (DPCS_TEST_REDIS_ADDR), a
// 3-node Redis Cluster (DPCS_TEST_REDIS_CLUSTER) and MariaDB
// (DPCS_TEST_MYSQL_DSN), as started by `make integration`. A missing
// address fails the test: it never skips.
func realBackends() []backend {
	return []backend{{"redis", realRedis}, {"cluster", realCluster}, {"mariadb", realMariaDB}}
}

func env(tb testing.TB, name string) string {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		tb.Fatalf("%s is not set (run `make integration`)", name)
	}
	return v
}

// redisHarness moves time forward on a real Redis by shortening the TTL of
// every key under the harness's own prefix (or deleting it), which is what
// the passing of that much time would do to them.
func redisHarness(tb testing.TB, rdb redis.UniversalClient) harness {
	tb.Helper()
	prefix := "idemtest:" + strings.ReplaceAll(uniqueKey(tb), "{", "(") + ":"
	s, err := NewRedisStore(rdb, WithKeyPrefix(strings.ReplaceAll(prefix, "}", ")")))
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	advance := func(d time.Duration) {
		shift := func(ctx context.Context, c *redis.Client) error {
			iter := c.Scan(ctx, 0, s.prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				k := iter.Val()
				pttl, err := c.PTTL(ctx, k).Result()
				if err != nil {
					return err
				}
				if pttl <= d {
					err = c.Del(ctx, k).Err()
				} else {
					err = c.PExpire(ctx, k, pttl-d).Err()
				}
				if err != nil {
					return err
				}
			}
			return iter.Err()
		}
		var err error
		switch c := rdb.(type) {
		case *redis.ClusterClient:
			err = c.ForEachMaster(ctx, shift)
		case *redis.Client:
			err = shift(ctx, c)
		}
		if err != nil {
			tb.Fatalf("advance: %v", err)
		}
	}
	return harness{store: s, advance: advance}
}

func realRedis(tb testing.TB) harness {
	tb.Helper()
	addr := env(tb, "DPCS_TEST_REDIS_ADDR")
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		tb.Fatalf("redis at %s: %v", addr, err)
	}
	tb.Cleanup(func() { rdb.Close() })
	return redisHarness(tb, rdb)
}

func realCluster(tb testing.TB) harness {
	tb.Helper()
	addrs := env(tb, "DPCS_TEST_REDIS_CLUSTER")
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
	if err := rdb.ForEachShard(context.Background(), func(ctx context.Context, c *redis.Client) error {
		return c.Ping(ctx).Err()
	}); err != nil {
		tb.Fatalf("redis cluster at %s: %v", addrs, err)
	}
	tb.Cleanup(func() { rdb.Close() })
	return redisHarness(tb, rdb)
}

func openMariaDB(tb testing.TB) *sql.DB {
	tb.Helper()
	dsn := env(tb, "DPCS_TEST_MYSQL_DSN")
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	if err := db.Ping(); err != nil {
		tb.Fatalf("mariadb: %v", err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

func realMariaDB(tb testing.TB) harness {
	tb.Helper()
	return sqlHarness(tb, openMariaDB(tb))
}

// Tagged keys of one tag share a cluster slot with the quota engine's
// family keys.
func TestClusterTaggedKeys(t *testing.T) {
	addrs := env(t, "DPCS_TEST_REDIS_CLUSTER")
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
	defer rdb.Close()
	s, _ := NewRedisStore(rdb)
	ctx := context.Background()
	a, err := rdb.ClusterKeySlot(ctx, s.RedisKey(TaggedKey("g", "100", "evt_a"))).Result()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := rdb.ClusterKeySlot(ctx, "family:{100}:meta").Result()
	if a != b {
		t.Errorf("tagged key in slot %d, family key in %d", a, b)
	}
}

// The SQL store on MariaDB through an outage (the database unreachable, then
// back): calls fail with errors, never with a wrong outcome, and the claim
// taken before the outage completes after it.
func TestSQLStoreOutageMariaDB(t *testing.T) {
	cfg, err := mysql.ParseDSN(env(t, "DPCS_TEST_MYSQL_DSN"))
	if err != nil {
		t.Fatal(err)
	}
	p := outageproxy.New(t, cfg.Addr)
	cfg.Addr = p.Addr()
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = 500*time.Millisecond, 2*time.Second, 2*time.Second
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h := sqlHarness(t, db)
	g := newGuard(t, h.store, WithLease(time.Minute))
	ctx := context.Background()
	keys := []string{uniqueKey(t), uniqueKey(t)}
	c, err := g.Claim(ctx, keys[0])
	if err != nil || c.Outcome != Acquired {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}

	p.Down()
	if got, err := g.Claim(ctx, keys[1]); err == nil {
		t.Errorf("claim while down: %v, want an error", got.Outcome)
	}
	if err := g.Complete(ctx, c, []byte("r")); err == nil || errors.Is(err, ErrLeaseLost) {
		t.Errorf("complete while down: %v, want a database error", err)
	}
	p.Up(t)

	deadline := time.Now().Add(10 * time.Second)
	for {
		err = g.Complete(ctx, c, []byte("r"))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("complete after the outage: %v", err)
	}
	if d, err := g.Claim(ctx, keys[0]); err != nil || d.Outcome != Done || string(d.Result) != "r" {
		t.Errorf("after the outage: %+v %v", d, err)
	}
	if d, err := g.Claim(ctx, keys[1]); err != nil || d.Outcome != Acquired {
		t.Errorf("new key after the outage: %+v %v", d, err)
	}
}
