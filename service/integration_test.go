//go:build integration

package service

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The processor's stories on a real redis-server and a 3-node Redis Cluster
// (started by `make integration`), with kfake as the broker.

func realRedis(t *testing.T) redis.UniversalClient {
	t.Helper()
	addr := os.Getenv("DPCS_TEST_REDIS_ADDR")
	if addr == "" {
		t.Fatal("DPCS_TEST_REDIS_ADDR is not set (run `make integration`)")
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func realCluster(t *testing.T) redis.UniversalClient {
	t.Helper()
	addrs := os.Getenv("DPCS_TEST_REDIS_CLUSTER")
	if addrs == "" {
		t.Fatal("DPCS_TEST_REDIS_CLUSTER is not set (run `make integration`)")
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func TestProcessorOnRealRedis(t *testing.T) {
	for name, open := range map[string]func(*testing.T) redis.UniversalClient{"redis": realRedis, "cluster": realCluster} {
		t.Run(name, func(t *testing.T) {
			t.Run("last10MB", func(t *testing.T) { storyLast10MB(newHarnessOn(t, open(t))) })
			t.Run("duplicates", func(t *testing.T) { storyDuplicates(newHarnessOn(t, open(t))) })
			t.Run("policyUpdated", func(t *testing.T) { storyPolicyUpdated(newHarnessOn(t, open(t))) })
			t.Run("crashRestart", func(t *testing.T) { storyCrashRestart(newHarnessOn(t, open(t))) })
		})
	}
}
