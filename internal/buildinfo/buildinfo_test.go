package buildinfo

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestResolve(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8",
		Main: debug.Module{Path: "github.com/dabom/dpcs", Version: "v0.1.1-0.20261123180939-5102705905f2+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "-trimpath", Value: "true"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "5102705905f23a00431225a41d82d869e2fecd9b"},
			{Key: "vcs.time", Value: "2026-11-23T18:09:39Z"},
			{Key: "vcs.modified", Value: "true"},
		}}
	// What CI builds (GOFLAGS=-buildvcs=false), `go run` and test binaries carry.
	bare := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/dabom/dpcs", Version: "(devel)"}}
	release := linked{version: "v0.1.0", commit: "0123456789abcdef0123456789abcdef01234567", date: "2026-11-24T09:00:00Z", modified: "false"}
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		ld   linked
		want Info
	}{
		{"no build info", nil, linked{},
			Info{Version: Devel, Commit: Unknown, CommitTime: Unknown, GoVersion: runtime.Version()}},
		{"built without vcs", bare, linked{},
			Info{Version: Devel, Commit: Unknown, CommitTime: Unknown, GoVersion: "go1.26.8"}},
		{"empty main version", &debug.BuildInfo{GoVersion: "go1.26.8"}, linked{},
			Info{Version: Devel, Commit: Unknown, CommitTime: Unknown, GoVersion: "go1.26.8"}},
		{"toolchain stamp", stamped, linked{},
			Info{Version: "v0.1.1-0.20261123180939-5102705905f2+dirty", Commit: "5102705905f23a00431225a41d82d869e2fecd9b",
				CommitTime: "2026-11-23T18:09:39Z", Modified: true, GoVersion: "go1.26.8"}},
		{"linker wins over the stamp", stamped, release,
			Info{Version: "v0.1.0", Commit: release.commit, CommitTime: release.date, GoVersion: "go1.26.8"}},
		{"linker without a stamp", bare, release,
			Info{Version: "v0.1.0", Commit: release.commit, CommitTime: release.date, GoVersion: "go1.26.8"}},
		{"linker version only", stamped, linked{version: "v0.2.0\n"},
			Info{Version: "v0.2.0", Commit: "5102705905f23a00431225a41d82d869e2fecd9b",
				CommitTime: "2026-11-23T18:09:39Z", Modified: true, GoVersion: "go1.26.8"}},
		{"unparsable modified keeps the stamp", stamped, linked{modified: "perhaps"},
			Info{Version: "v0.1.1-0.20261123180939-5102705905f2+dirty", Commit: "5102705905f23a00431225a41d82d869e2fecd9b",
				CommitTime: "2026-11-23T18:09:39Z", Modified: true, GoVersion: "go1.26.8"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, resolve(tt.bi, tt.ld)); diff != "" {
				t.Errorf("resolve (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLine(t *testing.T) {
	tests := []struct {
		name string
		in   Info
		want string
	}{
		{"release", Info{Version: "v0.1.0", Commit: "5102705905f23a00431225a41d82d869e2fecd9b", CommitTime: "2026-11-23T18:09:39Z", GoVersion: "go1.26.8"},
			"dpcs server v0.1.0 (commit 5102705, 2026-11-23, go1.26.8)"},
		{"modified", Info{Version: "v0.1.1-0.20261123180939-5102705905f2+dirty", Commit: "5102705905f23a00431225a41d82d869e2fecd9b",
			CommitTime: "2026-11-23T18:09:39Z", Modified: true, GoVersion: "go1.26.8"},
			"dpcs server v0.1.1-0.20261123180939-5102705905f2+dirty (commit 5102705+dirty, 2026-11-23, go1.26.8)"},
		{"nothing known", Info{Version: Devel, Commit: Unknown, CommitTime: Unknown, GoVersion: "go1.26.8"},
			"dpcs server devel (commit unknown, unknown, go1.26.8)"},
		{"short commit and odd time kept whole", Info{Version: "v0.1.0", Commit: "abc", CommitTime: "yesterday", GoVersion: "go1.26.8"},
			"dpcs server v0.1.0 (commit abc, yesterday, go1.26.8)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.Line("dpcs server"); got != tt.want {
				t.Errorf("Line = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestAsked(t *testing.T) {
	tests := []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"-version"}, true},
		{[]string{"--version"}, true},
		{[]string{"-version=true"}, true},
		{[]string{"-rate", "5", "-version"}, true},
		{[]string{"rebuild", "42"}, false},
		{[]string{"-versions"}, false},
		{[]string{"-version=false"}, false},
		{[]string{"--", "-version"}, false},
	}
	for _, tt := range tests {
		if got := Asked(tt.args); got != tt.want {
			t.Errorf("Asked(%q) = %v, want %v", tt.args, got, tt.want)
		}
	}
}

// TestReadInThisBinary: a test binary carries no version and no commit (and
// CI builds with -buildvcs=false), so Read falls back to devel and unknown
// without failing, and says so in the line and the JSON.
func TestReadInThisBinary(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	got := Read()
	if diff := cmp.Diff(resolve(bi, linked{}), got); diff != "" {
		t.Errorf("Read (-want +got):\n%s", diff)
	}
	if got.Version == "" || got.Commit == "" || got.CommitTime == "" || got.GoVersion != runtime.Version() {
		t.Errorf("Read = %+v: every field must be set", got)
	}
	if line := got.Line("x"); strings.Contains(line, "  ") || strings.Contains(line, "()") {
		t.Errorf("Line = %q", line)
	}

	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/version", nil))
	if ct := rec.Header().Get("Content-Type"); rec.Code != http.StatusOK || ct != "application/json" {
		t.Fatalf("GET /version: %d %q", rec.Code, ct)
	}
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"version": got.Version, "commit": got.Commit, "commitTime": got.CommitTime,
		"modified": got.Modified, "goVersion": got.GoVersion}
	if diff := cmp.Diff(want, body); diff != "" {
		t.Errorf("GET /version body (-want +got):\n%s", diff)
	}
}

// TestLinkerOverride builds a real binary twice — as CI does (no VCS stamp,
// no -ldflags) and with the -X flags scripts/release.sh passes — and checks
// what it prints for -version and answers on /version. (Without -trimpath,
// which would rebuild the standard library outside the build cache.)
func TestLinkerOverride(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	const pkg = "github.com/dabom/dpcs/internal/buildinfo"
	release := "-X " + pkg + ".version=v0.1.0 -X " + pkg + ".commit=0123456789abcdef0123456789abcdef01234567" +
		" -X " + pkg + ".date=2026-11-24T09:00:00Z -X " + pkg + ".modified=false"
	tests := []struct {
		name, ldflags, wantLine string
		want                    map[string]any
	}{
		{"ci build", "", "printversion devel (commit unknown, unknown, " + runtime.Version() + ")",
			map[string]any{"version": "devel", "commit": "unknown", "commitTime": "unknown", "modified": false, "goVersion": runtime.Version()}},
		{"release build", release, "printversion v0.1.0 (commit 0123456, 2026-11-24, " + runtime.Version() + ")",
			map[string]any{"version": "v0.1.0", "commit": "0123456789abcdef0123456789abcdef01234567", "commitTime": "2026-11-24T09:00:00Z",
				"modified": false, "goVersion": runtime.Version()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "printversion")
			cmd := exec.Command(gobin, "build", "-buildvcs=false", "-ldflags", tt.ldflags, "-o", bin, "./testdata/printversion")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build: %v\n%s", err, out)
			}
			out, err := exec.Command(bin).Output()
			if err != nil {
				t.Fatal(err)
			}
			line, js, _ := strings.Cut(string(out), "\n")
			if line != tt.wantLine {
				t.Errorf("line = %q, want %q", line, tt.wantLine)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(js), &got); err != nil {
				t.Fatalf("%v: %q", err, js)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("/version (-want +got):\n%s", diff)
			}
		})
	}
}
