package writebehind

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/consumer"
	"github.com/dabom/dpcs/envelope/kafkarecord"
)

// Headers a Runner adds to a dead-lettered record (kafkarecord.DeadLetter: the
// original key, value and headers are kept).
const (
	HeaderDLTReason    = kafkarecord.HeaderDLTReason    // why the record can never be written
	HeaderDLTTopic     = kafkarecord.HeaderDLTTopic     // the topic it was consumed from
	HeaderDLTPartition = kafkarecord.HeaderDLTPartition // its partition, decimal
	HeaderDLTOffset    = kafkarecord.HeaderDLTOffset    // its offset, decimal
)

// Decoder turns a consumed record into the item to write. An error means the
// record can never be written: it goes to the dead-letter topic.
type Decoder[T any] func(*kgo.Record) (T, error)

type entry[T any] struct {
	slot[T]
	rec *kgo.Record
}

// Runner consumes a topic in a consumer group, decodes each record, writes
// the items in batches with a Writer, and commits offsets only after the
// batch was written: at least once, nothing lost. The Kafka side is
// package envelope/consumer's lifecycle (configured with WithConsumer);
// the Runner is its handler.
//
//   - Batches: the batch size (WithBatchSize, 100) or the interval since the
//     oldest buffered record (WithInterval, 5 s), whichever comes first.
//   - Fetches wait on the broker up to 250 ms for 256 KiB of records
//     (consumer.WithFetchWait; WithConsumer changes it): at moderate rates
//     a poll then carries a good part of a batch, not the few records
//     produced since the last one.
//   - Database failing: fetching pauses, nothing is committed, and the same
//     batch is retried with exponential backoff (WithBackoff, 100 ms … 30 s)
//     for as long as it takes; after a successful retry the batch is
//     committed and fetching resumes. The group membership stays alive
//     meanwhile, and rebalances may run between attempts.
//   - A record that can never be written, because it does not decode or
//     because the writer rejects it (see Writer), goes to the dead-letter
//     topic ("<topic>.DLT", consumer.WithDLT) with a dlt-reason header; the
//     rest of its batch is written and committed normally.
//   - Rebalances: the client blocks rebalances while a batch is in hand;
//     on revoke the runner tries once more to write and commit what it
//     holds, and otherwise leaves it uncommitted for the partition's next
//     owner.
//   - A commit the broker refuses (the batch is written) is retried after a
//     backoff and with every later commit, without writing again, until it
//     succeeds or the partition is revoked: a consumer of the committed
//     offsets (a Redis recovery waiting for the write-behind) sees the end.
//
// The writer must tolerate the same items again (insert-ignore on a unique
// key): records written but not yet committed before a crash or a failed
// commit are delivered again.
type Runner[T any] struct {
	c      *consumer.Consumer
	decode Decoder[T]
	w      Writer[T]
	hooks  Hooks

	// cur is the batch being written and entries its items' states, kept
	// across the consumer's retries of it (what was written is not written
	// again). The consumer calls the handler and the hooks that read them
	// one at a time.
	cur     *consumer.Batch
	entries map[*kgo.Record]*entry[T]
}

// NewRunner returns a runner writing the records of usage-persist (see
// WithConsumer for another topic) with w, decoded by decode. kopts configure
// the Kafka client (kgo.SeedBrokers and whatever else the deployment needs);
// the consumer adds its group, topic, kgo.DisableAutoCommit,
// kgo.BlockRebalanceOnPoll and its partition callbacks, which must not be
// overridden. The client is created here; Run starts consuming.
func NewRunner[T any](decode Decoder[T], w Writer[T], kopts []kgo.Opt, opts ...Option) (*Runner[T], error) {
	if decode == nil || w == nil {
		return nil, fmt.Errorf("%w: nil decoder or writer", ErrInvalid)
	}
	cfg := defaults()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	r := &Runner[T]{decode: decode, w: w, hooks: cfg.hooks}
	copts := append([]consumer.Option{
		consumer.WithGroup(DefaultGroup),
		consumer.WithTopics(envelope.TopicUsagePersist),
		consumer.WithBatch(cfg.batchSize, cfg.interval),
		consumer.WithFetchWait(defaultFetchWait, defaultFetchMinBytes),
		consumer.WithBackoff(cfg.backoff.Min, cfg.backoff.Max, cfg.backoff.Jitter),
		consumer.WithLogger(cfg.log),
		consumer.WithHooks(r.consumerHooks()),
	}, cfg.consumer...)
	c, err := consumer.New(consumer.HandlerFunc(r.handle), kopts, copts...)
	if err != nil {
		return nil, runnerErr(err)
	}
	r.c = c
	return r, nil
}

// Run consumes until ctx ends or Close is called, then drains: it keeps
// trying to write and commit what it holds (bounded by Close's context, or
// by consumer.WithDrainTimeout, 30 s, after ctx ended), leaves the group
// and closes the client. It returns nil after a complete drain; an error
// wrapping ErrNotWritten if records were left uncommitted (they are
// redelivered to the group). Run may be called once.
func (r *Runner[T]) Run(ctx context.Context) error { return runnerErr(r.c.Run(ctx)) }

// Close stops Run and waits until it has drained (bounded by ctx) and
// closed the client; it returns what Run returned. Without Run, it closes
// the client.
func (r *Runner[T]) Close(ctx context.Context) error { return runnerErr(r.c.Close(ctx)) }

// runnerErr maps the consumer's errors onto the package's.
func runnerErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, consumer.ErrUncommitted):
		return fmt.Errorf("%w: %w", ErrNotWritten, err)
	case errors.Is(err, consumer.ErrInvalid):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return fmt.Errorf("writebehind: %w", err)
}

// handle makes one attempt to write a batch: the records not written yet
// (decoded the first time the batch is seen), isolating the items the
// writer rejects; those and the undecodable go to the dead-letter topic.
func (r *Runner[T]) handle(ctx context.Context, b *consumer.Batch) error {
	if r.cur != b {
		r.cur, r.entries = b, make(map[*kgo.Record]*entry[T], len(b.Records))
	}
	ss := make([]*slot[T], len(b.Records))
	for i, rec := range b.Records {
		e := r.entries[rec]
		if e == nil {
			e = &entry[T]{rec: rec}
			if item, err := r.decode(rec); err != nil {
				e.state, e.reason = rejected, err
			} else {
				e.item = item
			}
			r.entries[rec] = e
		}
		ss[i] = &e.slot
	}
	if b.Attempt() > 1 && r.hooks.OnRetry != nil {
		r.hooks.OnRetry(RetryInfo{Items: count(ss, pending) + count(ss, rejected), Attempt: b.Attempt()})
	}
	if err := writeOnce(ctx, r.w, ss, true); err != nil {
		return err
	}
	for _, rec := range b.Records {
		if e := r.entries[rec]; e.state == rejected {
			b.DeadLetter(rec, e.reason)
			e.state = handled
		}
	}
	return nil
}

// left counts the current batch's items not yet written or dead-lettered.
func (r *Runner[T]) left(step string) int {
	if r.cur == nil {
		return 0
	}
	n := 0
	for _, rec := range r.cur.Records {
		e := r.entries[rec]
		switch {
		case e == nil, e.state == pending, e.state == rejected:
			n++
		case e.state == handled && step == consumer.StepDeadLetter:
			n++
		}
	}
	return n
}

// consumerHooks turns the consumer's events into the runner's Hooks.
func (r *Runner[T]) consumerHooks() consumer.Hooks {
	h := r.hooks
	pause := func(f func(PauseInfo)) func(consumer.PauseInfo) {
		if f == nil {
			return nil
		}
		return func(i consumer.PauseInfo) { f(PauseInfo{Topics: i.Topics}) }
	}
	return consumer.Hooks{
		OnBatch: func(i consumer.BatchInfo) {
			r.cur, r.entries = nil, nil
			if h.OnFlush != nil {
				h.OnFlush(FlushInfo{Items: i.Records - i.DeadLettered, Rejected: i.DeadLettered, Attempts: i.Attempts,
					Duration: i.Duration, Reason: i.Reason})
			}
		},
		OnRetry: func(i consumer.RetryInfo) {
			if h.OnError != nil {
				h.OnError(ErrorInfo{Items: r.left(i.Step), Attempt: i.Attempt, Err: i.Err, Backoff: i.Wait})
			}
		},
		OnDeadLetter: func(i consumer.DeadLetterInfo) {
			if h.OnReject != nil {
				h.OnReject(RejectInfo{Reason: i.Cause, Record: i.Record})
			}
		},
		OnCommit: func(i consumer.CommitInfo) {
			if h.OnCommit != nil {
				h.OnCommit(CommitInfo{Records: i.Records, Err: i.Err})
			}
		},
		OnPause:  pause(h.OnPause),
		OnResume: pause(h.OnResume),
	}
}
