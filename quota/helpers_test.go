package quota

import (
	"context"
	"errors"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/dabom/dpcs/policy"
	"github.com/redis/go-redis/v9"
)

func newMiniredis(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	m := miniredis.RunT(tb)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

// newMiniredisCluster is a Redis Cluster client on a miniredis, which
// answers CLUSTER SLOTS as one master owning every slot: the engine takes
// its Cluster paths (a marker per master, replica acks grouped by master).
func newMiniredisCluster(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	m := miniredis.RunT(tb)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{m.Addr()}})
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

type backend struct {
	name string
	open func(testing.TB) redis.UniversalClient
}

// eachBackend runs fn on miniredis (through a plain and a Cluster client)
// and, under the integration tag, on a real redis-server and a 3-node Redis
// Cluster, side by side (each backend is its own server; fn must only touch
// keys under its own prefix).
func eachBackend(t *testing.T, fn func(t *testing.T, rdb redis.UniversalClient)) {
	t.Helper()
	runBackends(t, append([]backend{{"miniredis", newMiniredis}, {"miniredis-cluster", newMiniredisCluster}}, realBackends()...), fn)
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

// injected is the error fault hooks inject.
var injected = errors.New("ERR injected")

// faultHook lets a test fail or rewrite what a go-redis client sends, one
// command or pipeline at a time (a single command is a pipeline of one).
type faultHook struct {
	// before runs before cmds are sent; an error fails every one of them
	// without sending it.
	before func(cmds []redis.Cmder) error
	// after runs once cmds were answered, and may change their replies.
	after func(cmds []redis.Cmder)
}

func (h *faultHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.process(ctx, []redis.Cmder{cmd}, func(ctx context.Context, _ []redis.Cmder) error { return next(ctx, cmd) })
	}
}

func (h *faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { return h.process(ctx, cmds, next) }
}

func (h *faultHook) process(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
	if h.before != nil {
		if err := h.before(cmds); err != nil {
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
	}
	err := next(ctx, cmds)
	if h.after != nil {
		h.after(cmds)
	}
	return err
}

// names are the names of cmds ("evalsha", "wait", …).
func names(cmds []redis.Cmder) []string {
	out := make([]string, len(cmds))
	for i, c := range cmds {
		out[i] = c.Name()
	}
	return out
}

// ackReplicas makes every WAIT answer n, as n replicas acknowledging in
// time would (miniredis has none and answers 0).
func ackReplicas(n int64) func(cmds []redis.Cmder) {
	return func(cmds []redis.Cmder) {
		for _, c := range cmds {
			if w, ok := c.(*redis.IntCmd); ok && c.Name() == "wait" && c.Err() == nil {
				w.SetVal(n)
			}
		}
	}
}

// rules parses a constraint map, as the callers of Enforce do.
func rules(tb interface {
	Helper()
	Fatal(...any)
}, m map[string]string) policy.Constraints {
	tb.Helper()
	c, err := policy.ParseConstraints(m)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
