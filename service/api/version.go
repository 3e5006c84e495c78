package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/internal/buildinfo"
)

// VersionInfo is what GET /version answers: the build of the binary serving
// the API — Version (v0.1.0, a Go pseudo-version for an untagged commit, or
// "devel"), Commit (the git revision or "unknown"), CommitTime (RFC 3339 or
// "unknown"), Modified (built from a work tree with uncommitted changes) and
// GoVersion. BuildVersion reads it from the running binary.
type VersionInfo buildinfo.Info

// BuildVersion returns the running binary's build information: the values
// set at link time by a release build (make release), else what the Go
// toolchain stamped (module version, vcs.revision, vcs.time, vcs.modified),
// else "devel" and "unknown".
func BuildVersion() VersionInfo { return VersionInfo(buildinfo.Read()) }

type versionOutput struct {
	Body VersionInfo
}

// registerVersion adds GET /version, public like /healthz: it tells an
// operator or a client which build answers without needing a token.
func (a *Server) registerVersion() {
	v := a.cfg.Build
	if v == (VersionInfo{}) {
		v = BuildVersion()
	}
	huma.Register(a.api, huma.Operation{OperationID: "get-version", Method: http.MethodGet, Path: "/version",
		Summary: "The build serving this API",
		Description: "Release version, git commit and commit time, whether the work tree was modified, and the Go release " +
			"of the binary answering. Public: no token is needed. Values the binary does not carry read devel or unknown.",
		Tags: []string{systemTag}, Security: public(),
	}, func(context.Context, *struct{}) (*versionOutput, error) {
		return &versionOutput{Body: v}, nil
	})
}
