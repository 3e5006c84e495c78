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

// The console's texts (console/i18n.js): the Korean and the English table
// hold the same keys, each once, and every key the console names — t("…")
// in its modules, data-i18n in its page — is in them. A key missing from a
// table would show the key itself to an agent.
func TestConsoleTexts(t *testing.T) {
	files := os.DirFS(".")
	src, err := fs.ReadFile(files, "console/i18n.js")
	if err != nil {
		t.Fatal(err)
	}
	tables := jsTableKeys(t, string(src))
	ko, en := tables["ko"], tables["en"]
	if len(ko) == 0 || len(en) == 0 {
		t.Fatalf("found %d Korean and %d English texts in console/i18n.js", len(ko), len(en))
	}
	for k := range ko {
		if !en[k] {
			t.Errorf("%q has a Korean text and no English one", k)
		}
	}
	for k := range en {
		if !ko[k] {
			t.Errorf("%q has an English text and no Korean one", k)
		}
	}
	used := regexp.MustCompile(`\bt\(\s*"([^"]+)"|data-i18n(?:-label)?="([^"]+)"`)
	err = fs.WalkDir(files, "console", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if ext := path.Ext(name); ext != ".js" && ext != ".html" {
			return nil
		}
		b, err := fs.ReadFile(files, name)
		if err != nil {
			return err
		}
		for _, m := range used.FindAllStringSubmatch(string(b), -1) {
			if k := m[1] + m[2]; !ko[k] {
				t.Errorf("%s names the text %q, which console/i18n.js lacks", name, k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// jsTableKeys reads the keys of i18n.js's `ko: {…}` and `en: {…}` objects:
// a small tokenizer (strings, identifiers, braces), enough for an object
// literal of string values. A key twice in one table is an error (the
// second text would silently win).
func jsTableKeys(t *testing.T, src string) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	var table map[string]bool
	depth := 0
	var prev string // the previous token
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(src) && src[j] != c {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			prev = src[i+1 : j]
			i = j + 1
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(src) && (src[j] == '_' || src[j] >= 'a' && src[j] <= 'z' || src[j] >= 'A' && src[j] <= 'Z' || src[j] >= '0' && src[j] <= '9') {
				j++
			}
			prev = src[i:j]
			i = j
		case c == ':':
			if depth == 1 && (prev == "ko" || prev == "en") {
				table = map[string]bool{}
				out[prev] = table
			} else if depth == 2 && table != nil {
				if table[prev] {
					t.Errorf("console/i18n.js: %q twice in one table", prev)
				}
				table[prev] = true
			}
			i++
		case c == '{':
			depth++
			i++
		case c == '}':
			depth--
			if depth < 2 {
				table = nil
			}
			if depth == 0 {
				return out // the end of the tables' object
			}
			i++
		default:
			i++
		}
	}
	return out
}

// Neither front-end asks with the browser's own dialogs (#38: a removal
// and a re-apply were asked with confirm(), which a screen reader, the
// page's language and the CSP-styled page do not reach): confirm, alert
// and prompt are never called in their modules; questions are asked
// inside the page (TestConsoleStories' "remove her", TestFamilyApp's
// limit and gift confirmations).
func TestNoNativeDialogs(t *testing.T) {
	files := os.DirFS(".") // the package directory: what web embeds
	dialog := regexp.MustCompile(`(?:^|[^.\w])(?:window\.)?(?:confirm|alert|prompt)\s*\(`)
	seen := 0
	for _, dir := range []string{"app", "console"} {
		err := fs.WalkDir(files, dir, func(name string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || path.Ext(name) != ".js" {
				return err
			}
			b, err := fs.ReadFile(files, name)
			if err != nil {
				return err
			}
			seen++
			for i, line := range bytes.Split(b, []byte("\n")) {
				code := line
				if j := bytes.Index(code, []byte("//")); j >= 0 {
					code = code[:j] // a comment may name them
				}
				if dialog.Match(code) {
					t.Errorf("%s:%d: a native dialog: %s", name, i+1, bytes.TrimSpace(line))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if seen < 10 {
		t.Fatalf("read %d modules: not the front-ends' directories", seen)
	}
}
