// Package web serves DPCS's two embedded web front-ends (doc/frontends.md):
// the family app under /app/ and the back office under /console/. Both are
// plain HTML, CSS and ES modules built on the public API only; nothing is
// built with Node and nothing is loaded from the network at run time
// (third-party browser code is vendored once, under vendor/ with its licence,
// and served to each front-end under its own prefix).
//
// Handler serves the files with a Content-Security-Policy allowing only the
// page's own origin, compressed with gzip when the browser accepts it, and
// with revalidation (ETag) so a new release is picked up at once.
package web

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// assets holds both front-ends and the vendored browser code they share.
// Files whose names start with "." or "_" are left out by embed.
//
//go:embed app console vendor
var assets embed.FS

// vendorDir holds the third-party browser code, one copy for both front-ends
// (vendor/README.md says what and from where). A page asks for
// vendor/<file> relative to itself, so each front-end gets it under its own
// prefix (/app/vendor/…, /console/vendor/…): the family app's service worker,
// whose scope is /app/, then caches it with the shell and the charts draw
// offline.
const vendorDir = "vendor"

// CSP is the Content-Security-Policy of every front-end response: scripts,
// styles, images, fonts, the manifest, the service worker and API calls
// (fetch, EventSource) from the page's own origin only; no inline script.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"font-src 'self'; connect-src 'self'; manifest-src 'self'; worker-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Prefixes returns the URL path prefixes Handler serves ("/app/", "/console/").
func Prefixes() []string { return []string{"/app/", "/console/"} }

// Handler serves both front-ends. Mount it on the paths Prefixes returns
// (a directory path serves its index.html; /app and /console redirect to the
// directory).
func Handler() http.Handler {
	return &handler{files: assets}
}

type handler struct {
	files fs.FS
	cache sync.Map // name -> *asset
}

type asset struct {
	body, gz []byte
	etag     string
	ctype    string
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	p := r.URL.Path
	for _, pre := range Prefixes() {
		if p == strings.TrimSuffix(pre, "/") {
			http.Redirect(w, r, pre, http.StatusMovedPermanently)
			return
		}
	}
	name := strings.TrimPrefix(path.Clean(p), "/")
	if strings.HasSuffix(p, "/") {
		name = path.Join(name, "index.html")
	}
	file, ok := assetFile(name)
	if !ok {
		http.NotFound(w, r)
		return
	}
	a, ok := h.load(file)
	if !ok {
		http.NotFound(w, r)
		return
	}
	hd := w.Header()
	hd.Set("Content-Security-Policy", CSP)
	hd.Set("Content-Type", a.ctype)
	hd.Set("Cache-Control", "no-cache")
	hd.Set("ETag", a.etag)
	hd.Set("Vary", "Accept-Encoding")
	if strings.HasSuffix(name, "sw.js") {
		hd.Set("Service-Worker-Allowed", "/"+strings.SplitN(name, "/", 2)[0]+"/")
	}
	if match := r.Header.Get("If-None-Match"); match != "" && match == a.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body := a.body
	if a.gz != nil && acceptsGzip(r) {
		hd.Set("Content-Encoding", "gzip")
		body = a.gz
	}
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	w.Write(body)
}

// assetFile returns the embedded file that serves name, a cleaned URL path
// without its leading slash: <front-end>/vendor/<file> is vendor/<file>, any
// other name under a front-end is itself, and a name outside the front-ends
// is nothing.
func assetFile(name string) (string, bool) {
	front, rest, ok := strings.Cut(name, "/")
	if !ok || !slices.Contains(Prefixes(), "/"+front+"/") {
		return "", false
	}
	if f, ok := strings.CutPrefix(rest, vendorDir+"/"); ok {
		return path.Join(vendorDir, f), true
	}
	return name, true
}

// load reads and prepares an asset once; file is its name in the embedded
// files, so the front-ends share one asset (and ETag) for vendor/<file>.
func (h *handler) load(name string) (*asset, bool) {
	if v, ok := h.cache.Load(name); ok {
		return v.(*asset), true
	}
	if !fs.ValidPath(name) {
		return nil, false
	}
	body, err := fs.ReadFile(h.files, name)
	if err != nil {
		return nil, false
	}
	sum := sha256.Sum256(body)
	a := &asset{body: body, etag: `"` + hex.EncodeToString(sum[:12]) + `"`, ctype: contentType(name)}
	if len(body) > 512 && compressible(a.ctype) {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(body)
		if zw.Close() == nil && buf.Len() < len(body) {
			a.gz = buf.Bytes()
		}
	}
	v, _ := h.cache.LoadOrStore(name, a)
	return v.(*asset), true
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js", ".mjs":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".json":
		return "application/json"
	case ".webmanifest":
		return "application/manifest+json"
	case ".svg":
		return "image/svg+xml"
	case ".png":
		return "image/png"
	case ".txt", ".md":
		return "text/plain; charset=utf-8"
	}
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}

func compressible(ctype string) bool {
	return strings.HasPrefix(ctype, "text/") || strings.Contains(ctype, "json") || strings.Contains(ctype, "svg")
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(enc), "gzip") {
			continue
		}
		q := 1.0
		if v, ok := strings.CutPrefix(strings.ReplaceAll(params, " ", ""), "q="); ok {
			q, _ = strconv.ParseFloat(v, 64)
		}
		return q > 0
	}
	return false
}
