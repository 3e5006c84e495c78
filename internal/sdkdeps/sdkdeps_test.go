package sdkdeps

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const module = "github.com/dabom/dpcs"

// sdk is every SDK package (the module's packages outside internal/,
// service, examples, e2e and chaos) with the third-party modules it may
// link, exactly, and standard-library packages it must not link. A change
// here is a change of what every consumer of the package compiles in.
var sdk = map[string]struct {
	modules []string // exactly the modules linked, sorted
	noStd   []string // standard-library packages it must not link
}{
	"envelope": {
		modules: []string{"github.com/google/uuid"},
		noStd:   []string{"database/sql", "net/http"},
	},
	"envelope/kafkarecord": {
		modules: []string{"github.com/google/uuid", "github.com/klauspost/compress", "github.com/pierrec/lz4/v4",
			"github.com/twmb/franz-go", "github.com/twmb/franz-go/pkg/kmsg"},
		noStd: []string{"database/sql", "net/http"},
	},
	"envelope/consumer": { // the Kafka consumer-group lifecycle: what kafkarecord links, nothing more
		modules: []string{"github.com/google/uuid", "github.com/klauspost/compress", "github.com/pierrec/lz4/v4",
			"github.com/twmb/franz-go", "github.com/twmb/franz-go/pkg/kmsg"},
		noStd: []string{"database/sql", "net/http"},
	},
	"policy": {
		noStd: []string{"database/sql", "net", "net/http"},
	},
	"quota": {
		modules: []string{"github.com/cespare/xxhash/v2", "github.com/redis/go-redis/v9", "go.uber.org/atomic", "golang.org/x/sys"},
		noStd:   []string{"database/sql", "net/http"},
	},
	"idempotency": { // Redis and SQL stores; the caller opens the *sql.DB
		modules: []string{"github.com/cespare/xxhash/v2", "github.com/redis/go-redis/v9", "go.uber.org/atomic", "golang.org/x/sys"},
		noStd:   []string{"net/http"},
	},
	"writebehind": { // Kafka consumer into SQL; the caller opens the *sql.DB and owns its tables (no embedded schema)
		modules: []string{"github.com/google/uuid", "github.com/klauspost/compress", "github.com/pierrec/lz4/v4",
			"github.com/twmb/franz-go", "github.com/twmb/franz-go/pkg/kmsg"},
		noStd: []string{"embed", "net/http"},
	},
	"notify": { // Kafka consumer, Redis hub, SQL inbox, webhooks and Web Push (net/http, standard crypto only, the dial guard code.dny.dev/ssrf), OpenTelemetry's trace API (not its SDK)
		modules: []string{"code.dny.dev/ssrf", "github.com/cespare/xxhash/v2", "github.com/google/uuid", "github.com/klauspost/compress",
			"github.com/pierrec/lz4/v4", "github.com/redis/go-redis/v9", "github.com/twmb/franz-go",
			"github.com/twmb/franz-go/pkg/kmsg", "go.opentelemetry.io/otel", "go.opentelemetry.io/otel/trace",
			"go.uber.org/atomic", "golang.org/x/sys"},
	},
	"notify/pushsub": { // a push subscription and its check, for what stores them: the dial guard's address rules, no HTTP client
		modules: []string{"code.dny.dev/ssrf"},
		noStd:   []string{"database/sql", "net/http"},
	},
	"simulate": { // Kafka producer and its control API (huma), rate limits
		modules: []string{"github.com/danielgtaylor/huma/v2", "github.com/google/uuid", "github.com/klauspost/compress",
			"github.com/pierrec/lz4/v4", "github.com/twmb/franz-go", "github.com/twmb/franz-go/pkg/kmsg", "golang.org/x/time"},
		noStd: []string{"database/sql"},
	},
}

// notSDK are the module's packages that are not SDK (path prefixes); web is
// the deployables' embedded front-ends, served through service.
var notSDK = []string{"internal/", "service", "examples/", "e2e", "chaos", "web"}

// pkg is one package of go list's answer.
type pkg struct {
	path    string
	module  string // "" for the standard library, module for the main module
	imports []string
	deps    []string
}

// goList runs go list -deps on patterns and returns every package it
// names, the patterns' own and their dependencies.
func goList(t *testing.T, patterns ...string) map[string]pkg {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	const sep = "\x1f"
	format := strings.Join([]string{
		"{{.ImportPath}}",
		"{{with .Module}}{{.Path}}{{end}}",
		`{{join .Imports " "}}`,
		`{{join .Deps " "}}`,
		"{{with .Error}}{{.Err}}{{end}}",
	}, sep)
	cmd := exec.Command(gobin, append([]string{"list", "-e", "-deps", "-f", format}, patterns...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", patterns, err, stderr.Bytes())
	}
	pkgs := make(map[string]pkg)
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), sep)
		if len(f) != 5 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		if f[4] != "" {
			t.Fatalf("go list: %s: %s", f[0], f[4])
		}
		pkgs[f[0]] = pkg{path: f[0], module: f[1], imports: strings.Fields(f[2]), deps: strings.Fields(f[3])}
	}
	return pkgs
}

func TestEverySDKPackageIsPinned(t *testing.T) {
	var got []string
	for p, info := range goList(t, module+"/...") {
		rel, ok := strings.CutPrefix(p, module+"/")
		if !ok || info.module != module || slices.ContainsFunc(notSDK, func(pre string) bool { return strings.HasPrefix(rel, pre) }) {
			continue
		}
		got = append(got, rel)
	}
	slices.Sort(got)
	var want []string
	for p := range sdk {
		want = append(want, p)
	}
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SDK packages (-allow-listed +in the module): add new SDK packages to sdk with the modules they may link\n%s", diff)
	}
}

func TestSDKDependencies(t *testing.T) {
	var patterns []string
	for p := range sdk {
		patterns = append(patterns, module+"/"+p)
	}
	slices.Sort(patterns)
	pkgs := goList(t, patterns...)
	for _, pattern := range patterns {
		rel := strings.TrimPrefix(pattern, module+"/")
		t.Run(rel, func(t *testing.T) {
			root, ok := pkgs[pattern]
			if !ok {
				t.Fatalf("go list did not list %s", pattern)
			}
			closure := append([]string{pattern}, root.deps...)
			var got []string
			std := make(map[string]bool)
			for _, d := range root.deps {
				switch m := pkgs[d].module; {
				case m == "":
					std[d] = true
				case m != module && !slices.Contains(got, m):
					got = append(got, m)
				}
			}
			slices.Sort(got)
			want := sdk[rel].modules
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("modules linked by %s (-allowed +linked):\n%s", rel, diff)
				for _, m := range got {
					if !slices.Contains(want, m) {
						t.Errorf("%s is linked through %s", m, via(pkgs, closure, func(p string) bool { return pkgs[p].module == m }))
					}
				}
			}
			for _, s := range sdk[rel].noStd {
				if std[s] {
					t.Errorf("%s links %s (through %s)", rel, s, via(pkgs, closure, func(p string) bool { return p == s }))
				}
			}
			// SDK packages are below the service (doc/architecture.md, "Package map").
			for _, d := range root.deps {
				if r, ok := strings.CutPrefix(d, module+"/"); ok && (r == "service" || strings.HasPrefix(r, "service/")) {
					t.Errorf("%s links %s (through %s)", rel, r, via(pkgs, closure, func(p string) bool { return p == d }))
				}
			}
		})
	}
}

// via names the packages of closure that import a package matching target
// without matching it themselves: where a dependency comes in.
func via(pkgs map[string]pkg, closure []string, target func(string) bool) string {
	var out []string
	for _, p := range closure {
		if target(p) {
			continue
		}
		for _, imp := range pkgs[p].imports {
			if target(imp) {
				out = append(out, p+" → "+imp)
			}
		}
	}
	return strings.Join(out, ", ")
}
