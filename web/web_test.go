package web_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
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
		{"/app/vendor/chart.umd.min.js", http.MethodGet, 200, "text/javascript; charset=utf-8", "Chart.js v"},
		{"/console/vendor/chart.umd.min.js", http.MethodGet, 200, "text/javascript; charset=utf-8", "Chart.js v"},
		{"/vendor/chart.umd.min.js", http.MethodGet, 404, "", ""}, // only under a front-end
		{"/app/vendor/../../vendor/README.md", http.MethodGet, 404, "", ""},
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

// The chart library is embedded once and served under both front-ends'
// prefixes: the same bytes, so the same ETag.
func TestVendorSharedByFrontEnds(t *testing.T) {
	srv := httptest.NewServer(web.Handler())
	defer srv.Close()
	var etags []string
	var bodies [][]byte
	for _, p := range web.Prefixes() {
		res, err := http.Get(srv.URL + p + "vendor/chart.umd.min.js")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%svendor/chart.umd.min.js: status %d", p, res.StatusCode)
		}
		etags = append(etags, res.Header.Get("ETag"))
		bodies = append(bodies, b)
	}
	want, err := os.ReadFile("vendor/chart.umd.min.js")
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range web.Prefixes() {
		if !bytes.Equal(bodies[i], want) {
			t.Errorf("%svendor/chart.umd.min.js differs from web/vendor/chart.umd.min.js", p)
		}
		if etags[i] != etags[0] {
			t.Errorf("%svendor/chart.umd.min.js: ETag %s, want %s as under %s", p, etags[i], etags[0], web.Prefixes()[0])
		}
	}
}

// TestVendoredSums checks the vendored files against vendor/SHA256SUMS (the
// sums of the npm tarball's files, see vendor/README.md): every file there but
// the README and the sums is listed, and every listed file is unchanged.
func TestVendoredSums(t *testing.T) {
	sums, err := os.ReadFile("vendor/SHA256SUMS")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS: bad line %q", line)
		}
		listed[name] = true
		b, err := os.ReadFile("vendor/" + name)
		if err != nil {
			t.Errorf("SHA256SUMS lists %s: %v", name, err)
			continue
		}
		if got := sha256.Sum256(b); hex.EncodeToString(got[:]) != sum {
			t.Errorf("vendor/%s: sha256 %x, SHA256SUMS says %s", name, got, sum)
		}
	}
	entries, err := os.ReadDir("vendor")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if n := e.Name(); n != "README.md" && n != "SHA256SUMS" && !listed[n] {
			t.Errorf("vendor/%s is not in SHA256SUMS", n)
		}
	}
}
