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
// family when none is named) and exits.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
	if err := run(ctx, os.Args[1:], os.Getenv, nil); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends; ready (if not nil) receives the API address.
func run(ctx context.Context, args []string, getenv func(string) string, ready chan<- string) error {
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
		return rebuild(ctx, db, engine, args[1:], log)
	}
	st, err := store.New(db, store.WithLocation(cfg.Zone), store.WithLogger(log))
	if err != nil {
		return err
	}
	kopts := []kgo.Opt{kgo.SeedBrokers(cfg.KafkaBrokers...)}
	producer, err := kgo.NewClient(append(service.ProducerOpts(), kopts...)...)
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
	hub, err := notify.NewHub()
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
	notifier, err := notify.New(inbox, hub, kopts, append(nopts, notify.WithLogger(log))...)
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

func rebuild(ctx context.Context, db *sql.DB, eng *quota.Engine, args []string, log *slog.Logger) error {
	var ids []int64
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return fmt.Errorf("rebuild: bad family id %q", a)
		}
		ids = append(ids, id)
	}
	start := time.Now()
	if err := store.Rebuild(ctx, db, eng, ids...); err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	log.Info("redis rebuilt from sql", "families", len(ids), "took", time.Since(start))
	return nil
}
