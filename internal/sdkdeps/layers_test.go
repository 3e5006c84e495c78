package sdkdeps

import (
	"slices"
	"strings"
	"testing"
)

// The import rules of the module's packages (doc/architecture.md, "Package
// map"): imports run one way, and what embeds a server or a SQL driver is
// linked only by the composition root and the harnesses.

// layers says, per package (module-relative), which module packages (a
// relative path) and third-party packages (a path with a dot: a prefix) its
// non-test dependency closure must not contain.
var layers = map[string][]string{
	// The door to the quota state and its judges: SDK-grade.
	"service/judge": {"service", "service/api", "service/recovery", "service/store", "service/outbox",
		"github.com/danielgtaylor/huma"},
	// Recovery reads SQL through the store and writes Redis through the door.
	"service/recovery": {"service", "service/api", "github.com/danielgtaylor/huma"},
	// The store is SQL; the outbox is its relay to Kafka.
	"service/store":  {"service", "service/api", "service/judge", "service/recovery", "github.com/danielgtaylor/huma"},
	"service/outbox": {"service", "service/api", "service/judge", "service/recovery", "service/store", "github.com/danielgtaylor/huma"},
	// The HTTP API takes the door, the store and hooks; never the root.
	"service/api": {"service", "service/recovery"},
	// The charging interface takes its grant steps through its own Charger
	// interface (the door implements it) and its sessions from the store:
	// it links neither the door nor the API, nor huma (3GPP's shapes).
	"service/charging": {"service", "service/api", "service/judge", "service/recovery", "service/family",
		"github.com/danielgtaylor/huma"},
}

// embedded are what only the composition root (service), the mains and the
// harnesses may link: in-process servers and SQL drivers.
var embedded = []string{
	"github.com/twmb/franz-go/pkg/kfake",
	"github.com/alicebob/miniredis",
	"modernc.org/sqlite",
	"github.com/go-sql-driver/mysql",
}

// mayEmbed says whether a module package (module-relative) may link them:
// the composition root, the mains, the harnesses, and the embedded Redis's
// clock (internal/miniclock, used by those).
func mayEmbed(rel string) bool {
	for _, pre := range []string{"examples/", "internal/bench/", "internal/testenv/"} {
		if strings.HasPrefix(rel, pre) {
			return true
		}
	}
	return slices.Contains([]string{"service", "internal/testenv", "internal/miniclock", "e2e", "chaos"}, rel)
}

// isModule reports whether dep is rel, a module package.
func isModule(dep, rel string) bool { return dep == module+"/"+rel }

func TestLayers(t *testing.T) {
	pkgs := goList(t, module+"/...")
	for rel, banned := range layers {
		t.Run(rel, func(t *testing.T) {
			p, ok := pkgs[module+"/"+rel]
			if !ok {
				t.Fatalf("go list did not list %s", rel)
			}
			closure := append([]string{p.path}, p.deps...)
			for _, d := range p.deps {
				for _, b := range banned {
					if isModule(d, b) || strings.Contains(b, ".") && strings.HasPrefix(d, b) {
						t.Errorf("%s links %s (through %s)", rel, b, via(pkgs, closure, func(x string) bool { return x == d }))
					}
				}
			}
		})
	}
}

// TestEmbeddedOnlyAtTheRoot: kfake, miniredis and the SQL drivers are
// linked only by the composition root, the mains and the harnesses.
func TestEmbeddedOnlyAtTheRoot(t *testing.T) {
	pkgs := goList(t, module+"/...")
	for path, p := range pkgs {
		rel, ok := strings.CutPrefix(path, module+"/")
		if !ok || p.module != module || mayEmbed(rel) {
			continue
		}
		closure := append([]string{path}, p.deps...)
		for _, e := range embedded {
			if i := slices.IndexFunc(p.deps, func(d string) bool { return strings.HasPrefix(d, e) }); i >= 0 {
				d := p.deps[i]
				t.Errorf("%s links %s (through %s)", rel, e, via(pkgs, closure, func(x string) bool { return x == d }))
			}
		}
	}
}

// TestInternalLeaves: internal/ holds leaf helpers, which import no DPCS
// package outside internal/; the harnesses that compose the system live
// apart, in internal/bench and internal/testenv.
func TestInternalLeaves(t *testing.T) {
	pkgs := goList(t, module+"/...")
	for path, p := range pkgs {
		rel, ok := strings.CutPrefix(path, module+"/")
		if !ok || !strings.HasPrefix(rel, "internal/") || strings.HasPrefix(rel, "internal/bench/") ||
			rel == "internal/testenv" || strings.HasPrefix(rel, "internal/testenv/") {
			continue
		}
		for _, imp := range p.imports {
			if r, ok := strings.CutPrefix(imp, module+"/"); ok && !strings.HasPrefix(r, "internal/") {
				t.Errorf("%s imports %s: internal/ holds leaves (move the harness to internal/bench or internal/testenv)", rel, r)
			}
		}
	}
}
