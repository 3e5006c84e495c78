package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/dabom/dpcs/internal/backoff"
)

// Option configures a Consumer. Options are applied in order; for the
// options that set a value the last one wins, WithHooks and WithBeforeClose
// add. A worker built on a Consumer (notify.Notifier, writebehind.Runner)
// applies its own defaults first and the caller's options after them.
type Option func(*config) error

type config struct {
	group          string
	topics         []string
	dlt            string
	maxPoll        int
	batchSize      int
	interval       time.Duration
	backoff        backoff.Policy
	drainTimeout   time.Duration
	rebalanceEvery time.Duration
	readCommitted  bool
	fetchWait      time.Duration
	fetchMinBytes  int32
	commitEvery    time.Duration
	log            *slog.Logger
	hooks          hookList
	beforeClose    []func(context.Context) error
}

func defaults() config {
	return config{
		maxPoll:        500,
		backoff:        backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second},
		drainTimeout:   30 * time.Second,
		rebalanceEvery: 250 * time.Millisecond,
		log:            slog.New(slog.DiscardHandler),
	}
}

func (c *config) apply(opts []Option) error {
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return err
		}
	}
	if c.group == "" {
		return fmt.Errorf("%w: no consumer group (WithGroup)", ErrInvalid)
	}
	if len(c.topics) == 0 {
		return fmt.Errorf("%w: no topics (WithTopics)", ErrInvalid)
	}
	return nil
}

// WithGroup sets the consumer group. Required: there is no default.
func WithGroup(group string) Option {
	return func(c *config) error {
		if group == "" {
			return fmt.Errorf("%w: empty group", ErrInvalid)
		}
		c.group = group
		return nil
	}
}

// WithTopics sets the topics consumed (replacing earlier ones). Required:
// there is no default.
func WithTopics(topics ...string) Option {
	return func(c *config) error {
		if len(topics) == 0 {
			return fmt.Errorf("%w: no topics", ErrInvalid)
		}
		for _, t := range topics {
			if t == "" {
				return fmt.Errorf("%w: empty topic", ErrInvalid)
			}
		}
		c.topics = append([]string(nil), topics...)
		return nil
	}
}

// WithDLT sends every dead letter (Batch.DeadLetter) to topic. Default: the
// dead-letter topic of the record's own topic, envelope.DLT(topic)
// ("<topic>.DLT").
func WithDLT(topic string) Option {
	return func(c *config) error {
		if topic == "" {
			return fmt.Errorf("%w: empty DLT topic", ErrInvalid)
		}
		c.dlt = topic
		return nil
	}
}

// WithMaxPoll caps the records taken from one poll; without WithBatch each
// poll is one batch, so this bounds a batch. Larger polls cost fewer round
// trips per record and replay more after a crash. Default: 500.
func WithMaxPoll(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: max poll must be ≥ 1", ErrInvalid)
		}
		c.maxPoll = n
		return nil
	}
}

// WithBatch accumulates records across polls: a batch is handled when it
// holds size records or interval after its first record arrived, whichever
// comes first (polls then take at most the room left). Default: off, each
// non-empty poll is a batch.
func WithBatch(size int, interval time.Duration) Option {
	return func(c *config) error {
		if size < 1 || size > 1_000_000 {
			return fmt.Errorf("%w: batch size must be 1..1000000", ErrInvalid)
		}
		if interval <= 0 {
			return fmt.Errorf("%w: batch interval must be > 0", ErrInvalid)
		}
		c.batchSize, c.interval = size, interval
		return nil
	}
}

// WithBackoff sets the waits between attempts of a failing step (the
// handler, a finish step, dead-lettering, a refused commit): from min,
// doubling per consecutive failure, up to max, each less a random fraction
// of up to jitter (0 to 1). Default: 100 ms to 5 s, no jitter.
func WithBackoff(min, max time.Duration, jitter float64) Option {
	return func(c *config) error {
		p := backoff.Policy{Min: min, Max: max, Jitter: jitter}
		if err := p.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		c.backoff = p
		return nil
	}
}

// WithDrainTimeout bounds how long a Consumer whose Run context ended keeps
// finishing and committing what it holds before it leaves the group (Close
// bounds the drain with its own context instead). Default: 30 s.
func WithDrainTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: drain timeout must be > 0", ErrInvalid)
		}
		c.drainTimeout = d
		return nil
	}
}

// WithRebalanceInterval bounds how long finish steps (Batch.Finish) may run
// back to back, holding rebalances off: after that the loop waits for the
// outstanding one and lets a rebalance in. Rebalances are also let in
// whenever no finish step is outstanding. Default: 250 ms.
func WithRebalanceInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: rebalance interval must be > 0", ErrInvalid)
		}
		c.rebalanceEvery = d
		return nil
	}
}

// WithReadCommitted consumes only committed records of transactional
// producers (records of aborted transactions are skipped). Default: off
// (read uncommitted, Kafka's default).
func WithReadCommitted() Option {
	return func(c *config) error { c.readCommitted = true; return nil }
}

// MinFetchWait is the shortest fetch wait Kafka's client accepts
// (WithFetchWait).
const MinFetchWait = 10 * time.Millisecond

// WithFetchWait makes each fetch wait on the broker until minBytes of
// records are there or wait has passed, whichever comes first
// (kgo.FetchMinBytes, kgo.FetchMaxWait): at moderate rates a poll then
// carries a batch instead of the few records that arrived since the last
// one, so the fetches, commits and the handler's per-batch work are paid
// per batch; a record waits at most wait longer. wait is MinFetchWait to
// one minute, minBytes ≥ 1. Default: the client's own (kgo: 1 byte, 5 s),
// a fetch returns as soon as anything arrived.
func WithFetchWait(wait time.Duration, minBytes int32) Option {
	return func(c *config) error {
		if wait < MinFetchWait || wait > time.Minute {
			return fmt.Errorf("%w: fetch wait must be %s to 1m", ErrInvalid, MinFetchWait)
		}
		if minBytes < 1 {
			return fmt.Errorf("%w: fetch min bytes must be ≥ 1", ErrInvalid)
		}
		c.fetchWait, c.fetchMinBytes = wait, minBytes
		return nil
	}
}

// WithCommitEvery commits offsets at most every d: a batch done sooner
// after the last commit keeps its offsets for the next one, made with a
// later batch's or when d is up (the loop's poll wakes for it). A failing
// batch, a revoke and a close commit what is kept at once: a reader of the
// committed offsets (a Redis recovery's drain) sees them as soon as the
// consumer stops handling.
// What a crash leaves uncommitted (at most d of handled batches) is read
// again by the partitions' next owner, as any uncommitted record is: for a
// handler that dedupes by record id, nothing changes but fewer commit
// requests at moderate rates, where each poll carries few records. d is 0
// (every batch commits; the default) to one minute.
func WithCommitEvery(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 || d > time.Minute {
			return fmt.Errorf("%w: commit interval must be 0 to 1m", ErrInvalid)
		}
		c.commitEvery = d
		return nil
	}
}

// WithLogger sets where the consumer logs: failures and retries at Warn,
// dead letters at Warn; successes are not logged. Default: discarded.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalid)
		}
		c.log = l
		return nil
	}
}

// WithHooks adds observability (and rebalance) callbacks; it may be given
// more than once, and every set is called, in the order given. Default:
// none.
func WithHooks(h Hooks) Option {
	return func(c *config) error { c.hooks = append(c.hooks, h); return nil }
}

// WithBeforeClose adds fn to run once the consumer has stopped and drained,
// before it flushes what was produced through Client, leaves the group and
// closes the client: work that produces through the client (a channel's
// dead letters) finishes there. fn gets the drain's context (Close's, or the
// drain timeout's); its error is joined to what Run and Close return. It may
// be given more than once; the functions run in the order given. Default:
// none.
func WithBeforeClose(fn func(ctx context.Context) error) Option {
	return func(c *config) error {
		if fn == nil {
			return fmt.Errorf("%w: nil before-close func", ErrInvalid)
		}
		c.beforeClose = append(c.beforeClose, fn)
		return nil
	}
}
