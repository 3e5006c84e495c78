package service

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/miniclock"
	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/access"
	"github.com/dabom/dpcs/service/api"
	"github.com/dabom/dpcs/service/charging"
	"github.com/dabom/dpcs/service/charging/smfsim"
	"github.com/dabom/dpcs/service/family"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/kafkaops"
	"github.com/dabom/dpcs/service/limit"
	"github.com/dabom/dpcs/service/outbox"
	"github.com/dabom/dpcs/service/recovery"
	"github.com/dabom/dpcs/service/store"
	"github.com/dabom/dpcs/simulate"
)

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

// DemoFamilyID is the seed's "Last 10 MB" family the all-in-one provisions:
// two parents and two children sharing a 10 MB pool.
const DemoFamilyID = 100

// demoFirstFamily is the first family id of the simulated population, clear
// of the demo family and its customer ids (family × 10 + index).
const demoFirstFamily = 1000

// System is the whole DPCS in one process: Kafka, Redis and SQL (real or
// embedded), the processor deployable, the simulator and the HTTP endpoints.
// End-to-end tests start it too.
type System struct {
	Brokers       []string
	HTTPAddr      string
	SimulatorAddr string
	// Engine is the quota engine, for reading the state; every write goes
	// through State, the door to it.
	Engine *quota.Engine
	State  *judge.State
	// Family makes every change to a family (the application layer the
	// API calls).
	Family *family.Service
	// Charging is the charging interface an SMF calls (nil when off, or
	// when no Charger takes its grant steps); SMFs are the demo's
	// simulated PDU sessions against it (nil when none run).
	Charging *Charging
	SMFs     *smfsim.Simulator
	DB       *sql.DB
	Store    *store.Store
	API      *api.Server
	// AdminAddr serves /healthz, /readyz and /metrics when Config.AdminAddr
	// was set (StartSystem takes it as given: "" or "off" serves none; the
	// mains resolve the default with Config.AdminAddress). It is the only
	// address serving /metrics: HTTPAddr serves the probes, not the metrics.
	AdminAddr string
	// Registry holds every metric of the system (Metrics, the Kafka
	// clients', the simulator's, the Go runtime's).
	Registry  *prometheus.Registry
	Metrics   *Metrics
	Simulator *simulate.Simulator
	// Hub carries live notifications (for SSE subscribers).
	Hub *notify.Hub
	// Weekly sends the owners' weekly summaries (nil when
	// DPCS_WEEKLY_SUMMARY is off).
	Weekly *WeeklySummaries
	// Rebuild is what the start-time rebuild of Redis from SQL did (zero
	// when none ran). Families it could not restore are logged and listed
	// here, and the system runs without them: Redis does not know their
	// members, so their events are refused (BLOCKED_NOT_MEMBER, never
	// charged) until the family's SQL rows are fixed and it is rebuilt.
	Rebuild recovery.Report
	// Decisions serves POST /decisions; GatewayToken is a credential for it
	// (the first of DPCS_GATEWAY_TOKENS, or the data dir's generated one).
	Decisions    *judge.Decisions
	GatewayToken string

	log       *slog.Logger
	kafka     *kfake.Cluster
	redisSrv  *miniredis.Miniredis
	stopClock func() // the embedded Redis's TTL clock
	rdb       redis.UniversalClient
	access    *access.Redis
	live      *notify.RedisBridge
	workers   *Workers
	producer  *kgo.Client
	// backOffice is the API's dead-letter browser and Kafka statistics.
	backOffice *kafkaops.BackOffice
	publisher  *simulate.Publisher
	relay      *outbox.Relay
	settler    *family.Settler
	servers    []*http.Server
	admin      *AdminServer
	cancel     context.CancelFunc
	// closeRecovery closes the recovery's Kafka admin client.
	closeRecovery func()
	catalog       *CatalogWatcher
	done          chan error
	relayDone     chan error
	closeOnce     sync.Once
	closeErr      error

	// shutdownTracing flushes the spans not yet exported.
	shutdownTracing func(context.Context) error
}

// StartSystem starts everything and returns once it runs. Close stops it.
func StartSystem(ctx context.Context, cfg SystemConfig, log *slog.Logger) (_ *System, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.checkDemoLimits(); err != nil {
		return nil, err
	}
	s := &System{log: log, Registry: NewRegistry(), done: make(chan error, 1)}
	if s.Metrics, err = NewMetrics(s.Registry); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.Close(context.Background())
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if cfg.Tracing.ServiceName == "" {
		cfg.Tracing.ServiceName = "dpcs"
	}
	tp, shutdownTracing, err := Tracing(ctx, cfg.Tracing)
	if err != nil {
		return nil, err
	}
	s.shutdownTracing = shutdownTracing
	if s.Brokers = cfg.KafkaBrokers; len(s.Brokers) == 0 {
		s.kafka, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(cfg.KafkaPort),
			kfake.DataDir(filepath.Join(cfg.DataDir, "kafka")), kfake.SeedTopics(envelope.DefaultPartitions, envelope.Topics()...))
		if err != nil {
			return nil, fmt.Errorf("embedded kafka: %w", err)
		}
		s.Brokers = s.kafka.ListenAddrs()
	}
	if cfg.RedisAddr == "" && len(cfg.RedisCluster) == 0 {
		if s.redisSrv, err = miniredis.Run(); err != nil {
			return nil, fmt.Errorf("embedded redis: %w", err)
		}
		// miniredis only expires keys when told: without this a claim whose
		// holder died would be held for ever, and day counters and replay
		// records would never expire.
		s.stopClock = miniclock.Follow(s.redisSrv, time.Second)
		cfg.RedisAddr = s.redisSrv.Addr()
	}
	if s.rdb, err = cfg.Redis(); err != nil {
		return nil, err
	}
	if s.Engine, err = quota.New(s.rdb, cfg.EngineOptions()...); err != nil {
		return nil, err
	}
	if err := s.Engine.Load(ctx); err != nil {
		return nil, err
	}
	if s.DB, err = cfg.SQL(ctx); err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx, s.DB); err != nil {
		return nil, err
	}
	if err := Migrate(ctx, s.DB); err != nil {
		return nil, err
	}
	kopts := append([]kgo.Opt{kgo.SeedBrokers(s.Brokers...)}, cfg.Kafka.options()...) // TLS/SASL: real brokers only
	// The simulator's and the relay's records begin their traces.
	popts := slices.Concat(simulate.ProducerOptions(kgo.LeaderAck()), kopts, KafkaHooks(s.Registry, "producer"), TracingKafkaOpts(tp))
	if s.producer, err = kgo.NewClient(popts...); err != nil {
		return nil, err
	}
	if err := EnsureTopics(ctx, s.producer, envelope.DefaultPartitions, envelope.Topics()...); err != nil {
		return nil, err
	}
	pop, err := demoPopulation(cfg.DemoFamilies)
	if err != nil {
		return nil, err
	}
	if s.Store, err = store.New(s.DB, append(cfg.StoreOptions(), store.WithLocation(cfg.Zone))...); err != nil {
		return nil, err
	}
	// Every write to the quota state goes through the door, made safe
	// beside a rebuild by recovery.NewDoor (marks, re-arms, restore on touch).
	if s.State, err = recovery.NewDoor(s.Engine, s.Store, judge.WithTouchHook(s.Metrics.OnTouch)); err != nil {
		return nil, err
	}
	var seeded bool
	if cfg.Demo {
		if seeded, err = s.seed(ctx, pop, cfg.DemoFamilies); err != nil {
			return nil, fmt.Errorf("seed demo: %w", err)
		}
	}
	// An embedded Redis starts empty: rebuild it from SQL. So does a
	// freshly seeded demo on a real Redis.
	// Redis is judged only from a state SQL vouches for (doc/architecture.md, "Never trust Redis blindly"): the
	// processor checks a state generation and per-partition watermarks with
	// every batch and rebuilds Redis from SQL when they do not match.
	rec, closeRec, err := recovery.NewDeployable(s.State, s.DB, kopts, log, recovery.Automatic, s.Metrics.OnRecovered)
	if err != nil {
		return nil, err
	}
	s.closeRecovery = closeRec
	// An embedded Redis starts empty: rebuild it from SQL now, unless the
	// write-behind has usage-persist records still to write (a crash left
	// them in the embedded Kafka): then the rebuild waits for them, once the
	// workers run, as a recovery does.
	rebuild := s.redisSrv != nil || seeded
	var backlog int64
	if rebuild {
		if backlog, err = rec.Backlog(ctx); err != nil {
			return nil, err
		}
	}
	report := func(info recovery.Info, rerr error) error {
		// One family the engine refuses must not keep every other family
		// from being served: log it and start without it.
		if rerr != nil && !errors.Is(rerr, recovery.ErrIncomplete) {
			return fmt.Errorf("rebuild redis from sql: %w", rerr)
		}
		s.Rebuild = info.Report
		for _, f := range s.Rebuild.Failed {
			log.Error("redis rebuild: family not restored from sql; its members' events are refused (BLOCKED_NOT_MEMBER) until its rows are fixed and it is rebuilt (doc/runbook.md)",
				"familyId", f.FamilyID, "err", f.Err)
		}
		log.Info("redis rebuilt from sql", "generation", info.Generation, "families", info.Families, "failed", info.Failed, "took", info.Total)
		return nil
	}
	if rebuild && backlog == 0 {
		if err := report(rec.Bootstrap(ctx, "start")); err != nil {
			return nil, err
		}
	}
	// The decisions' spooled usage-persist rows never expire: they are the
	// only way a judged event reaches SQL.
	if s.relay, err = outbox.New(s.DB, s.producer, outbox.WithLogger(log), outbox.WithHooks(s.Metrics.RelayHooks()),
		outbox.WithKeep(envelope.TopicUsagePersist)); err != nil {
		return nil, err
	}
	nopts, err := cfg.NotifierOptions(s.rdb)
	if err != nil {
		return nil, err
	}
	pushOpt, pushChannel, vapidPublic, err := cfg.systemPush(ctx, s.Store, log)
	if err != nil {
		return nil, err
	}
	nopts = append(nopts, pushOpt)
	s.catalog = WatchCatalog(ctx, s.DB, cfg.CatalogRefresh, log)
	s.workers, err = NewWorkers(s.State, s.DB, kopts, WorkersConfig{Logger: log, Notifier: nopts, Metrics: s.Metrics, TracerProvider: tp,
		Processor: []judge.ProcessorOpt{judge.WithLocation(cfg.Zone), judge.WithMaxEventAge(cfg.DedupeWindow - time.Hour),
			judge.WithStateGuard(rec), judge.WithApps(s.catalog.Apps())}})
	if err != nil {
		return nil, err
	}
	s.Hub = s.workers.Hub
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.done <- s.workers.Run(runCtx) }()
	if rebuild && backlog > 0 {
		log.Warn("usage-persist has records not yet in SQL: rebuilding Redis once the write-behind wrote them", "records", backlog)
		if err := report(rec.RebuildNow(ctx, "start: usage-persist not yet in SQL")); err != nil {
			return nil, err
		}
	}
	s.relayDone = make(chan error, 1)
	go func() { s.relayDone <- s.relay.Run(runCtx) }()

	if s.publisher, err = simulate.NewPublisher(s.producer, simulate.WithPublisherLogger(log)); err != nil {
		return nil, err
	}
	gen, err := simulate.NewGenerator(pop, simulate.WithLocation(cfg.Zone))
	if err != nil {
		return nil, err
	}
	if s.Simulator, err = simulate.New(gen, s.publisher, simulate.WithRate(cfg.SimulatorRate), simulate.WithLogger(log)); err != nil {
		return nil, err
	}
	if err := RegisterSimulator(s.Registry, s.Simulator); err != nil {
		return nil, err
	}
	if cfg.Demo && cfg.SimulatorRate > 0 && cfg.DemoFamilies > 0 {
		if err := s.Simulator.Start(); err != nil {
			return nil, err
		}
	}
	secret, err := jwtSecret(cfg)
	if err != nil {
		return nil, err
	}
	inbox, err := notify.NewSQLInbox(s.DB)
	if err != nil {
		return nil, err
	}
	// Login limits: in memory (the API's default) on the embedded Redis: one
	// process has nothing to share, and miniredis's Lua is slow and serves
	// the quota engine. On a real Redis they are shared with other APIs.
	var limiter limit.Limiter
	if s.redisSrv == nil {
		if limiter, err = limit.NewRedisLimiter(s.rdb); err != nil {
			return nil, err
		}
	}
	if s.access, err = access.NewRedis(ctx, s.rdb, "", log); err != nil {
		return nil, err
	}
	gateways, err := gatewayTokens(cfg)
	if err != nil {
		return nil, err
	}
	s.GatewayToken = gateways[0]
	// Records Kafka does not take go to the outbox: a decision is answered
	// once they are in Kafka or in SQL.
	spool, err := outbox.NewSpool(s.DB, sqldialect.Unknown, s.relay.Wake)
	if err != nil {
		return nil, err
	}
	if s.Decisions, err = judge.NewDecisions(s.State, slices.Concat(kopts, KafkaHooks(s.Registry, "decisions")),
		append(cfg.DecisionOptions(rec, s.Metrics, log), judge.WithSpool(spool), judge.WithApps(s.catalog.Apps()))...); err != nil {
		return nil, err
	}
	// The back office's dead-letter browser and operations view: the
	// processor's metrics are in this registry.
	if s.backOffice, err = kafkaops.New(kopts...); err != nil {
		return nil, err
	}
	backOffice := s.backOffice
	opsMetrics, err := cfg.OperationsMetrics(s.Registry)
	if err != nil {
		return nil, err
	}
	// Every family change is live on the family's other screens, on this
	// process's streams and (over Redis pub/sub) every other API process's.
	if s.live, err = notify.NewRedisBridge(ctx, s.rdb, s.Hub, notify.WithBridgeLogger(log)); err != nil {
		return nil, err
	}
	if s.Charging, err = s.startCharging(cfg, log); err != nil {
		return nil, err
	}
	famOpts := []family.Option{family.WithWake(s.relay.Wake), family.WithLogger(log), family.WithGiftRules(cfg.Gift.Rules()),
		family.WithOnChange(LiveChanges(s.live, log, nil))}
	if s.Charging != nil { // every family change reaches the live sessions it may affect
		famOpts = append(famOpts, family.WithOnChange(s.Charging.OnChange))
	}
	if s.Family, err = family.New(s.Store, s.State, famOpts...); err != nil {
		return nil, err
	}
	// Families whose change's door step was not confirmed are settled
	// from SQL in the background.
	if s.settler, err = family.NewSettler(s.Family); err != nil {
		return nil, err
	}
	if s.API, err = api.New(api.Config{Store: s.Store, State: s.State, Family: s.Family, Hub: s.Hub, Inbox: inbox,
		Secret: secret, Logger: log, AccessEvents: s.access, OnRequest: s.Metrics.OnRequest,
		Limiter: limiter, Limits: cfg.AuthLimits, TrustedProxies: cfg.TrustedProxies, Streams: cfg.Streams,
		VAPIDPublicKey: vapidPublic, AllowLoopbackPush: cfg.AllowLoopbackPush, MaxPushSubscriptions: cfg.PushMaxSubscriptions,
		Decisions: s.Decisions, GatewayTokens: gateways, TopUpOffers: cfg.TopUps, GiftRate: cfg.Gift.Rate, VATRate: cfg.APIVATRate(), OnCatalogChange: s.catalog.Set,
		DeadLetters: backOffice, KafkaStats: backOffice, OperationsMetrics: opsMetrics}); err != nil {
		return nil, err
	}
	if err := s.Metrics.WatchStreams(s.API.OpenStreams); err != nil {
		return nil, err
	}
	// The owners' weekly summary, at the operator's time.
	if cfg.WeeklyAt != nil {
		var push notify.Channel
		if cfg.Pushes(notify.KindWeeklySummary) {
			push = pushChannel
		}
		if s.Weekly, err = NewWeeklySummaries(s.Store, inbox, s.live, push, *cfg.WeeklyAt, cfg.Zone, log); err != nil {
			return nil, err
		}
		s.Weekly.Start()
	}
	// The API address serves the probes too; the metrics only the admin
	// address does: they are the operator's, not the public's
	// (doc/observability.md).
	admin := AdminHandler(s.Registry, Ready(s.rdb, s.DB, s.workers.Processor, log))
	mux := http.NewServeMux()
	mux.Handle("/", s.API.Handler())
	for _, p := range []string{"GET /healthz", "GET /readyz"} {
		mux.Handle(p, admin)
	}
	if s.HTTPAddr, err = s.serve(cfg.HTTPAddr, mux); err != nil {
		return nil, fmt.Errorf("DPCS_HTTP_ADDR: %w", err)
	}
	if addr := cfg.AdminAddress(""); addr != "" {
		if s.admin, err = StartAdmin(addr, WithPprof(admin, cfg.AdminPprof), log); err != nil {
			return nil, fmt.Errorf("DPCS_ADMIN_ADDR: %w", err)
		}
		s.AdminAddr = s.admin.Addr
	}
	if s.Charging != nil && cfg.Demo && cfg.SimulatorSessions > 0 && cfg.DemoFamilies > 0 {
		if err := s.startSMFs(cfg, pop, log); err != nil {
			return nil, err
		}
	}
	if cfg.SimulatorAddr != "" {
		if s.SimulatorAddr, err = s.serve(cfg.SimulatorAddr, simulate.NewHandler(s.Simulator)); err != nil {
			return nil, fmt.Errorf("DPCS_SIMULATOR_ADDR: %w", err)
		}
	}
	return s, nil
}

// DemoPassword is the password of every seeded demo member and of the demo
// back-office admin DemoAdminID. It is public: it is seeded only with
// SystemConfig.Demo.
const DemoPassword = "dpcs-demo"

// DemoAdminID is the seeded back-office admin.
const DemoAdminID = 1

// DemoAgentID is the seeded care agent (AGENT: reads what an admin reads,
// changes nothing), phone 010-0000-0002.
const DemoAgentID = 2

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
	opts := []judge.DecisionsOpt{judge.WithLinger(c.DecisionLinger)}
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

// seed writes the demo into an empty SQL store: the seed's "Last 10 MB"
// family (two owners, two children marked as minors, 10 MB) and the
// simulated population. It
// reports whether it seeded; a store that has families is left alone.
func (s *System) seed(ctx context.Context, pop *simulate.Population, families int) (bool, error) {
	ids, err := s.Store.FamilyIDs(ctx, 0, 1)
	if err != nil || len(ids) > 0 {
		return false, err
	}
	hash, err := s.Store.HashPassword(DemoPassword)
	if err != nil {
		return false, err
	}
	add := func(id int64, name string, plan int64, members []store.NewMember) error {
		if _, err := s.Store.CreateFamily(ctx, store.NewFamily{ID: id, Name: name, PlanBytes: plan}, store.System); err != nil {
			return err
		}
		for _, m := range members {
			m.FamilyID, m.PasswordHash = id, hash
			if _, err := s.Store.AddMember(ctx, m, store.System); err != nil {
				return err
			}
		}
		return nil
	}
	demo := []store.NewMember{
		{ID: simulate.CustomerID(DemoFamilyID, 0), Name: "아빠", Phone: "010-0000-0100", Role: policy.RoleOwner},
		{ID: simulate.CustomerID(DemoFamilyID, 1), Name: "엄마", Phone: "010-0000-0101", Role: policy.RoleOwner},
		// Every member of a family plan is a subscriber with a number of
		// its own: the back office finds a family by a child's phone too.
		{ID: simulate.CustomerID(DemoFamilyID, 2), Name: "자녀1", Phone: "010-0000-0102", Role: policy.RoleMember, Minor: true},
		{ID: simulate.CustomerID(DemoFamilyID, 3), Name: "자녀2", Phone: "010-0000-0103", Role: policy.RoleMember, Minor: true},
	}
	if err := add(DemoFamilyID, "김씨 가족 (Last 10 MB)", 10<<20, demo); err != nil {
		return false, err
	}
	if _, err := s.Store.AddMember(ctx, store.NewMember{ID: DemoAdminID, Name: "admin", Phone: "010-0000-0001",
		Role: policy.RoleAdmin, PasswordHash: hash}, store.System); err != nil {
		return false, err
	}
	if _, err := s.Store.AddMember(ctx, store.NewMember{ID: DemoAgentID, Name: "상담원", Phone: "010-0000-0002",
		Role: policy.RoleAgent, PasswordHash: hash}, store.System); err != nil {
		return false, err
	}
	if families > 0 {
		for f := range pop.Families() {
			ms := make([]store.NewMember, len(f.Members))
			for i, m := range f.Members {
				ms[i] = store.NewMember{ID: m.CustomerID, Name: fmt.Sprintf("member %d", m.CustomerID), Role: m.Role,
					Phone: DemoPhone(m.CustomerID)}
			}
			if err := add(f.ID, fmt.Sprintf("family %d", f.ID), f.PlanBytes, ms); err != nil {
				return false, err
			}
		}
	}
	return true, nil
}

// DemoPhone is the phone the demo gives a simulated member (by customer
// id, 010-0001-0000 for 10000), so that the simulated SMFs can name it by
// its MSISDN (DemoMSISDN).
func DemoPhone(cid int64) string { return fmt.Sprintf("010-%04d-%04d", cid/10000%10000, cid%10000) }

// DemoMSISDN is DemoPhone as an SMF names the subscriber.
func DemoMSISDN(cid int64) string {
	return fmt.Sprintf("msisdn-8210%04d%04d", cid/10000%10000, cid%10000)
}

// DemoSubscribers are the subscriberIdentifiers (DemoMSISDN) of the
// members of the all-in-one's demo of families families: whom simulated
// SMFs in another process name (examples/simulator with
// DPCS_SIMULATOR_CHARGING_URL).
func DemoSubscribers(families int) ([]string, error) {
	pop, err := demoPopulation(families)
	if err != nil {
		return nil, err
	}
	return demoSubscribers(pop), nil
}

func demoPopulation(families int) (*simulate.Population, error) {
	return simulate.NewPopulation(1, simulate.WithFamilies(max(families, 1)), simulate.WithFirstFamilyID(demoFirstFamily))
}

func demoSubscribers(pop *simulate.Population) []string {
	var subs []string
	for f := range pop.Families() {
		for _, m := range f.Members {
			subs = append(subs, DemoMSISDN(m.CustomerID))
		}
	}
	return subs
}

// startSMFs starts the demo's simulated PDU sessions against the
// charging interface, for the simulated members.
func (s *System) startSMFs(cfg SystemConfig, pop *simulate.Population, log *slog.Logger) error {
	subs := demoSubscribers(pop)
	sim, err := smfsim.New(smfsim.Config{URL: "http://" + s.Charging.Addr, Token: s.Charging.Token, Subscribers: subs,
		Sessions: cfg.SimulatorSessions, NotifyAddr: "127.0.0.1:0", Seed: 1, Logger: log})
	if err != nil {
		return err
	}
	if err := sim.Start(); err != nil {
		return err
	}
	s.SMFs = sim
	return nil
}

// startCharging starts the charging interface on cfg.Charging.Addr (taken
// as given, as AdminAddr is: "" or "off" serves none; the all-in-one's main
// resolves the default with ChargingConfig.Address) with cfg.Charger, else
// the door's grant steps; nil when it is off or the door takes none.
// Notifications may reach loopback when the interface listens on loopback
// (the demo's SMFs do).
func (s *System) startCharging(cfg SystemConfig, log *slog.Logger) (*Charging, error) {
	addr := cfg.Charging.Address("")
	if addr == "" {
		return nil, nil
	}
	charger := cfg.Charger
	if charger == nil {
		c, ok := doorCharger(s.Decisions, s.State)
		if !ok {
			log.Warn("charging interface not started: the door takes no grant steps in this build (service/charging.Charger)")
			return nil, nil
		}
		charger = c
	}
	tokens, err := chargingTokens(cfg)
	if err != nil {
		return nil, err
	}
	host, _, _ := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	return StartCharging(cfg.Charging, addr, ChargingDeps{Charger: charger, Store: s.Store, Logger: log, Metrics: s.Metrics,
		Tokens: tokens, Loopback: host == "localhost" || (ip != nil && ip.IsLoopback())})
}

func (s *System) serve(addr string, h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	srv := NewHTTPServer(h, HTTPServerConfig{Logger: s.log})
	s.servers = append(s.servers, srv)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server", "addr", addr, "err", err)
		}
	}()
	return ln.Addr().String(), nil
}

// Close stops the simulator (flushing what it sent), the HTTP servers, the
// workers (the write-behind drains) and the embedded infrastructure.
// Close is idempotent.
func (s *System) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { s.closeErr = s.close(ctx) })
	return s.closeErr
}

func (s *System) close(ctx context.Context) error {
	var errs []error
	if s.closeRecovery != nil {
		defer s.closeRecovery()
	}
	if s.Simulator != nil {
		errs = append(errs, s.Simulator.Stop(ctx))
	}
	if s.publisher != nil {
		errs = append(errs, s.publisher.Close(ctx))
	}
	// Live SSE streams end when the hub closes; Shutdown would otherwise
	// wait for them until ctx expires and leave nothing for the drain.
	if s.Hub != nil {
		errs = append(errs, s.Hub.Close(ctx))
	}
	for _, srv := range s.servers {
		errs = append(errs, srv.Shutdown(ctx))
	}
	if s.SMFs != nil { // before the interface: they release what they hold
		errs = append(errs, s.SMFs.Close(ctx))
	}
	if s.Charging != nil {
		errs = append(errs, s.Charging.Close(ctx))
	}
	if s.Decisions != nil {
		errs = append(errs, s.Decisions.Close(ctx))
	}
	if s.settler != nil {
		errs = append(errs, s.settler.Close(ctx))
	}
	if s.access != nil {
		errs = append(errs, s.access.Close())
	}
	if s.Weekly != nil {
		s.Weekly.Close()
	}
	if s.live != nil {
		errs = append(errs, s.live.Close())
	}
	if s.admin != nil {
		errs = append(errs, s.admin.Close(ctx))
	}
	if s.cancel != nil {
		s.cancel()
		errs = append(errs, <-s.done)
		if err := <-s.relayDone; err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
	}
	if s.relay != nil {
		errs = append(errs, s.relay.Close(ctx))
	}
	if s.workers != nil {
		errs = append(errs, s.workers.Close(ctx))
	}
	if s.catalog != nil {
		s.catalog.Close()
	}
	if s.backOffice != nil {
		s.backOffice.Close()
	}
	if s.producer != nil {
		s.producer.Close()
	}
	if s.DB != nil {
		errs = append(errs, s.DB.Close())
	}
	if s.rdb != nil {
		errs = append(errs, s.rdb.Close())
	}
	if s.stopClock != nil {
		s.stopClock()
	}
	if s.redisSrv != nil {
		s.redisSrv.Close()
	}
	if s.kafka != nil {
		s.kafka.Close()
	}
	if s.shutdownTracing != nil {
		errs = append(errs, s.shutdownTracing(ctx))
	}
	return errors.Join(errs...)
}
