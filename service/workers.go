package service

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/recovery"
	"github.com/dabom/dpcs/service/store"
	"github.com/dabom/dpcs/writebehind"
)

// WorkersConfig tunes the processor deployable. The zero value is the default.
type WorkersConfig struct {
	// Logger receives both workers' logs. Default: discard.
	Logger *slog.Logger
	// Processor, WriteBehind and Notifier are extra options of each worker,
	// given after the workers' defaults (the write-behind's batch:
	// WriteBehindBatch, WriteBehindInterval).
	Processor   []judge.ProcessorOpt
	WriteBehind []writebehind.Option
	Notifier    []notify.Option
	// Hub receives live notifications for SSE subscribers. Default: a new hub.
	Hub *notify.Hub
	// NoNotifier leaves the notifier out (when an API deployable runs it,
	// feeding its own SSE subscribers). Default: included.
	NoNotifier bool
	// Metrics, when set, measures the workers: their hooks feed it (options
	// in Processor, WriteBehind and Notifier given after them win) and each
	// worker's Kafka client gets KafkaHooks (client processor, write-behind,
	// notifier), as does a hub created here. Default: none.
	Metrics *Metrics
	// TracerProvider traces the workers (see Tracing): NewWorkers adds the
	// Kafka tracing hooks (TracingKafkaOpts) to every worker's client — do
	// not add them to kopts too — and gives tp to the processor, the
	// notifier and the hub it creates (a Hub given in Hub is the caller's
	// to trace, notify.WithHubTracerProvider). Default: no tracing.
	TracerProvider trace.TracerProvider
}

// The write-behind's batches in the processor deployable: a usage_record
// insert (and a commit) per 1,000 rows, at 5,000 events/s five a second
// instead of the library's 100 rows fifty times a second, and at low rates
// a row is in SQL within a second (doc/benchmarks.md, "The processor at
// 5,000 events/s").
const (
	WriteBehindBatch    = 1000
	WriteBehindInterval = time.Second
)

// Migrate creates the tables the workers write: usage_record (the store's,
// store.MigrateUsage) and the notification inbox; and those every process
// that judges reads: redis_state and redis_marks (store.MigrateRedisState).
func Migrate(ctx context.Context, db *sql.DB) error {
	if err := store.MigrateUsage(ctx, db); err != nil {
		return err
	}
	if err := store.MigrateRedisState(ctx, db); err != nil {
		return err
	}
	inbox, err := notify.NewSQLInbox(db)
	if err != nil {
		return err
	}
	return inbox.Migrate(ctx)
}

// Workers is the processor deployable (doc/deploy.md, "The binaries"): the processor judging
// usage-events and policy-updated, and in the same process the write-behind
// runner moving usage-persist into the usage_record table and the notifier
// storing notification-events in the inbox and pushing them to the hub.
type Workers struct {
	Processor   *judge.Processor
	WriteBehind *writebehind.Runner[store.UsageRecord]
	Notifier    *notify.Notifier
	Hub         *notify.Hub
	log         *slog.Logger
}

// NewWorkers builds the workers. db must be migrated (Migrate); kopts name
// the brokers.
func NewWorkers(qs *judge.State, db *sql.DB, kopts []kgo.Opt, cfg WorkersConfig) (*Workers, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	procOpts := []judge.ProcessorOpt{judge.WithLogger(log.With("worker", "processor"))}
	wbOpts := []writebehind.Option{writebehind.WithLogger(log.With("worker", "write-behind")),
		writebehind.WithBatchSize(WriteBehindBatch), writebehind.WithInterval(WriteBehindInterval)}
	nOpts := []notify.Option{notify.WithLogger(log.With("worker", "notifier"))}
	var hubOpts []notify.HubOption
	if tp := cfg.TracerProvider; tracingOn(tp) {
		kopts = append(slices.Clip(kopts), TracingKafkaOpts(tp)...)
		procOpts = append(procOpts, judge.WithTracerProvider(tp))
		nOpts = append(nOpts, notify.WithTracerProvider(tp))
		hubOpts = append(hubOpts, notify.WithHubTracerProvider(tp))
	}
	clientOpts := func(string) []kgo.Opt { return kopts }
	if m := cfg.Metrics; m != nil {
		procOpts = append(procOpts, judge.WithProcessorHooks(m.ProcessorHooks()))
		wbOpts = append(wbOpts, writebehind.WithHooks(m.WriteBehindHooks()))
		nOpts = append(nOpts, notify.WithHooks(m.NotifierHooks()))
		hubOpts = append(hubOpts, notify.WithHubHooks(m.HubHooks()))
		clientOpts = func(name string) []kgo.Opt { return slices.Concat(kopts, KafkaHooks(m.Registerer(), name)) }
	}
	proc, err := judge.NewProcessor(qs, clientOpts("processor"), append(procOpts, cfg.Processor...)...)
	if err != nil {
		return nil, err
	}
	w, err := store.NewUsageWriter(db)
	var truth *store.Store
	if err == nil {
		truth, err = store.New(db, store.WithLocation(qs.Location()))
	}
	if err != nil {
		proc.Close(context.Background())
		return nil, fmt.Errorf("service: usage writer: %w", err)
	}
	// Records of events judged before the current generation that SQL
	// learns only now make Redis stale (doc/architecture.md, "Late records").
	late := recovery.NewLateRecords(w, truth, qs, log.With("worker", "write-behind"))
	wb, err := writebehind.NewRunner[store.UsageRecord](store.DecodeUsageRecord, late, clientOpts("write-behind"), append(wbOpts, cfg.WriteBehind...)...)
	if err != nil {
		proc.Close(context.Background())
		return nil, fmt.Errorf("service: write-behind runner: %w", err)
	}
	if cfg.NoNotifier {
		return &Workers{Processor: proc, WriteBehind: wb, log: log}, nil
	}
	hub := cfg.Hub
	if hub == nil {
		if hub, err = notify.NewHub(hubOpts...); err != nil {
			proc.Close(context.Background())
			wb.Close(context.Background())
			return nil, err
		}
	}
	inbox, err := notify.NewSQLInbox(db)
	var names *store.Store
	if err == nil {
		names, err = store.New(db) // texts that name a member or an app say its name
	}
	if err == nil {
		var n *notify.Notifier
		n, err = notify.New(inbox, hub, clientOpts("notifier"), slices.Concat(nOpts, []notify.Option{notify.WithNames(names), notify.WithApps(names)}, cfg.Notifier)...)
		if err == nil {
			return &Workers{Processor: proc, WriteBehind: wb, Notifier: n, Hub: hub, log: log}, nil
		}
	}
	proc.Close(context.Background())
	wb.Close(context.Background())
	return nil, fmt.Errorf("service: notifier: %w", err)
}

// Run runs both workers until ctx ends or one of them fails, then stops the
// other; it returns the first failure (nil on a clean stop).
func (w *Workers) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	runs := []func(context.Context) error{w.Processor.Run, w.WriteBehind.Run}
	if w.Notifier != nil {
		runs = append(runs, w.Notifier.Run)
	}
	errs := make([]error, len(runs))
	for i, run := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil {
				errs[i] = err
				cancel()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close stops the workers; the write-behind runner and the notifier's
// channels drain within ctx. The hub is closed too.
func (w *Workers) Close(ctx context.Context) error {
	err := errors.Join(w.Processor.Close(ctx), w.WriteBehind.Close(ctx))
	if w.Notifier != nil {
		err = errors.Join(err, w.Notifier.Close(ctx), w.Hub.Close(ctx))
	}
	return err
}
