package notify

import (
	"context"
	"errors"
	"time"

	"github.com/dabom/dpcs/envelope/consumer"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/codes"
)

// Dead letters of the notifier: a record it cannot decode, or whose
// delivery a channel gave up on, goes to its DLT with the reason.

func (n *Notifier) dltRecord(src *kgo.Record, channel, reason string) *kgo.Record {
	return kafkarecord.DeadLetter(src, n.c.DeadLetterTopic(src.Topic), reason, kgo.RecordHeader{Key: HeaderDLTChannel, Value: []byte(channel)})
}

// deadLettered reports a channel's dead letter.
func (n *Notifier) deadLettered(src *kgo.Record, channel, reason string, err error) {
	if err != nil {
		n.cfg.log.Error("notify: dead letter failed", "channel", channel, "reason", reason, "err", err)
	} else {
		n.cfg.log.Warn("notify: dead-lettered", "channel", channel, "reason", reason,
			"topic", src.Topic, "partition", src.Partition, "offset", src.Offset)
	}
	if h := n.cfg.hooks.OnDeadLetter; h != nil {
		h(DeadLetterInfo{Channel: channel, Reason: reason, Record: src, Err: err})
	}
}

// deadLetter has the consumer dead-letter a record the notifier cannot
// handle, in its span, before the poll is committed.
func (n *Notifier) deadLetter(b *consumer.Batch, it *item, reason string) {
	it.span.SetStatus(codes.Error, "dead-lettered: "+reason)
	it.rec.Context = it.ctx // the dead letter is produced in the record's process span
	b.DeadLetter(it.rec, errors.New(reason))
}

// deadLetterSync dead-letters a failed channel delivery (bounded wait; the
// consumer has long committed the record, so a failure here is reported).
func (n *Notifier) deadLetterSync(r *kgo.Record, channel, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := n.c.Client().ProduceSync(ctx, n.dltRecord(r, channel, reason)).FirstErr()
	n.deadLettered(r, channel, reason, err)
}

// deadLetterAsync dead-letters without waiting (the consumer's path).
func (n *Notifier) deadLetterAsync(r *kgo.Record, channel, reason string) {
	n.c.Client().Produce(context.Background(), n.dltRecord(r, channel, reason), func(_ *kgo.Record, err error) {
		n.deadLettered(r, channel, reason, err)
	})
}
