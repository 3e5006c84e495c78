package httpserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// serve starts New(h, c) on a loopback port and returns its base URL.
func serve(t *testing.T, h http.Handler, c Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(h, c)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Close()
		_ = srv.Shutdown(ctx)
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// short are bounds small enough for a test to outlive them many times.
var short = Config{ReadHeaderTimeout: 100 * time.Millisecond, ReadTimeout: 200 * time.Millisecond,
	HandlerTimeout: 150 * time.Millisecond, WriteTimeout: 250 * time.Millisecond, IdleTimeout: time.Second}

// ticker streams a line every 20 ms until the client goes away.
func ticker() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "data: %d\n\n", i); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
}

// readStream reads the stream until it has lasted outlive or ends, and
// returns how long it lasted and why it ended (nil: it outlived).
func readStream(t *testing.T, url string, outlive time.Duration) (time.Duration, error) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	start := time.Now()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if time.Since(start) > outlive {
			return time.Since(start), nil
		}
	}
	if err := sc.Err(); err != nil {
		return time.Since(start), err
	}
	return time.Since(start), fmt.Errorf("stream ended (status %d)", resp.StatusCode)
}

// A stream request outlives the read, write and handler timeouts many times
// over (net/http clears the read deadline once the request is read, so
// ReadTimeout never cuts it; the write deadline is lifted); the same stream
// without the exemption is cut.
func TestStreamOutlivesTimeouts(t *testing.T) {
	outlive := 5 * short.WriteTimeout
	c := short
	c.Streaming = func(r *http.Request) bool { return r.URL.Path == "/stream" }
	base := serve(t, ticker(), c)
	if lasted, err := readStream(t, base+"/stream", outlive); err != nil {
		t.Errorf("stream ended after %v (read timeout %v, write timeout %v): %v", lasted, c.ReadTimeout, c.WriteTimeout, err)
	}
	if lasted, err := readStream(t, base+"/not-a-stream", outlive); err == nil {
		t.Errorf("a stream not exempt lasted %v, past the write timeout %v", lasted, c.WriteTimeout)
	}
}

// A slow non-stream handler is cut at HandlerTimeout: the client gets a 503
// problem at once and the handler's context is cancelled.
func TestSlowHandlerIsCut(t *testing.T) {
	cancelled := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(time.Minute):
		}
		w.Write([]byte("too late"))
	})
	base := serve(t, h, short)
	start := time.Now()
	resp, err := http.Get(base + "/slow")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(string(body), `"status":503`) {
		t.Errorf("slow handler: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	// The handler would run a minute; the margin is for a loaded machine.
	if took > 5*time.Second {
		t.Errorf("answered after %v, handler timeout %v", took, short.HandlerTimeout)
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Error("the slow handler's context was not cancelled within 10 s of its timeout")
	}
}

// Every response carries the security headers; a handler's own policy (an
// HTML page's) replaces the default; a handler's own status passes.
func TestSecurityHeaders(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{}`))
	})
	mux.HandleFunc("GET /docs", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src https://unpkg.com/x.js")
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte(`<!doctype html>`))
	})
	mux.HandleFunc("GET /busy", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	})
	// Default bounds: a loaded machine must not turn these into 503s.
	c := Config{Streaming: func(r *http.Request) bool { return r.URL.Path == "/stream" }}
	mux.Handle("GET /stream", ticker())
	base := serve(t, mux, c)
	for _, tc := range []struct {
		path, csp, contentType string
		status                 int
	}{
		{"/json", "default-src 'none'; frame-ancestors 'none'", "application/json", http.StatusOK},
		{"/docs", "default-src 'none'; script-src https://unpkg.com/x.js", "text/html", http.StatusOK},
		{"/busy", "default-src 'none'; frame-ancestors 'none'", "text/plain; charset=utf-8", http.StatusServiceUnavailable},
		{"/missing", "default-src 'none'; frame-ancestors 'none'", "text/plain; charset=utf-8", http.StatusNotFound},
		{"/stream", "default-src 'none'; frame-ancestors 'none'", "text/event-stream", http.StatusOK},
	} {
		t.Run(tc.path, func(t *testing.T) {
			resp, err := http.Get(base + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := map[string]string{"Status": fmt.Sprint(tc.status), "Content-Type": tc.contentType, "Content-Security-Policy": tc.csp,
				"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY", "Cache-Control": "no-store"}
			got := map[string]string{"Status": fmt.Sprint(resp.StatusCode)}
			for k := range want {
				if k != "Status" {
					got[k] = resp.Header.Get(k)
				}
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("headers (-want +got):\n%s", d)
			}
		})
	}
}

// Oversized headers are refused (431) and a client that never finishes its
// headers is disconnected after ReadHeaderTimeout.
func TestHeaderBounds(t *testing.T) {
	c := Config{ReadHeaderTimeout: short.ReadHeaderTimeout, MaxHeaderBytes: 4 << 10}
	base := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}), c)
	req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
	req.Header.Set("X-Big", strings.Repeat("x", 64<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("64 KiB header: %d", resp.StatusCode)
	}

	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	// The server closes the connection; the deadline only keeps a broken
	// server from hanging the test.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	n, err := conn.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a client stuck in its headers was still connected after 10 s (read header timeout %v)", c.ReadHeaderTimeout)
	}
	if err == nil && n > 0 {
		// net/http may answer 408 before closing; then the close follows.
		_, err = io.ReadAll(conn)
	}
	t.Logf("slow-header client disconnected after %v (%v)", time.Since(start).Round(time.Millisecond), err)
}

func TestDefaults(t *testing.T) {
	srv := New(http.NotFoundHandler(), Config{})
	got := []any{srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes, srv.ErrorLog == nil}
	want := []any{5 * time.Second, 30 * time.Second, 35 * time.Second, 120 * time.Second, 64 << 10, true}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("defaults (-want +got):\n%s", d)
	}
}

// A self-timed request runs without http.TimeoutHandler: its writer is the
// connection's, which flushes (TimeoutHandler's buffers the whole response
// and cannot), its context
// ends at HandlerTimeout, and the handler's own answer at that moment is
// what the client gets. Other requests keep TimeoutHandler's 503.
func TestSelfTimed(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, flushes := w.(http.Flusher)
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"status":503,"detail":"own answer","flushes":%v,"err":%q}`, flushes, r.Context().Err())
	})
	c := short
	c.SelfTimed = func(r *http.Request) bool { return r.URL.Path == "/decisions" }
	base := serve(t, h, c)
	get := func(path string) (int, string, time.Duration) {
		start := time.Now()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), time.Since(start)
	}
	code, body, took := get("/decisions")
	if want := `{"status":503,"detail":"own answer","flushes":true,"err":"context deadline exceeded"}`; code != 503 || body != want {
		t.Errorf("self-timed: %d %s, want 503 %s", code, body, want)
	}
	if took > 5*time.Second {
		t.Errorf("self-timed answered after %v, handler timeout %v", took, c.HandlerTimeout)
	}
	code, body, _ = get("/other")
	if code != 503 || strings.Contains(body, "own answer") || !strings.Contains(body, "took too long") {
		t.Errorf("not self-timed: %d %s, want TimeoutHandler's 503", code, body)
	}
}
