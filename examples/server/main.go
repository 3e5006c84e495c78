// Command server is the DPCS API deployable (doc/deploy.md, "The binaries"):
// the huma API with JWT auth, the outbox relay publishing policy-updated, and
// the notifier feeding the API's live SSE streams and the inbox. It runs
// against real infrastructure; `make run` is the all-in-one on embedded
// infrastructure.
//
//	DPCS_KAFKA_BROKERS=10.0.0.1:9092 DPCS_REDIS_ADDR=10.0.1.1:6379 \
//	DPCS_MYSQL_DSN='dpcs:secret@tcp(10.0.2.1:3306)/dpcs?parseTime=true' \
//	DPCS_JWT_SECRET=… go run ./examples/server
//
// /healthz, /readyz and /metrics (Prometheus) are served on DPCS_ADMIN_ADDR
// (default 127.0.0.1:9091; off: none). It collects garbage at GOGC=400
// unless GOGC is set (service.GCPercent).
//
// POST /decisions answers gateways synchronously (decision, remaining,
// rule) with a credential of DPCS_GATEWAY_TOKENS; without one it refuses
// every call.
//
// Run the processor deployable beside it with DPCS_NOTIFIER=off (this
// server's notifier feeds its SSE subscribers). `go run ./examples/server
// rebuild [familyId…]` recomputes Redis from SQL after Redis lost data (every
// family when none is named), prints a report (families restored, each
// family that failed and why) and exits, with status 1 if any family failed.
//
// A new deployment has no account: `go run ./examples/server admin create
// --name NAME --phone PHONE` creates the first back-office admin with a
// password read from stdin (typed without echo on a terminal), or from
// --password-file PATH or --password-env VAR; at least 12 bytes, never
// printed. It needs only the SQL settings and prints the new admin's id.
//
// Web Push needs a VAPID key pair: `go run ./examples/server vapid-keys`
// prints a new one as DPCS_VAPID_PUBLIC_KEY and DPCS_VAPID_PRIVATE_KEY lines
// (set them, with DPCS_VAPID_SUBJECT, on every server and processor; the
// private key is a secret, doc/security.md). It needs no other setting.
//
// DPCS_OTLP_ENDPOINT (or the standard OTEL_EXPORTER_OTLP_ENDPOINT) turns
// OpenTelemetry tracing on (doc/observability.md, Tracing).
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/buildinfo"
	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service"
	"github.com/dabom/dpcs/service/access"
	"github.com/dabom/dpcs/service/api"
	"github.com/dabom/dpcs/service/family"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/kafkaops"
	"github.com/dabom/dpcs/service/limit"
	"github.com/dabom/dpcs/service/outbox"
	"github.com/dabom/dpcs/service/recovery"
	"github.com/dabom/dpcs/service/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	service.SetGCPercent(os.Getenv)
	var err error
	if len(os.Args) > 1 && os.Args[1] == "admin" {
		// The variable --password-env names is the operator's own.
		if err = service.CheckEnv(os.Environ(), passwordEnv(os.Args[2:])); err == nil {
			err = admin(ctx, os.Args[2:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
		}
	} else if err = service.CheckEnv(os.Environ()); err == nil {
		err = run(ctx, os.Args[1:], os.Getenv, os.Stdout, nil)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

// passwordEnv is the value of admin's --password-env flag in args, if any.
func passwordEnv(args []string) string {
	for i, a := range args {
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "password-env" || !strings.HasPrefix(a, "-") {
			continue
		}
		if hasValue {
			return value
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// run serves until ctx ends; ready (if not nil) receives the API address.
// Commands (rebuild) print their report to stdout.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer, ready chan<- string) error {
	if buildinfo.Asked(args) {
		return buildinfo.Print(stdout, "dpcs server")
	}
	if len(args) > 0 && args[0] == "vapid-keys" {
		return vapidKeys(stdout)
	}
	cfg, err := service.LoadSystemConfig(getenv)
	if err != nil {
		return err
	}
	if len(cfg.KafkaBrokers) == 0 || (cfg.RedisAddr == "" && len(cfg.RedisCluster) == 0) {
		return errors.New("DPCS_KAFKA_BROKERS and DPCS_REDIS_ADDR (or DPCS_REDIS_CLUSTER) are required; `make run` is the all-in-one on embedded infrastructure")
	}
	if cfg.JWTSecret == "" {
		return errors.New("DPCS_JWT_SECRET: required (at least 32 bytes, the same for every API instance)")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	cfg.Tracing.ServiceName = "dpcs-server"
	tp, shutdownTracing, err := service.Tracing(ctx, cfg.Tracing)
	if err != nil {
		return err
	}
	defer flushTraces(log, shutdownTracing)
	rdb, err := cfg.Redis()
	if err != nil {
		return err
	}
	defer rdb.Close()
	engine, err := quota.New(rdb, cfg.EngineOptions()...)
	if err != nil {
		return err
	}
	db, err := cfg.SQL(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := store.Migrate(ctx, db); err != nil {
		return err
	}
	if err := service.Migrate(ctx, db); err != nil {
		return err
	}
	st, err := store.New(db, append(cfg.StoreOptions(), store.WithLocation(cfg.Zone), store.WithLogger(log))...)
	if err != nil {
		return err
	}
	reg := service.NewRegistry()
	metrics, err := service.NewMetrics(reg)
	if err != nil {
		return err
	}
	// Every write to the quota state goes through the door, made safe
	// beside a rebuild by recovery.NewDoor (marks, re-arms, restore on touch).
	qs, err := recovery.NewDoor(engine, st, judge.WithTouchHook(metrics.OnTouch))
	if err != nil {
		return err
	}
	if len(args) > 0 && args[0] == "rebuild" {
		return rebuild(ctx, db, qs, cfg.KafkaOptions(), log, args[1:], stdout)
	}
	kopts := cfg.KafkaOptions()
	// The relay's policy-updated records begin their traces.
	producer, err := kgo.NewClient(slices.Concat(judge.ProducerOpts(), kopts, service.KafkaHooks(reg, "producer"), service.TracingKafkaOpts(tp))...)
	if err != nil {
		return err
	}
	defer producer.Close()
	if err := service.EnsureTopics(ctx, producer, envelope.DefaultPartitions, envelope.Topics()...); err != nil {
		return err
	}
	// The decisions' spooled usage-persist rows never expire: they are the
	// only way a judged event reaches SQL.
	relay, err := outbox.New(db, producer, outbox.WithLogger(log), outbox.WithHooks(metrics.RelayHooks()),
		outbox.WithKeep(envelope.TopicUsagePersist))
	if err != nil {
		return err
	}
	hub, err := notify.NewHub(notify.WithHubHooks(metrics.HubHooks()), notify.WithHubTracerProvider(tp))
	if err != nil {
		return err
	}
	inbox, err := notify.NewSQLInbox(db)
	if err != nil {
		return err
	}
	nopts, err := cfg.NotifierOptions(rdb)
	if err != nil {
		return err
	}
	pushOpt, pushChannel, err := cfg.WebPush(db, log)
	if err != nil {
		return err
	}
	if pushOpt != nil {
		nopts = append(nopts, pushOpt)
	}
	notifier, err := notify.New(inbox, hub, slices.Concat(kopts, service.KafkaHooks(reg, "notifier"), service.TracingKafkaOpts(tp)),
		append(nopts, notify.WithLogger(log), notify.WithHooks(metrics.NotifierHooks()), notify.WithTracerProvider(tp),
			notify.WithNames(st), notify.WithApps(st))...)
	if err != nil {
		return err
	}
	limiter, err := limit.NewRedisLimiter(rdb) // login limits shared by every API instance
	if err != nil {
		return err
	}
	// Member removals, role changes and ended sessions reach every API
	// instance's SSE streams over Redis pub/sub.
	accessEvents, err := access.NewRedis(ctx, rdb, "", log)
	if err != nil {
		return err
	}
	defer accessEvents.Close()
	// POST /decisions: gateways' synchronous decisions, judged only from
	// the state generation SQL names, their records produced before
	// answering. A stale state they find (their own grants lost by Redis)
	// is rebuilt from SQL as a processor's would be (DPCS_RECOVERY).
	var gens judge.GenerationSource = recovery.NewGenerations(st)
	if cfg.Recovery != "off" {
		rec, closeRec, err := recovery.NewDeployable(qs, db, kopts, log, cfg.RecoveryMode(), nil)
		if err != nil {
			return err
		}
		defer closeRec()
		gens = rec
	}
	// Records Kafka does not take go to the outbox (the relay publishes
	// them): a decision is answered once they are in Kafka or in SQL.
	spool, err := outbox.NewSpool(db, sqldialect.Unknown, relay.Wake)
	if err != nil {
		return err
	}
	// Events name their category from the app catalog the back office
	// edits: this server's edits at once, other servers' within
	// DPCS_CATALOG_REFRESH.
	catalog := service.WatchCatalog(ctx, db, cfg.CatalogRefresh, log)
	defer catalog.Close()
	decisions, err := judge.NewDecisions(qs, slices.Concat(kopts, service.KafkaHooks(reg, "decisions")),
		append(cfg.DecisionOptions(gens, metrics, log), judge.WithSpool(spool), judge.WithApps(catalog.Apps()))...)
	if err != nil {
		return err
	}
	// The back office reads the DLTs and the groups' lags, replays dead
	// letters, and reads the processors' metrics from their admin
	// pages (DPCS_OPERATIONS_METRICS_URLS) besides this server's own.
	backOffice, err := kafkaops.New(kopts...)
	if err != nil {
		return err
	}
	defer backOffice.Close()
	opsMetrics, err := cfg.OperationsMetrics(reg)
	if err != nil {
		return err
	}
	// Every family change is live on the family's other screens: on this
	// server's SSE streams and, over Redis pub/sub, every other server's.
	live, err := notify.NewRedisBridge(ctx, rdb, hub, notify.WithBridgeLogger(log))
	if err != nil {
		return err
	}
	defer live.Close()
	// The charging interface SMFs call (DPCS_CHARGING_ADDR, off by
	// default): grants through the door, sessions in SQL, and every family
	// change made here reaching the live sessions it may affect, whichever
	// server opened them (also with the listener off).
	chf, err := service.StartServerCharging(cfg.Charging, st, log, metrics, decisions)
	if err != nil {
		return err
	}
	famOpts := []family.Option{family.WithWake(relay.Wake), family.WithLogger(log), family.WithGiftRules(cfg.Gift.Rules()),
		family.WithOnChange(service.LiveChanges(live, log, nil))}
	if chf != nil {
		famOpts = append(famOpts, family.WithOnChange(chf.OnChange))
		if chf.Addr != "" {
			log.Info("charging interface serving", "addr", chf.Addr)
		}
	}
	fam, err := family.New(st, qs, famOpts...)
	if err != nil {
		return err
	}
	// Families whose change's door step was not confirmed are settled
	// from SQL in the background.
	settler, err := family.NewSettler(fam)
	if err != nil {
		return err
	}
	defer settler.Close(context.Background())
	apiServer, err := api.New(api.Config{Store: st, State: qs, Family: fam, Hub: hub, Inbox: inbox,
		Secret: []byte(cfg.JWTSecret), Logger: log, AccessEvents: accessEvents, OnRequest: metrics.OnRequest,
		Limiter: limiter, Limits: cfg.AuthLimits, TrustedProxies: cfg.TrustedProxies, Streams: cfg.Streams,
		VAPIDPublicKey: cfg.VAPIDPublicKey, MaxPushSubscriptions: cfg.PushMaxSubscriptions,
		Decisions: decisions, GatewayTokens: cfg.GatewayTokens, OnCatalogChange: catalog.Edited(chf), TopUpOffers: cfg.TopUps, GiftRate: cfg.Gift.Rate, VATRate: cfg.APIVATRate(),
		DeadLetters: backOffice, KafkaStats: backOffice, OperationsMetrics: opsMetrics})
	if err != nil {
		return err
	}
	if err := metrics.WatchStreams(apiServer.OpenStreams); err != nil {
		return err
	}
	// The owners' weekly summary, at the operator's time: every server runs
	// it, each family's week is sent once.
	if cfg.WeeklyAt != nil {
		var ch notify.Channel
		if pushChannel != nil && cfg.Pushes(notify.KindWeeklySummary) {
			ch = pushChannel
		}
		weekly, err := service.NewWeeklySummaries(st, inbox, live, ch, *cfg.WeeklyAt, cfg.Zone, log)
		if err != nil {
			return err
		}
		weekly.Start()
		defer weekly.Close()
	}
	mux := http.NewServeMux()
	mux.Handle("/", apiServer.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	if addr := cfg.AdminAddress(service.DefaultServerAdminAddr); addr != "" {
		adm, err := service.StartAdmin(addr, service.WithPprof(service.AdminHandler(reg, service.Ready(rdb, db, nil, log)), cfg.AdminPprof), log)
		if err != nil {
			return fmt.Errorf("DPCS_ADMIN_ADDR: %w", err)
		}
		defer adm.Close(context.Background())
		log.Info("admin endpoints", "addr", adm.Addr, "metrics", "http://"+adm.Addr+"/metrics")
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("DPCS_HTTP_ADDR: %w", err)
	}
	srv := service.NewHTTPServer(mux, service.HTTPServerConfig{Logger: log})
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 3)
	go func() { errc <- relay.Run(runCtx) }()
	go func() { errc <- notifier.Run(runCtx) }()
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
			return
		}
		errc <- nil
	}()
	log.Info("api serving", "addr", ln.Addr().String(), "docs", "http://"+ln.Addr().String()+"/docs")
	if ready != nil {
		ready <- ln.Addr().String()
	}
	var firstErr error
	select {
	case <-ctx.Done():
	case firstErr = <-errc:
	}
	cancel()
	shutdown, stop := context.WithTimeout(context.Background(), 15*time.Second)
	defer stop()
	// The hub first: live SSE streams end with it, or Shutdown would wait for
	// them until the deadline.
	hubErr := hub.Close(shutdown)
	srvErr := srv.Shutdown(shutdown)
	var chfErr error
	if chf != nil {
		chfErr = chf.Close(shutdown)
	}
	return errors.Join(firstErr, hubErr, srvErr, chfErr, decisions.Close(shutdown), relay.Close(shutdown), notifier.Close(shutdown))
}

// rebuild restores the named families (every family when none is named),
// prints what it did and every family it could not restore with the reason,
// and fails when any failed, so scripts see it in the exit status. A rebuild
// of every family is a new state generation, run as a recovery does: under
// the rebuild lease, with the processors paused by the state marker, once SQL
// holds every judged event. Named families are restored in the current
// generation, fenced (judged no more) and SQL drained first.
func rebuild(ctx context.Context, db *sql.DB, qs *judge.State, kopts []kgo.Opt, log *slog.Logger, args []string, stdout io.Writer) error {
	var ids []int64
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return fmt.Errorf("rebuild: bad family id %q", a)
		}
		ids = append(ids, id)
	}
	start := time.Now()
	var rep recovery.Report
	var err error
	if len(ids) == 0 {
		rec, closeRec, rerr := recovery.NewDeployable(qs, db, kopts, log, recovery.Automatic, nil)
		if rerr != nil {
			return fmt.Errorf("rebuild: %w", rerr)
		}
		defer closeRec()
		var info recovery.Info
		info, err = rec.RebuildNow(ctx, "operator: server rebuild")
		rep = info.Report
		if err == nil || errors.Is(err, recovery.ErrIncomplete) {
			fmt.Fprintf(stdout, "generation: %s (waited %s for SQL to hold every judged event)\n", info.Generation, info.Drain.Round(time.Millisecond))
		}
	} else {
		// Fenced and drained first: no event judged before the restore
		// is dropped, none judged on the state it replaces.
		rec, closeRec, rerr := recovery.NewDeployable(qs, db, kopts, log, recovery.Automatic, nil)
		if rerr != nil {
			return fmt.Errorf("rebuild: %w", rerr)
		}
		defer closeRec()
		rep, err = rec.RebuildFamilies(ctx, ids...)
	}
	fmt.Fprintf(stdout, "families restored: %d, failed: %d, took: %s\n", rep.Rebuilt, len(rep.Failed), time.Since(start).Round(time.Millisecond))
	for _, f := range rep.Failed {
		fmt.Fprintf(stdout, "failed family %d: %v\n", f.FamilyID, f.Err)
	}
	switch {
	case errors.Is(err, recovery.ErrIncomplete):
		return fmt.Errorf("rebuild: %d of %d families failed (listed in the report); fix their SQL rows and rebuild them (doc/runbook.md)",
			len(rep.Failed), rep.Rebuilt+len(rep.Failed))
	case err != nil:
		return fmt.Errorf("rebuild: %w", err)
	}
	return nil
}

// flushTraces exports the spans not yet sent (tracing on), within 5 s.
func flushTraces(log *slog.Logger, shutdown func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		log.Warn("flushing traces", "err", err)
	}
}

// vapidKeys prints a new VAPID key pair as environment lines.
func vapidKeys(stdout io.Writer) error {
	k, err := notify.GenerateVAPIDKeys()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "DPCS_VAPID_PUBLIC_KEY=%s\nDPCS_VAPID_PRIVATE_KEY=%s\n", k.Public, k.Private)
	return err
}
