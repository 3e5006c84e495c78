package web

import (
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The family app's service worker caches the app shell so it opens offline:
// every file a page loads must be in its list, and every listed file must
// exist (cache.addAll fails on one missing file and the worker never
// installs).
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
		return nil
	})
	if err != nil {
		t.Fatal(err)
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
		if _, err := fs.Stat(assets, "app/"+l); err != nil {
			t.Errorf("sw.js's SHELL lists %s, which does not exist: the worker would not install", l)
		}
	}
}
