package sdkdeps

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxServiceFileLines bounds a non-test Go file under service/: a file a
// newcomer reads in one sitting (doc/architecture.md, "Package map"). A
// file that grows past it is split by concern, as judge's touch.go,
// writes.go and records.go were.
const maxServiceFileLines = 600

func TestServiceFilesStaySmall(t *testing.T) {
	root := filepath.Join("..", "..", "service")
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		if n := bytes.Count(b, []byte("\n")); n > maxServiceFileLines {
			t.Errorf("%s has %d lines, more than %d: split it by concern", path, n, maxServiceFileLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked %d files under %s: the walk found too few", checked, root)
	}
}
