package idempotency

import (
	"context"
	"errors"
	"net"
	"strings"
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
		g := newGuard(t, h.store, WithLease(5*time.Second), WithTTL(time.Hour))
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

// Empty batches are answered at once: the store is not called, no hook runs.
func TestGuardBatchEmpty(t *testing.T) {
	ctx := context.Background()
	hook := func(i CompleteInfo) { t.Errorf("hook called for %+v", i) }
	g := newGuard(t, &funcBatchStore{funcStore: funcStore{tb: t}}, WithHooks(Hooks{
		OnClaim:    func(i ClaimInfo) { t.Errorf("OnClaim called for %+v", i) },
		OnComplete: hook,
		OnRelease:  hook,
	}))
	if cs, err := g.ClaimBatch(ctx, nil); cs != nil || err != nil {
		t.Errorf("ClaimBatch(nil) = %v, %v", cs, err)
	}
	if err := g.CompleteBatch(ctx, nil, nil); err != nil {
		t.Errorf("CompleteBatch(nil) = %v", err)
	}
	if err := g.ReleaseBatch(ctx, []Claim{}); err != nil {
		t.Errorf("ReleaseBatch(empty) = %v", err)
	}
}

// batchStores runs fn on a BatchStore and on a plain Store built from the
// same per-key answers, so the guard's two paths are held to one contract.
func batchStores(t *testing.T, plain funcStore, fn func(t *testing.T, s Store)) {
	t.Helper()
	batch := &funcBatchStore{
		funcStore: funcStore{tb: t},
		claimBatch: func(ctx context.Context, keys, tokens []string, lease time.Duration) ([]Claim, error) {
			out := make([]Claim, len(keys))
			for i := range keys {
				c, err := plain.claim(ctx, keys[i], tokens[i], lease)
				if err != nil {
					return nil, err
				}
				out[i] = c
			}
			return out, nil
		},
		completeBatch: func(ctx context.Context, keys, tokens []string, results [][]byte, ttl time.Duration) ([]error, error) {
			errs := make([]error, len(keys))
			for i := range keys {
				errs[i] = plain.complete(ctx, keys[i], tokens[i], results[i], ttl)
			}
			return errs, nil
		},
		releaseBatch: func(ctx context.Context, keys, tokens []string) ([]error, error) {
			errs := make([]error, len(keys))
			for i := range keys {
				errs[i] = plain.release(ctx, keys[i], tokens[i])
			}
			return errs, nil
		},
	}
	t.Run("batch", func(t *testing.T) { plain.tb = t; batch.tb = t; fn(t, batch) })
	t.Run("plain", func(t *testing.T) { plain.tb = t; fn(t, &plain) })
}

// The batch methods normalise what the store answers as Claim does, and
// report each key to the hooks with its own outcome and error.
func TestGuardBatchStoreAnswers(t *testing.T) {
	answers := map[string]Claim{
		"a": {Outcome: Acquired, Result: []byte("x"), RetryAfter: time.Second},
		"d": {Outcome: Done},
		"p": {Outcome: InProgress, Result: []byte("x"), RetryAfter: time.Second},
	}
	lost := map[string]bool{"lost": true}
	plain := funcStore{
		claim: func(_ context.Context, key, _ string, _ time.Duration) (Claim, error) { return answers[key], nil },
		complete: func(_ context.Context, key, _ string, result []byte, _ time.Duration) error {
			if result == nil {
				return errors.New("nil result reached the store")
			}
			if lost[key] {
				return ErrLeaseLost
			}
			return nil
		},
		release: func(_ context.Context, key, _ string) error {
			if lost[key] {
				return ErrLeaseLost
			}
			return nil
		},
	}
	batchStores(t, plain, func(t *testing.T, s Store) {
		ctx := context.Background()
		var claimed []ClaimInfo
		var completed, released []CompleteInfo
		g := newGuard(t, s, WithTokens(seqTokens()), WithHooks(Hooks{
			OnClaim:    func(i ClaimInfo) { claimed = append(claimed, i) },
			OnComplete: func(i CompleteInfo) { completed = append(completed, i) },
			OnRelease:  func(i CompleteInfo) { released = append(released, i) },
		}))
		cs, err := g.ClaimBatch(ctx, []string{"a", "d", "p"})
		if err != nil {
			t.Fatal(err)
		}
		want := []Claim{
			{Key: "a", Outcome: Acquired, Token: "t1"},
			{Key: "d", Outcome: Done, Result: []byte{}},
			{Key: "p", Outcome: InProgress, RetryAfter: time.Second},
		}
		if diff := cmp.Diff(want, cs); diff != "" {
			t.Errorf("claims (-want +got):\n%s", diff)
		}
		var hooked []string
		for _, i := range claimed {
			hooked = append(hooked, i.Key+"="+i.Outcome.String())
		}
		if diff := cmp.Diff([]string{"a=acquired", "d=done", "p=in-progress"}, hooked); diff != "" {
			t.Errorf("OnClaim (-want +got):\n%s", diff)
		}

		ours := []Claim{cs[0], {Key: "lost", Outcome: Acquired, Token: "t9"}}
		err = g.CompleteBatch(ctx, ours, [][]byte{nil, []byte("r")})
		if !errors.Is(err, ErrLeaseLost) || err.Error() != `idempotency: complete "lost": idempotency: lease lost` {
			t.Errorf("CompleteBatch = %v, want ErrLeaseLost for lost only", err)
		}
		err = g.ReleaseBatch(ctx, ours)
		if !errors.Is(err, ErrLeaseLost) || err.Error() != `idempotency: release "lost": idempotency: lease lost` {
			t.Errorf("ReleaseBatch = %v, want ErrLeaseLost for lost only", err)
		}
		for name, infos := range map[string][]CompleteInfo{"OnComplete": completed, "OnRelease": released} {
			if len(infos) != 2 || infos[0].Key != "a" || infos[0].Err != nil || infos[1].Key != "lost" || !errors.Is(infos[1].Err, ErrLeaseLost) {
				t.Errorf("%s got %+v, want a without error, lost with ErrLeaseLost", name, infos)
			}
		}
	})
}

// A failing store fails the whole batch, wrapped with the operation and the
// batch's size; every key reaches the hooks with that error. A plain store
// is not asked about the keys after the one that failed.
func TestGuardBatchStoreFailures(t *testing.T) {
	var asked []string
	plain := funcStore{
		claim: func(_ context.Context, key, _ string, _ time.Duration) (Claim, error) {
			asked = append(asked, key)
			if key == "bad" {
				return Claim{}, errStore
			}
			return Claim{Outcome: Acquired}, nil
		},
	}
	batchStores(t, plain, func(t *testing.T, s Store) {
		asked = nil
		var claimed []ClaimInfo
		g := newGuard(t, s, WithHooks(Hooks{OnClaim: func(i ClaimInfo) { claimed = append(claimed, i) }}))
		cs, err := g.ClaimBatch(context.Background(), []string{"a", "bad", "c"})
		if cs != nil || !errors.Is(err, errStore) || err.Error() != "idempotency: claim 3 keys: store is down" {
			t.Fatalf("ClaimBatch = %v, %v", cs, err)
		}
		if _, batch := s.(BatchStore); !batch {
			if diff := cmp.Diff([]string{"a", "bad"}, asked); diff != "" {
				t.Errorf("keys asked (-want +got):\n%s", diff)
			}
		}
		if len(claimed) != 3 {
			t.Fatalf("OnClaim called %d times, want 3", len(claimed))
		}
		for _, i := range claimed {
			if i.Outcome != 0 || !errors.Is(i.Err, errStore) {
				t.Errorf("OnClaim(%+v), want outcome 0 and the store error", i)
			}
		}
	})

	ctx := context.Background()
	mine := []Claim{{Key: "a", Outcome: Acquired, Token: "t"}, {Key: "b", Outcome: Acquired, Token: "u"}}
	var completed []CompleteInfo
	down := &funcBatchStore{
		funcStore: funcStore{tb: t},
		completeBatch: func(context.Context, []string, []string, [][]byte, time.Duration) ([]error, error) {
			return nil, errStore
		},
		releaseBatch: func(context.Context, []string, []string) ([]error, error) { return nil, errStore },
	}
	g := newGuard(t, down, WithHooks(Hooks{OnComplete: func(i CompleteInfo) { completed = append(completed, i) }}))
	if err := g.CompleteBatch(ctx, mine, [][]byte{nil, nil}); !errors.Is(err, errStore) || err.Error() != "idempotency: complete 2 keys: store is down" {
		t.Errorf("CompleteBatch = %v", err)
	}
	if len(completed) != 2 || !errors.Is(completed[0].Err, errStore) || !errors.Is(completed[1].Err, errStore) {
		t.Errorf("OnComplete got %+v, want both keys with the store error", completed)
	}
	if err := g.ReleaseBatch(ctx, mine); !errors.Is(err, errStore) || err.Error() != "idempotency: release 2 keys: store is down" {
		t.Errorf("ReleaseBatch = %v", err)
	}
}

// A BatchStore that answers for the wrong number of keys, or with an
// outcome out of contract, fails the batch instead of misattributing answers.
func TestGuardBatchStoreOutOfContract(t *testing.T) {
	ctx := context.Background()
	mine := []Claim{{Key: "a", Outcome: Acquired, Token: "t"}, {Key: "b", Outcome: Acquired, Token: "u"}}
	short := &funcBatchStore{
		funcStore: funcStore{tb: t},
		claimBatch: func(context.Context, []string, []string, time.Duration) ([]Claim, error) {
			return []Claim{{Outcome: Acquired}}, nil
		},
		completeBatch: func(context.Context, []string, []string, [][]byte, time.Duration) ([]error, error) {
			return []error{nil}, nil
		},
		releaseBatch: func(context.Context, []string, []string) ([]error, error) { return nil, nil },
	}
	g := newGuard(t, short)
	if cs, err := g.ClaimBatch(ctx, []string{"a", "b"}); cs != nil || err == nil || err.Error() != "idempotency: claim 2 keys: store returned 1 claims for 2 keys" {
		t.Errorf("ClaimBatch = %v, %v", cs, err)
	}
	if err := g.CompleteBatch(ctx, mine, [][]byte{nil, nil}); err == nil || err.Error() != "idempotency: complete: store returned 1 answers for 2 keys" {
		t.Errorf("CompleteBatch = %v", err)
	}
	if err := g.ReleaseBatch(ctx, mine); err == nil || err.Error() != "idempotency: release: store returned 0 answers for 2 keys" {
		t.Errorf("ReleaseBatch = %v", err)
	}

	odd := &funcBatchStore{funcStore: funcStore{tb: t}, claimBatch: func(context.Context, []string, []string, time.Duration) ([]Claim, error) {
		return []Claim{{Outcome: Acquired}, {Outcome: 0}}, nil
	}}
	if cs, err := newGuard(t, odd).ClaimBatch(ctx, []string{"a", "b"}); cs != nil || err == nil || err.Error() != `idempotency: claim "b": store returned Outcome(0)` {
		t.Errorf("ClaimBatch with a zero outcome = %v, %v", cs, err)
	}
}

// Invalid batches are refused before the store is asked.
func TestGuardBatchInvalid(t *testing.T) {
	ctx := context.Background()
	g := newGuard(t, &funcBatchStore{funcStore: funcStore{tb: t}})
	mine := []Claim{{Key: "a", Outcome: Acquired, Token: "t"}}
	for name, err := range map[string]error{
		"long key":         func() error { _, err := g.ClaimBatch(ctx, []string{"a", strings.Repeat("k", MaxKeyLen+1)}); return err }(),
		"fewer results":    g.CompleteBatch(ctx, mine, nil),
		"more results":     g.CompleteBatch(ctx, mine, [][]byte{nil, nil}),
		"results, no keys": g.CompleteBatch(ctx, nil, [][]byte{nil}),
		"long result":      g.CompleteBatch(ctx, mine, [][]byte{make([]byte, MaxResultLen+1)}),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// A BatchStore answering for fewer keys than it was given fails the batch
// with an error (joinKeyErrs) — with hooks set too, each claim reported to
// its hook with that error.
func TestGuardBatchShortAnswerWithHooks(t *testing.T) {
	ctx := context.Background()
	short := &funcBatchStore{
		funcStore: funcStore{tb: t},
		completeBatch: func(context.Context, []string, []string, [][]byte, time.Duration) ([]error, error) {
			return []error{nil}, nil
		},
		releaseBatch: func(context.Context, []string, []string) ([]error, error) { return []error{nil}, nil },
	}
	var completed, released []CompleteInfo
	g := newGuard(t, short, WithHooks(Hooks{
		OnComplete: func(i CompleteInfo) { completed = append(completed, i) },
		OnRelease:  func(i CompleteInfo) { released = append(released, i) },
	}))
	mine := []Claim{{Key: "a", Outcome: Acquired, Token: "t"}, {Key: "b", Outcome: Acquired, Token: "u"}}
	if err := g.CompleteBatch(ctx, mine, [][]byte{nil, nil}); err == nil || err.Error() != "idempotency: complete: store returned 1 answers for 2 keys" {
		t.Errorf("CompleteBatch = %v", err)
	}
	if err := g.ReleaseBatch(ctx, mine); err == nil || err.Error() != "idempotency: release: store returned 1 answers for 2 keys" {
		t.Errorf("ReleaseBatch = %v", err)
	}
	for name, infos := range map[string][]CompleteInfo{"OnComplete": completed, "OnRelease": released} {
		if len(infos) != 2 || infos[0].Err == nil || infos[1].Err == nil {
			t.Errorf("%s got %+v, want both claims with the error", name, infos)
		}
	}
}
