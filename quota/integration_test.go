//go:build integration

package quota

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The integration tag runs every story, the differential property and the
// concurrency test on a real redis-server (DPCS_TEST_REDIS_ADDR) and a 3-node
// Redis Cluster (DPCS_TEST_REDIS_CLUSTER, comma-separated), as started by
// `make integration`. A missing address fails the test: it never skips.
func realBackends() []backend {
	return []backend{{"redis", realRedis}, {"cluster", realCluster}}
}

func realRedis(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	addr := os.Getenv("DPCS_TEST_REDIS_ADDR")
	if addr == "" {
		tb.Fatal("DPCS_TEST_REDIS_ADDR is not set (run `make integration`)")
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		tb.Fatalf("redis at %s: %v", addr, err)
	}
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

func realCluster(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	addrs := os.Getenv("DPCS_TEST_REDIS_CLUSTER")
	if addrs == "" {
		tb.Fatal("DPCS_TEST_REDIS_CLUSTER is not set (run `make integration`)")
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
	if err := rdb.ForEachShard(context.Background(), func(ctx context.Context, c *redis.Client) error {
		return c.Ping(ctx).Err()
	}); err != nil {
		tb.Fatalf("redis cluster at %s: %v", addrs, err)
	}
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

// The families of one property run land on different cluster nodes; a
// script touching keys of two families would fail with CROSSSLOT.
func TestClusterSpreadsFamilies(t *testing.T) {
	rdb := realCluster(t).(*redis.ClusterClient)
	ctx := context.Background()
	k := keys{}
	slots := map[int64]bool{}
	for f := int64(1); f <= 16; f++ {
		s, err := rdb.ClusterKeySlot(ctx, k.family(f)).Result()
		if err != nil {
			t.Fatal(err)
		}
		s2, _ := rdb.ClusterKeySlot(ctx, k.events(f, 20260206)).Result()
		if s != s2 {
			t.Fatalf("family %d: keys in slots %d and %d", f, s, s2)
		}
		slots[s] = true
	}
	if len(slots) < 8 {
		t.Errorf("16 families in only %d slots", len(slots))
	}
}
