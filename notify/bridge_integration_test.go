//go:build integration

package notify

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/internal/testenv"
)

// TestRedisBridgeOnRealRedis: live notifications cross between two
// processes' hubs on a real redis-server and on a 3-node Redis Cluster
// (PUBLISH on one node reaches a subscriber on another).
func TestRedisBridgeOnRealRedis(t *testing.T) {
	for name, open := range map[string]func(testing.TB) redis.UniversalClient{"redis": testenv.RealRedis, "cluster": testenv.RealCluster} {
		t.Run(name, func(t *testing.T) {
			bridgeSuite(t, newProcess(t, open(t)), newProcess(t, open(t)))
		})
	}
}
