// Package buildinfo says which build a DPCS binary is: its version, the
// commit it was built from and when that commit was made, and the Go release
// that compiled it. The mains print it for -version and the HTTP servers
// answer it on GET /version; the SDK packages never need it.
//
// The Go toolchain stamps this into every binary it builds inside a git
// clone (runtime/debug.ReadBuildInfo: the module version, vcs.revision,
// vcs.time, vcs.modified). Release builds set it explicitly with the linker,
// which wins over the stamp and also works where there is none (a source
// tarball, a git worktree, GOFLAGS=-buildvcs=false as in CI):
//
//	go build -trimpath -ldflags "-X github.com/dabom/dpcs/internal/buildinfo.version=v0.1.0 \
//	  -X github.com/dabom/dpcs/internal/buildinfo.commit=$(git rev-parse HEAD) \
//	  -X github.com/dabom/dpcs/internal/buildinfo.date=$(git show -s --format=%cI HEAD) \
//	  -X github.com/dabom/dpcs/internal/buildinfo.modified=false" ./examples/server
//
// scripts/release.sh (make release) does exactly that.
package buildinfo

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// Set by the linker (-ldflags "-X …") for release builds; empty otherwise.
// They are never written at run time.
var version, commit, date, modified string

// Unknown stands for a commit or commit time the binary does not carry.
const Unknown = "unknown"

// Devel is the version of a binary built without a version: a `go run`, a
// test binary, or a build outside a git clone without -ldflags.
const Devel = "devel"

// Info describes one build. Every field is set: what the binary does not
// carry reads Devel or Unknown.
type Info struct {
	// Version is the release version (v0.1.0) set at link time, else the
	// module version the Go toolchain derived from git (a tag such as
	// v0.1.0, or a pseudo-version such as v0.1.1-0.20261123180939-5102705905f2),
	// else "devel".
	Version string `json:"version" doc:"Release version (v0.1.0), a Go pseudo-version for an untagged commit, or devel" example:"v0.1.0"`
	// Commit is the full git revision, or "unknown".
	Commit string `json:"commit" doc:"Git revision the binary was built from, or unknown" example:"5102705905f23a00431225a41d82d869e2fecd9b"`
	// CommitTime is the commit's time (RFC 3339), or "unknown".
	CommitTime string `json:"commitTime" doc:"Time of that commit (RFC 3339), or unknown" example:"2026-11-23T18:09:39Z"`
	// Modified reports a build from a work tree with uncommitted changes.
	Modified bool `json:"modified" doc:"The work tree had uncommitted changes when it was built"`
	// GoVersion is the Go release that compiled the binary (go1.26.8).
	GoVersion string `json:"goVersion" doc:"Go release that compiled the binary" example:"go1.26.8"`
}

// linked holds the linker-set values.
type linked struct{ version, commit, date, modified string }

// Read returns this binary's build information: the linker-set values where
// given, the Go toolchain's stamp otherwise.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return resolve(bi, linked{version, commit, date, modified})
}

// resolve combines the toolchain's stamp (bi may be nil) with the linker
// values, which win field by field.
func resolve(bi *debug.BuildInfo, ld linked) Info {
	in := Info{Version: Devel, Commit: Unknown, CommitTime: Unknown, GoVersion: runtime.Version()}
	if bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			in.Version = v
		}
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if s.Value != "" {
					in.Commit = s.Value
				}
			case "vcs.time":
				if s.Value != "" {
					in.CommitTime = s.Value
				}
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	}
	// A value passed through a shell may carry a trailing newline.
	if v := strings.TrimSpace(ld.version); v != "" {
		in.Version = v
	}
	if v := strings.TrimSpace(ld.commit); v != "" {
		in.Commit = v
	}
	if v := strings.TrimSpace(ld.date); v != "" {
		in.CommitTime = v
	}
	if b, err := strconv.ParseBool(strings.TrimSpace(ld.modified)); err == nil {
		in.Modified = b
	}
	return in
}

// Line is the one-line form -version prints, name being the program:
// "dpcs server v0.1.0 (commit 5102705, 2026-11-23, go1.26.8)". A modified
// work tree shows as "5102705+dirty"; what is missing reads unknown.
func (in Info) Line(name string) string {
	c := in.Commit
	if c != Unknown && len(c) > 7 {
		c = c[:7]
	}
	if in.Modified {
		c += "+dirty"
	}
	day := in.CommitTime
	if len(day) >= len("2006-01-02") && day[4] == '-' {
		day = day[:len("2006-01-02")]
	}
	return fmt.Sprintf("%s %s (commit %s, %s, %s)", name, in.Version, c, day, in.GoVersion)
}

// Asked reports whether a command line (without the program name) asks for
// the version: -version or --version before any "--".
func Asked(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-version", "--version", "-version=true", "--version=true":
			return true
		}
	}
	return false
}

// Print writes Read().Line(name) and a newline to w.
func Print(w io.Writer, name string) error {
	_, err := io.WriteString(w, Read().Line(name)+"\n")
	return err
}

// Handler answers a request with Read() as JSON (the body of GET /version on
// the servers that are not the huma API, such as the simulator's control
// port). Mount it on a GET route.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		b, err := json.Marshal(Read())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(append(b, '\n'))
	})
}
