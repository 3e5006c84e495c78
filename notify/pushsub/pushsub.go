// Package pushsub is a browser's Web Push subscription (the Push API's
// PushSubscription) and the check it passes before it is stored, apart
// from notify's sender: what stores subscriptions (service/store) links no
// HTTP client. notify.PushSubscription is this package's Subscription and
// notify.ValidatePushSubscription its Validate.
package pushsub

import (
	"crypto/ecdh"
	"encoding/base64"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"code.dny.dev/ssrf"
)

// Subscription is a browser's push subscription: where to post and the
// keys to encrypt for.
type Subscription struct {
	MemberID int64  `json:"memberId"`
	Endpoint string `json:"endpoint"`
	// P256dh is the user agent's P-256 public key, uncompressed (65 bytes),
	// base64url; Auth its 16-byte authentication secret, base64url.
	P256dh string `json:"p256dh"`
	Auth   string `json:"auth"`
	// Role is the member's role (MEMBER, OWNER), when the store says (a
	// push's recipients): a MEMBER gets the texts written for members (a
	// low-data alert says to ask a parent, not to top up).
	Role string `json:"role,omitempty"`
}

// Error is a subscription Validate refuses: the field at fault (endpoint,
// keys.p256dh, keys.auth) and why.
type Error struct {
	Field, Reason string
}

func (e *Error) Error() string { return e.Reason }

// The only ports a push endpoint may name: the dial guard's
// (notify.PublicOnlyDialer).
const (
	portHTTP  = 80
	portHTTPS = 443
)

// Validate checks a subscription as a browser sends it: an https endpoint
// on port 443 (or 80) whose host is not localhost nor an address literal
// the dial guard refuses (notify.PublicOnlyDialer; a hostname resolving
// inside the network is refused when it is dialled), a 65-byte
// uncompressed P-256 public key on the curve and a 16-byte auth secret,
// both base64url (padding allowed). allowLoopback, for tests with a local
// push service, also accepts an http or https endpoint on a loopback host,
// any port. The endpoint is judged in its one spelling (Normalize: 127.1,
// 0x7f000001 or 169.254.169.254. are the addresses they spell): store it
// in that spelling. The error is an *Error.
func Validate(s Subscription, allowLoopback bool) error {
	bad := func(field, reason string) error { return &Error{Field: field, Reason: reason} }
	norm, err := Normalize(s.Endpoint)
	if err != nil {
		return err
	}
	u, err := url.Parse(norm)
	if err != nil || u.Host == "" || u.User != nil {
		return bad("endpoint", "push endpoint must be an absolute https URL")
	}
	loopback := allowLoopback && IsLoopbackHost(u.Hostname())
	switch {
	case u.Scheme == "https", u.Scheme == "http" && loopback:
	default:
		return bad("endpoint", "push endpoint must be https")
	}
	if !loopback {
		if reason := checkHost(u); reason != "" {
			return bad("endpoint", reason)
		}
	}
	if len(s.Endpoint) > 2048 {
		return bad("endpoint", "push endpoint longer than 2048 bytes")
	}
	pub, err := DecodeKey(s.P256dh)
	if err != nil || len(pub) != 65 {
		return bad("keys.p256dh", "keys.p256dh must be a 65-byte P-256 public key, base64url")
	}
	if _, err := ecdh.P256().NewPublicKey(pub); err != nil {
		return bad("keys.p256dh", "keys.p256dh is not a P-256 point")
	}
	auth, err := DecodeKey(s.Auth)
	if err != nil || len(auth) != 16 {
		return bad("keys.auth", "keys.auth must be a 16-byte secret, base64url")
	}
	return nil
}

// DecodeKey decodes base64url with or without padding (browsers send it
// without, some libraries with).
func DecodeKey(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

// Port is u's port, or its scheme's.
func Port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "http" {
		return strconv.Itoa(portHTTP)
	}
	return strconv.Itoa(portHTTPS)
}

// IsLoopbackHost reports whether host (a URL's Hostname) is localhost or a
// loopback address literal.
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// checkHost refuses, when a subscription is made, what the dial guard would
// refuse at every delivery and can be told from the URL alone: a port other
// than 80 and 443, a localhost name, an address literal the guard refuses.
// A hostname that resolves inside the network passes here; the dial
// refuses it. It returns why, or "".
func checkHost(u *url.URL) string {
	port, err := strconv.ParseUint(Port(u), 10, 16)
	if err != nil || (port != portHTTP && port != portHTTPS) {
		return "push endpoint port must be 443"
	}
	host := strings.ToLower(u.Hostname())
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return "push endpoint must be a public host, not localhost"
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if ssrf.New(ssrf.WithPorts(portHTTP, portHTTPS)).SafeAddr(a) != nil {
			return "push endpoint must be a public address"
		}
	}
	return ""
}
