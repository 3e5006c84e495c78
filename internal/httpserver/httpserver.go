// Package httpserver builds the deployables' hardened http.Server: every
// phase of a request bounded (headers, body, handler, writes, idle
// keep-alives, header size), long-lived streams (SSE) exempt from the bounds
// that would cut them, and security headers on every response.
//
// Why not just http.Server's timeouts: WriteTimeout does not stop a slow
// handler (it runs on, and the client only sees the connection close when
// it finally writes), and it cuts an SSE stream once it passes. So
// non-stream handlers run under http.TimeoutHandler (a 503 and a cancelled
// context at HandlerTimeout, before the connection's write deadline), and
// stream requests have their write deadline lifted (http.ResponseController):
// their handler bounds each write itself, as huma's sse package does (5 s a
// message). ReadTimeout covers reading the request only: net/http clears
// the read deadline once a body-less request is read, so it never cuts a
// stream (TestStreamOutlivesTimeouts holds both).
package httpserver

import (
	"context"
	"log/slog"
	"net/http"
	"time"
)

// Defaults of Config's zero fields.
const (
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultHandlerTimeout    = 30 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
	// writeMargin is how much longer than HandlerTimeout the connection's
	// write deadline is by default, so the 503 of a timed-out handler still
	// reaches the client.
	writeMargin = 5 * time.Second
)

// Config bounds a server. Zero fields take the defaults.
type Config struct {
	// ReadHeaderTimeout bounds reading a request's headers (slow-header
	// clients). Default 5 s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading the whole request, body included. Default
	// 30 s.
	ReadTimeout time.Duration
	// HandlerTimeout bounds a non-stream handler: past it the client gets a
	// 503 problem and the request's context is cancelled. Default 30 s.
	HandlerTimeout time.Duration
	// WriteTimeout is the connection's write deadline from the end of the
	// request's headers, the backstop behind HandlerTimeout. Default
	// HandlerTimeout + 5 s.
	WriteTimeout time.Duration
	// IdleTimeout bounds waiting for the next request on a keep-alive
	// connection. Default 120 s.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (431 beyond). Default 64 KiB.
	MaxHeaderBytes int
	// Streaming reports whether r asks for a long-lived stream (SSE): its
	// write deadline is lifted and HandlerTimeout does not apply, so its
	// handler must bound each write itself. Default: no request is a stream.
	Streaming func(r *http.Request) bool
	// SelfTimed reports whether r's handler answers by itself once its
	// context ends (POST /decisions answers 503 at its decision timeout):
	// it runs on the connection's goroutine, its context ending at
	// HandlerTimeout and the connection's write deadline behind it, without
	// http.TimeoutHandler's goroutine and buffered copy of every response —
	// a fifth of a gateway's single decision (doc/benchmarks.md, "Peers").
	// Default: no request is.
	SelfTimed func(r *http.Request) bool
	// Logger receives the server's own errors (malformed requests, handler
	// panics). Default: the standard log package.
	Logger *slog.Logger
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&c.ReadTimeout, DefaultReadTimeout)
	def(&c.HandlerTimeout, DefaultHandlerTimeout)
	def(&c.WriteTimeout, c.HandlerTimeout+writeMargin)
	def(&c.IdleTimeout, DefaultIdleTimeout)
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	return c
}

// New returns a server for h with c's bounds and SecurityHeaders on every
// response. Serve it with Serve or ListenAndServe; stop it with Shutdown.
func New(h http.Handler, c Config) *http.Server {
	c = c.withDefaults()
	srv := &http.Server{
		Handler:           SecurityHeaders(c.bound(h)),
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
	}
	if c.Logger != nil {
		srv.ErrorLog = slog.NewLogLogger(c.Logger.Handler(), slog.LevelWarn)
	}
	return srv
}

// timeoutProblem is the body of a handler cut at HandlerTimeout (RFC 9457).
const timeoutProblem = `{"title":"Service Unavailable","status":503,"detail":"the request took too long and was cancelled"}`

// bound runs stream requests with their write deadline lifted, self-timed
// ones with their context ending at HandlerTimeout, and the others under
// http.TimeoutHandler.
func (c Config) bound(h http.Handler) http.Handler {
	timed := http.TimeoutHandler(h, c.HandlerTimeout, timeoutProblem)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.Streaming != nil && c.Streaming(r) {
			// An error only where the writer has no deadline (not net/http's
			// own): then there is nothing to lift.
			_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
			h.ServeHTTP(w, r)
			return
		}
		if c.SelfTimed != nil && c.SelfTimed(r) {
			ctx, cancel := context.WithTimeout(r.Context(), c.HandlerTimeout)
			defer cancel()
			h.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		timed.ServeHTTP(problemOnTimeout{w}, r)
	})
}

// problemOnTimeout labels http.TimeoutHandler's 503, which carries no
// Content-Type, as the problem it is. Responses of the handler itself come
// with their own Content-Type and pass unchanged.
type problemOnTimeout struct{ http.ResponseWriter }

func (p problemOnTimeout) WriteHeader(code int) {
	if h := p.Header(); code == http.StatusServiceUnavailable && h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/problem+json")
	}
	p.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection.
func (p problemOnTimeout) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// SecurityHeaders sets, before h runs, the headers every API response
// carries: X-Content-Type-Options nosniff, Referrer-Policy no-referrer,
// X-Frame-Options DENY, Cache-Control no-store (responses carry tokens and
// family data; nothing is for shared caches) and a Content-Security-Policy
// allowing nothing (default-src 'none'; frame-ancestors 'none'), right for
// JSON and event streams. A handler serving HTML sets its own policy, which
// replaces this one: huma's /docs page sends a strict one of its own that
// allows exactly its renderer's script and style (pinned with subresource
// integrity) from unpkg.com and fetches of the OpenAPI document from self.
func SecurityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Cache-Control", "no-store")
		hd.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
		h.ServeHTTP(w, r)
	})
}
