package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/service/limit"
	"github.com/dabom/dpcs/service/store"
)

// Brute-force protection of POST /auth/token and /auth/refresh: request
// rates per client address and per login, and a temporary lockout of a login
// after consecutive failures. Over a limit the API answers 429 (RFC 9457
// problem) with Retry-After in seconds.

// AuthLimits are the brute-force limits of POST /auth/token and
// /auth/refresh. A zero field takes its default.
type AuthLimits struct {
	// LoginPerAddress limits the logins one client address sends, whatever
	// the login. Default: 60 per minute (a carrier NAT puts many phones
	// behind one address).
	LoginPerAddress limit.Rate `envconfig:"RATE_ADDRESS" doc_default:"60/1m" deployables:"server, all-in-one" desc:"logins one client address may send, written N/duration"`
	// LoginPerLogin limits the attempts on one login, from every address
	// together. Default: 10 per minute.
	LoginPerLogin limit.Rate `envconfig:"RATE_LOGIN" doc_default:"10/1m" deployables:"server, all-in-one" desc:"attempts on one login from every address together, N/duration"`
	// RefreshPerAddress limits the refreshes one client address sends.
	// Default: 120 per minute.
	RefreshPerAddress limit.Rate `envconfig:"RATE_REFRESH" doc_default:"120/1m" deployables:"server, all-in-one" desc:"token refreshes one client address may send, N/duration"`
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
		r   *limit.Rate
		def limit.Rate
	}{{&l.LoginPerAddress, limit.Rate{N: 60, Per: time.Minute}}, {&l.LoginPerLogin, limit.Rate{N: 10, Per: time.Minute}}, {&l.RefreshPerAddress, limit.Rate{N: 120, Per: time.Minute}}} {
		if *f.r == (limit.Rate{}) {
			*f.r = f.def
		}
		if err := f.r.Check(); err != nil {
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

// authGuard is the API's brute-force protection.
type authGuard struct {
	limiter limit.Limiter
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
		lim = limit.NewMemoryLimiter(cfg.Clock, 0)
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
	var r limit.Rate
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
