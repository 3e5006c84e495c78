package service

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestWithPprof: the profiles are served only when asked for, and the
// admin endpoints stay as they were either way.
func TestWithPprof(t *testing.T) {
	admin := AdminHandler(NewRegistry(), nil)
	for _, on := range []bool{false, true} {
		srv := httptest.NewServer(WithPprof(admin, on))
		get := func(path string) (int, string) {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, body := get("/healthz"); code != http.StatusOK || body != "ok\n" {
			t.Errorf("on=%v: /healthz = %d %q", on, code, body)
		}
		code, body := get("/debug/pprof/")
		switch {
		case on && (code != http.StatusOK || !strings.Contains(body, "goroutine")):
			t.Errorf("on: /debug/pprof/ = %d, want the profiles' index", code)
		case !on && code != http.StatusNotFound:
			t.Errorf("off: /debug/pprof/ = %d, want 404", code)
		}
		srv.Close()
	}
}
