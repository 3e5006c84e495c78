// Command processor is the DPCS processor deployable (doc/deploy.md, "The
// binaries"; doc/architecture.md, "The decision path"): it judges usage-events
// and policy-updated with the Lua quota engine on Redis (or Redis Cluster)
// and, in the same process, writes usage-persist into usage_record.
//
//	DPCS_KAFKA_BROKERS=127.0.0.1:9092 DPCS_REDIS_ADDR=127.0.0.1:6379 \
//	DPCS_MYSQL_DSN='dpcs:dpcs@tcp(127.0.0.1:3306)/dpcs?parseTime=true' go run ./examples/processor
//
// DPCS_NOTIFIER=off leaves the notifier out, for when examples/server runs it.
// DPCS_RECOVERY (auto, manual, off; default auto) is what happens when Redis
// comes back empty or stale: rebuilt from SQL automatically, left to an
// operator (`server rebuild`), or not checked (doc/runbook.md).
// It serves /healthz, /readyz and /metrics (Prometheus) on DPCS_ADMIN_ADDR
// (default 127.0.0.1:9090; off: none) from the start, ready once it judges.
// At start it waits up to DPCS_START_TIMEOUT (default 2m) for Redis and MySQL.
// DPCS_KAFKA_SESSION_TIMEOUT (a duration, default kgo's 45s) is how soon the
// group hands a crashed instance's partitions to the others.
// Without DPCS_MYSQL_DSN it writes to the SQLite file DPCS_SQLITE_PATH
// (default dpcs.db). Run several to share the partitions of a consumer group.
// With neither DPCS_KAFKA_BROKERS nor a Redis address it runs on embedded
// infrastructure (kfake on DPCS_EMBEDDED_KAFKA_PORT, miniredis rebuilt from
// SQL, SQLite in DPCS_DATA_DIR) — the all-in-one without simulator and demo.
//
// DPCS_OTLP_ENDPOINT (or the standard OTEL_EXPORTER_OTLP_ENDPOINT) turns
// OpenTelemetry tracing on (doc/observability.md, Tracing). It collects
// garbage at GOGC=400 unless GOGC is set (service.GCPercent).
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/backoff"
	"github.com/dabom/dpcs/internal/buildinfo"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/recovery"
	"github.com/dabom/dpcs/service/store"
)

func main() {
	if buildinfo.Asked(os.Args[1:]) {
		buildinfo.Print(os.Stdout, "dpcs processor")
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	service.SetGCPercent(os.Getenv)
	err := service.CheckEnv(os.Environ())
	if err == nil {
		err = run(ctx, os.Getenv)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "processor:", err)
		os.Exit(1)
	}
}

// await calls fn until it succeeds, ctx ends or limit has passed, waiting
// 0.5 s, 1 s, 2 s … 10 s between attempts.
func await(ctx context.Context, log *slog.Logger, limit time.Duration, what string, fn func() error) error {
	deadline := time.Now().Add(limit)
	p := backoff.Policy{Min: 500 * time.Millisecond, Max: 10 * time.Second}
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || ctx.Err() != nil {
			return err
		}
		wait := p.Delay(attempt)
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("%s not reachable within DPCS_START_TIMEOUT (%s): %w", what, limit, err)
		}
		log.Warn("waiting for a dependency", "what", what, "retry_in", wait, "err", err)
		if err := backoff.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

func run(ctx context.Context, getenv func(string) string) error {
	cfg, err := service.LoadConfig(getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	if len(cfg.KafkaBrokers) == 0 && cfg.RedisAddr == "" && len(cfg.RedisCluster) == 0 {
		return runEmbedded(ctx, getenv, log)
	}
	if len(cfg.KafkaBrokers) == 0 {
		return errors.New("DPCS_KAFKA_BROKERS: required with a real Redis")
	}
	cfg.Tracing.ServiceName = "dpcs-processor"
	tp, shutdownTracing, err := service.Tracing(ctx, cfg.Tracing)
	if err != nil {
		return err
	}
	defer flushTraces(log, shutdownTracing)
	var groupOpts []kgo.Opt
	if d := cfg.KafkaSessionTimeout; d > 0 {
		// Heartbeat at most a third of the session, as Kafka advises.
		groupOpts = append(groupOpts, kgo.SessionTimeout(d), kgo.HeartbeatInterval(min(3*time.Second, d/3)))
	}
	rdb, err := cfg.Redis()
	if err != nil {
		return err
	}
	defer rdb.Close()
	engine, err := quota.New(rdb, cfg.EngineOptions()...)
	if err != nil {
		return err
	}
	reg := service.NewRegistry()
	metrics, err := service.NewMetrics(reg)
	if err != nil {
		return err
	}
	// The admin endpoints answer while the dependencies are awaited: alive,
	// not ready until the workers run.
	var ready atomic.Pointer[func(context.Context) error]
	if addr := cfg.AdminAddress(service.DefaultProcessorAdminAddr); addr != "" {
		adm, err := service.StartAdmin(addr, service.WithPprof(service.AdminHandler(reg, func(ctx context.Context) error {
			if r := ready.Load(); r != nil {
				return (*r)(ctx)
			}
			return &service.NotReadyError{What: "starting: waiting for redis, sql and kafka"}
		}), cfg.AdminPprof), log)
		if err != nil {
			return fmt.Errorf("DPCS_ADMIN_ADDR: %w", err)
		}
		defer adm.Close(context.Background())
		log.Info("admin endpoints", "addr", adm.Addr, "metrics", "http://"+adm.Addr+"/metrics")
	}
	startWait := cfg.StartTimeout
	// Redis or MySQL may be down when the deployable starts (a restart during
	// an outage): wait for them, as running workers do, instead of exiting.
	if err := await(ctx, log, startWait, "redis", func() error { return engine.Load(ctx) }); err != nil {
		return err
	}
	var db *sql.DB
	err = await(ctx, log, startWait, "sql", func() error {
		d, err := cfg.SQL(ctx)
		if err == nil {
			if err = service.Migrate(ctx, d); err != nil {
				d.Close()
			}
		}
		db = d
		return err
	})
	if err != nil {
		return err
	}
	defer db.Close()
	// Every write to the quota state goes through the door; with recovery
	// on it is made safe beside a rebuild by recovery.NewDoor: every batch
	// also checks the family-write marks the API recorded.
	var qs *judge.State
	if cfg.Recovery == "off" {
		qs, err = judge.NewState(engine)
	} else {
		var st *store.Store
		if st, err = store.New(db, store.WithLocation(cfg.Zone)); err == nil {
			qs, err = recovery.NewDoor(engine, st, judge.WithTouchHook(metrics.OnTouch))
		}
	}
	if err != nil {
		return err
	}
	kopts := append(cfg.KafkaOptions(), groupOpts...)
	admin, err := kgo.NewClient(kopts...)
	if err != nil {
		return err
	}
	err = service.EnsureTopics(ctx, admin, envelope.DefaultPartitions, envelope.Topics()...)
	admin.Close()
	if err != nil {
		return err
	}
	nopts, err := cfg.NotifierOptions(rdb)
	if err != nil {
		return err
	}
	if cfg.Notifier == "on" {
		push, err := cfg.WebPushOptions(db, log)
		if err != nil {
			return err
		}
		nopts = append(nopts, push...)
	}
	var guard []judge.ProcessorOpt
	if cfg.Recovery != "off" {
		// Judge only from a Redis state SQL vouches for; rebuild it (or wait
		// for an operator) when it came back empty or stale.
		rec, closeRec, err := recovery.NewDeployable(qs, db, kopts, log, cfg.RecoveryMode(), metrics.OnRecovered)
		if err != nil {
			return err
		}
		defer closeRec()
		guard = append(guard, judge.WithStateGuard(rec))
	}
	hooks := metrics.ProcessorHooks()
	measure := hooks.OnBatch
	hooks.OnBatch = func(b judge.BatchInfo) {
		measure(b)
		log.Debug("batch", "records", b.Records, "usage", b.Usage, "duplicates", b.Duplicates,
			"dlt", b.DeadLettered, "script", b.ScriptLatency, "lag", b.Lag)
	}
	// Events name their category from the app catalog the back office
	// edits, read again every DPCS_CATALOG_REFRESH.
	catalog := service.WatchCatalog(ctx, db, cfg.CatalogRefresh, log)
	defer catalog.Close()
	w, err := service.NewWorkers(qs, db, kopts, service.WorkersConfig{
		Logger:     log,
		Notifier:   nopts,
		NoNotifier: cfg.Notifier == "off",
		Metrics:    metrics,
		Processor: append([]judge.ProcessorOpt{
			judge.WithLocation(cfg.Zone),
			judge.WithMaxEventAge(cfg.DedupeWindow - time.Hour),
			judge.WithProcessorHooks(hooks),
			judge.WithApps(catalog.Apps()),
			cfg.GrantChargedOpt(),
		}, guard...),
		TracerProvider: tp,
	})
	if err != nil {
		return err
	}
	check := service.Ready(rdb, db, w.Processor, log)
	ready.Store(&check)
	log.Info("processor running", "brokers", cfg.KafkaBrokers, "group", judge.ProcessorGroup)
	err = w.Run(ctx)
	shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return errors.Join(err, w.Close(shutdown))
}

// runEmbedded runs the workers on embedded Kafka, Redis and SQLite.
func runEmbedded(ctx context.Context, getenv func(string) string, log *slog.Logger) error {
	sys, err := service.LoadSystemConfig(getenv)
	if err != nil {
		return err
	}
	sys.DemoFamilies, sys.SimulatorRate, sys.SimulatorAddr = 0, 0, ""
	sys.AdminAddr = sys.AdminAddress(service.DefaultProcessorAdminAddr)
	sys.Tracing.ServiceName = "dpcs-processor"
	s, err := service.StartSystem(ctx, sys, log)
	if err != nil {
		return err
	}
	log.Info("processor running on embedded infrastructure", "kafka", s.Brokers, "http", s.HTTPAddr, "admin", s.AdminAddr, "data", sys.DataDir)
	<-ctx.Done()
	shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.Close(shutdown)
}

// flushTraces exports the spans not yet sent (tracing on), within 5 s.
func flushTraces(log *slog.Logger, shutdown func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		log.Warn("flushing traces", "err", err)
	}
}
