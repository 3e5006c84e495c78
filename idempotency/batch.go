package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// BatchStore is a Store that also claims, completes and releases many keys
// in one round trip. The Guard's batch methods use it when the store has it
// and fall back to one call per key otherwise. Each key is still handled
// atomically on its own (the batch is not a transaction): the results line
// up with keys, and per-key failures (ErrLeaseLost) come back in errs.
type BatchStore interface {
	Store
	ClaimBatch(ctx context.Context, keys, tokens []string, lease time.Duration) ([]Claim, error)
	CompleteBatch(ctx context.Context, keys, tokens []string, results [][]byte, ttl time.Duration) (errs []error, err error)
	ReleaseBatch(ctx context.Context, keys, tokens []string) (errs []error, err error)
}

var _ BatchStore = (*RedisStore)(nil)

// ClaimBatch claims every key (as Claim does each), in one round trip when
// the store is a BatchStore. The claims line up with keys. The same key
// given twice is claimed once: the later copies report InProgress. An
// invalid key fails the whole batch before anything is claimed.
func (g *Guard) ClaimBatch(ctx context.Context, keys []string) (cs []Claim, err error) {
	start := time.Now()
	defer func() {
		if g.hooks.OnClaim != nil {
			d := time.Since(start)
			for i, k := range keys {
				var o Outcome
				if err == nil {
					o = cs[i].Outcome
				}
				g.hooks.OnClaim(ClaimInfo{Key: k, Outcome: o, Duration: d, Err: err})
			}
		}
	}()
	if len(keys) == 0 {
		return nil, nil
	}
	tokens := make([]string, len(keys))
	for i, k := range keys {
		if err := ValidKey(k); err != nil {
			return nil, err
		}
		tokens[i] = g.token()
		if tokens[i] == "" || len(tokens[i]) > 64 || strings.ContainsAny(tokens[i], "\x00") {
			return nil, fmt.Errorf("%w: token must be 1..64 bytes", ErrInvalid)
		}
	}
	if bs, ok := g.store.(BatchStore); ok {
		cs, err = bs.ClaimBatch(ctx, keys, tokens, g.lease)
		if err == nil && len(cs) != len(keys) {
			err = fmt.Errorf("store returned %d claims for %d keys", len(cs), len(keys))
		}
	} else {
		cs = make([]Claim, len(keys))
		for i, k := range keys {
			if cs[i], err = g.store.Claim(ctx, k, tokens[i], g.lease); err != nil {
				break
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("idempotency: claim %d keys: %w", len(keys), err)
	}
	for i := range cs {
		c := &cs[i]
		c.Key, c.Token = keys[i], ""
		switch c.Outcome {
		case Acquired:
			c.Token, c.Result, c.RetryAfter = tokens[i], nil, 0
		case Done:
			if c.Result == nil {
				c.Result = []byte{}
			}
			c.RetryAfter = 0
		case InProgress:
			c.Result = nil
		default:
			return nil, fmt.Errorf("idempotency: claim %q: store returned %v", keys[i], c.Outcome)
		}
	}
	return cs, nil
}

// CompleteBatch completes Acquired claims with their results (as Complete
// does each), in one round trip when the store is a BatchStore. results
// lines up with claims. The error joins each claim's failure
// (ErrLeaseLost for a claim no longer ours).
func (g *Guard) CompleteBatch(ctx context.Context, claims []Claim, results [][]byte) (err error) {
	start := time.Now()
	var errs []error
	defer func() {
		if g.hooks.OnComplete != nil {
			d := time.Since(start)
			for i, c := range claims {
				e := err
				if len(errs) == len(claims) { // else the store answered out of contract: err says so
					e = errs[i]
				}
				g.hooks.OnComplete(CompleteInfo{Key: c.Key, Duration: d, Err: e})
			}
		}
	}()
	if len(results) != len(claims) {
		return fmt.Errorf("%w: %d results for %d claims", ErrInvalid, len(results), len(claims))
	}
	if len(claims) == 0 {
		return nil
	}
	keys, tokens, err := g.ownedAll(claims)
	if err != nil {
		return err
	}
	rs := make([][]byte, len(results))
	for i, r := range results {
		if len(r) > MaxResultLen {
			return fmt.Errorf("%w: result longer than %d bytes", ErrInvalid, MaxResultLen)
		}
		if r == nil {
			r = []byte{}
		}
		rs[i] = r
	}
	if bs, ok := g.store.(BatchStore); ok {
		errs, err = bs.CompleteBatch(ctx, keys, tokens, rs, g.ttl)
	} else {
		errs = make([]error, len(keys))
		for i := range keys {
			errs[i] = g.store.Complete(ctx, keys[i], tokens[i], rs[i], g.ttl)
		}
	}
	if err != nil {
		return fmt.Errorf("idempotency: complete %d keys: %w", len(keys), err)
	}
	return joinKeyErrs("complete", keys, errs)
}

// ReleaseBatch releases Acquired claims (as Release does each), in one
// round trip when the store is a BatchStore. The error joins each claim's
// failure (ErrLeaseLost for a claim no longer ours).
func (g *Guard) ReleaseBatch(ctx context.Context, claims []Claim) (err error) {
	start := time.Now()
	var errs []error
	defer func() {
		if g.hooks.OnRelease != nil {
			d := time.Since(start)
			for i, c := range claims {
				e := err
				if len(errs) == len(claims) { // else the store answered out of contract: err says so
					e = errs[i]
				}
				g.hooks.OnRelease(CompleteInfo{Key: c.Key, Duration: d, Err: e})
			}
		}
	}()
	if len(claims) == 0 {
		return nil
	}
	keys, tokens, err := g.ownedAll(claims)
	if err != nil {
		return err
	}
	if bs, ok := g.store.(BatchStore); ok {
		errs, err = bs.ReleaseBatch(ctx, keys, tokens)
	} else {
		errs = make([]error, len(keys))
		for i := range keys {
			errs[i] = g.store.Release(ctx, keys[i], tokens[i])
		}
	}
	if err != nil {
		return fmt.Errorf("idempotency: release %d keys: %w", len(keys), err)
	}
	return joinKeyErrs("release", keys, errs)
}

func (g *Guard) ownedAll(claims []Claim) (keys, tokens []string, err error) {
	keys, tokens = make([]string, len(claims)), make([]string, len(claims))
	for i, c := range claims {
		if err := g.owned(c); err != nil {
			return nil, nil, err
		}
		keys[i], tokens[i] = c.Key, c.Token
	}
	return keys, tokens, nil
}

func joinKeyErrs(op string, keys []string, errs []error) error {
	if len(errs) != len(keys) {
		return fmt.Errorf("idempotency: %s: store returned %d answers for %d keys", op, len(errs), len(keys))
	}
	var out []error
	for i, e := range errs {
		if e != nil {
			out = append(out, fmt.Errorf("idempotency: %s %q: %w", op, keys[i], e))
		}
	}
	return errors.Join(out...)
}

// ClaimBatch implements BatchStore: the claim script for every key in one
// pipeline (EVALSHA, then EVAL for whatever Redis did not have cached).
func (s *RedisStore) ClaimBatch(ctx context.Context, keys, tokens []string, lease time.Duration) ([]Claim, error) {
	cmds, err := s.pipeline(ctx, claimScript, len(keys), func(i int) ([]string, []any) {
		return []string{s.RedisKey(keys[i])}, []any{claimPrefix + tokens[i], lease.Milliseconds()}
	})
	if err != nil {
		return nil, err
	}
	out := make([]Claim, len(keys))
	for i, c := range cmds {
		v, err := c.Slice()
		if err != nil {
			return nil, err
		}
		if out[i], err = s.claimReply(keys[i], v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// CompleteBatch implements BatchStore in one pipeline.
func (s *RedisStore) CompleteBatch(ctx context.Context, keys, tokens []string, results [][]byte, ttl time.Duration) ([]error, error) {
	cmds, err := s.pipeline(ctx, completeScript, len(keys), func(i int) ([]string, []any) {
		return []string{s.RedisKey(keys[i])}, []any{claimPrefix + tokens[i], append([]byte(donePrefix), results[i]...), ttl.Milliseconds()}
	})
	if err != nil {
		return nil, err
	}
	return oneEach(cmds)
}

// ReleaseBatch implements BatchStore in one pipeline.
func (s *RedisStore) ReleaseBatch(ctx context.Context, keys, tokens []string) ([]error, error) {
	cmds, err := s.pipeline(ctx, releaseScript, len(keys), func(i int) ([]string, []any) {
		return []string{s.RedisKey(keys[i])}, []any{claimPrefix + tokens[i]}
	})
	if err != nil {
		return nil, err
	}
	return oneEach(cmds)
}

// oneEach reads the 1/0 replies of complete and release scripts.
func oneEach(cmds []*redis.Cmd) ([]error, error) {
	errs := make([]error, len(cmds))
	for i, c := range cmds {
		n, err := c.Int()
		if err != nil {
			return nil, err
		}
		if n != 1 {
			errs[i] = ErrLeaseLost
		}
	}
	return errs, nil
}

// pipeline runs sc n times in one pipeline with EVALSHA; the calls Redis
// answered NOSCRIPT (it did not run them) go again with EVAL in a second
// one. It fails if the pipeline could not be sent or a call failed.
func (s *RedisStore) pipeline(ctx context.Context, sc *redis.Script, n int, call func(i int) ([]string, []any)) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, n)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			k, a := call(i)
			cmds[i] = sc.EvalSha(ctx, p, k, a...)
		}
		return nil
	})
	if err == nil {
		return cmds, nil
	}
	var again []int
	for i, c := range cmds {
		if e := c.Err(); e != nil {
			if !redis.HasErrorPrefix(e, "NOSCRIPT") {
				return nil, e
			}
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return nil, err
	}
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range again {
			k, a := call(i)
			cmds[i] = sc.Eval(ctx, p, k, a...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return cmds, nil
}
