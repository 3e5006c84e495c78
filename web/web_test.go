package web_test

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dabom/dpcs/web"
)

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(web.Handler())
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		path, method string
		status       int
		ctype, body  string
	}{
		{"/app/", http.MethodGet, 200, "text/html; charset=utf-8", "<html"},
		{"/console/", http.MethodGet, 200, "text/html; charset=utf-8", "<html"},
		{"/app/index.html", http.MethodHead, 200, "text/html; charset=utf-8", ""},
		{"/app", http.MethodGet, 301, "", ""},
		{"/app/no-such-file.js", http.MethodGet, 404, "", ""},
		{"/app/../web.go", http.MethodGet, 404, "", ""},
		{"/app/", http.MethodPost, 405, "", ""},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.path, res.StatusCode, tc.status)
			continue
		}
		if tc.status != 200 {
			continue
		}
		if got := res.Header.Get("Content-Type"); got != tc.ctype {
			t.Errorf("%s: Content-Type %q, want %q", tc.path, got, tc.ctype)
		}
		if got := res.Header.Get("Content-Security-Policy"); got != web.CSP {
			t.Errorf("%s: CSP %q", tc.path, got)
		}
		if !strings.Contains(string(b), tc.body) {
			t.Errorf("%s: body %q lacks %q", tc.path, b, tc.body)
		}
	}
}

func TestHandlerGzipAndETag(t *testing.T) {
	srv := httptest.NewServer(web.Handler())
	defer srv.Close()
	// Go's transport asks for gzip and decodes it itself unless the request
	// names an encoding; ask explicitly to see the raw answer.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/app/", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(strings.NewReader(string(raw)))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ = io.ReadAll(zr)
	}
	if !strings.Contains(string(raw), "<html") {
		t.Fatalf("body %q", raw)
	}
	etag := res.Header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	req, _ = http.NewRequest(http.MethodGet, srv.URL+"/app/", nil)
	req.Header.Set("If-None-Match", etag)
	res2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res2.Body.Close()
	if res2.StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match: status %d, want 304", res2.StatusCode)
	}
}
