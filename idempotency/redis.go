package idempotency

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/claim.lua
	claimLua string
	//go:embed lua/complete.lua
	completeLua string
	//go:embed lua/release.lua
	releaseLua string

	claimScript    = redis.NewScript(claimLua)
	completeScript = redis.NewScript(completeLua)
	releaseScript  = redis.NewScript(releaseLua)
)

// Values stored under a key: a live claim or a completed result.
const (
	claimPrefix = "c:"
	donePrefix  = "d:"
)

// RedisOption configures a RedisStore.
type RedisOption func(*RedisStore) error

// WithKeyPrefix puts prefix before every key. It must not contain '{' or
// '}', so that a TaggedKey's hash tag stays the first one. Default: "idem:".
func WithKeyPrefix(prefix string) RedisOption {
	return func(s *RedisStore) error {
		if strings.ContainsAny(prefix, "{}") {
			return fmt.Errorf("%w: key prefix must not contain '{' or '}'", ErrInvalid)
		}
		s.prefix = prefix
		return nil
	}
}

// RedisStore keeps claims in Redis, one string per key: "c:<token>" with
// the lease as its TTL (SET NX PX), then "d:<result>" with the result TTL.
// Every operation is one single-key script, so it works unchanged on a Redis
// Cluster; use TaggedKey to place a key beside related keys.
type RedisStore struct {
	rdb    redis.UniversalClient
	prefix string
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore returns a store on rdb: a *redis.Client, *redis.ClusterClient
// or *redis.Ring. It does not contact Redis.
func NewRedisStore(rdb redis.UniversalClient, opts ...RedisOption) (*RedisStore, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalid)
	}
	s := &RedisStore{rdb: rdb, prefix: "idem:"}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// RedisKey is the Redis key that holds key.
func (s *RedisStore) RedisKey(key string) string { return s.prefix + key }

// Claim implements Store with SET NX PX inside a script that also reads the
// current holder, in one round trip.
func (s *RedisStore) Claim(ctx context.Context, key, token string, lease time.Duration) (Claim, error) {
	v, err := claimScript.Run(ctx, s.rdb, []string{s.RedisKey(key)}, claimPrefix+token, lease.Milliseconds()).Slice()
	if err != nil {
		return Claim{}, err
	}
	return s.claimReply(key, v)
}

// claimReply reads claim.lua's reply for key.
func (s *RedisStore) claimReply(key string, v []any) (Claim, error) {
	if len(v) == 1 {
		return Claim{Outcome: Acquired}, nil
	}
	if len(v) != 3 {
		return Claim{}, fmt.Errorf("unexpected claim reply %v", v)
	}
	cur, _ := v[1].(string)
	pttl, _ := v[2].(int64)
	switch {
	case strings.HasPrefix(cur, donePrefix):
		return Claim{Outcome: Done, Result: []byte(cur[len(donePrefix):])}, nil
	case strings.HasPrefix(cur, claimPrefix):
		return Claim{Outcome: InProgress, RetryAfter: time.Duration(max(pttl, 0)) * time.Millisecond}, nil
	}
	return Claim{}, fmt.Errorf("key %s holds a value this store did not write", s.RedisKey(key))
}

// Complete implements Store.
func (s *RedisStore) Complete(ctx context.Context, key, token string, result []byte, ttl time.Duration) error {
	n, err := completeScript.Run(ctx, s.rdb, []string{s.RedisKey(key)},
		claimPrefix+token, append([]byte(donePrefix), result...), ttl.Milliseconds()).Int()
	if err != nil {
		return err
	}
	if n != 1 {
		return ErrLeaseLost
	}
	return nil
}

// Release implements Store with a compare-and-delete script.
func (s *RedisStore) Release(ctx context.Context, key, token string) error {
	n, err := releaseScript.Run(ctx, s.rdb, []string{s.RedisKey(key)}, claimPrefix+token).Int()
	if err != nil {
		return err
	}
	if n != 1 {
		return ErrLeaseLost
	}
	return nil
}
