//go:build integration

package access

import (
	"testing"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// TestRedisOnRealRedis: access events cross between two
// instances' clients on a real redis-server and on a 3-node Redis Cluster
// (PUBLISH on one node reaches a subscriber on another).
func TestRedisOnRealRedis(t *testing.T) {
	for name, open := range map[string]func(testing.TB) redis.UniversalClient{"redis": testenv.RealRedis, "cluster": testenv.RealCluster} {
		t.Run(name, func(t *testing.T) {
			eventsSuite(t, newRedisBus(t, open(t)), newRedisBus(t, open(t)))
		})
	}
}
