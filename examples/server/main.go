// Command server is the DPCS API deployable (SPEC §10): the huma API with
// JWT auth, the outbox relay publishing policy-updated, and the notifier
// feeding the API's live SSE streams and the inbox. It runs against real
// infrastructure; `make run` is the all-in-one on embedded infrastructure.
//
//	DPCS_KAFKA_BROKERS=10.0.0.1:9092 DPCS_REDIS_ADDR=10.0.1.1:6379 \
//	DPCS_MYSQL_DSN='dpcs:secret@tcp(10.0.2.1:3306)/dpcs?parseTime=true' \
//	DPCS_JWT_SECRET=… go run ./examples/server
//
// Run the processor deployable beside it with DPCS_NOTIFIER=off (this
// server's notifier feeds its SSE subscribers). `go run ./examples/server
// rebuild [familyId…]` recomputes Redis from SQL after Redis lost data (every
// family when none is named), prints a report (families restored, each
// family that failed and why) and exits, with status 1 if any family failed.
//
// DPCS_OTLP_ENDPOINT (or the standard OTEL_EXPORTER_OTLP_ENDPOINT) turns
// OpenTelemetry tracing on (doc/runbook.md, Tracing).
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
	"strconv"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service"
	"github.com/dabom/dpcs/service/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, nil); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends; ready (if not nil) receives the API address.
// Commands (rebuild) print their report to stdout.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer, ready chan<- string) error {
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
	if len(args) > 0 && args[0] == "rebuild" {
		return rebuild(ctx, db, engine, []kgo.Opt{kgo.SeedBrokers(cfg.KafkaBrokers...)}, log, args[1:], stdout)
	}
	st, err := store.New(db, store.WithLocation(cfg.Zone), store.WithLogger(log))
	if err != nil {
		return err
	}
	kopts := []kgo.Opt{kgo.SeedBrokers(cfg.KafkaBrokers...)}
	// The relay's policy-updated records begin their traces.
	producer, err := kgo.NewClient(append(append(service.ProducerOpts(), kopts...), service.TracingKafkaOpts(tp)...)...)
	if err != nil {
		return err
	}
	defer producer.Close()
	if err := service.EnsureTopics(ctx, producer, service.DefaultPartitions, service.Topics()...); err != nil {
		return err
	}
	relay, err := store.NewRelay(db, producer, store.WithRelayLogger(log))
	if err != nil {
		return err
	}
	hub, err := notify.NewHub(notify.WithHubTracerProvider(tp))
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
	notifier, err := notify.New(inbox, hub, append(kopts, service.TracingKafkaOpts(tp)...),
		append(nopts, notify.WithLogger(log), notify.WithTracerProvider(tp))...)
	if err != nil {
		return err
	}
	api, err := service.NewAPI(service.APIConfig{Store: st, Engine: engine, Hub: hub, Inbox: inbox,
		Wake: relay.Wake, Secret: []byte(cfg.JWTSecret), Logger: log})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/", api.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("DPCS_HTTP_ADDR: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second} // no WriteTimeout: SSE
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
	return errors.Join(firstErr, hubErr, srv.Shutdown(shutdown), relay.Close(shutdown), notifier.Close(shutdown))
}

// rebuild restores the named families (every family when none is named),
// prints what it did and every family it could not restore with the reason,
// and fails when any failed, so scripts see it in the exit status. A rebuild
// of every family is a new state generation, run as a recovery does: under
// the rebuild lease, with the processors paused by the state marker, once SQL
// holds every judged event. Named families are restored in the current
// generation.
func rebuild(ctx context.Context, db *sql.DB, eng *quota.Engine, kopts []kgo.Opt, log *slog.Logger, args []string, stdout io.Writer) error {
	var ids []int64
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return fmt.Errorf("rebuild: bad family id %q", a)
		}
		ids = append(ids, id)
	}
	start := time.Now()
	var rep store.RebuildReport
	var err error
	if len(ids) == 0 {
		rec, closeRec, rerr := service.NewDeployableRecovery(eng, db, kopts, log, false, nil)
		if rerr != nil {
			return fmt.Errorf("rebuild: %w", rerr)
		}
		defer closeRec()
		var info service.RecoveryInfo
		info, err = rec.RebuildNow(ctx, "operator: server rebuild")
		rep = info.Report
		if err == nil || errors.Is(err, store.ErrRebuildIncomplete) {
			fmt.Fprintf(stdout, "generation: %s (waited %s for SQL to hold every judged event)\n", info.Generation, info.Drain.Round(time.Millisecond))
		}
	} else {
		st, serr := store.New(db, store.WithLocation(eng.Location()))
		if serr != nil {
			return serr
		}
		state, serr := st.RedisState(ctx)
		if serr != nil {
			return fmt.Errorf("rebuild: %w", serr)
		}
		rep, err = store.RebuildGeneration(ctx, db, eng, state.Generation, ids...)
	}
	fmt.Fprintf(stdout, "families restored: %d, failed: %d, took: %s\n", rep.Rebuilt, len(rep.Failed), time.Since(start).Round(time.Millisecond))
	for _, f := range rep.Failed {
		fmt.Fprintf(stdout, "failed family %d: %v\n", f.FamilyID, f.Err)
	}
	switch {
	case errors.Is(err, store.ErrRebuildIncomplete):
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
