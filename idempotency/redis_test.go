package idempotency

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
)

// newRedisStore is a RedisStore on a fresh miniredis.
func newRedisStore(tb testing.TB, opts ...RedisOption) (*miniredis.Miniredis, *redis.Client, *RedisStore) {
	tb.Helper()
	m := miniredis.RunT(tb)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	tb.Cleanup(func() { rdb.Close() })
	s, err := NewRedisStore(rdb, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return m, rdb, s
}

// WithKeyPrefix places every key under the prefix, claims and results alike.
func TestRedisStoreKeyPrefix(t *testing.T) {
	m, _, s := newRedisStore(t, WithKeyPrefix("dpcs:idem:"))
	key := TaggedKey("g", "100", "evt_1")
	if got, want := s.RedisKey(key), "dpcs:idem:g:{100}:evt_1"; got != want {
		t.Errorf("RedisKey = %q, want %q", got, want)
	}
	g := newGuard(t, s, WithTokens(func() string { return "tok" }))
	ctx := context.Background()
	c, err := g.Claim(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := m.Get("dpcs:idem:g:{100}:evt_1"); err != nil || v != "c:tok" {
		t.Errorf("claim stored as %q, %v; want c:tok", v, err)
	}
	if err := g.Complete(ctx, c, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if v, err := m.Get("dpcs:idem:g:{100}:evt_1"); err != nil || v != "d:ok" {
		t.Errorf("result stored as %q, %v; want d:ok", v, err)
	}
	if diff := cmp.Diff([]string{"dpcs:idem:g:{100}:evt_1"}, m.Keys()); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
	other := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer other.Close()
	if _, err := NewRedisStore(other, WithKeyPrefix("a}")); !errors.Is(err, ErrInvalid) {
		t.Errorf("prefix with '}': %v, want ErrInvalid", err)
	}
}

// A key holding a value the store did not write (another program's key
// under the same prefix) is an error, never taken for a claim or a result,
// and is left as it was.
func TestRedisStoreForeignValue(t *testing.T) {
	m, _, s := newRedisStore(t)
	if err := m.Set("idem:k", "42"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const want = "key idem:k holds a value this store did not write"
	if c, err := s.Claim(ctx, "k", "t", time.Second); err == nil || err.Error() != want {
		t.Errorf("Claim = %+v, %v; want %q", c, err, want)
	}
	if cs, err := s.ClaimBatch(ctx, []string{"other", "k"}, []string{"t", "t"}, time.Second); cs != nil || err == nil || err.Error() != want {
		t.Errorf("ClaimBatch = %+v, %v; want %q", cs, err, want)
	}
	for _, op := range []error{s.Complete(ctx, "k", "t", nil, time.Second), s.Release(ctx, "k", "t")} {
		if !errors.Is(op, ErrLeaseLost) {
			t.Errorf("Complete/Release of a foreign key = %v, want ErrLeaseLost", op)
		}
	}
	if v, _ := m.Get("idem:k"); v != "42" {
		t.Errorf("foreign value changed to %q", v)
	}
}

// Every operation returns Redis's error, wrapped by the guard, and never
// mistakes it for a lost lease.
func TestRedisStoreErrors(t *testing.T) {
	m, _, s := newRedisStore(t)
	g := newGuard(t, s)
	ctx := context.Background()
	c, err := g.Claim(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	m.SetError("ERR injected failure")
	ops := map[string]func() error{
		"Claim":         func() error { _, err := g.Claim(ctx, "k"); return err },
		"Complete":      func() error { return g.Complete(ctx, c, nil) },
		"Release":       func() error { return g.Release(ctx, c) },
		"ClaimBatch":    func() error { _, err := g.ClaimBatch(ctx, []string{"k", "j"}); return err },
		"CompleteBatch": func() error { return g.CompleteBatch(ctx, []Claim{c}, [][]byte{nil}) },
		"ReleaseBatch":  func() error { return g.ReleaseBatch(ctx, []Claim{c}) },
		"Do": func() error {
			_, _, err := g.Do(ctx, "k", func(context.Context) ([]byte, error) {
				t.Error("Do ran fn although the claim failed")
				return nil, nil
			})
			return err
		},
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			err := op()
			if err == nil || !strings.Contains(err.Error(), "ERR injected failure") || !strings.HasPrefix(err.Error(), "idempotency: ") {
				t.Errorf("got %v, want the injected error wrapped", err)
			}
			if errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrInvalid) {
				t.Errorf("got %v, a Redis failure reported as a lost lease or bad argument", err)
			}
		})
	}
	m.SetError("")
	// The claim survived the outage.
	if err := g.Complete(ctx, c, []byte("r")); err != nil {
		t.Errorf("Complete after the outage: %v", err)
	}
}

// A cancelled context fails the call with context.Canceled; nothing is claimed.
func TestRedisStoreCancelledContext(t *testing.T) {
	m, _, s := newRedisStore(t)
	g := newGuard(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Claim(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Claim = %v, want context.Canceled", err)
	}
	if _, err := g.ClaimBatch(ctx, []string{"k"}); !errors.Is(err, context.Canceled) {
		t.Errorf("ClaimBatch = %v, want context.Canceled", err)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("keys %v written with a cancelled context", keys)
	}
}

// failEval fails every pipeline that starts with EVAL (the batch's second
// try after NOSCRIPT), as a connection lost at that moment would.
type failEval struct{ err error }

func (h failEval) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h failEval) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h failEval) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "eval" {
			for _, c := range cmds {
				c.SetErr(h.err)
			}
			return h.err
		}
		return next(ctx, cmds)
	}
}

// When Redis lost its scripts and the EVAL that should run them fails, the
// batch fails with that error and nothing is claimed.
func TestRedisBatchRetryFails(t *testing.T) {
	m, rdb, s := newRedisStore(t)
	lost := errors.New("connection lost")
	rdb.AddHook(failEval{lost})
	g := newGuard(t, s)
	ctx := context.Background()
	for name, op := range map[string]func() error{
		"claim": func() error { _, err := g.ClaimBatch(ctx, []string{"a", "b"}); return err },
		"complete": func() error {
			return g.CompleteBatch(ctx, []Claim{{Key: "a", Outcome: Acquired, Token: "t"}}, [][]byte{nil})
		},
		"release": func() error { return g.ReleaseBatch(ctx, []Claim{{Key: "a", Outcome: Acquired, Token: "t"}}) },
	} {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := op(); !errors.Is(err, lost) {
			t.Errorf("%s: %v, want the EVAL failure", name, err)
		}
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("keys %v written by a failed batch", keys)
	}
}
