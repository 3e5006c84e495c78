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
// redis-server and a 3-node Redis Cluster, side by side (each backend is its
// own server; fn must only touch keys under its own prefix).
func eachBackend(t *testing.T, fn func(t *testing.T, rdb redis.UniversalClient)) {
	t.Helper()
	runBackends(t, append([]backend{{"miniredis", newMiniredis}}, realBackends()...), fn)
}

// eachBackendOnce is eachBackend for the long property tests: under the
// integration tag only on the real servers, since `make test` runs them on
// miniredis already (with the race detector and as many checks).
func eachBackendOnce(t *testing.T, fn func(t *testing.T, rdb redis.UniversalClient)) {
	t.Helper()
	bs := realBackends()
	if len(bs) == 0 {
		bs = []backend{{"miniredis", newMiniredis}}
	}
	runBackends(t, bs, fn)
}

func runBackends(t *testing.T, bs []backend, fn func(t *testing.T, rdb redis.UniversalClient)) {
	t.Helper()
	for _, b := range bs {
		t.Run(b.name, func(t *testing.T) {
			if len(bs) > 1 {
				t.Parallel()
			}
			fn(t, b.open(t))
		})
	}
}
