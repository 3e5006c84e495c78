package notify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"code.dny.dev/ssrf"

	"github.com/dabom/dpcs/notify/pushsub"
)

// ErrNotPublic is returned when a connection would reach an address the
// dial guard refuses (see PublicOnlyDialer): a push endpoint, or a place a
// webhook receiver redirected to, inside the deployment's network or in any
// other special-purpose range.
var ErrNotPublic = errors.New("notify: destination address is not public")

// The only ports the guard lets a connection reach.
const (
	portHTTP  = 80
	portHTTPS = 443
)

// DefaultPushTimeout bounds each push to one endpoint (WithPushTimeout):
// push services answer within milliseconds, so a few seconds tell a dead or
// deliberately slow endpoint apart.
const DefaultPushTimeout = 3 * time.Second

// dialGuard is the dial-time guard: code.dny.dev/ssrf's Guardian (kept in
// sync with the IANA special-purpose registries by its generator) behind a
// net.Dialer's Control, so it sees the address each connection goes to after
// name resolution. loopback opens loopback addresses (any port) too, for
// tests with a local push service.
type dialGuard struct {
	g        *ssrf.Guardian
	loopback bool
	allow    []netip.Prefix
}

func newDialGuard(loopback bool) dialGuard {
	return dialGuard{g: ssrf.New(ssrf.WithPorts(portHTTP, portHTTPS)), loopback: loopback}
}

// control is a net.Dialer's Control.
func (d dialGuard) control(network, address string, _ syscall.RawConn) error {
	if ap, err := netip.ParseAddrPort(address); err == nil {
		a := ap.Addr().Unmap()
		if d.loopback && a.IsLoopback() {
			return nil
		}
		for _, p := range d.allow {
			if p.Contains(a) {
				return nil
			}
		}
	}
	if err := d.g.Safe(network, address, nil); err != nil {
		return fmt.Errorf("%w: %w", ErrNotPublic, err)
	}
	return nil
}

func (d dialGuard) dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, Control: d.control}
}

// PublicOnlyDialer returns a dialer that connects only where
// code.dny.dev/ssrf's guard allows: TCP to ports 80 and 443 of addresses in
// no range of the IANA special-purpose registries and, for IPv6, inside
// global unicast (2000::/3). It refuses loopback, private, link-local
// (169.254.169.254), carrier-grade NAT (100.64.0.0/10, where clouds put
// metadata services such as 100.100.100.200), benchmarking (198.18.0.0/15),
// NAT64 (64:ff9b::/96), 6to4 (2002::/16), IPv4-mapped, documentation,
// multicast and reserved addresses. The check is on the address each
// connection goes to, after name resolution, so a hostname resolving inside
// the network is refused as its address would be; the error wraps
// ErrNotPublic. Its timeout is DefaultPushTimeout.
func PublicOnlyDialer() *net.Dialer { return newDialGuard(false).dialer(DefaultPushTimeout) }

// GuardedDialer returns a dialer with PublicOnlyDialer's guard that also
// connects, on any port, to addresses in the networks allowed (destinations
// an operator vouches for, such as its SMFs' notification endpoints) and,
// with loopback, to loopback addresses (tests). Its timeout is timeout.
func GuardedDialer(timeout time.Duration, loopback bool, allow ...netip.Prefix) *net.Dialer {
	g := newDialGuard(loopback)
	for _, p := range allow {
		g.allow = append(g.allow, p.Masked())
	}
	return g.dialer(timeout)
}

// guardedTransport dials through dial and never through a proxy: a proxy
// would connect on our behalf, past the guard.
func guardedTransport(dial func(ctx context.Context, network, addr string) (net.Conn, error), handshake time.Duration) *http.Transport {
	return &http.Transport{DialContext: dial, ForceAttemptHTTP2: true, MaxIdleConns: 100, MaxIdleConnsPerHost: maxParallelPushes,
		IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: handshake, ExpectContinueTimeout: time.Second}
}

// pushClient is WebPush's default client: guarded dials, and no redirects
// (RFC 8030 has none; an endpoint is the URL the browser gave, and a
// redirect could point anywhere). Each push's deadline comes from its
// context (WithPushTimeout).
func pushClient(loopback bool, timeout time.Duration) *http.Client {
	return &http.Client{
		Transport:     guardedTransport(newDialGuard(loopback).dialer(timeout).DialContext, timeout),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// webhookClient is Webhook's default client for the URL u: the URL's own
// host and port are the operator's choice and are dialled as configured
// (a receiver inside the network is normal), every other place, which only
// a redirect can lead to, through the guard.
func webhookClient(u *url.URL) *http.Client {
	origin := net.JoinHostPort(u.Hostname(), pushsub.Port(u))
	plain := &net.Dialer{Timeout: 10 * time.Second}
	guarded := newDialGuard(false).dialer(10 * time.Second)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if strings.EqualFold(addr, origin) {
			return plain.DialContext(ctx, network, addr)
		}
		return guarded.DialContext(ctx, network, addr)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: guardedTransport(dial, 10*time.Second)}
}
