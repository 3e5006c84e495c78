package quota

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

func newMiniredis(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	m := miniredis.RunT(tb)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

type backend struct {
	name string
	open func(testing.TB) redis.UniversalClient
}

// eachBackend runs fn on miniredis and, under the integration tag, on a real
// redis-server and a 3-node Redis Cluster.
func eachBackend(t *testing.T, fn func(t *testing.T, rdb redis.UniversalClient)) {
	t.Helper()
	for _, b := range append([]backend{{"miniredis", newMiniredis}}, realBackends()...) {
		t.Run(b.name, func(t *testing.T) { fn(t, b.open(t)) })
	}
}
