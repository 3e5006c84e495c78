package idempotency

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
)

func outcomes(cs []Claim) []Outcome {
	out := make([]Outcome, len(cs))
	for i, c := range cs {
		out[i] = c.Outcome
	}
	return out
}

// The batch methods answer as the single-key ones, key by key: on the Redis
// store in one pipeline, on the others one call per key.
func TestGuardBatch(t *testing.T) {
	eachStore(t, func(t *testing.T, h harness) {
		ctx := context.Background()
		g := newGuard(t, h.store, WithLease(time.Second), WithTTL(time.Hour))
		a, b, c := uniqueKey(t), uniqueKey(t), uniqueKey(t)
		held, err := g.Claim(ctx, c)
		if err != nil || held.Outcome != Acquired {
			t.Fatalf("claim c: %+v %v", held, err)
		}
		cs, err := g.ClaimBatch(ctx, []string{a, b, a, c})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]Outcome{Acquired, Acquired, InProgress, InProgress}, outcomes(cs)); diff != "" {
			t.Fatalf("first batch (-want +got):\n%s", diff)
		}
		if cs[0].Key != a || cs[0].Token == "" || cs[2].Token != "" || cs[3].RetryAfter <= 0 {
			t.Errorf("claims: %+v", cs)
		}
		if err := g.CompleteBatch(ctx, []Claim{cs[0]}, [][]byte{[]byte("7")}); err != nil {
			t.Fatal(err)
		}
		if err := g.ReleaseBatch(ctx, []Claim{cs[1]}); err != nil {
			t.Fatal(err)
		}
		again, err := g.ClaimBatch(ctx, []string{a, b})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]Outcome{Done, Acquired}, outcomes(again)); diff != "" {
			t.Fatalf("second batch (-want +got):\n%s", diff)
		}
		if string(again[0].Result) != "7" {
			t.Errorf("result of a = %q, want 7", again[0].Result)
		}
		// cs[1] was released and b claimed again: the old claim is lost.
		err = g.CompleteBatch(ctx, []Claim{again[1], cs[1]}, [][]byte{nil, nil})
		if !errors.Is(err, ErrLeaseLost) {
			t.Errorf("completing a lost claim: %v, want ErrLeaseLost", err)
		}
		if err := g.ReleaseBatch(ctx, []Claim{cs[1]}); !errors.Is(err, ErrLeaseLost) {
			t.Errorf("releasing a lost claim: %v, want ErrLeaseLost", err)
		}
		if d, err := g.Claim(ctx, b); err != nil || d.Outcome != Done {
			t.Errorf("b after its batch complete: %+v %v", d, err)
		}
		if err := g.CompleteBatch(ctx, []Claim{cs[2]}, [][]byte{nil}); !errors.Is(err, ErrInvalid) {
			t.Errorf("completing an in-progress answer: %v, want ErrInvalid", err)
		}
		if _, err := g.ClaimBatch(ctx, []string{a, ""}); !errors.Is(err, ErrInvalid) {
			t.Errorf("empty key: %v, want ErrInvalid", err)
		}
	})
}

// countHook counts the scripts a go-redis client sends: as single commands
// and in pipelines (connection set-up is not counted).
type countHook struct{ cmds, pipes atomic.Int32 }

func isScript(c redis.Cmder) bool { return c.Name() == "evalsha" || c.Name() == "eval" }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			h.cmds.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && isScript(cmds[0]) {
			h.pipes.Add(1)
		}
		return next(ctx, cmds)
	}
}

// A batch on the Redis store is one pipeline; when Redis lost its script
// cache, the calls it refused (NOSCRIPT) go again with EVAL in a second one.
func TestRedisBatchOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	hook := &countHook{}
	rdb.AddHook(hook)
	s, err := NewRedisStore(rdb)
	if err != nil {
		t.Fatal(err)
	}
	g := newGuard(t, s)
	keys := []string{"k1", "k2", "k3"}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	hook.cmds.Store(0)
	hook.pipes.Store(0)
	cs, err := g.ClaimBatch(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Outcome{Acquired, Acquired, Acquired}, outcomes(cs)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if p, c := hook.pipes.Load(), hook.cmds.Load(); p != 2 || c != 0 {
		t.Errorf("claim with an empty script cache: %d pipelines, %d commands; want 2, 0", p, c)
	}
	hook.pipes.Store(0)
	if err := g.CompleteBatch(ctx, cs, [][]byte{nil, nil, nil}); err != nil {
		t.Fatal(err)
	}
	again, err := g.ClaimBatch(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Outcome{Done, Done, Done}, outcomes(again)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	// complete: EVALSHA refused, then EVAL; claim: cached since the first batch.
	if p, c := hook.pipes.Load(), hook.cmds.Load(); p != 3 || c != 0 {
		t.Errorf("complete + claim: %d pipelines, %d commands; want 3, 0", p, c)
	}
}
