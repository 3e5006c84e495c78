// Package consumer is the one Kafka consumer-group lifecycle of DPCS: poll,
// hand batches of records to a Handler, dead-letter what it rejects, commit
// only after success, pause and back off while a dependency fails, finish
// what it can before the group takes partitions away, and drain on Close.
// The notifier (notify.Notifier) and the write-behind (writebehind.Runner)
// run on it, and so can any consumer of the envelope topics.
//
// # Use
//
//	h := consumer.HandlerFunc(func(ctx context.Context, b *consumer.Batch) error {
//		for _, r := range b.Records {
//			ev, err := kafkarecord.Decode(r)
//			if err != nil {
//				b.DeadLetter(r, err) // to "<topic>.DLT", before the commit
//				continue
//			}
//			if err := store(ctx, ev); err != nil {
//				return err // fetching pauses; the same batch comes again after a backoff
//			}
//		}
//		return nil // the batch is committed
//	})
//	c, err := consumer.New(h, []kgo.Opt{kgo.SeedBrokers(brokers...)},
//		consumer.WithGroup("my-group"), consumer.WithTopics(envelope.TopicNotificationEvents))
//	go c.Run(ctx)
//	…
//	err = c.Close(shutdownCtx) // finishes and commits what it holds, leaves the group
//
// # What it guarantees
//
//   - At least once, nothing skipped: a batch is committed only after the
//     handler returned nil, its finish step (below) succeeded and its dead
//     letters were acknowledged, and batches are committed in order. A
//     crash redelivers what was not committed, so handlers must tolerate
//     records again (dedupe by event id, insert-ignore on a unique key).
//   - A failing dependency pauses: when Handle returns an error, fetching
//     of every consumed topic pauses (Hooks.OnPause) and the same *Batch is
//     handed to Handle again after a backoff (WithBackoff: 100 ms doubling
//     to 5 s), for as long as it takes; nothing of it or after it is
//     committed meanwhile. Rebalances may run between attempts. An error
//     marked Permanent stops Run instead.
//   - Dead letters: Batch.DeadLetter sends a record to the dead-letter
//     topic (WithDLT; default "<topic>.DLT") with headers dlt-reason,
//     dlt-topic, dlt-partition and dlt-offset besides its own
//     (kafkarecord.DeadLetter), before the batch is committed; the
//     partition keeps flowing.
//   - A commit the broker refuses is kept and retried after a backoff and
//     with every later commit (offsets only move forward), without handling
//     the batch again, until it succeeds or the partition is revoked.
//   - Rebalances: the client blocks rebalances while a batch is in hand
//     (kgo.BlockRebalanceOnPoll). When the group revokes partitions whose
//     records the consumer holds, it makes one attempt (at most 5 s, or the
//     batch interval when shorter) to finish and commit that batch;
//     otherwise it drops those records uncommitted, for the next owner.
//     Lost partitions (a fatal group error) are dropped at once.
//     Hooks.OnRevoked and OnLost name the partitions, for handlers that
//     keep state per partition.
//   - Close(ctx) drains: it finishes and commits what the consumer holds,
//     bounded by ctx, then leaves the group and closes the client; it
//     reports records left uncommitted (ErrUncommitted). Every goroutine
//     the consumer starts ends by then.
//
// # Batches
//
// By default each non-empty poll (at most WithMaxPoll records, 500) is one
// batch. WithBatch(size, interval) accumulates across polls instead: a
// batch is handled when it holds size records or interval after its first
// record arrived — the write-behind's "100 records or 5 s".
//
// # Overlapping the next poll with the acknowledgements of this one
//
// A handler that produces outputs must not have its batch committed before
// the outputs are acknowledged, but waiting for them before polling again
// halves throughput. Batch.Finish sets a step the consumer runs
// asynchronously after Handle returned: the loop polls and handles the next
// batch meanwhile; that batch's finish step, dead letters and commit wait
// for this one's, so commits stay in poll order. Rebalances are let in only
// when no finish step is outstanding, at least every WithRebalanceInterval
// (250 ms). The processor's shape:
//
//	func (p *Processor) Handle(ctx context.Context, b *consumer.Batch) error {
//		outs, err := p.judge(ctx, b) // dead letters through b.DeadLetter
//		if err != nil {
//			return err // Redis down: paused, backed off, judged again
//		}
//		acks := p.produce(outs) // asynchronous
//		b.Finish(func(ctx context.Context) error {
//			return acks.wait(ctx) // flush, wait, produce the failed ones again
//		})
//		return nil
//	}
//
// # Observability
//
// Hooks (WithHooks, which may be given several times) carry event structs:
// OnBatch, OnRetry, OnDeadLetter, OnCommit, OnPause, OnResume, OnAssigned,
// OnRevoked, OnLost. Failures are logged at Warn to an optional
// *slog.Logger (WithLogger).
package consumer
