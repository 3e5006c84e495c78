package service

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dabom/dpcs/service/api"
	"github.com/dabom/dpcs/service/limit"
	"github.com/dabom/dpcs/service/store"
	"github.com/google/go-cmp/cmp"
	"github.com/kelseyhightower/envconfig"
)

var update = flag.Bool("update", false, "rewrite doc/configuration.md's table of variables from the configuration structs")

// envKinds has a field of every kind the configuration structs use, nested
// and embedded structs, and types that decode themselves.
type envKinds struct {
	envEmbedded
	S    string        `envconfig:"K_S" default:"d"`
	I    int           `envconfig:"K_I"`
	I32  int32         `envconfig:"K_I32"`
	U64  uint64        `envconfig:"K_U64"`
	F    float64       `envconfig:"K_F"`
	B    bool          `envconfig:"K_B"`
	D    time.Duration `envconfig:"K_D" default:"3s"`
	L    []string      `envconfig:"K_L"`
	Lv   slog.Level    `envconfig:"K_LEVEL"` // encoding.TextUnmarshaler
	R    limit.Rate    `envconfig:"K_RATE"`  // envconfig.Decoder
	Nest struct {
		X int `envconfig:"X" default:"7"`
	} `envconfig:"K_NEST"`
	Skip string `ignored:"true"`
}

type envEmbedded struct {
	E string `envconfig:"K_E"`
}

// readEnv decodes as envconfig.Process does: same variables, same values.
func TestReadEnvLikeEnvconfig(t *testing.T) {
	for _, vars := range []map[string]string{
		{},
		{"DPCS_K_S": "x", "DPCS_K_I": "-12", "DPCS_K_I32": "0x10", "DPCS_K_U64": "18446744073709551615", "DPCS_K_F": "2.5",
			"DPCS_K_B": "true", "DPCS_K_D": "1m30s", "DPCS_K_L": "a, b,,c", "DPCS_K_LEVEL": "warn", "DPCS_K_RATE": "5/30s",
			"DPCS_K_NEST_X": "9", "DPCS_K_E": "emb", "DPCS_SKIP": "no"},
	} {
		t.Run(fmt.Sprint(len(vars)), func(t *testing.T) {
			for k, v := range vars {
				t.Setenv(k, v)
			}
			var want, got envKinds
			if err := envconfig.Process(EnvPrefix, &want); err != nil {
				t.Fatal(err)
			}
			r, err := readEnv(os.Getenv, &got, nil)
			if err != nil {
				t.Fatal(err)
			}
			if errs := r.errs(); len(errs) > 0 {
				t.Fatal(errs)
			}
			if d := cmp.Diff(want, got, cmp.AllowUnexported(envKinds{})); d != "" {
				t.Errorf("readEnv differs from envconfig.Process (-envconfig +readEnv):\n%s", d)
			}
		})
	}
	// A value that does not decode is an error naming the variable.
	var k envKinds
	r, err := readEnv(env(map[string]string{"DPCS_K_I": "many", "DPCS_K_RATE": "fast"}), &k, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(r.errs())
	for _, v := range []string{"DPCS_K_I: ", "DPCS_K_RATE: want N/duration"} {
		if !strings.Contains(got, v) {
			t.Errorf("errors %s do not contain %q", got, v)
		}
	}
}

// The defaults are the ones the loaders always had.
func TestLoadConfigDefaults(t *testing.T) {
	c, err := LoadConfig(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Zone.String() != "Asia/Seoul" && c.Zone.String() != "KST" {
		t.Errorf("zone %v", c.Zone)
	}
	c.Zone = nil
	want := Config{SQLitePath: "dpcs.db", Timezone: "Asia/Seoul", DedupeWindow: 24 * time.Hour, ReplicaAckTimeout: 100 * time.Millisecond,
		Recovery: "auto", LogLevel: slog.LevelInfo, StartTimeout: 2 * time.Minute, Notifier: "on", Tracing: TracingConfig{SampleRatio: 1},
		PushKinds:   []string{"CUSTOMER_BLOCKED", "THRESHOLD_ALERT", "DATA_REQUESTED", "DATA_REQUEST_ANSWERED", "DATA_GIFTED", "WEEKLY_SUMMARY"},
		PushTimeout: 3 * time.Second, PushMaxSubscriptions: 10, FamilyMaxMembers: 10, FamilyMaxNotes: 1000, VATRate: 10,
		Gift: GiftConfig{GivenPerMonth: 2, ReceivedPerMonth: 2, Step: 100 << 20, Max: 1 << 30, GiverFloor: 500 << 20, MaxShare: 50,
			ReceivedMax: 2 << 30, Rate: limit.Rate{N: 10, Per: time.Minute}},
		TopUpOffers: "100MB=2200,500MB=5500,1GB=9900,3GB=19800", TopUps: api.DefaultTopUpOffers(), CatalogRefresh: 30 * time.Second,
		WeeklySummary: "MON 09:00", WeeklyAt: &WeeklyAt{Day: time.Monday, Minute: 540}}
	if d := cmp.Diff(want, c, cmp.Comparer(func(a, b limit.Rate) bool { return a == b })); d != "" {
		t.Errorf("defaults (-want +got):\n%s", d)
	}
	s, err := LoadSystemConfig(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if s.DataDir != "dpcs-data" || s.KafkaPort != 9092 || s.HTTPAddr != "127.0.0.1:8080" || s.SimulatorAddr != "127.0.0.1:8081" ||
		!s.Demo || s.DemoFamilies != 2000 || s.SimulatorRate != 100 || s.SQLitePath != filepath.Join("dpcs-data", "dpcs.db") {
		t.Errorf("system defaults %+v", s)
	}
	sim, err := LoadSimulatorConfig(env(map[string]string{"DPCS_KAFKA_BROKERS": " k:9092 ,"}))
	if err != nil || sim.Rate != 1000 || sim.Families != 250000 || sim.StepDelay != 200*time.Millisecond || len(sim.KafkaBrokers) != 1 || sim.KafkaBrokers[0] != "k:9092" {
		t.Errorf("simulator %+v, %v", sim, err)
	}
}

func TestLoadConfigProcessorVariables(t *testing.T) {
	c, err := LoadConfig(env(map[string]string{"DPCS_KAFKA_SESSION_TIMEOUT": "10s", "DPCS_START_TIMEOUT": "0s", "DPCS_NOTIFIER": "off"}))
	if err != nil || c.KafkaSessionTimeout != 10*time.Second || c.StartTimeout != 0 || c.Notifier != "off" {
		t.Errorf("%v %v %q, %v", c.KafkaSessionTimeout, c.StartTimeout, c.Notifier, err)
	}
	for k, v := range map[string]string{"DPCS_KAFKA_SESSION_TIMEOUT": "10", "DPCS_START_TIMEOUT": "-1s", "DPCS_NOTIFIER": "no"} {
		if _, err := LoadConfig(env(map[string]string{k: v})); err == nil || !strings.Contains(err.Error(), k+": want") {
			t.Errorf("%s=%s: error %v does not name it", k, v, err)
		}
	}
}

func TestCheckEnv(t *testing.T) {
	tests := []struct {
		name    string
		environ []string
		allow   []string
		want    []string // each a line of the error; none: no error
	}{
		{"known", []string{"DPCS_REDIS_ADDR=r:6379", "DPCS_SIMULATOR_SEED=3", "DPCS_WEBHOOK_SECRET=x", "PATH=/bin"}, nil, nil},
		{"tests' and scripts'", []string{"DPCS_TEST_REDIS_ADDR=x", "DPCS_CHAOS_SEED=1", "DPCS_REDIS_PORT=6390"}, nil, nil},
		{"not ours", []string{"DPCSX=1", "OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4318", "dpcs_redis_adr=1"}, nil, nil},
		{"allowed", []string{"DPCS_ADMIN_PASSWORD=secret"}, []string{"DPCS_ADMIN_PASSWORD"}, nil},
		{"typos", []string{"DPCS_REDIS_ADR=r:6379", "DPCS_LOG_LEVEL=debug", "DPCS_KAFKA_BROKER=k:9092", "DPCS_WEBHOOK_SECERT=x"}, nil, []string{
			"DPCS_REDIS_ADR: no deployable reads this variable; did you mean DPCS_REDIS_ADDR? (doc/configuration.md lists them)",
			"DPCS_KAFKA_BROKER: no deployable reads this variable; did you mean DPCS_KAFKA_BROKERS? (doc/configuration.md lists them)",
			"DPCS_WEBHOOK_SECERT: no deployable reads this variable; did you mean DPCS_WEBHOOK_SECRET? (doc/configuration.md lists them)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckEnv(tt.environ, tt.allow...)
			var got []string
			if err != nil {
				got = strings.Split(err.Error(), "\n")
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("CheckEnv (-want +got):\n%s", d)
			}
		})
	}
}

// Every DPCS_* variable the scripts, the Makefile and the end-to-end and
// chaos tests mention is known: a deployable they start must not refuse it.
func TestCheckEnvKnowsScriptVariables(t *testing.T) {
	name := regexp.MustCompile(`DPCS_[A-Z0-9_]+`)
	var environ []string
	for _, glob := range []string{"../scripts/*", "../Makefile", "../e2e/*.go", "../chaos/*.go", "../.ci/*"} {
		files, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue // a directory
			}
			for _, n := range name.FindAllString(string(b), -1) {
				if strings.HasSuffix(n, "_") {
					continue // a prefix the text names (DPCS_CHAOS_*)
				}
				environ = append(environ, n+"=1")
			}
		}
	}
	if len(environ) < 20 {
		t.Fatalf("only %d variables found in the scripts: the globs are wrong", len(environ))
	}
	if err := CheckEnv(environ); err != nil {
		t.Error(err)
	}
}

const (
	docBegin = "<!-- BEGIN VARIABLES: generated from the configuration structs' tags by TestConfigurationDoc; `go test ./service -run TestConfigurationDoc -update` rewrites it -->"
	docEnd   = "<!-- END VARIABLES -->"
)

// doc/configuration.md's table is the configuration structs' tags.
func TestConfigurationDoc(t *testing.T) {
	vars, err := EnvVariables()
	if err != nil {
		t.Fatal(err)
	}
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	var b strings.Builder
	b.WriteString(docBegin + "\n\n| Variable | Default | Read by | Meaning |\n|---|---|---|---|\n")
	for _, v := range vars {
		def := "—"
		if v.Default != "" {
			def = "`" + cell(v.Default) + "`"
			if strings.Contains(v.Default, " ") {
				def = cell(v.Default)
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", v.Name, def, strings.Join(v.Deployables, ", "), cell(v.Meaning))
	}
	b.WriteString("\n" + docEnd)
	table := b.String()

	const path = "../doc/configuration.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	start, end := strings.Index(string(doc), docBegin), strings.Index(string(doc), docEnd)
	if start < 0 || end < start {
		t.Fatalf("%s has no %q … %q region", path, docBegin, docEnd)
	}
	have := string(doc[start : end+len(docEnd)])
	if have == table {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(string(doc[:start])+table+string(doc[end+len(docEnd):])), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s differs from the configuration structs (-doc +structs); run go test ./service -run TestConfigurationDoc -update:\n%s",
		path, cmp.Diff(strings.Split(have, "\n"), strings.Split(table, "\n")))
}

// The carriers' gift rules are the store's defaults unless the operator
// says otherwise; sizes take MB and GB; a bad one names its variable.
func TestGiftConfig(t *testing.T) {
	c, err := LoadConfig(env(nil))
	if err != nil || c.Gift.Rules() != store.DefaultGiftRules() {
		t.Errorf("default gift rules %+v, %v; want the carriers' %+v", c.Gift.Rules(), err, store.DefaultGiftRules())
	}
	c, err = LoadConfig(env(map[string]string{"DPCS_GIFT_STEP": "50MB", "DPCS_GIFT_MAX": "2GB", "DPCS_GIFT_GIVEN_PER_MONTH": "5",
		"DPCS_GIFT_MINORS_GIVE": "true", "DPCS_GIFT_GIVER_FLOOR": "0"}))
	if r := c.Gift.Rules(); err != nil || r.Step != 50<<20 || r.Max != 2<<30 || r.GivenPerMonth != 5 || r.MinorsOnlyReceive || r.GiverFloor != 0 {
		t.Errorf("gift rules %+v, %v", r, err)
	}
	for name, value := range map[string]string{"DPCS_GIFT_STEP": "1TB", "DPCS_GIFT_MAX_SHARE": "101", "DPCS_GIFT_RATE": "fast",
		"DPCS_GIFT_GIVEN_PER_MONTH": "-1"} {
		if _, err := LoadConfig(env(map[string]string{name: value})); err == nil || !strings.Contains(err.Error(), name+": ") {
			t.Errorf("%s=%s: %v, want an error naming it", name, value, err)
		}
	}
	if _, err := LoadConfig(env(map[string]string{"DPCS_GIFT_STEP": "1GB", "DPCS_GIFT_MAX": "100MB"})); err == nil ||
		!strings.Contains(err.Error(), "DPCS_GIFT_MAX: ") {
		t.Errorf("a most below a step: %v", err)
	}
}

func TestTopUpOffersConfig(t *testing.T) {
	c, err := LoadConfig(env(map[string]string{"DPCS_TOPUP_OFFERS": "1GB=12000"}))
	if err != nil || len(c.TopUps) != 1 || c.TopUps[0] != (api.TopUpOffer{ID: "1GB", Bytes: 1 << 30, PriceKRW: 12000}) {
		t.Errorf("DPCS_TOPUP_OFFERS=1GB=12000: %v %v", c.TopUps, err)
	}
	if _, err := LoadConfig(env(map[string]string{"DPCS_TOPUP_OFFERS": "1TB=5"})); err == nil || !strings.Contains(err.Error(), "DPCS_TOPUP_OFFERS: ") {
		t.Errorf("a bad offer: %v, want an error naming DPCS_TOPUP_OFFERS", err)
	}
}
