package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope/kafkarecord"
)

type topicPartition struct {
	topic     string
	partition int32
}

// keep holds b's offsets for a later commit (WithCommitEvery) when the
// last commit was sent less than the interval ago, and says whether it did.
// A batch finished by a revoke or a close, or after a refused commit, is
// committed at once.
func (c *Consumer) keep(b *Batch) bool {
	if c.cfg.commitEvery <= 0 || b.reason == "close" || b.reason == "revoke" || len(b.Records) == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	due := c.lastCommit.Add(c.cfg.commitEvery)
	if c.stopping || c.commitFailures > 0 || !time.Now().Before(due) {
		return false
	}
	if c.unacked == nil {
		c.unacked = map[topicPartition]*kgo.Record{}
	}
	latest(c.unacked, b.Records)
	if c.kept == nil {
		c.kept = map[topicPartition]int{}
	}
	for _, r := range b.Records {
		c.kept[topicPartition{r.Topic, r.Partition}]++
	}
	c.commitAt = due
	return true
}

// latest records in last, per partition, the last of recs.
func latest(last map[topicPartition]*kgo.Record, recs []*kgo.Record) {
	for _, r := range recs {
		tp := topicPartition{r.Topic, r.Partition}
		if prev, ok := last[tp]; !ok || r.Offset > prev.Offset {
			last[tp] = r
		}
	}
}

// commit commits recs (the records of a batch, n of them) together with any
// earlier commit the broker refused or kept for later (keep), the last
// record per partition. On failure the batch is done all the same: the
// refused offsets are kept and committed again after a backoff and with
// every later commit, until that succeeds or their partitions go. A
// consumer of the committed offsets (a Redis recovery waiting for the
// write-behind) sees the end that way.
func (c *Consumer) commit(ctx context.Context, recs []*kgo.Record, n int) error {
	c.mu.Lock()
	last := make(map[topicPartition]*kgo.Record, len(c.unacked)+1)
	for tp, r := range c.unacked {
		last[tp] = r
	}
	for _, k := range c.kept {
		n += k
	}
	clear(c.kept)
	c.lastCommit = time.Now()
	c.mu.Unlock()
	latest(last, recs)
	if len(last) == 0 {
		return nil
	}
	all := make([]*kgo.Record, 0, len(last))
	offsets := map[string]map[int32]int64{}
	for tp, r := range last {
		all = append(all, r)
		if offsets[tp.topic] == nil {
			offsets[tp.topic] = map[int32]int64{}
		}
		offsets[tp.topic][tp.partition] = r.Offset + 1
	}
	err := c.cl.CommitRecords(ctx, all...)
	c.mu.Lock()
	var wait time.Duration
	if err == nil {
		// What was kept meanwhile (a finish step beside a revoke) stays
		// for the next commit.
		for tp, r := range c.unacked {
			if l, ok := last[tp]; ok && r.Offset <= l.Offset {
				delete(c.unacked, tp)
			}
		}
		c.commitFailures = 0
	} else {
		if c.unacked == nil {
			c.unacked = map[topicPartition]*kgo.Record{}
		}
		latest(c.unacked, all)
		c.commitFailures++
		wait = c.cfg.backoff.Delay(c.commitFailures)
		c.commitAt = time.Now().Add(wait)
	}
	draining := c.draining
	c.mu.Unlock()
	switch {
	case err == nil:
	case !draining && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		// The stop ended the loop's context, not the broker the commit:
		// the drain commits these.
		c.cfg.log.Debug("consumer: commit cut short by the stop", "partitions", len(last), "err", err)
	default:
		c.cfg.log.Warn("consumer: commit refused; retrying", "partitions", len(last), "retryIn", wait, "err", err)
	}
	c.cfg.hooks.commit(CommitInfo{Records: n, Offsets: offsets, Err: err})
	return err
}

// deadLetters produces b's dead letters not yet acknowledged.
func (c *Consumer) deadLetters(ctx context.Context, b *Batch) error {
	var out []*kgo.Record
	of := map[*kgo.Record]*deadLetter{}
	for _, d := range b.dead {
		if d.sent {
			continue
		}
		reason := "no reason given"
		if d.cause != nil {
			reason = d.cause.Error()
		}
		r := kafkarecord.DeadLetter(d.rec, c.DeadLetterTopic(d.rec.Topic), reason, d.extra...)
		r.Context = d.rec.Context
		out = append(out, r)
		of[r] = d
	}
	if len(out) == 0 {
		return nil
	}
	var firstErr error
	for _, res := range c.cl.ProduceSync(ctx, out...) {
		d := of[res.Record]
		if res.Err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("consumer: dead-letter to %s: %w", res.Record.Topic, res.Err)
			}
			continue
		}
		d.sent = true
		c.cfg.log.Warn("consumer: dead-lettered", "topic", d.rec.Topic, "partition", d.rec.Partition,
			"offset", d.rec.Offset, "dlt", res.Record.Topic, "reason", d.cause)
		c.cfg.hooks.deadLetter(DeadLetterInfo{Record: d.rec, Topic: res.Record.Topic, Cause: d.cause})
	}
	return firstErr
}

// pause stops fetching while a step is being retried; pauses nest.
func (c *Consumer) pause() {
	c.mu.Lock()
	c.pauses++
	first := c.pauses == 1
	if first {
		c.cl.PauseFetchTopics(c.cfg.topics...)
	}
	c.mu.Unlock()
	if first {
		c.cfg.hooks.pause(PauseInfo{Topics: slices.Clone(c.cfg.topics)}, true)
	}
}

// resume undoes one pause; fetching resumes with the last.
func (c *Consumer) resume() {
	c.mu.Lock()
	c.pauses--
	last := c.pauses == 0
	if last {
		c.cl.ResumeFetchTopics(c.cfg.topics...)
	}
	c.mu.Unlock()
	if last {
		c.cfg.hooks.pause(PauseInfo{Topics: slices.Clone(c.cfg.topics)}, false)
	}
}
