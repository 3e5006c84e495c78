package consumer

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Batch is a set of consumed records handed to a Handler. It is committed
// only after the handler (and the finish step it set, if any) succeeded and
// its dead letters were acknowledged.
//
// When a step fails, the same *Batch is handed to the handler again: a
// handler may keep state per batch (keyed by the *Batch or by its records'
// pointers) so that a retry resumes instead of starting over. Between
// attempts the batch never grows; it shrinks when the group revokes
// partitions whose records it holds (Records then lacks them, and their
// dead letters are forgotten).
type Batch struct {
	// Records are the batch's records in the order they were polled: per
	// partition, in offset order.
	Records []*kgo.Record
	// Lag is how many records the partitions of the batch's last poll still
	// held after it (high watermark − next offset, summed), as the fetch
	// reported.
	Lag int64

	attempts int
	reason   string
	step     step
	started  time.Time
	dead     []*deadLetter
	finish   func(context.Context) error
	dlCount  int // dead letters acknowledged
}

type step uint8

const (
	stepHandle     step = iota // the handler has not succeeded yet
	stepFinish                 // handled; its finish step (if any) is due
	stepDeadLetter             // finished; its dead letters are due
	stepCommit                 // dead-lettered; its commit is due
	stepDone                   // committed (or its commit kept for a retry)
)

type deadLetter struct {
	rec   *kgo.Record
	cause error
	extra []kgo.RecordHeader
	sent  bool
}

// Attempt is how many times the handler has been called with b, this call
// included: 1 the first time.
func (b *Batch) Attempt() int { return b.attempts }

// Reason says what made this attempt (see BatchInfo.Reason).
func (b *Batch) Reason() string { return b.reason }

// DeadLetter queues r, one of b.Records, for the dead-letter topic (WithDLT)
// with the cause in the dlt-reason header, the origin in dlt-topic,
// dlt-partition and dlt-offset, and the extra headers
// (kafkarecord.DeadLetter). Dead letters are produced after the handler
// (and the finish step) succeeded and before the commit, retried until the
// broker acknowledges them. Queuing r again replaces its cause and headers,
// so a handler that dead-letters again on a retry sends r once. The dead
// letter is produced in r.Context, so a tracing client continues r's
// trace. DeadLetter may be called from Handle and from the finish step, not
// concurrently.
func (b *Batch) DeadLetter(r *kgo.Record, cause error, extra ...kgo.RecordHeader) {
	for _, d := range b.dead {
		if d.rec == r {
			d.cause, d.extra, d.sent = cause, extra, false
			return
		}
	}
	b.dead = append(b.dead, &deadLetter{rec: r, cause: cause, extra: extra})
}

// Finish sets a step to run after Handle returned nil, asynchronously: while
// it runs, the consumer polls and handles the next batch (its finish step
// waits for this one: batches are committed in order), and rebalances wait
// until no finish step is outstanding (WithRebalanceInterval bounds how long
// they wait). This is how a handler that produces outputs overlaps waiting
// for their acknowledgements with handling the next poll. The batch is
// committed once f returns nil; an error is retried with backoff (f must
// then resume its work, not start it again), and an error marked Permanent
// stops Run. The finish step set by an attempt that returned an error is
// dropped; the last one set by the successful attempt runs.
func (b *Batch) Finish(f func(ctx context.Context) error) { b.finish = f }

// drop removes the records of the gone partitions and their dead letters;
// it returns how many records went.
func (b *Batch) drop(gone func(*kgo.Record) bool) int {
	kept := b.Records[:0]
	for _, r := range b.Records {
		if !gone(r) {
			kept = append(kept, r)
		}
	}
	n := len(b.Records) - len(kept)
	clear(b.Records[len(kept):])
	b.Records = kept
	dead := b.dead[:0]
	for _, d := range b.dead {
		if !gone(d.rec) {
			dead = append(dead, d)
		}
	}
	clear(b.dead[len(dead):])
	b.dead = dead
	return n
}
