package service

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/charging"
	"github.com/dabom/dpcs/service/judge"
)

// The all-in-one's configuration (SystemConfig, DPCS_* variables) and
// what it derives: the engine's and the decisions' options, the JWT
// secret and the gateway credentials kept in the data directory.

// SystemConfig configures the all-in-one: infrastructure from Config (what is
// not given is embedded), plus the demo and the listeners.
type SystemConfig struct {
	Config
	// DataDir (DPCS_DATA_DIR, default dpcs-data) holds the embedded Kafka log
	// and the SQLite file, so a restart keeps the data.
	DataDir string `envconfig:"DATA_DIR" default:"dpcs-data" deployables:"all-in-one" desc:"directory of the embedded Kafka log, the SQLite file and the generated JWT secret; a restart keeps the data"`
	// KafkaPort (DPCS_EMBEDDED_KAFKA_PORT, default 9092; 0 picks a free port)
	// is where the embedded Kafka listens on 127.0.0.1.
	KafkaPort int `envconfig:"EMBEDDED_KAFKA_PORT" default:"9092" deployables:"all-in-one" desc:"port of the embedded Kafka on 127.0.0.1 (0 picks a free one)"`
	// HTTPAddr (DPCS_HTTP_ADDR, default 127.0.0.1:8080) serves the API,
	// health and readiness (the metrics are on the admin address only);
	// SimulatorAddr (DPCS_SIMULATOR_ADDR, default
	// 127.0.0.1:8081; off: none) the simulator's control API.
	HTTPAddr      string `envconfig:"HTTP_ADDR" default:"127.0.0.1:8080" deployables:"server, all-in-one" desc:"host:port of the API, with /healthz (all-in-one: and /readyz); /metrics only on DPCS_ADMIN_ADDR"`
	SimulatorAddr string `envconfig:"SIMULATOR_ADDR" default:"127.0.0.1:8081" deployables:"all-in-one" desc:"host:port of the embedded simulator's control API; off: none"`
	// Demo (DPCS_DEMO: 1 or 0; default 1 without DPCS_MYSQL_DSN, 0 with it)
	// seeds an empty store with the demo: the "Last 10 MB" family, the
	// simulated population and the back-office admin DemoAdminID, all with
	// the published DemoPassword, and starts the simulator. Without it
	// nothing is seeded and the simulator stays stopped: a real deployment
	// creates its first admin with `server admin create` and a password of
	// its own (doc/security.md).
	Demo bool `envconfig:"DEMO" doc_default:"1 without DPCS_MYSQL_DSN, else 0" deployables:"all-in-one" desc:"1: seed an empty store with the demo (published password, doc/security.md) and start the simulator; 0: seed nothing"`
	// DemoFamilies (DPCS_DEMO_FAMILIES, default 2000) families are provisioned
	// and driven by the simulator at SimulatorRate (DPCS_SIMULATOR_RATE,
	// default 100 events/s; 0 leaves it stopped).
	DemoFamilies  int     `envconfig:"DEMO_FAMILIES" default:"2000" deployables:"all-in-one" desc:"simulated families the demo provisions (0 to 250000)"`
	SimulatorRate float64 `envconfig:"SIMULATOR_RATE" default:"100" deployables:"all-in-one" desc:"events/s the embedded simulator sends (0 to 1000000; 0 leaves it stopped)"`
	// JWTSecret (DPCS_JWT_SECRET, at least 32 bytes) signs access tokens.
	// Empty: a random secret kept in DataDir/jwt-secret, so tokens survive
	// restarts of the same data dir.
	// AllowLoopbackPush accepts push subscriptions to http endpoints on a
	// loopback host (tests with a local push service); not read from the
	// environment.
	AllowLoopbackPush bool `ignored:"true"`
	// GatewayTokens (DPCS_GATEWAY_TOKENS, comma-separated, each at least 32
	// bytes) are the credentials of POST /decisions. Empty: the server
	// refuses every call of it; the all-in-one generates one, kept in
	// DataDir/gateway-token and printed in its banner.
	GatewayTokens []string `envconfig:"GATEWAY_TOKENS" deployables:"server, all-in-one" doc_default:"all-in-one: random, kept in $DPCS_DATA_DIR/gateway-token; server: none (POST /decisions refused)" desc:"credentials (comma-separated, each at least 32 bytes) gateways send as Authorization: Bearer to POST /decisions, and only there"`
	// DecisionLinger (DPCS_DECISION_LINGER, default 200µs) and
	// DecisionMaxBatch (DPCS_DECISION_MAX_BATCH, default 256) shape the
	// group commits of POST /decisions; DecisionTimeout
	// (DPCS_DECISION_TIMEOUT, default 2s) bounds one.
	DecisionLinger   time.Duration `envconfig:"DECISION_LINGER" default:"200us" deployables:"server, all-in-one" desc:"how long a group commit of POST /decisions waits for more callers (0 to 100ms)"`
	DecisionMaxBatch int           `envconfig:"DECISION_MAX_BATCH" default:"256" deployables:"server, all-in-one" desc:"events that end a group commit's wait (1 to 10000)"`
	// DecisionConcurrency (DPCS_DECISION_CONCURRENCY, default 4): group
	// commits of POST /decisions judged at once; callers arriving while
	// all run join the next.
	DecisionConcurrency int           `envconfig:"DECISION_CONCURRENCY" default:"4" deployables:"server, all-in-one" desc:"group commits of POST /decisions judged at once, each one Redis pipeline on a connection of the shared pool (go-redis's default, 10 per CPU); callers arriving while all run join the next (1 to 64)"`
	DecisionTimeout     time.Duration `envconfig:"DECISION_TIMEOUT" default:"2s" deployables:"server, all-in-one" desc:"bound of one group commit, judging and producing its records to Kafka; past it the records go to the SQL outbox and the callers are answered (10ms to below 3s, the recovery's quiet window)"`
	// SimulatorSessions (DPCS_SIMULATOR_SESSIONS, default 20) simulated
	// PDU sessions run against the charging interface with the demo
	// (service/charging/smfsim), when the interface is on.
	SimulatorSessions int `envconfig:"SIMULATOR_SESSIONS" default:"20" deployables:"all-in-one" desc:"simulated SMF PDU sessions the demo runs against the charging interface when it is on (0 to 10000; 0: none): create, update at the threshold, release, beside the simulated events"`
	// Charging (DPCS_CHARGING_*) is the charging interface an SMF calls
	// (ChargingConfig); Charger, when set, takes its grant steps instead
	// of the door (tests); not read from the environment.
	Charging  ChargingConfig   `envconfig:"CHARGING"`
	Charger   charging.Charger `ignored:"true"`
	JWTSecret string           `envconfig:"JWT_SECRET" deployables:"server, all-in-one" doc_default:"all-in-one: random, kept in $DPCS_DATA_DIR/jwt-secret; server: required" desc:"key signing access tokens, at least 32 bytes, the same for every API instance"`
}

// EngineOptions are Config.EngineOptions and the grant sizes of the
// charging interface (ChargingConfig.GrantSizes): the engine that judges
// grant steps sizes them as the interface does. A configuration not read
// from the environment (no grant sizes) leaves the engine's defaults.
func (c SystemConfig) EngineOptions() []quota.Option {
	opts := c.Config.EngineOptions()
	if c.Charging.Grant > 0 {
		opts = append(opts, quota.WithGrantSizes(c.Charging.GrantSizes()))
	}
	return opts
}

// LoadSystemConfig reads SystemConfig through getenv; errors name the variable.
func LoadSystemConfig(getenv func(string) string) (SystemConfig, error) {
	var c SystemConfig
	r, err := readEnv(getenv, &c, configDecoders())
	if err != nil {
		return c, err
	}
	errs := c.Config.finish(getenv, r)
	c.SimulatorAddr = listenAddr(&errs, "DPCS_SIMULATOR_ADDR", c.SimulatorAddr)
	if c.JWTSecret != "" && len(c.JWTSecret) < 32 {
		errs = append(errs, errors.New("DPCS_JWT_SECRET: at least 32 bytes"))
	}
	for _, n := range []struct {
		key    string
		v      int
		lo, hi int
	}{{"DPCS_EMBEDDED_KAFKA_PORT", c.KafkaPort, 0, 65535}, {"DPCS_DEMO_FAMILIES", c.DemoFamilies, 0, 250_000},
		{"DPCS_SIMULATOR_SESSIONS", c.SimulatorSessions, 0, 10_000}} {
		r.want(&errs, n.key, n.v >= n.lo && n.v <= n.hi, fmt.Sprintf("a whole number from %d to %d", n.lo, n.hi))
	}
	c.GatewayTokens = trimList(c.GatewayTokens)
	r.want(&errs, "DPCS_GATEWAY_TOKENS", !slices.ContainsFunc(c.GatewayTokens, func(t string) bool { return len(t) < 32 }),
		"credentials of at least 32 bytes each, comma-separated")
	r.want(&errs, "DPCS_DECISION_LINGER", c.DecisionLinger >= 0 && c.DecisionLinger <= 100*time.Millisecond, "a duration from 0 to 100ms")
	r.want(&errs, "DPCS_DECISION_CONCURRENCY", c.DecisionConcurrency >= 1 && c.DecisionConcurrency <= 64, "a whole number from 1 to 64")
	r.want(&errs, "DPCS_DECISION_MAX_BATCH", c.DecisionMaxBatch >= 1 && c.DecisionMaxBatch <= 10_000, "a whole number from 1 to 10000")
	r.want(&errs, "DPCS_DECISION_TIMEOUT", c.DecisionTimeout >= 10*time.Millisecond && c.DecisionTimeout < 3*time.Second, "a duration from 10ms to below 3s")
	errs = append(errs, c.Charging.finish(r)...)
	r.want(&errs, "DPCS_SIMULATOR_RATE", c.SimulatorRate >= 0 && c.SimulatorRate <= 1e6, "events/s from 0 to 1000000")
	if _, set := r.raw["DPCS_SQLITE_PATH"]; !set {
		c.SQLitePath = filepath.Join(c.DataDir, "dpcs.db")
	}
	// Known passwords only where nothing real is: the embedded demo, unless
	// asked for explicitly.
	if _, set := r.raw["DPCS_DEMO"]; !set {
		c.Demo = c.MySQLDSN == ""
	}
	r.want(&errs, "DPCS_DEMO", true, "1 or 0")
	return c, errors.Join(append(errs, r.errs()...)...)
}

// jwtSecret returns the configured secret, or the data dir's own one
// (created on first start).
func jwtSecret(cfg SystemConfig) ([]byte, error) {
	if cfg.JWTSecret != "" {
		return []byte(cfg.JWTSecret), nil
	}
	path := filepath.Join(cfg.DataDir, "jwt-secret")
	if b, err := os.ReadFile(path); err == nil && len(b) >= 32 {
		return b, nil
	}
	b := make([]byte, 48)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	b = []byte(hex.EncodeToString(b))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("jwt secret: %w", err)
	}
	return b, nil
}

// gatewayTokens returns the configured gateway credentials, or the data
// dir's own one (created on first start).
func gatewayTokens(cfg SystemConfig) ([]string, error) {
	if len(cfg.GatewayTokens) > 0 {
		return cfg.GatewayTokens, nil
	}
	path := filepath.Join(cfg.DataDir, "gateway-token")
	if b, err := os.ReadFile(path); err == nil && len(b) >= 32 {
		return []string{string(b)}, nil
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	tok := "gw_" + hex.EncodeToString(b)
	if err := os.WriteFile(path, []byte(tok), 0o600); err != nil {
		return nil, fmt.Errorf("gateway token: %w", err)
	}
	return []string{tok}, nil
}

// DecisionOptions are the SyncDecisions options c asks for: its linger,
// batch bound, timeout, zone and dedupe window, judged only from the state
// generation gens names, measured by m (when not nil). When gens is also a
// judge.StateGuard (a *recovery.Guard), a stale state the decisions find is
// recovered by it.
func (c SystemConfig) DecisionOptions(gens judge.GenerationSource, m *Metrics, log *slog.Logger) []judge.DecisionsOpt {
	opts := []judge.DecisionsOpt{judge.WithLinger(c.DecisionLinger), c.GrantChargedOpt()}
	if g, ok := gens.(judge.StateGuard); ok {
		opts = append(opts, judge.WithStateGuard(g))
	} else {
		opts = append(opts, judge.WithGenerations(gens))
	}
	if c.DecisionTimeout > 0 {
		opts = append(opts, judge.WithTimeout(c.DecisionTimeout))
	}
	if c.Zone != nil {
		opts = append(opts, judge.WithLocation(c.Zone))
	}
	if c.DedupeWindow > time.Hour {
		opts = append(opts, judge.WithMaxEventAge(c.DedupeWindow-time.Hour))
	}
	if c.DecisionConcurrency > 0 {
		opts = append(opts, judge.WithConcurrency(c.DecisionConcurrency))
	}
	if c.DecisionMaxBatch > 0 {
		opts = append(opts, judge.WithMaxBatch(c.DecisionMaxBatch))
	}
	if m != nil {
		opts = append(opts, judge.WithDecisionHooks(m.DecisionHooks()))
	}
	if log != nil {
		opts = append(opts, judge.WithLogger(log))
	}
	return opts
}
