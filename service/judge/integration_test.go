//go:build integration

package judge

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/internal/testenv"
)

// The processor's stories on a real redis-server and a 3-node Redis Cluster
// (started by `make integration`), with kfake as the broker.
func TestProcessorOnRealRedis(t *testing.T) {
	for name, open := range map[string]func(testing.TB) redis.UniversalClient{"redis": testenv.RealRedis, "cluster": testenv.RealCluster} {
		t.Run(name, func(t *testing.T) {
			t.Run("last10MB", func(t *testing.T) { storyLast10MB(newHarnessOn(t, open(t))) })
			t.Run("duplicates", func(t *testing.T) { storyDuplicates(newHarnessOn(t, open(t))) })
			t.Run("policyUpdated", func(t *testing.T) { storyPolicyUpdated(newHarnessOn(t, open(t))) })
			t.Run("crashRestart", func(t *testing.T) { storyCrashRestart(newHarnessOn(t, open(t))) })
		})
	}
}
