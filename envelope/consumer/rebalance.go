package consumer

import (
	"context"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// revokeBudget bounds the one attempt to finish a batch before the group
// takes its partitions (with WithBatch, the batch interval when shorter):
// the whole group waits for it.
const revokeBudget = 5 * time.Second

// The partition callbacks run only while the loop waits in a poll
// (kgo.BlockRebalanceOnPoll) and never with a finish step outstanding (the
// loop allows rebalances only without one), so they never run while a
// batch is being handled or committed.

func (c *Consumer) onAssigned(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
	c.cfg.hooks.partitions(PartitionsInfo{Partitions: ps}, func(h Hooks) func(PartitionsInfo) { return h.OnAssigned })
}

// onRevoked makes one attempt, bounded by revokeBudget, to finish and
// commit the pending batch if it holds records of the revoked partitions
// (or to commit a refused commit of theirs); what is left of them is then
// dropped uncommitted, for the partitions' next owner to read again.
func (c *Consumer) onRevoked(ctx context.Context, _ *kgo.Client, ps map[string][]int32) {
	c.work.Lock()
	defer c.work.Unlock()
	gone := partitionSet(ps)
	c.mu.Lock()
	b, stopping := c.pend, c.stopping
	touched := b != nil && slices.ContainsFunc(b.Records, gone.has)
	refused := false
	for tp := range c.unacked {
		refused = refused || gone[tp]
	}
	c.mu.Unlock()
	if !stopping && (touched || refused) {
		budget := revokeBudget
		if c.cfg.batchSize > 0 {
			budget = min(budget, c.cfg.interval)
		}
		rctx, cancel := context.WithTimeout(ctx, budget)
		if touched {
			b.reason = "revoke"
			if err := c.complete(rctx, b); err != nil {
				step, cause := split(err)
				c.cfg.log.Warn("consumer: batch not finished before its partitions were revoked; left uncommitted",
					"step", step, "records", len(b.Records), "err", cause)
			} else {
				c.finished(b)
				c.release(b)
			}
		} else {
			_ = c.commit(rctx, nil, 0)
		}
		cancel()
	}
	dropped := c.forget(gone)
	c.cfg.hooks.partitions(PartitionsInfo{Partitions: ps, Dropped: dropped}, func(h Hooks) func(PartitionsInfo) { return h.OnRevoked })
}

// onLost drops what the consumer holds of the lost partitions, uncommitted:
// the member left the group (a fatal group error), commits would fail.
func (c *Consumer) onLost(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
	c.work.Lock()
	defer c.work.Unlock()
	dropped := c.forget(partitionSet(ps))
	c.cfg.hooks.partitions(PartitionsInfo{Partitions: ps, Dropped: dropped}, func(h Hooks) func(PartitionsInfo) { return h.OnLost })
}

type partitions map[topicPartition]bool

func partitionSet(ps map[string][]int32) partitions {
	set := partitions{}
	for t, parts := range ps {
		for _, p := range parts {
			set[topicPartition{t, p}] = true
		}
	}
	return set
}

func (s partitions) has(r *kgo.Record) bool { return s[topicPartition{r.Topic, r.Partition}] }

// forget drops the records and refused commits of the gone partitions and
// returns how many records went.
func (c *Consumer) forget(gone partitions) int {
	c.mu.Lock()
	n := 0
	if c.pend != nil {
		n += c.pend.drop(gone.has)
		if len(c.pend.Records) == 0 {
			c.pend = nil
		}
	}
	held := c.held[:0]
	for _, r := range c.held {
		if !gone.has(r) {
			held = append(held, r)
		}
	}
	n += len(c.held) - len(held)
	clear(c.held[len(held):])
	c.held = held
	for tp := range c.unacked {
		if gone[tp] {
			delete(c.unacked, tp)
		}
	}
	resume := false
	if c.pend == nil {
		resume = c.nextLocked()
	}
	c.countLocked()
	c.mu.Unlock()
	if resume {
		c.resume()
	}
	return n
}
