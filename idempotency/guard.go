package idempotency

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrInvalid is wrapped by every error about bad arguments or options.
	ErrInvalid = errors.New("idempotency: invalid argument")

	// ErrLeaseLost is returned by Complete and Release when the key no longer
	// holds the caller's claim: the lease expired (and another worker may
	// have taken the key over) or the claim was already completed or
	// released. The work done under the lost claim may be repeated by the
	// new owner; it must itself be idempotent (a UNIQUE key downstream).
	ErrLeaseLost = errors.New("idempotency: lease lost")

	// ErrInProgress is returned by Guard.Do when another worker holds a live
	// claim on the key. Retry after Claim.RetryAfter, or leave the event to
	// be redelivered.
	ErrInProgress = errors.New("idempotency: in progress elsewhere")
)

// Outcome is what a claim found.
type Outcome int

// The outcomes of Claim.
const (
	// Acquired: the key is ours until the lease expires. Do the work, then
	// Complete (or Release to let another worker try).
	Acquired Outcome = iota + 1
	// Done: the work was completed before; Claim.Result is what was stored.
	Done
	// InProgress: another worker holds a live claim. Claim.RetryAfter says
	// when its lease runs out.
	InProgress
)

// String returns "acquired", "done" or "in-progress".
func (o Outcome) String() string {
	switch o {
	case Acquired:
		return "acquired"
	case Done:
		return "done"
	case InProgress:
		return "in-progress"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Claim is the answer to a claim of Key.
type Claim struct {
	Key     string
	Outcome Outcome
	// Token identifies this claim (Acquired only); Complete and Release act
	// only while the key still holds it.
	Token string
	// Result is the stored result (Done only; never nil then, maybe empty).
	Result []byte
	// RetryAfter is how long the other worker's lease still runs
	// (InProgress only).
	RetryAfter time.Duration
}

// Store keeps claims and results. Implementations must make each method
// atomic per key: of any number of concurrent Claims of a key that holds no
// live claim or result, exactly one is Acquired. Keys have passed
// ValidKey; durations are whole milliseconds ≥ 1 ms.
type Store interface {
	// Claim stores a claim of key by token that expires after lease, unless
	// the key holds a live claim (InProgress) or a result (Done). Only
	// Outcome, Result and RetryAfter of the returned Claim are used.
	Claim(ctx context.Context, key, token string, lease time.Duration) (Claim, error)
	// Complete replaces the claim of key by token with result, kept for ttl;
	// ErrLeaseLost when key does not hold that live claim.
	Complete(ctx context.Context, key, token string, result []byte, ttl time.Duration) error
	// Release deletes the claim of key by token; ErrLeaseLost when key does
	// not hold that live claim.
	Release(ctx context.Context, key, token string) error
}

// Limits on keys and results, so that every store can hold them (the SQL
// store's key column is VARCHAR(255), its result column a BLOB).
const (
	MaxKeyLen    = 255
	MaxResultLen = 65535
)

// Key returns the key of eventID for consumer group group,
// "{group}:{eventID}", also the key of SQLStore's processed-events table:
// one key space per consumer group, so two groups each process an event once.
func Key(group, eventID string) string { return group + ":" + eventID }

// TaggedKey is Key with a Redis Cluster hash tag, "{group}:{tag}:{eventID}"
// with tag in braces, so the key lives in the slot of other keys carrying the
// same tag (e.g. tag "100" beside the quota engine's family:{100}:… keys).
// group must not contain '{'.
func TaggedKey(group, tag, eventID string) string {
	return group + ":{" + tag + "}:" + eventID
}

// ValidKey reports whether key can be stored: 1..MaxKeyLen bytes.
func ValidKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key must be 1..%d bytes, got %d", ErrInvalid, MaxKeyLen, len(key))
	}
	return nil
}

// ClaimInfo is passed to Hooks.OnClaim after every claim.
type ClaimInfo struct {
	Key      string
	Outcome  Outcome // 0 on error
	Duration time.Duration
	Err      error
}

// CompleteInfo is passed to Hooks.OnComplete and Hooks.OnRelease.
type CompleteInfo struct {
	Key      string
	Duration time.Duration
	Err      error
}

// Hooks are optional callbacks for observability; nil funcs are skipped.
// They run on the caller's goroutine and must be quick.
type Hooks struct {
	OnClaim    func(ClaimInfo)
	OnComplete func(CompleteInfo)
	OnRelease  func(CompleteInfo)
}

// Option configures a Guard.
type Option func(*Guard) error

// WithLease sets how long a claim holds a key before another worker may take
// it over (a crashed worker's event is retried after this). It must exceed
// the time the work takes. Default: 30 s.
func WithLease(d time.Duration) Option {
	return func(g *Guard) error {
		if d < time.Millisecond {
			return fmt.Errorf("%w: lease must be ≥ 1ms", ErrInvalid)
		}
		g.lease = d
		return nil
	}
}

// WithTTL sets how long a completed result is remembered; a duplicate
// arriving later is processed again. Default: 24 h.
func WithTTL(d time.Duration) Option {
	return func(g *Guard) error {
		if d < time.Millisecond {
			return fmt.Errorf("%w: TTL must be ≥ 1ms", ErrInvalid)
		}
		g.ttl = d
		return nil
	}
}

// WithHooks sets observability callbacks. Default: none.
func WithHooks(h Hooks) Option {
	return func(g *Guard) error { g.hooks = h; return nil }
}

// WithTokens sets the source of claim tokens, which must be unique per
// claim. Default: 128 random bits (crypto/rand.Text).
func WithTokens(next func() string) Option {
	return func(g *Guard) error {
		if next == nil {
			return fmt.Errorf("%w: nil token source", ErrInvalid)
		}
		g.token = next
		return nil
	}
}

// Guard lets any consumer process each key at most once at a time and
// remember the result: Claim, do the work, Complete (or Release on failure).
// It is safe for concurrent use.
type Guard struct {
	store Store
	lease time.Duration
	ttl   time.Duration
	token func() string
	hooks Hooks
}

// New returns a guard over store.
func New(store Store, opts ...Option) (*Guard, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	g := &Guard{store: store, lease: 30 * time.Second, ttl: 24 * time.Hour, token: rand.Text}
	for _, o := range opts {
		if err := o(g); err != nil {
			return nil, err
		}
	}
	g.lease, g.ttl = ceilMs(g.lease), ceilMs(g.ttl)
	return g, nil
}

func ceilMs(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// Claim claims key with the guard's lease. On Acquired the caller owns key
// until the lease expires and must Complete or Release it; on Done the
// stored result is in Claim.Result; on InProgress another worker owns it.
func (g *Guard) Claim(ctx context.Context, key string) (c Claim, err error) {
	start := time.Now()
	defer func() {
		if g.hooks.OnClaim != nil {
			g.hooks.OnClaim(ClaimInfo{Key: key, Outcome: c.Outcome, Duration: time.Since(start), Err: err})
		}
	}()
	if err := ValidKey(key); err != nil {
		return Claim{}, err
	}
	token := g.token()
	if token == "" || len(token) > 64 || strings.ContainsAny(token, "\x00") {
		return Claim{}, fmt.Errorf("%w: token must be 1..64 bytes", ErrInvalid)
	}
	c, err = g.store.Claim(ctx, key, token, g.lease)
	if err != nil {
		return Claim{}, fmt.Errorf("idempotency: claim %q: %w", key, err)
	}
	c.Key = key
	c.Token = ""
	switch c.Outcome {
	case Acquired:
		c.Token, c.Result, c.RetryAfter = token, nil, 0
	case Done:
		if c.Result == nil {
			c.Result = []byte{}
		}
		c.RetryAfter = 0
	case InProgress:
		c.Result = nil
	default:
		return Claim{}, fmt.Errorf("idempotency: claim %q: store returned %v", key, c.Outcome)
	}
	return c, nil
}

// Complete stores result for an Acquired claim, kept for the guard's TTL,
// only if the claim is still ours; else ErrLeaseLost.
func (g *Guard) Complete(ctx context.Context, c Claim, result []byte) (err error) {
	start := time.Now()
	defer func() {
		if g.hooks.OnComplete != nil {
			g.hooks.OnComplete(CompleteInfo{Key: c.Key, Duration: time.Since(start), Err: err})
		}
	}()
	if err := g.owned(c); err != nil {
		return err
	}
	if len(result) > MaxResultLen {
		return fmt.Errorf("%w: result longer than %d bytes", ErrInvalid, MaxResultLen)
	}
	if result == nil {
		result = []byte{}
	}
	if err := g.store.Complete(ctx, c.Key, c.Token, result, g.ttl); err != nil {
		return fmt.Errorf("idempotency: complete %q: %w", c.Key, err)
	}
	return nil
}

// Release gives up an Acquired claim so another worker may claim the key at
// once, only if the claim is still ours (compare-and-delete); else
// ErrLeaseLost.
func (g *Guard) Release(ctx context.Context, c Claim) (err error) {
	start := time.Now()
	defer func() {
		if g.hooks.OnRelease != nil {
			g.hooks.OnRelease(CompleteInfo{Key: c.Key, Duration: time.Since(start), Err: err})
		}
	}()
	if err := g.owned(c); err != nil {
		return err
	}
	if err := g.store.Release(ctx, c.Key, c.Token); err != nil {
		return fmt.Errorf("idempotency: release %q: %w", c.Key, err)
	}
	return nil
}

func (g *Guard) owned(c Claim) error {
	if c.Outcome != Acquired || c.Token == "" {
		return fmt.Errorf("%w: not an acquired claim (%v)", ErrInvalid, c.Outcome)
	}
	return ValidKey(c.Key)
}

// Do runs fn once per key: it claims key, runs fn and completes the claim
// with fn's result. If key was done before, Do returns the stored result and
// duplicate = true without running fn. If another worker holds key, Do
// returns ErrInProgress. If fn fails, the claim is released (so a retry may
// run fn again) and fn's error returned. If the lease was lost before fn
// finished, Do returns fn's result with an error wrapping ErrLeaseLost.
func (g *Guard) Do(ctx context.Context, key string, fn func(context.Context) ([]byte, error)) (result []byte, duplicate bool, err error) {
	c, err := g.Claim(ctx, key)
	if err != nil {
		return nil, false, err
	}
	switch c.Outcome {
	case Done:
		return c.Result, true, nil
	case InProgress:
		return nil, false, fmt.Errorf("%w: %q (lease ends in %v)", ErrInProgress, key, c.RetryAfter)
	}
	result, err = fn(ctx)
	if err != nil {
		if rerr := g.Release(context.WithoutCancel(ctx), c); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
			return nil, false, errors.Join(err, rerr)
		}
		return nil, false, err
	}
	if err := g.Complete(ctx, c, result); err != nil {
		return result, false, err
	}
	return result, false, nil
}
