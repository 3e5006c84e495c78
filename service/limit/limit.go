package limit

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// Rate is N requests per Per, in bursts of up to N (GCRA: one request every
// Per/N on average, N at once after a quiet Per).
type Rate struct {
	N   int
	Per time.Duration
}

func (r Rate) String() string { return fmt.Sprintf("%d/%s", r.N, r.Per) }

// Decode reads a rate written "N/duration" (envconfig.Decoder).
func (r *Rate) Decode(s string) error {
	v, err := ParseRate(s)
	*r = v
	return err
}

// ParseRate reads a rate written "N/duration", e.g. "60/1m".
func ParseRate(s string) (Rate, error) {
	n, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Rate{}, fmt.Errorf("want N/duration (e.g. 60/1m), got %q", s)
	}
	var r Rate
	var err error
	if r.N, err = strconv.Atoi(strings.TrimSpace(n)); err != nil {
		return Rate{}, fmt.Errorf("want N/duration (e.g. 60/1m), got %q", s)
	}
	if r.Per, err = time.ParseDuration(strings.TrimSpace(per)); err != nil {
		return Rate{}, fmt.Errorf("want N/duration (e.g. 60/1m), got %q", s)
	}
	return r, r.Check()
}

// Check refuses a rate outside 1 to 1,000,000 requests per 1 ms to 24 h.
func (r Rate) Check() error {
	if r.N <= 0 || r.N > 1_000_000 || r.Per < time.Millisecond || r.Per > 24*time.Hour {
		return fmt.Errorf("rate %s: want 1 to 1000000 requests per 1ms to 24h", r)
	}
	return nil
}

// Limiter keeps the counters of the brute-force limits. Keys are opaque
// strings chosen by the API (no personal data). MemoryLimiter serves one
// process; RedisLimiter is shared by every API instance on one Redis.
type Limiter interface {
	// Allow counts one request of key against rate r. It returns 0 when the
	// request is within the rate, else how long until one would be (the
	// refused request is not counted).
	Allow(ctx context.Context, key string, r Rate) (time.Duration, error)
	// Fail counts a failed attempt of key and returns how many more
	// failures key is allowed before it is locked. The after-th consecutive
	// failure clears the count, locks key for lockFor and returns 0 (once
	// per lockout); a count is forgotten lockFor after its last failure.
	Fail(ctx context.Context, key string, after int, lockFor time.Duration) (int, error)
	// Locked returns how long key stays locked (0: it is not).
	Locked(ctx context.Context, key string) (time.Duration, error)
	// Reset forgets key's failures (a successful attempt).
	Reset(ctx context.Context, key string) error
}

var (
	_ Limiter = (*MemoryLimiter)(nil)
	_ Limiter = (*RedisLimiter)(nil)
)

// DefaultLimiterKeys is how many keys a MemoryLimiter holds by default.
const DefaultLimiterKeys = 100_000

// limiterSample is how many keys an eviction compares.
const limiterSample = 8

// MemoryLimiter is an Limiter in this process's memory, the API's
// default. Its memory is bounded: it holds at most maxKeys keys. When it is
// full, a new key first drops every expired one; if it is still full, keys
// are evicted until it is 7/8 full, each the one expiring first among a
// sample of 8 (so locks, which live longest, go last). It runs no goroutine.
type MemoryLimiter struct {
	now  func() time.Time
	max  int
	mu   sync.Mutex
	keys map[string]*limitEntry
}

type limitEntry struct {
	tat         time.Time // GCRA's theoretical arrival time
	fails       int
	failsUntil  time.Time
	lockedUntil time.Time
}

// expiry is when the entry is the same as no entry.
func (e *limitEntry) expiry() time.Time {
	t := e.tat
	if e.failsUntil.After(t) {
		t = e.failsUntil
	}
	if e.lockedUntil.After(t) {
		t = e.lockedUntil
	}
	return t
}

// NewMemoryLimiter returns a MemoryLimiter reading clock (nil: time.Now)
// and holding up to maxKeys keys (0: DefaultLimiterKeys).
func NewMemoryLimiter(clock func() time.Time, maxKeys int) *MemoryLimiter {
	if clock == nil {
		clock = time.Now
	}
	if maxKeys <= 0 {
		maxKeys = DefaultLimiterKeys
	}
	return &MemoryLimiter{now: clock, max: maxKeys, keys: make(map[string]*limitEntry)}
}

// Len returns how many keys the limiter holds.
func (l *MemoryLimiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// entry returns key's live entry, creating it (and making room) when create
// is set; else nil when there is none. Called with l.mu held.
func (l *MemoryLimiter) entry(key string, now time.Time, create bool) *limitEntry {
	if e := l.keys[key]; e != nil {
		if !e.expiry().After(now) {
			*e = limitEntry{} // expired: the same as a new one
		}
		return e
	}
	if !create {
		return nil
	}
	if len(l.keys) >= l.max {
		for k, x := range l.keys {
			if !x.expiry().After(now) {
				delete(l.keys, k)
			}
		}
		for keep := l.max - max(1, l.max/8); len(l.keys) > keep; {
			var victim string
			var at time.Time
			i := 0
			for k, x := range l.keys {
				if i == 0 || x.expiry().Before(at) {
					victim, at = k, x.expiry()
				}
				if i++; i == limiterSample {
					break
				}
			}
			delete(l.keys, victim)
		}
	}
	e := &limitEntry{}
	l.keys[key] = e
	return e
}

// Allow implements Limiter with GCRA, as redis_rate does.
func (l *MemoryLimiter) Allow(_ context.Context, key string, r Rate) (time.Duration, error) {
	if err := r.Check(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	e := l.entry(key, now, true)
	emission := r.Per / time.Duration(r.N)
	tat := e.tat
	if tat.Before(now) {
		tat = now
	}
	next := tat.Add(emission)
	if allowAt := next.Add(-emission * time.Duration(r.N)); now.Before(allowAt) {
		return allowAt.Sub(now), nil
	}
	e.tat = next
	return 0, nil
}

// Fail implements Limiter.
func (l *MemoryLimiter) Fail(_ context.Context, key string, after int, lockFor time.Duration) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	e := l.entry(key, now, true)
	if !e.failsUntil.After(now) {
		e.fails = 0
	}
	e.fails++
	if e.fails >= after {
		e.fails, e.failsUntil, e.lockedUntil = 0, time.Time{}, now.Add(lockFor)
		return 0, nil
	}
	e.failsUntil = now.Add(lockFor)
	return after - e.fails, nil
}

// Locked implements Limiter.
func (l *MemoryLimiter) Locked(_ context.Context, key string) (time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if e := l.entry(key, now, false); e != nil && e.lockedUntil.After(now) {
		return e.lockedUntil.Sub(now), nil
	}
	return 0, nil
}

// Reset implements Limiter.
func (l *MemoryLimiter) Reset(_ context.Context, key string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.entry(key, l.now(), false); e != nil {
		e.fails, e.failsUntil = 0, time.Time{}
	}
	return nil
}

//go:embed lua/auth_fail.lua
var authFailLua string

var authFailScript = redis.NewScript(authFailLua)

// RedisLimiter is an Limiter on Redis, shared by every API instance
// using it. Rates are redis_rate's GCRA (keys rate:dpcs:auth:<key>, judged
// by Redis's clock); failures and locks are dpcs:auth:{<key>}:fails and
// :lock, one hash slot per key, so it works on a Redis Cluster. Every key
// expires on its own.
type RedisLimiter struct {
	rdb  redis.UniversalClient
	rate *redis_rate.Limiter
}

// NewRedisLimiter returns a RedisLimiter on rdb (a Client, Ring or
// ClusterClient).
func NewRedisLimiter(rdb redis.UniversalClient) (*RedisLimiter, error) {
	if rdb == nil {
		return nil, errors.New("limit: NewRedisLimiter: nil Redis client")
	}
	return &RedisLimiter{rdb: rdb, rate: redis_rate.NewLimiter(rdb)}, nil
}

func redisLimitKey(key, suffix string) string { return "dpcs:auth:{" + key + "}:" + suffix }

// Allow implements Limiter.
func (l *RedisLimiter) Allow(ctx context.Context, key string, r Rate) (time.Duration, error) {
	if err := r.Check(); err != nil {
		return 0, err
	}
	res, err := l.rate.Allow(ctx, "dpcs:auth:"+key, redis_rate.Limit{Rate: r.N, Burst: r.N, Period: r.Per})
	if err != nil {
		return 0, fmt.Errorf("rate limit: %w", err)
	}
	if res.Allowed > 0 {
		return 0, nil
	}
	// The script computes in float seconds since 2017 (about 0.1 µs of
	// rounding): a wait rounded up to the millisecond, plus one, is enough.
	return res.RetryAfter.Truncate(time.Millisecond) + 2*time.Millisecond, nil
}

// Fail implements Limiter.
func (l *RedisLimiter) Fail(ctx context.Context, key string, after int, lockFor time.Duration) (int, error) {
	left, err := authFailScript.Run(ctx, l.rdb, []string{redisLimitKey(key, "fails"), redisLimitKey(key, "lock")},
		after, lockFor.Milliseconds()).Int()
	if err != nil {
		return 0, fmt.Errorf("count failure: %w", err)
	}
	return left, nil
}

// Locked implements Limiter.
func (l *RedisLimiter) Locked(ctx context.Context, key string) (time.Duration, error) {
	d, err := l.rdb.PTTL(ctx, redisLimitKey(key, "lock")).Result()
	if err != nil {
		return 0, fmt.Errorf("lock: %w", err)
	}
	return max(d, 0), nil // -2: no lock (-1, no expiry, is never written)
}

// Reset implements Limiter.
func (l *RedisLimiter) Reset(ctx context.Context, key string) error {
	if err := l.rdb.Del(ctx, redisLimitKey(key, "fails")).Err(); err != nil {
		return fmt.Errorf("reset failures: %w", err)
	}
	return nil
}

// Failures says how many consecutive failures key has now (0: none, or
// forgotten).
func (l *MemoryLimiter) Failures(_ context.Context, key string) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if e := l.entry(key, now, false); e != nil && e.failsUntil.After(now) {
		return e.fails, nil
	}
	return 0, nil
}

// Failures says how many consecutive failures key has now (0: none, or
// forgotten).
func (l *RedisLimiter) Failures(ctx context.Context, key string) (int, error) {
	n, err := l.rdb.Get(ctx, redisLimitKey(key, "fails")).Int()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("failures: %w", err)
	}
	return n, nil
}
