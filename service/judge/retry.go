package judge

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// produce sends every record and waits for all acknowledgements, retrying the
// ones that failed (duplicates in Kafka are harmless: ids are deterministic).
// It flushes instead of waiting out the producer's linger: the poll is not
// committed before these are acknowledged. Safe for concurrent use.
func (p *Processor) produce(ctx context.Context, recs []*kgo.Record) error {
	pending := recs
	return p.retry(ctx, "kafka produce", func() error {
		if len(pending) == 0 {
			return nil
		}
		var mu sync.Mutex
		var failed []*kgo.Record
		var firstErr error
		var wg sync.WaitGroup
		wg.Add(len(pending))
		for _, r := range pending {
			p.cl.Produce(ctx, r, func(r *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					failed = append(failed, r)
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
				wg.Done()
			})
		}
		if err := p.cl.Flush(ctx); err != nil {
			return err
		}
		wg.Wait() // every promise has run once Flush returned
		pending = failed
		return firstErr
	})
}

// permanent marks an error that retrying cannot fix.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// retry calls fn until it succeeds, returns a permanent error, or ctx is done;
// waits grow exponentially from backoffMin to backoffMax. While it waits, the
// processor fetches nothing more (Kafka buffers), and it never skips.
func (p *Processor) retry(ctx context.Context, what string, fn func() error) error {
	wait := p.backoffMin
	paused := false
	defer func() {
		if paused {
			p.cl.ResumeFetchTopics(ProcessorTopics()...)
		}
	}()
	for attempt := 1; ; attempt++ {
		err := fn()
		var perm permanent
		if err == nil || errors.As(err, &perm) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !paused {
			p.cl.PauseFetchTopics(ProcessorTopics()...)
			paused = true
		}
		if p.procHooks.OnRetry != nil {
			p.procHooks.OnRetry(RetryInfo{What: what, Attempt: attempt, Wait: wait, Err: err})
		}
		p.log.Warn("retrying", "what", what, "attempt", attempt, "wait", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, p.backoffMax)
	}
}
