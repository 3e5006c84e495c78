package service

import (
	"context"
	"database/sql"
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
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/access"
	"github.com/dabom/dpcs/service/api"
	"github.com/dabom/dpcs/service/charging/smfsim"
	"github.com/dabom/dpcs/service/family"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/kafkaops"
	"github.com/dabom/dpcs/service/limit"
	"github.com/dabom/dpcs/service/outbox"
	"github.com/dabom/dpcs/service/recovery"
	"github.com/dabom/dpcs/service/store"
	"github.com/dabom/dpcs/simulate"
	"github.com/dabom/dpcs/writebehind"
)

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
	if s.redisSrv != nil {
		s.rdb = embeddedRedis(cfg.RedisAddr)
	} else if s.rdb, err = cfg.Redis(); err != nil {
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
		// SQLite is one connection shared by every writer and reader here:
		// the library's batches of 100 rows keep each write-behind
		// transaction short, so the API's reads and /readyz's ping do not
		// queue behind a 1,000-row insert (WriteBehindBatch is for the
		// processor deployable's MariaDB).
		WriteBehind: []writebehind.Option{writebehind.WithBatchSize(100), writebehind.WithInterval(time.Second)},
		Processor: append([]judge.ProcessorOpt{judge.WithLocation(cfg.Zone), judge.WithMaxEventAge(cfg.DedupeWindow - time.Hour),
			judge.WithStateGuard(rec), judge.WithApps(s.catalog.Apps()), cfg.GrantChargedOpt()}, s.embeddedPoll()...)})
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
	if err := s.startAPI(ctx, cfg, kopts, rec, inbox, secret, vapidPublic, log); err != nil {
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

// startAPI starts what the HTTP API serves with: the login limits, the
// access events, the synchronous decisions, the back office's Kafka, the
// live bridge, the charging interface, the family service and its
// settler, and the API itself.
func (s *System) startAPI(ctx context.Context, cfg SystemConfig, kopts []kgo.Opt, rec *recovery.Guard, inbox *notify.SQLInbox,
	secret []byte, vapidPublic string, log *slog.Logger) error {
	var err error
	// Login limits: in memory (the API's default) on the embedded Redis: one
	// process has nothing to share, and miniredis's Lua is slow and serves
	// the quota engine. On a real Redis they are shared with other APIs.
	var limiter limit.Limiter
	if s.redisSrv == nil {
		if limiter, err = limit.NewRedisLimiter(s.rdb); err != nil {
			return err
		}
	}
	if s.access, err = access.NewRedis(ctx, s.rdb, "", log); err != nil {
		return err
	}
	gateways, err := gatewayTokens(cfg)
	if err != nil {
		return err
	}
	s.GatewayToken = gateways[0]
	// Records Kafka does not take go to the outbox: a decision is answered
	// once they are in Kafka or in SQL.
	spool, err := outbox.NewSpool(s.DB, sqldialect.Unknown, s.relay.Wake)
	if err != nil {
		return err
	}
	if s.Decisions, err = judge.NewDecisions(s.State, slices.Concat(kopts, KafkaHooks(s.Registry, "decisions")),
		append(cfg.DecisionOptions(rec, s.Metrics, log), judge.WithSpool(spool), judge.WithApps(s.catalog.Apps()))...); err != nil {
		return err
	}
	// The back office's dead-letter browser and operations view: the
	// processor's metrics are in this registry.
	if s.backOffice, err = kafkaops.New(kopts...); err != nil {
		return err
	}
	backOffice := s.backOffice
	opsMetrics, err := cfg.OperationsMetrics(s.Registry)
	if err != nil {
		return err
	}
	// Every family change is live on the family's other screens, on this
	// process's streams and (over Redis pub/sub) every other API process's.
	if s.live, err = notify.NewRedisBridge(ctx, s.rdb, s.Hub, notify.WithBridgeLogger(log)); err != nil {
		return err
	}
	if s.Charging, err = s.startCharging(cfg, log); err != nil {
		return err
	}
	famOpts := []family.Option{family.WithWake(s.relay.Wake), family.WithLogger(log), family.WithGiftRules(cfg.Gift.Rules()),
		family.WithOnChange(LiveChanges(s.live, log, nil))}
	if s.Charging != nil { // every family change reaches the live sessions it may affect
		famOpts = append(famOpts, family.WithOnChange(s.Charging.OnChange))
	}
	if s.Family, err = family.New(s.Store, s.State, famOpts...); err != nil {
		return err
	}
	// Families whose change's door step was not confirmed are settled
	// from SQL in the background.
	if s.settler, err = family.NewSettler(s.Family); err != nil {
		return err
	}
	if s.API, err = api.New(api.Config{Store: s.Store, State: s.State, Family: s.Family, Hub: s.Hub, Inbox: inbox,
		Secret: secret, Logger: log, AccessEvents: s.access, OnRequest: s.Metrics.OnRequest,
		Limiter: limiter, Limits: cfg.AuthLimits, TrustedProxies: cfg.TrustedProxies, Streams: cfg.Streams,
		VAPIDPublicKey: vapidPublic, AllowLoopbackPush: cfg.AllowLoopbackPush, MaxPushSubscriptions: cfg.PushMaxSubscriptions,
		Decisions: s.Decisions, GatewayTokens: gateways, TopUpOffers: cfg.TopUps, GiftRate: cfg.Gift.Rate, VATRate: cfg.APIVATRate(), OnCatalogChange: s.catalog.Edited(s.Charging),
		DeadLetters: backOffice, KafkaStats: backOffice, OperationsMetrics: opsMetrics}); err != nil {
		return err
	}
	if err := s.Metrics.WatchStreams(s.API.OpenStreams); err != nil {
		return err
	}
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
		c, ok := doorCharger(s.Decisions)
		if !ok {
			return nil, errors.New("DPCS_CHARGING_ADDR: the charging interface needs the door's synchronous decisions (judge.Decisions)")
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
