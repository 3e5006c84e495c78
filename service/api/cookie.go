package api

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
)

// Browser sessions (doc/security.md, "The refresh cookie"): a client that
// sends SessionHeader: cookie with its login gets the refresh token in
// RefreshCookie — HttpOnly (no script reads it), SameSite=Strict, scoped to
// the /auth routes, Secure except on plain-http loopback — and never in a
// body. /auth/refresh and /auth/logout read the cookie only from requests
// that carry the header too (a cross-site form or image cannot send a
// custom header, and the API answers no CORS preflight) and that a browser
// did not mark as coming from another site (Sec-Fetch-Site). API clients
// that send no header keep the refresh token in the JSON bodies.
const (
	RefreshCookie = "dpcs_refresh"
	SessionHeader = "X-DPCS-Session"
	// cookieSession is SessionHeader's one value.
	cookieSession = "cookie"
)

// browser is what a cookie session needs of a request; the inputs of the
// /auth routes resolve it. The session header is described in the routes'
// texts rather than declared as a parameter, so clients generated from the
// OpenAPI document call the routes as before (TestGeneratedClient).
type browser struct {
	session bool   // SessionHeader: cookie
	cookie  string // RefreshCookie's value
	site    string // Sec-Fetch-Site
	secure  bool   // a cookie set in the answer is Secure
}

func (b *browser) resolve(ctx huma.Context) []error {
	switch v := ctx.Header(SessionHeader); v {
	case "":
	case cookieSession:
		b.session = true
	default:
		return []error{&huma.ErrorDetail{Location: "header." + SessionHeader, Message: "must be " + cookieSession + " or absent"}}
	}
	if c, err := huma.ReadCookie(ctx, RefreshCookie); err == nil {
		b.cookie = c.Value
	}
	b.site = ctx.Header("Sec-Fetch-Site")
	b.secure = ctx.TLS() != nil || !loopbackHost(ctx.Host())
	return nil
}

// loopbackHost reports a Host header naming this machine (localhost,
// *.localhost, 127.0.0.0/8, ::1). Browsers refuse a Secure cookie from a
// plain-http page, so the embedded demo served on http://127.0.0.1 gets it
// without; anywhere else the cookie is Secure and needs https in front.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// cookieAllowed refuses (403) a request reading the refresh cookie without
// the session header or from another site.
func (b browser) cookieAllowed() error {
	if !b.session {
		return huma.Error403Forbidden("the refresh cookie is only read with the header " + SessionHeader + ": " + cookieSession)
	}
	if b.site != "" && b.site != "same-origin" && b.site != "none" {
		return huma.Error403Forbidden("the refresh cookie is not read on requests from another site")
	}
	return nil
}

// cookiePath is where the browser sends the cookie: the /auth routes under
// the API's public base URL (Config.ServerURL).
func (a *Server) cookiePath() string {
	base := "/"
	if u, err := url.Parse(a.cfg.ServerURL); err == nil && u.Path != "" {
		base = u.Path
	}
	return path.Join("/", base, "auth")
}

// refreshCookie is the Set-Cookie value carrying token until expires; an
// empty token clears the cookie.
func (a *Server) refreshCookie(token string, expires time.Time, secure bool) string {
	c := http.Cookie{Name: RefreshCookie, Value: token, Path: a.cookiePath(), HttpOnly: true, Secure: secure,
		SameSite: http.SameSiteStrictMode, MaxAge: -1}
	if token != "" {
		c.MaxAge = max(1, int(expires.Sub(a.now())/time.Second))
	}
	return c.String()
}

// clearingCookie adds the clearing of the refresh cookie to err (a refused
// cookie refresh: the browser should not present it again).
func (a *Server) clearingCookie(err error, secure bool) error {
	return huma.ErrorWithHeaders(err, http.Header{"Set-Cookie": {a.refreshCookie("", time.Time{}, secure)}})
}

// statusOf is the HTTP status of a huma error, 0 for other errors and nil.
func statusOf(err error) int {
	var se huma.StatusError
	if errors.As(err, &se) {
		return se.GetStatus()
	}
	return 0
}
