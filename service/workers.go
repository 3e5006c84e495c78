package service

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/writebehind"
)

// WorkersConfig tunes the processor deployable. The zero value is the default.
type WorkersConfig struct {
	// Logger receives both workers' logs. Default: discard.
	Logger *slog.Logger
	// Processor and WriteBehind are extra options of each worker.
	Processor   []ProcessorOption
	WriteBehind []writebehind.Option
}

// Workers is the processor deployable of SPEC §8: the processor judging
// usage-events and policy-updated, and in the same process the write-behind
// runner moving usage-persist into the usage_record table.
type Workers struct {
	Processor   *Processor
	WriteBehind *writebehind.Runner[writebehind.UsageRecord]
	log         *slog.Logger
}

// NewWorkers builds both workers. db must hold usage_record
// (writebehind.MigrateUsage); kopts name the brokers.
func NewWorkers(dec Decider, db *sql.DB, kopts []kgo.Opt, cfg WorkersConfig) (*Workers, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	proc, err := NewProcessor(dec, kopts, append([]ProcessorOption{WithProcessorLogger(log.With("worker", "processor"))}, cfg.Processor...)...)
	if err != nil {
		return nil, err
	}
	w, err := writebehind.NewUsageWriter(db)
	if err != nil {
		proc.Close()
		return nil, fmt.Errorf("service: usage writer: %w", err)
	}
	wb, err := writebehind.NewRunner(writebehind.DecodeUsageRecord, w, kopts,
		append([]writebehind.Option{writebehind.WithLogger(log.With("worker", "write-behind"))}, cfg.WriteBehind...)...)
	if err != nil {
		proc.Close()
		return nil, fmt.Errorf("service: write-behind runner: %w", err)
	}
	return &Workers{Processor: proc, WriteBehind: wb, log: log}, nil
}

// Run runs both workers until ctx ends or one of them fails, then stops the
// other; it returns the first failure (nil on a clean stop).
func (w *Workers) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, run := range []func(context.Context) error{w.Processor.Run, w.WriteBehind.Run} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil {
				errs[i] = err
				cancel()
			}
			if i == 0 {
				// Run returns with the client still open; close it here, in
				// the goroutine that owned the loop.
				w.Processor.Close()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close stops both workers; the write-behind runner drains within ctx.
func (w *Workers) Close(ctx context.Context) error {
	w.Processor.Close()
	return w.WriteBehind.Close(ctx)
}
