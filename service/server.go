package service

import (
	"net/http"

	"github.com/dabom/dpcs/internal/httpserver"
	"github.com/dabom/dpcs/service/api"
)

// HTTPServerConfig bounds a deployable's HTTP server (headers, body,
// handler, writes, idle keep-alives, header size); zero fields take the
// defaults: 5 s to read headers, 30 s for the whole request, 30 s for a
// handler (then 503 and its context cancelled), writes until 35 s, 120 s
// idle, 64 KiB of headers.
type HTTPServerConfig = httpserver.Config

// NewHTTPServer returns the hardened server every deployable serves its API
// with: c's bounds, the notification stream (api.StreamRequest) exempt from the
// handler and write timeouts (each SSE message has its own 5 s deadline),
// and security headers on every response (X-Content-Type-Options nosniff,
// Referrer-Policy no-referrer, X-Frame-Options DENY, Cache-Control no-store
// and a Content-Security-Policy allowing nothing, which /docs replaces with
// its own strict one). c.Streaming, when nil, is api.StreamRequest;
// c.SelfTimed, when nil, api.SelfTimedRequest (POST /decisions, which answers
// 503 at its own decision timeout, runs without http.TimeoutHandler).
func NewHTTPServer(h http.Handler, c HTTPServerConfig) *http.Server {
	if c.Streaming == nil {
		c.Streaming = api.StreamRequest
	}
	if c.SelfTimed == nil {
		c.SelfTimed = api.SelfTimedRequest
	}
	return httpserver.New(h, c)
}
