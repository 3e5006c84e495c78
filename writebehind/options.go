package writebehind

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope/consumer"
	"github.com/dabom/dpcs/internal/backoff"
)

// FlushInfo is passed to Hooks.OnFlush after a batch was written (or, in a
// Runner, written, dead-lettered and committed).
type FlushInfo struct {
	Items    int           // items written
	Rejected int           // items rejected (dead-lettered) instead
	Attempts int           // write attempts it took, ≥ 1
	Duration time.Duration // from the first attempt to success
	Reason   string        // "size", "interval", "flush", "close", "revoke", "retry"
}

// ErrorInfo is passed to Hooks.OnError when a write attempt failed and the
// batch will be retried after Backoff.
type ErrorInfo struct {
	Items   int // items still to write
	Attempt int // the failed attempt, from 1
	Err     error
	Backoff time.Duration
}

// RetryInfo is passed to Hooks.OnRetry just before a retry.
type RetryInfo struct {
	Items   int
	Attempt int // the attempt about to start, ≥ 2
}

// RejectInfo is passed to Hooks.OnReject for every item that can never be
// written and was handed to the reject handler (a Runner: the DLT).
type RejectInfo struct {
	Reason error
	Record *kgo.Record // the Kafka record, for a Runner; nil in a Sink
}

// PauseInfo is passed to Hooks.OnPause and Hooks.OnResume (Runner only).
type PauseInfo struct {
	Topics []string // the topics whose fetching paused or resumed
}

// CommitInfo is passed to Hooks.OnCommit after a Runner committed (or
// failed to commit) the offsets of a written batch.
type CommitInfo struct {
	Records int
	Err     error
}

// Hooks are optional callbacks for observability; nil funcs are skipped.
// They run on the sink's or runner's goroutine and must be quick.
type Hooks struct {
	OnFlush  func(FlushInfo)
	OnError  func(ErrorInfo)
	OnRetry  func(RetryInfo)
	OnReject func(RejectInfo)
	OnPause  func(PauseInfo)
	OnResume func(PauseInfo)
	OnCommit func(CommitInfo)
}

type config struct {
	batchSize int
	interval  time.Duration
	buffer    int
	backoff   backoff.Policy
	hooks     Hooks
	log       *slog.Logger
	reject    func(ctx context.Context, item any, reason error) error
	consumer  []consumer.Option
}

// jitter is the random fraction of each backoff wait.
const jitter = 0.2

func defaults() config {
	return config{
		batchSize: 100,
		interval:  5 * time.Second,
		backoff:   backoff.Policy{Min: 100 * time.Millisecond, Max: 30 * time.Second, Jitter: jitter},
		log:       slog.New(slog.DiscardHandler),
	}
}

// A Runner's fetches wait up to defaultFetchWait for defaultFetchMinBytes
// of records (consumer.WithFetchWait).
const (
	defaultFetchWait     = 250 * time.Millisecond
	defaultFetchMinBytes = 256 << 10
)

// DefaultGroup is the Runner's default consumer group.
const DefaultGroup = "usage-persist-writer"

// Option configures a Sink or a Runner; each option says which it applies to
// (the others ignore it).
type Option func(*config) error

// WithBatchSize sets how many items make a batch: a batch is written as soon
// as it is full. Sink and Runner. Default: 100.
func WithBatchSize(n int) Option {
	return func(c *config) error {
		if n < 1 || n > 1_000_000 {
			return fmt.Errorf("%w: batch size must be 1..1000000", ErrInvalid)
		}
		c.batchSize = n
		return nil
	}
}

// WithInterval sets the longest an item waits for its batch to fill: a
// non-empty batch is written this long after its first item arrived. Sink
// and Runner. Default: 5 s.
func WithInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: interval must be > 0", ErrInvalid)
		}
		c.interval = d
		return nil
	}
}

// WithBuffer sets how many added items may wait beyond the batch being
// formed or written; Add blocks while the buffer is full (back-pressure).
// Sink only. Default: 10 × the batch size.
func WithBuffer(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: buffer must be ≥ 1", ErrInvalid)
		}
		c.buffer = n
		return nil
	}
}

// WithBackoff sets the retry delays after a failed write: min, doubling per
// attempt up to max, each less up to 20 % jitter. Sink and Runner (its
// consumer's backoff). Default: 100 ms to 30 s.
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) error {
		p := backoff.Policy{Min: min, Max: max, Jitter: jitter}
		if err := p.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		c.backoff = p
		return nil
	}
}

// WithHooks sets observability callbacks. Sink and Runner. Default: none.
func WithHooks(h Hooks) Option {
	return func(c *config) error { c.hooks = h; return nil }
}

// WithLogger sets where failures are logged (at Warn; successes are not
// logged). Sink and Runner. Default: discarded.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalid)
		}
		c.log = l
		return nil
	}
}

// WithReject sets what a Sink does with an item its Writer reports as never
// writable (see Writer): reject is called with it and the reason, and the
// item is dropped once reject returns nil (an error is retried like a
// failed write). Without it, such errors are retried like any other: a
// Sink never drops an item on its own. Sink only (a Runner dead-letters).
// Default: none.
func WithReject[T any](reject func(ctx context.Context, item T, reason error) error) Option {
	return func(c *config) error {
		if reject == nil {
			return fmt.Errorf("%w: nil reject func", ErrInvalid)
		}
		c.reject = func(ctx context.Context, item any, reason error) error {
			t, ok := item.(T)
			if !ok {
				return fmt.Errorf("%w: WithReject type does not match the sink's items", ErrInvalid)
			}
			return reject(ctx, t, reason)
		}
		return nil
	}
}

// WithConsumer configures a Runner's Kafka consumer (package
// envelope/consumer): its group, topic, dead-letter topic, drain timeout,
// hooks and the rest, e.g. WithConsumer(consumer.WithGroup("g")). The
// Runner's defaults come first — group DefaultGroup, topic usage-persist,
// dead letters to "<topic>.DLT", batches from WithBatchSize and
// WithInterval, fetches waiting up to 250 ms for 256 KiB, backoff from WithBackoff, WithLogger's logger — and these
// options after them, so they win. Runner only; may be given more than
// once. Default: none.
func WithConsumer(opts ...consumer.Option) Option {
	return func(c *config) error {
		c.consumer = append(c.consumer, opts...)
		return nil
	}
}

func (c *config) apply(opts []Option) error {
	for _, o := range opts {
		if err := o(c); err != nil {
			return err
		}
	}
	if c.buffer == 0 {
		c.buffer = 10 * c.batchSize
	}
	return nil
}
