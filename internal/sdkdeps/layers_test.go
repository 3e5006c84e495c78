package sdkdeps

import (
	"slices"
	"strings"
	"testing"
)

// The import rules of the module's packages (doc/architecture.md, "Package
// map"): imports run one way, each service package links only what its
// allow-list names, and what embeds a server or a SQL driver is linked only
// by the composition root and the harnesses.

// rule is what one package's non-test dependency closure may hold.
type rule struct {
	// dpcs are the module's packages it may link, module-relative: "sdk"
	// is every SDK package (the sdk table), "internal/..." every leaf
	// under internal/ (not the harnesses). The package itself is implied.
	dpcs []string
	// modules are the third-party modules it may link (these or fewer).
	modules []string
	// noStd are standard-library packages it must not link.
	noStd []string
}

// Third-party modules, by what they are for.
var (
	kafkaMods = []string{"github.com/twmb/franz-go", "github.com/twmb/franz-go/pkg/kmsg",
		"github.com/klauspost/compress", "github.com/pierrec/lz4/v4", "github.com/google/uuid"}
	kadmMod   = []string{"github.com/twmb/franz-go/pkg/kadm"}
	redisMods = []string{"github.com/redis/go-redis/v9", "github.com/cespare/xxhash/v2", "go.uber.org/atomic", "golang.org/x/sys"}
	traceMods = []string{"go.opentelemetry.io/otel", "go.opentelemetry.io/otel/trace"}
	breaker   = []string{"github.com/sony/gobreaker/v2"}
	// What the SQL store links beside Kafka and Redis (through the SDK
	// types it stores): bcrypt, the text rule, the push endpoint rule.
	storeMods = []string{"golang.org/x/crypto", "golang.org/x/text", "code.dny.dev/ssrf"}
	// The HTTP API's own: huma, JWTs, rate limits, and the Prometheus text
	// format the operations view reads.
	apiMods = []string{"github.com/danielgtaylor/huma/v2", "github.com/golang-jwt/jwt/v5", "github.com/go-redis/redis_rate/v10",
		"github.com/prometheus/client_golang", "github.com/prometheus/client_model", "github.com/prometheus/common",
		"github.com/prometheus/procfs", "github.com/beorn7/perks", "github.com/munnerz/goautoneg", "google.golang.org/protobuf"}
)

// layers is each service package's allow-list (module-relative). A package
// named here that the module does not hold (yet) is skipped with a log.
// The composition root (service), the mains and the harnesses may link
// anything but what TestEmbeddedOnlyAtTheRoot keeps to them.
var layers = map[string]rule{
	// The door to the quota state and its judges: SDK-grade, no SQL, no
	// HTTP, not the notifier (alert texts come from policy or the caller).
	"service/judge": {
		dpcs:    []string{"envelope", "envelope/kafkarecord", "envelope/consumer", "policy", "quota", "internal/..."},
		modules: slices.Concat(kafkaMods, redisMods, traceMods, breaker),
		noStd:   []string{"database/sql", "net/http"},
	},
	// The transactional outbox and its relay: SQL and Kafka only.
	"service/outbox": {
		dpcs:    []string{"envelope", "envelope/kafkarecord", "internal/..."},
		modules: kafkaMods,
		noStd:   []string{"net/http"},
	},
	// The SQL truth: families, members, policies, audit, usage records.
	"service/store": {
		dpcs:    []string{"sdk", "service/outbox", "internal/..."},
		modules: slices.Concat(kafkaMods, redisMods, storeMods),
		noStd:   []string{"net/http"},
	},
	// The application layer: one method per family change (truth, door,
	// relay); called by the API and the charging interface.
	"service/family": {
		dpcs:    []string{"sdk", "service/judge", "service/store", "service/outbox", "internal/..."},
		modules: slices.Concat(kafkaMods, redisMods, storeMods, traceMods, breaker),
		noStd:   []string{"net/http"},
	},
	// Rebuilds: reads SQL through the store, writes Redis through the door.
	"service/recovery": {
		dpcs:    []string{"sdk", "service/judge", "service/store", "service/outbox", "internal/..."},
		modules: slices.Concat(kafkaMods, kadmMod, redisMods, storeMods, traceMods, breaker),
		noStd:   []string{"net/http"},
	},
	// The Nchf charging interface for the network: its own HTTP listener
	// (plain net/http: 3GPP's shapes, not huma's); its grant steps go
	// through its own Charger interface, which the door implements, and its
	// sessions through the store: it links neither the door nor the
	// application layer.
	"service/charging": {
		dpcs:    []string{"sdk", "service/store", "service/outbox", "internal/..."},
		modules: slices.Concat(kafkaMods, redisMods, storeMods, traceMods),
	},
	// Request rates and failure locks per key, in memory or on Redis: no
	// HTTP, no SQL.
	"service/limit": {
		modules: slices.Concat(redisMods, []string{"github.com/go-redis/redis_rate/v10"}),
		noStd:   []string{"database/sql", "net/http"},
	},
	// Access events between API processes (in process or Redis pub/sub).
	"service/access": {
		modules: redisMods,
		noStd:   []string{"database/sql", "net/http"},
	},
	// The back office's Kafka: dead letters read and replayed, lags.
	"service/kafkaops": {
		dpcs:    []string{"envelope", "envelope/kafkarecord", "internal/..."},
		modules: slices.Concat(kafkaMods, kadmMod),
		noStd:   []string{"database/sql", "net/http"},
	},
	// The gateways' POST /decisions on the API's huma: it judges through
	// its own Decider interface (the door implements it) and maps errors
	// through the API's function, so it links neither the door nor SQL.
	"service/api/gateway": {
		dpcs:    []string{"envelope", "policy", "quota", "internal/..."},
		modules: slices.Concat(redisMods, []string{"github.com/google/uuid", "github.com/danielgtaylor/huma/v2"}),
		noStd:   []string{"database/sql"},
	},
	// The API's wire types shared by its route groups (text fields,
	// policy and usage views).
	"service/api/view": {
		dpcs:    []string{"sdk", "service/store", "service/outbox", "internal/..."},
		modules: slices.Concat(kafkaMods, redisMods, storeMods, []string{"github.com/danielgtaylor/huma/v2"}),
	},
	// The back office's routes on the API's huma: templates and their
	// drift, families, the audit log, dead letters, the operations view.
	// The API's authorization and error mapping come in as functions: it
	// does not link service/api.
	"service/api/backoffice": {
		dpcs:    []string{"sdk", "service/judge", "service/store", "service/outbox", "service/family", "service/kafkaops", "service/api/view", "internal/..."},
		modules: slices.Concat(kafkaMods, kadmMod, redisMods, storeMods, traceMods, breaker, apiMods),
	},
	// The HTTP API: decodes, authorizes, calls service/family for writes
	// and reads through the store and the door's read interface.
	"service/api": {
		dpcs:    []string{"sdk", "service/judge", "service/store", "service/outbox", "service/family", "service/limit", "service/kafkaops", "service/access", "service/api/gateway", "service/api/backoffice", "service/api/view", "web", "internal/..."},
		modules: slices.Concat(kafkaMods, kadmMod, redisMods, storeMods, traceMods, breaker, apiMods),
	},
	// The embedded front-ends: files and a handler.
	"web": {},
}

// allowed reports whether module package dep (module-relative) is one of
// dpcs.
func allowed(dpcs []string, dep string) bool {
	for _, a := range dpcs {
		switch {
		case a == "sdk":
			if _, ok := sdk[dep]; ok {
				return true
			}
		case strings.HasSuffix(a, "/..."):
			tree := strings.TrimSuffix(a, "...")
			if strings.HasPrefix(dep, tree) && !harness(dep) {
				return true
			}
		case a == dep:
			return true
		}
	}
	return false
}

// harness reports whether rel is a harness: internal/bench or internal/testenv.
func harness(rel string) bool {
	return rel == "internal/testenv" || strings.HasPrefix(rel, "internal/testenv/") || strings.HasPrefix(rel, "internal/bench/")
}

func TestLayers(t *testing.T) {
	pkgs := goList(t, module+"/...")
	for rel, r := range layers {
		t.Run(rel, func(t *testing.T) {
			p, ok := pkgs[module+"/"+rel]
			if !ok {
				t.Skipf("%s is not in the module (yet): its rule waits for it", rel)
			}
			closure := append([]string{p.path}, p.deps...)
			through := func(d string) string {
				return via(pkgs, closure, func(x string) bool { return x == d })
			}
			for _, d := range p.deps {
				dep := pkgs[d]
				switch dr, mine := strings.CutPrefix(d, module+"/"); {
				case d == module || mine:
					if !allowed(r.dpcs, dr) {
						t.Errorf("%s links %s (through %s): not in its allow-list", rel, d, through(d))
					}
				case dep.module == "":
					if slices.Contains(r.noStd, d) {
						t.Errorf("%s links %s (through %s)", rel, d, through(d))
					}
				case !slices.Contains(r.modules, dep.module):
					t.Errorf("%s links module %s (%s, through %s): not in its allow-list", rel, dep.module, d, through(d))
				}
			}
		})
	}
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
