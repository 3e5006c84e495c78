package api

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dabom/dpcs/internal/httpserver"
	"github.com/danielgtaylor/huma/v2"
)

// StreamRequest matches exactly the API's SSE operations, so a stream added
// or moved is not cut by the handler timeout unnoticed.
func TestStreamRequestMatchesOpenAPI(t *testing.T) {
	f := newAPIFixture(t)
	streams := 0
	eachOperation(f, func(method, path string, op *huma.Operation) {
		sse := false
		if r := op.Responses["200"]; r != nil && r.Content["text/event-stream"] != nil {
			sse = true
			streams++
		}
		url := path
		for strings.Contains(url, "{") {
			i, j := strings.Index(url, "{"), strings.Index(url, "}")
			url = url[:i] + "42" + url[j+1:]
		}
		req, _ := http.NewRequest(method, "http://x"+url, nil)
		if got := StreamRequest(req); got != sse {
			t.Errorf("StreamRequest(%s %s) = %v, the operation streams: %v", method, path, got, sse)
		}
	})
	if streams == 0 {
		t.Error("the api.Server has no SSE operation: the check above checked nothing")
	}
}

// eachOperation calls fn with every operation of the fixture's OpenAPI
// document.
func eachOperation(f *apiFixture, fn func(method, path string, op *huma.Operation)) {
	for path, item := range f.api.OpenAPI().Paths {
		for method, op := range map[string]*huma.Operation{http.MethodGet: item.Get, http.MethodPost: item.Post,
			http.MethodPut: item.Put, http.MethodPatch: item.Patch, http.MethodDelete: item.Delete} {
			if op != nil {
				fn(method, path, op)
			}
		}
	}
}

// serveAPI serves the fixture's API as the deployables do (httpserver,
// with StreamRequest's streams exempt from the timeouts) on a loopback
// port and returns its base URL.
func serveAPI(t *testing.T, f *apiFixture, cfg httpserver.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpserver.New(f.api.Handler(), withStreams(cfg))
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// The API served by the hardened server with short bounds: its SSE stream (huma's
// sse, pinging every 50 ms in the fixture) outlives the write and handler
// timeouts many times over. With the default bounds, other responses carry
// the security headers and /docs keeps huma's own policy, which lets its
// renderer load.
func TestNewHTTPServerServesAPI(t *testing.T) {
	f := newAPIFixture(t)
	cfg := httpserver.Config{ReadTimeout: 200 * time.Millisecond, HandlerTimeout: 150 * time.Millisecond, WriteTimeout: 250 * time.Millisecond}
	base := serveAPI(t, f, cfg)

	req, _ := http.NewRequest(http.MethodGet, base+"/families/100/notifications/stream", nil)
	req.Header.Set("Authorization", "Bearer "+f.token(ownerA))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("stream: %d %v", resp.StatusCode, resp.Header)
	}
	outlive := 5 * cfg.WriteTimeout
	start, pings := time.Now(), 0
	sc := bufio.NewScanner(resp.Body)
	for time.Since(start) < outlive && sc.Scan() {
		if sc.Text() == "event: ping" {
			pings++
		}
	}
	if lasted := time.Since(start); lasted < outlive {
		t.Fatalf("stream ended after %v and %d pings (write timeout %v): %v", lasted, pings, cfg.WriteTimeout, sc.Err())
	}

	base = serveAPI(t, f, httpserver.Config{})

	for _, c := range []struct{ path, csp string }{
		{"/families/100", "default-src 'none'; frame-ancestors 'none'"},
		{"/openapi.json", "default-src 'none'; frame-ancestors 'none'"},
		{"/docs", "script-src https://unpkg.com/"},
	} {
		req, _ := http.NewRequest(http.MethodGet, base+c.path, nil)
		req.Header.Set("Authorization", "Bearer "+f.token(ownerA))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := fmt.Sprint(resp.StatusCode, resp.Header.Get("X-Content-Type-Options"), resp.Header.Get("Cache-Control"))
		if got != "200nosniffno-store" || !strings.Contains(resp.Header.Get("Content-Security-Policy"), c.csp) {
			t.Errorf("GET %s: %s, CSP %q, want one with %q", c.path, got, resp.Header.Get("Content-Security-Policy"), c.csp)
		}
	}
}

// Usage reports are bounded: from..to may span at most MaxReportRange, so
// one request cannot make the database aggregate years of events.
func TestUsageReportRangeBounded(t *testing.T) {
	f := newAPIFixture(t)
	owner, admin := f.token(ownerA), f.token(adminID)
	from := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	q := func(to time.Time) string {
		return "?from=" + from.Format(time.RFC3339) + "&to=" + to.Format(time.RFC3339)
	}
	for _, route := range []struct{ path, token string }{
		{"/families/100/members/1002/usage", owner},
		{"/admin/families/100/usage", admin},
	} {
		f.call(http.MethodGet, route.path+q(from.Add(MaxReportRange)), route.token, nil, http.StatusOK, nil)
		for _, to := range []time.Time{from.Add(MaxReportRange + time.Second), from.AddDate(100, 0, 0)} {
			p := f.problem(http.MethodGet, route.path+q(to), route.token, nil, http.StatusUnprocessableEntity, "query.to")
			if !strings.Contains(fmt.Sprint(p.Errors), "366 days") {
				t.Errorf("%s to %s: %+v does not say the bound", route.path, to, p.Errors)
			}
		}
	}
}

func withStreams(c httpserver.Config) httpserver.Config {
	c.Streaming = StreamRequest
	return c
}

// Only the decision route is self-timed: every other operation keeps
// http.TimeoutHandler's bound.
func TestSelfTimedRequestIsTheDecisionRoute(t *testing.T) {
	n := 0
	eachOperation(newAPIFixture(t), func(method, path string, _ *huma.Operation) {
		req, _ := http.NewRequest(method, "http://x"+path, nil)
		want := method == http.MethodPost && path == "/decisions"
		if got := SelfTimedRequest(req); got != want {
			t.Errorf("SelfTimedRequest(%s %s) = %v, want %v", method, path, got, want)
		}
		if want {
			n++
		}
	})
	if n != 1 {
		t.Errorf("%d decision routes in the OpenAPI document, want 1", n)
	}
}
