package web

import (
	"bytes"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The family app's service worker caches the app shell so it opens offline:
// every file a page loads must be in its list — the app's own files and the
// shared vendor/ files its code names — and every listed file must be served
// (cache.addAll fails on one missing file and the worker never installs).
func TestAppShellCached(t *testing.T) {
	sw, err := fs.ReadFile(assets, "app/sw.js")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)const SHELL = \[(.*?)\];`).FindSubmatch(sw)
	if m == nil {
		t.Fatal("sw.js has no SHELL list")
	}
	var listed []string
	for _, q := range regexp.MustCompile(`'([^']*)'`).FindAllSubmatch(m[1], -1) {
		listed = append(listed, string(q[1]))
	}
	var want []string
	var code []byte // every app file, to see which vendor files it names
	err = fs.WalkDir(assets, "app", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := strings.TrimPrefix(p, "app/")
		switch {
		case name == "sw.js", strings.HasSuffix(name, ".md"):
			return nil // the worker itself; licences and notes are not loaded by pages
		}
		want = append(want, name)
		b, err := fs.ReadFile(assets, p)
		code = append(code, b...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	vendored, err := fs.ReadDir(assets, vendorDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range vendored {
		if v := vendorDir + "/" + d.Name(); bytes.Contains(code, []byte(v)) {
			want = append(want, v)
		}
	}
	if !slices.Contains(want, "vendor/chart.umd.min.js") {
		t.Errorf("no app file names vendor/chart.umd.min.js: the charts would not load (want %v)", want)
	}
	for _, w := range want {
		if !slices.Contains(listed, w) {
			t.Errorf("app/%s is not in sw.js's SHELL: the app would not open offline", w)
		}
	}
	for _, l := range listed {
		if l == "./" {
			continue
		}
		file, ok := assetFile("app/" + l)
		if _, err := fs.Stat(assets, file); !ok || err != nil {
			t.Errorf("sw.js's SHELL lists %s, which is not served: the worker would not install", l)
		}
	}
}
