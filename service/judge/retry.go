package judge

import (
	"context"
	"sync"
	"time"

	"github.com/dabom/dpcs/internal/backoff"
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

// retry calls fn until it succeeds, returns an error marked
// backoff.Permanent, or ctx is done, waiting (internal/backoff) from
// backoffMin doubling to backoffMax between attempts. Nothing is fetched
// meanwhile: the consumer polls only between batches; Kafka buffers, and
// nothing is skipped.
func (p *Processor) retry(ctx context.Context, what string, fn func() error) error {
	return backoff.Retry(ctx, backoff.Policy{Min: p.backoffMin, Max: p.backoffMax}, fn, func(attempt int, wait time.Duration, err error) {
		if p.procHooks.OnRetry != nil {
			p.procHooks.OnRetry(RetryInfo{What: what, Attempt: attempt, Wait: wait, Err: err})
		}
		p.log.Warn("retrying", "what", what, "attempt", attempt, "wait", wait, "err", err)
	})
}
