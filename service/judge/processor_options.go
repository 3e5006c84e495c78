package judge

import (
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/dabom/dpcs/envelope/consumer"
)

// The options only a Processor takes (ProcessorOpt); the shared ones and
// Decisions' are in options.go.

// WithTracerProvider traces the processor with tp: every consumed record is
// judged in a span of its own ("usage-events process", "policy-updated
// process"; decision, family, member and the engine batch it was judged in
// as attributes), a child of the trace the record carries (record.Context,
// set by the Kafka client's tracing hooks: give the processor's kgo options
// the service's TracingKafkaOpts), and the records it causes (usage-persist,
// notification-events, dead letters) are produced in that span, so their
// consumers continue the same trace. Default: no tracing (a no-op
// provider costs nothing on the judging path).
func WithTracerProvider(tp trace.TracerProvider) ProcessorOpt {
	return processorOpt(func(c *processorConfig) error {
		if tp == nil {
			return errors.New("judge: nil tracer provider")
		}
		c.tracer = nil
		if _, off := tp.(noop.TracerProvider); !off {
			c.tracer = tp.Tracer(TracerName)
		}
		return nil
	})
}

// WithProcessorHooks sets the processor's hooks. Default: none.
func WithProcessorHooks(h ProcessorHooks) ProcessorOpt {
	return processorOpt(func(c *processorConfig) error { c.hooks = h; return nil })
}

// WithMaxPollRecords bounds the records judged per poll. Larger polls
// amortise the per-poll round trips (commit, flush) under load; a quiet
// stream yields small polls whatever the bound. Default: 2000.
func WithMaxPollRecords(n int) ProcessorOpt {
	return processorOpt(func(c *processorConfig) error {
		if n < 1 {
			return errors.New("judge: max poll records must be ≥ 1")
		}
		c.maxPoll = n
		return nil
	})
}

// WithApplyConcurrency splits each poll's usage events into up to n groups
// of whole partitions, judged concurrently (one batch each, on separate
// connections) with each group's outputs produced as soon as it is judged.
// A family's events share a partition, so they stay in one group, in
// order. A poll makes no more groups than it has WithMinGroupEvents
// events for. Default: 4; 1 judges a poll in one batch.
func WithApplyConcurrency(n int) ProcessorOpt {
	return processorOpt(func(c *processorConfig) error {
		if n < 1 {
			return errors.New("judge: apply concurrency must be ≥ 1")
		}
		c.groups = n
		return nil
	})
}

// WithMinGroupEvents makes a poll's groups (WithApplyConcurrency) hold n
// usage events or more each: a poll of fewer than 2n is judged in one
// batch, since at moderate rates each group's script call and produce
// request would carry a handful of events. Default: 64.
func WithMinGroupEvents(n int) ProcessorOpt {
	return processorOpt(func(c *processorConfig) error {
		if n < 1 {
			return errors.New("judge: min group events must be ≥ 1")
		}
		c.minGroup = n
		return nil
	})
}

// WithFetchWait makes each fetch of the processor's consumer wait on the
// broker until minBytes of records are there or wait has passed
// (consumer.WithFetchWait, which says the bounds): at moderate rates a poll
// then carries a batch, and its fetch, script calls, produce requests and
// commit are paid per batch; an event waits at most wait longer for its
// decision. Default: 10 ms (the least Kafka's client takes), 64 KiB.
func WithFetchWait(wait time.Duration, minBytes int32) ProcessorOpt {
	return processorOpt(func(c *processorConfig) error { c.fetch = consumer.WithFetchWait(wait, minBytes); return nil })
}

// WithCommitEvery commits the processor's offsets at most every d
// (consumer.WithCommitEvery): at moderate rates each poll carries a few
// events, and an offset commit per poll is a Kafka request per poll. What a
// crash leaves uncommitted (at most d of judged events) is judged again by
// the partitions' next owner and answered from the engine's dedupe records:
// nothing is charged twice. A failing batch (Redis lost, a rebuild) commits
// at once, so a recovery's drain sees every judged event's offset within its
// quiet period. 0 commits every poll. Default: 100 ms.
func WithCommitEvery(d time.Duration) ProcessorOpt {
	return processorOpt(func(c *processorConfig) error {
		if d < 0 || d > time.Minute {
			return errors.New("judge: commit interval must be 0 to 1m")
		}
		c.commitEvery = d
		return nil
	})
}

// WithRetryBackoff sets the first and the largest wait between attempts
// when Redis or Kafka fail. Default: 100 ms, 5 s.
func WithRetryBackoff(first, max time.Duration) ProcessorOpt {
	return processorOpt(func(c *processorConfig) error {
		if first <= 0 || max < first {
			return errors.New("judge: retry backoff must satisfy 0 < first ≤ max")
		}
		c.backoffMin, c.backoffMax = first, max
		return nil
	})
}
