//go:build integration

package limit

import (
	"fmt"
	"testing"
	"time"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// TestRedisLimiterOnRealRedis: the Limiter suite on a real redis-server
// and a Redis Cluster (started by `make integration`). Time passes by
// waiting the durations the limiter answered, plus Redis's 1 ms resolution.
func TestRedisLimiterOnRealRedis(t *testing.T) {
	for name, open := range map[string]func(testing.TB) redis.UniversalClient{"redis": testenv.RealRedis, "cluster": testenv.RealCluster} {
		t.Run(name, func(t *testing.T) {
			testAuthLimiter(t, 3*time.Second, func(t *testing.T) limiterUnderTest {
				l, err := NewRedisLimiter(open(t))
				if err != nil {
					t.Fatal(err)
				}
				return limiterUnderTest{Limiter: l, prefix: fmt.Sprintf("test-%d-", time.Now().UnixNano()),
					advance: func(d time.Duration) { time.Sleep(d + time.Millisecond) }}
			})
		})
	}
}
