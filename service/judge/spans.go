package judge

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/quota"
)

func (p *Processor) deadLetter(r *kgo.Record, reason string) *kgo.Record {
	if p.hooks.OnDeadLetter != nil {
		p.hooks.OnDeadLetter(r.Topic, reason)
	}
	p.log.Warn("dead-lettered", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", reason)
	dlt := kafkarecord.DeadLetter(r, envelope.DLT(r.Topic), reason)
	if p.tracer != nil {
		trace.SpanFromContext(r.Context).SetStatus(codes.Error, "dead-lettered: "+reason)
		causedBy([]*kgo.Record{dlt}, r)
	}
	return dlt
}

// startSpans starts a process span for each record, a child of the trace
// the record carries, and keeps it in the record's Context: what the
// record causes is produced in it (causedBy), and endSpans ends it.
func (p *Processor) startSpans(recs []*kgo.Record) {
	for _, r := range recs {
		parent := r.Context
		if parent == nil {
			parent = context.Background()
		}
		var span trace.Span
		r.Context, span = p.tracer.Start(parent, r.Topic+" process", trace.WithSpanKind(trace.SpanKindConsumer))
		if span.IsRecording() { // attributes only for recorded spans: an unsampled one costs little
			span.SetAttributes(
				attribute.String("messaging.system", "kafka"),
				attribute.String("messaging.operation.type", "process"),
				attribute.String("messaging.destination.name", r.Topic),
				attribute.String("messaging.consumer.group.name", ProcessorGroup),
				attribute.Int("messaging.destination.partition.id", int(r.Partition)),
				attribute.Int64("messaging.kafka.offset", r.Offset),
				attribute.String("messaging.kafka.message.key", string(r.Key)))
		}
	}
}

// endSpans ends the records' process spans, marking them failed when *err
// is set (the poll was not judged: it is redelivered).
func endSpans(recs []*kgo.Record, err *error) {
	for _, r := range recs {
		span := trace.SpanFromContext(r.Context)
		if *err != nil {
			span.SetStatus(codes.Error, (*err).Error())
		}
		span.End()
	}
}

// causedBy makes outs carry the trace of the record that caused them: they
// are produced in its process span.
func causedBy(outs []*kgo.Record, origin *kgo.Record) {
	for _, o := range outs {
		o.Context = origin.Context
	}
}

// judgedSpan records the decision on u's process span.
func judgedSpan(u usageIn, res quota.Result, batch int) {
	span := trace.SpanFromContext(u.rec.Context)
	if !span.IsRecording() {
		return
	}
	pl := u.env.Payload
	span.SetAttributes(
		attribute.String("dpcs.event_id", u.env.EventID),
		attribute.Int64("dpcs.family_id", pl.FamilyID),
		attribute.Int64("dpcs.customer_id", pl.CustomerID),
		attribute.Int64("dpcs.bytes", pl.BytesUsed),
		attribute.String("dpcs.decision", string(res.Decision)),
		attribute.Bool("dpcs.duplicate", res.Duplicate),
		attribute.Int64("dpcs.remaining_bytes", res.Remaining),
		attribute.Int("dpcs.engine_batch", batch),
	)
	if res.Rule != "" {
		span.SetAttributes(attribute.String("dpcs.rule", res.Rule))
	}
}
