package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/service/store"
)

// Brute-force protection of POST /auth/token and /auth/refresh: request
// rates per client address and per login, and a temporary lockout of a login
// after consecutive failures. Over a limit the API answers 429 (RFC 9457
// problem) with Retry-After in seconds.

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
	return r, r.check()
}

func (r Rate) check() error {
	if r.N <= 0 || r.N > 1_000_000 || r.Per < time.Millisecond || r.Per > 24*time.Hour {
		return fmt.Errorf("rate %s: want 1 to 1000000 requests per 1ms to 24h", r)
	}
	return nil
}

// AuthLimits are the brute-force limits of POST /auth/token and
// /auth/refresh. A zero field takes its default.
type AuthLimits struct {
	// LoginPerAddress limits the logins one client address sends, whatever
	// the login. Default: 60 per minute (a carrier NAT puts many phones
	// behind one address).
	LoginPerAddress Rate `envconfig:"RATE_ADDRESS" doc_default:"60/1m" deployables:"server, all-in-one" desc:"logins one client address may send, written N/duration"`
	// LoginPerLogin limits the attempts on one login, from every address
	// together. Default: 10 per minute.
	LoginPerLogin Rate `envconfig:"RATE_LOGIN" doc_default:"10/1m" deployables:"server, all-in-one" desc:"attempts on one login from every address together, N/duration"`
	// RefreshPerAddress limits the refreshes one client address sends.
	// Default: 120 per minute.
	RefreshPerAddress Rate `envconfig:"RATE_REFRESH" doc_default:"120/1m" deployables:"server, all-in-one" desc:"token refreshes one client address may send, N/duration"`
	// LockoutAfter consecutive failed logins lock the login for LockoutFor;
	// a successful login resets the count, and the count is forgotten
	// LockoutFor after its last failure. Logins that name nobody count and
	// lock the same way. Default: 10 failures, 15 minutes.
	LockoutAfter int           `envconfig:"LOCKOUT_AFTER" doc_default:"10" deployables:"server, all-in-one" desc:"consecutive failed logins (1 to 1000) that lock the login"`
	LockoutFor   time.Duration `envconfig:"LOCKOUT_FOR" doc_default:"15m" deployables:"server, all-in-one" desc:"how long a locked login stays locked (1s to 24h)"`
}

// Defaults of AuthLimits.
const (
	DefaultLockoutAfter = 10
	DefaultLockoutFor   = 15 * time.Minute
)

func (l AuthLimits) withDefaults() (AuthLimits, error) {
	for _, f := range []struct {
		r   *Rate
		def Rate
	}{{&l.LoginPerAddress, Rate{60, time.Minute}}, {&l.LoginPerLogin, Rate{10, time.Minute}}, {&l.RefreshPerAddress, Rate{120, time.Minute}}} {
		if *f.r == (Rate{}) {
			*f.r = f.def
		}
		if err := f.r.check(); err != nil {
			return l, err
		}
	}
	if l.LockoutAfter == 0 {
		l.LockoutAfter = DefaultLockoutAfter
	}
	if l.LockoutFor == 0 {
		l.LockoutFor = DefaultLockoutFor
	}
	if l.LockoutAfter < 1 || l.LockoutFor < time.Second || l.LockoutFor > 24*time.Hour {
		return l, fmt.Errorf("lockout after %d failures for %s: want at least 1 failure, for 1s to 24h", l.LockoutAfter, l.LockoutFor)
	}
	return l, nil
}

// AuthLimiter keeps the counters of the brute-force limits. Keys are opaque
// strings chosen by the API (no personal data). MemoryLimiter serves one
// process; RedisLimiter is shared by every API instance on one Redis.
type AuthLimiter interface {
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
	_ AuthLimiter = (*MemoryLimiter)(nil)
	_ AuthLimiter = (*RedisLimiter)(nil)
)

// DefaultLimiterKeys is how many keys a MemoryLimiter holds by default.
const DefaultLimiterKeys = 100_000

// limiterSample is how many keys an eviction compares.
const limiterSample = 8

// MemoryLimiter is an AuthLimiter in this process's memory, the API's
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

// Allow implements AuthLimiter with GCRA, as redis_rate does.
func (l *MemoryLimiter) Allow(_ context.Context, key string, r Rate) (time.Duration, error) {
	if err := r.check(); err != nil {
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

// Fail implements AuthLimiter.
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

// Locked implements AuthLimiter.
func (l *MemoryLimiter) Locked(_ context.Context, key string) (time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if e := l.entry(key, now, false); e != nil && e.lockedUntil.After(now) {
		return e.lockedUntil.Sub(now), nil
	}
	return 0, nil
}

// Reset implements AuthLimiter.
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

// RedisLimiter is an AuthLimiter on Redis, shared by every API instance
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
		return nil, errors.New("api: NewRedisLimiter: nil Redis client")
	}
	return &RedisLimiter{rdb: rdb, rate: redis_rate.NewLimiter(rdb)}, nil
}

func redisLimitKey(key, suffix string) string { return "dpcs:auth:{" + key + "}:" + suffix }

// Allow implements AuthLimiter.
func (l *RedisLimiter) Allow(ctx context.Context, key string, r Rate) (time.Duration, error) {
	if err := r.check(); err != nil {
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

// Fail implements AuthLimiter.
func (l *RedisLimiter) Fail(ctx context.Context, key string, after int, lockFor time.Duration) (int, error) {
	left, err := authFailScript.Run(ctx, l.rdb, []string{redisLimitKey(key, "fails"), redisLimitKey(key, "lock")},
		after, lockFor.Milliseconds()).Int()
	if err != nil {
		return 0, fmt.Errorf("count failure: %w", err)
	}
	return left, nil
}

// Locked implements AuthLimiter.
func (l *RedisLimiter) Locked(ctx context.Context, key string) (time.Duration, error) {
	d, err := l.rdb.PTTL(ctx, redisLimitKey(key, "lock")).Result()
	if err != nil {
		return 0, fmt.Errorf("lock: %w", err)
	}
	return max(d, 0), nil // -2: no lock (-1, no expiry, is never written)
}

// Reset implements AuthLimiter.
func (l *RedisLimiter) Reset(ctx context.Context, key string) error {
	if err := l.rdb.Del(ctx, redisLimitKey(key, "fails")).Err(); err != nil {
		return fmt.Errorf("reset failures: %w", err)
	}
	return nil
}

// authGuard is the API's brute-force protection.
type authGuard struct {
	limiter AuthLimiter
	limits  AuthLimits
	proxies []netip.Prefix
	salt    []byte // keys are HMACs under it: no logins or addresses in the limiter
}

func newAuthGuard(cfg Config) (authGuard, error) {
	limits, err := cfg.Limits.withDefaults()
	if err != nil {
		return authGuard{}, fmt.Errorf("api: Config.Limits: %w", err)
	}
	lim := cfg.Limiter
	if lim == nil {
		lim = NewMemoryLimiter(cfg.Clock, 0)
	}
	m := hmac.New(sha256.New, cfg.Secret)
	m.Write([]byte("dpcs auth limiter keys"))
	return authGuard{limiter: lim, limits: limits, proxies: append([]netip.Prefix(nil), cfg.TrustedProxies...), salt: m.Sum(nil)}, nil
}

// key names what kind counts for value v: the same in every API instance
// sharing the JWT secret.
func (g *authGuard) key(kind, v string) string {
	m := hmac.New(sha256.New, g.salt)
	m.Write([]byte(kind))
	m.Write([]byte{0})
	m.Write([]byte(v))
	return kind + ":" + hex.EncodeToString(m.Sum(nil)[:16])
}

// normalLogin is the login's limiter identity when it names no member
// (loginKey): every spelling Authenticate could take for the same member id
// is one (a decimal with a sign or leading zeros), phones are trimmed and
// lower-cased. Grouping more than the store distinguishes only makes the
// limits stricter.
func normalLogin(login string) string {
	if id, err := strconv.ParseInt(strings.TrimSpace(login), 10, 64); err == nil && id > 0 {
		return memberLogin(id)
	}
	return "phone:" + strings.ToLower(strings.TrimSpace(login))
}

// memberLogin is member id's limiter identity: whichever name a login
// gives it (its id or its phone), one rate, one failure count, one lock.
func memberLogin(id int64) string { return "id:" + strconv.FormatInt(id, 10) }

// loginKey is the limiter key of a login: the member's (memberLogin) when
// the login is a phone of a current member, else normalLogin's. A phone is
// looked up as Authenticate looks it up; a lookup that fails counts under
// the login's own spelling, which still limits it.
func (a *Server) loginKey(ctx context.Context, login string) string {
	name := normalLogin(login)
	if strings.HasPrefix(name, "phone:") {
		if m, err := a.cfg.Store.MemberByPhone(ctx, login); err == nil && m.ID > 0 {
			name = memberLogin(m.ID)
		}
	}
	return a.guard.key("login", name)
}

// clientAddr is the request's client address: the peer's, unless the peer
// is a trusted proxy; then X-Forwarded-For (all its headers, in order) is
// read from the right, skipping trusted proxies, and the first address that
// is not one is the client. An entry that is not an address stops the walk
// at the last trusted hop (it was not written by a trusted proxy).
func clientAddr(remote string, forwarded []string, trusted []netip.Prefix) (netip.Addr, bool) {
	parse := func(s string) (netip.Addr, bool) {
		s = strings.TrimSpace(s)
		if ap, err := netip.ParseAddrPort(s); err == nil {
			return ap.Addr().Unmap(), true
		}
		a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
		return a.Unmap(), err == nil && a.Zone() == ""
	}
	isTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	addr, ok := parse(remote)
	if !ok || !isTrusted(addr) {
		return addr, ok
	}
	var hops []string
	for _, h := range forwarded {
		hops = append(hops, strings.Split(h, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parse(hops[i])
		if !ok {
			break
		}
		if addr = a; !isTrusted(a) {
			break
		}
	}
	return addr, true
}

// addrKey is the limiter identity of a client address: IPv4 addresses alone,
// IPv6 ones by their /64 (what one subscriber gets).
func addrKey(a netip.Addr, ok bool) string {
	switch {
	case !ok:
		return "unknown"
	case a.Is6():
		return netip.PrefixFrom(a, 64).Masked().String()
	}
	return a.String()
}

type clientAddrKey struct{}

// retryAfter is a Retry-After value: whole seconds, at least 1.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(max(1, int64(math.Ceil(d.Seconds()))), 10)
}

// limitAddress is the huma middleware counting POST /auth/token and
// /auth/refresh against the client address's rate (before the body is read,
// so malformed requests count too). It passes the address to the handler.
func (a *Server) limitAddress(ctx huma.Context, next func(huma.Context)) {
	var r Rate
	op := ctx.Operation().OperationID
	switch op {
	case "login":
		r = a.guard.limits.LoginPerAddress
	case "refresh":
		r = a.guard.limits.RefreshPerAddress
	default:
		next(ctx)
		return
	}
	var xff []string
	if len(a.guard.proxies) > 0 {
		ctx.EachHeader(func(name, value string) {
			if strings.EqualFold(name, "X-Forwarded-For") {
				xff = append(xff, value)
			}
		})
	}
	addr := addrKey(clientAddr(ctx.RemoteAddr(), xff, a.guard.proxies))
	wait, err := a.guard.limiter.Allow(ctx.Context(), a.guard.key(op+"-addr", addr), r)
	if err != nil {
		a.log.ErrorContext(ctx.Context(), "api: rate limit", "err", err)
		huma.WriteErr(a.api, ctx, http.StatusServiceUnavailable, "cannot check the request rate now")
		return
	}
	if wait > 0 {
		ctx.SetHeader("Retry-After", retryAfter(wait))
		huma.WriteErr(a.api, ctx, http.StatusTooManyRequests, "too many requests from this address; retry later")
		return
	}
	next(huma.WithValue(ctx, clientAddrKey{}, addr))
}

// tooManyAttempts is the answer to a login over its rate or locked; the
// same whether the login names a member or not.
func tooManyAttempts(wait time.Duration) error {
	return huma.ErrorWithHeaders(huma.NewError(http.StatusTooManyRequests, "too many attempts for this login; retry later"),
		http.Header{"Retry-After": {retryAfter(wait)}})
}

// admitLogin refuses a login attempt on key while it is locked or over its
// rate.
func (a *Server) admitLogin(ctx context.Context, key string) error {
	wait, err := a.guard.limiter.Locked(ctx, key)
	if err == nil && wait == 0 {
		wait, err = a.guard.limiter.Allow(ctx, key, a.guard.limits.LoginPerLogin)
	}
	if err != nil {
		a.log.ErrorContext(ctx, "api: login limit", "err", err)
		return huma.NewError(http.StatusServiceUnavailable, "cannot check the login rate now")
	}
	if wait > 0 {
		return tooManyAttempts(wait)
	}
	return nil
}

// loginFailed counts a failed login on key and, when it locks the login,
// audits the lockout. It returns how many more failures the login is
// allowed before it is locked (0: this one locked it), or -1 when the count
// could not be kept. The attempt is refused whatever happens here.
func (a *Server) loginFailed(ctx context.Context, key, login string) int {
	l := a.guard.limits
	left, err := a.guard.limiter.Fail(ctx, key, l.LockoutAfter, l.LockoutFor)
	if err != nil {
		a.log.ErrorContext(ctx, "api: count a failed login", "err", err)
		return -1
	}
	if left > 0 {
		return left
	}
	addr, _ := ctx.Value(clientAddrKey{}).(string)
	a.log.WarnContext(ctx, "api: login locked after repeated failures", "failures", l.LockoutAfter, "for", l.LockoutFor, "address", addr)
	lo := store.Lockout{Login: login, Failures: l.LockoutAfter, Until: a.now().Add(l.LockoutFor), Address: addr}
	if err := a.cfg.Store.AuditLockout(ctx, lo); err != nil {
		a.log.ErrorContext(ctx, "api: audit a lockout", "err", err)
	}
	return 0
}

// loginSucceeded resets key's failures.
func (a *Server) loginSucceeded(ctx context.Context, key string) {
	if err := a.guard.limiter.Reset(ctx, key); err != nil {
		a.log.ErrorContext(ctx, "api: reset login failures", "err", err)
	}
}
