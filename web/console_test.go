package web_test

import (
	"bytes"
	"compress/gzip"
	"io/fs"
	"os"
	"path"
	"regexp"
	"testing"
)

// The back office's page weight: everything the console page loads (its
// HTML, CSS, ES modules and the shared vendor/ scripts it names: the chart
// library), gzip-compressed as the handler serves it, stays within the budget
// of issue 15 (250 KB a page).
func TestConsoleWeight(t *testing.T) {
	const budget = 250 << 10
	files := os.DirFS(".") // the package directory: what web embeds
	total := 0
	var code []byte // the console's files, to see which vendor files they name
	add := func(name string, b []byte) {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(b)
		zw.Close()
		total += buf.Len()
		t.Logf("%s: %d bytes, %d gzip", name, len(b), buf.Len())
	}
	err := fs.WalkDir(files, "console", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch path.Ext(name) {
		case ".html", ".css", ".js":
		default:
			return nil // notes are not loaded by the page
		}
		b, err := fs.ReadFile(files, name)
		if err != nil {
			return err
		}
		code = append(code, b...)
		add(name, b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	vendored, err := fs.Glob(files, "vendor/*.js")
	if err != nil {
		t.Fatal(err)
	}
	charts := false
	for _, name := range vendored {
		if !bytes.Contains(code, []byte(name)) {
			continue // not loaded by the console
		}
		b, err := fs.ReadFile(files, name)
		if err != nil {
			t.Fatal(err)
		}
		add(name, b)
		charts = charts || name == "vendor/chart.umd.min.js"
	}
	if !charts {
		t.Error("the console names no vendor/chart.umd.min.js: its charts would not load")
	}
	if total > budget {
		t.Errorf("the console page loads %d bytes gzip, over the %d budget", total, budget)
	}
	t.Logf("console page: %d bytes gzip of %d", total, budget)
}

// The CSP forbids inline scripts and style attributes: the console's HTML
// and its modules must not rely on them.
func TestConsoleNoInlineCode(t *testing.T) {
	files := os.DirFS(".") // the package directory: what web embeds
	inline := []*regexp.Regexp{
		regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`), // a script with a body
		regexp.MustCompile(`\sstyle=`),                      // a style attribute
		regexp.MustCompile(`\son[a-z]+=`),                   // an inline event handler
		regexp.MustCompile(`setAttribute\(\s*["']style["']`),
	}
	err := fs.WalkDir(files, "console", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if ext := path.Ext(name); ext != ".html" && ext != ".js" {
			return nil
		}
		b, err := fs.ReadFile(files, name)
		if err != nil {
			return err
		}
		for _, re := range inline {
			if loc := re.FindIndex(b); loc != nil {
				t.Errorf("%s: inline code the CSP blocks: %q", name, b[loc[0]:min(loc[1]+40, len(b))])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
