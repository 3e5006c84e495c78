package judge

import (
	"context"
	"time"

	"github.com/dabom/dpcs/internal/backoff"
)

// retry calls fn until it succeeds, returns an error marked
// backoff.Permanent, or ctx is done, waiting (internal/backoff) from
// backoffMin doubling to backoffMax between attempts. Nothing is fetched
// meanwhile: the consumer polls only between batches; Kafka buffers, and
// nothing is skipped.
func (p *Processor) retry(ctx context.Context, what string, fn func() error) error {
	return backoff.Retry(ctx, backoff.Policy{Min: p.backoffMin, Max: p.backoffMax}, fn, func(attempt int, wait time.Duration, err error) {
		if p.hooks.OnRetry != nil {
			p.hooks.OnRetry(RetryInfo{What: what, Attempt: attempt, Wait: wait, Err: err})
		}
		p.log.Warn("retrying", "what", what, "attempt", attempt, "wait", wait, "err", err)
	})
}
