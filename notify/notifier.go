package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/idempotency"
	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/policy"
)

// HeaderDLTChannel names the channel whose delivery failed on a record the
// notifier dead-lettered for a channel. The other dead-letter headers are
// writebehind's (dlt-reason, dlt-topic, dlt-partition, dlt-offset).
const HeaderDLTChannel = "dlt-channel"

// Notifier consumes notification-events in the consumer group
// notification-group: for each event it dedupes, stores the notification in
// the inbox, publishes it to the hub and queues it for the channels, and
// commits offsets only after all of that (see the package documentation).
type Notifier struct {
	cl    *kgo.Client
	store Store
	hub   *Hub
	cfg   config
	disp  []*dispatcher

	mu        sync.Mutex
	started   bool
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// New returns a notifier storing into store and publishing to hub. kopts
// configure the Kafka client (kgo.SeedBrokers and whatever else the
// deployment needs); the notifier adds its consumer group, topic,
// kgo.DisableAutoCommit and kgo.BlockRebalanceOnPoll, which must not be
// overridden. The channel workers start here; Run starts consuming; Close
// stops both.
func New(store Store, hub *Hub, kopts []kgo.Opt, opts ...Option) (*Notifier, error) {
	if store == nil || hub == nil {
		return nil, fmt.Errorf("%w: nil store or hub", ErrInvalid)
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.dlt == "" {
		cfg.dlt = envelope.DLT(cfg.topic)
	}
	if cfg.loc == nil {
		loc, err := policy.LoadZone(policy.DefaultZone)
		if err != nil {
			return nil, err
		}
		cfg.loc = loc
	}
	all := append(append([]kgo.Opt{}, kopts...),
		kgo.ConsumeTopics(cfg.topic),
		kgo.ConsumerGroup(cfg.group),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
	)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("notify: kafka client: %w", err)
	}
	n := &Notifier{cl: cl, store: store, hub: hub, cfg: cfg, stop: make(chan struct{}), done: make(chan struct{})}
	for _, c := range cfg.channels {
		ctx, cancel := context.WithCancel(context.Background())
		d := &dispatcher{name: c.name, ch: c.ch, kinds: map[string]bool{}, n: n,
			queue: make(chan job, cfg.queue), ctx: ctx, cancel: cancel}
		for _, k := range c.kinds {
			d.kinds[string(k)] = true
		}
		d.start(cfg.workers)
		n.disp = append(n.disp, d)
	}
	return n, nil
}

func defaultConfig() config {
	return config{
		group:       DefaultGroup,
		topic:       envelope.TopicNotificationEvents,
		queue:       1024,
		workers:     4,
		schedule:    []time.Duration{time.Second, 5 * time.Second, 30 * time.Second},
		sendTimeout: 10 * time.Second,
		sleep:       sleepTimer,
		backoffMin:  100 * time.Millisecond,
		backoffMax:  5 * time.Second,
		maxPoll:     100,
		lang:        Korean,
		now:         time.Now,
		log:         slog.New(slog.DiscardHandler),
		tracer:      noop.NewTracerProvider().Tracer(TracerName),
	}
}

// Run consumes until ctx ends or Close is called. It returns nil on a clean
// stop; records handled but not committed are redelivered to the group and
// deduped. Run may be called once.
func (n *Notifier) Run(ctx context.Context) error {
	n.mu.Lock()
	if n.started {
		n.mu.Unlock()
		return fmt.Errorf("%w: Run called twice or after Close", ErrInvalid)
	}
	n.started = true
	n.mu.Unlock()
	defer close(n.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // ends with Run
		select {
		case <-n.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	defer n.cl.AllowRebalance()
	for {
		fs := n.cl.PollRecords(ctx, n.cfg.maxPoll)
		if fs.IsClientClosed() || ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			n.cfg.log.Warn("notify: fetch error", "topic", t, "partition", p, "err", err)
		})
		recs := fs.Records()
		for i, r := range recs {
			if err := n.handle(ctx, r); err != nil { // only ctx ends handling
				n.commit(ctx, recs[:i])
				return nil
			}
		}
		n.commit(ctx, recs)
		n.cl.AllowRebalance()
	}
}

// finishing is the context for recording what was done — committing
// offsets, completing or releasing a claim — which goes ahead even when ctx
// just ended, bounded to 5 s.
func finishing(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
}

// commit commits the offsets of handled records, even when ctx just ended.
// A failed commit is harmless: the records come again and are deduped.
func (n *Notifier) commit(ctx context.Context, recs []*kgo.Record) {
	if len(recs) == 0 {
		return
	}
	cctx, cancel := finishing(ctx)
	defer cancel()
	err := n.cl.CommitRecords(cctx, recs...)
	if err != nil {
		n.cfg.log.Warn("notify: commit failed", "records", len(recs), "err", err)
	}
	if h := n.cfg.hooks.OnCommit; h != nil {
		h(CommitInfo{Records: len(recs), Err: err})
	}
}

// Close stops Run (what it had not committed is redelivered), lets the
// channel workers finish their queues and retries until ctx ends (what is
// left then is dead-lettered), leaves the group and closes the Kafka
// client. The hub is the caller's to close. It returns ctx's error if ctx
// ended first.
func (n *Notifier) Close(ctx context.Context) error {
	n.closeOnce.Do(func() {
		n.mu.Lock()
		started := n.started
		n.started = true
		n.mu.Unlock()
		close(n.stop)
		var errs []error
		if started {
			select {
			case <-n.done:
			case <-ctx.Done():
				errs = append(errs, ctx.Err())
				<-n.done // Run returns promptly once its context is cancelled
			}
		}
		for _, d := range n.disp {
			if err := d.close(ctx); err != nil {
				errs = append(errs, fmt.Errorf("channel %s: %w", d.name, err))
			}
		}
		n.cl.AllowRebalance()
		n.cl.Close()
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// permanent marks an error retrying cannot fix: the record is dead-lettered.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// handle processes one record completely in its own span, a child of the
// trace the record carries (r.Context, set by the Kafka client's tracing
// hooks); it returns an error only when ctx ended first.
func (n *Notifier) handle(ctx context.Context, r *kgo.Record) error {
	ctx, span := n.cfg.tracer.Start(trace.ContextWithSpan(ctx, trace.SpanFromContext(r.Context)), r.Topic+" process",
		trace.WithSpanKind(trace.SpanKindConsumer))
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.destination.name", r.Topic),
			attribute.String("messaging.consumer.group.name", n.cfg.group),
			attribute.Int("messaging.destination.partition.id", int(r.Partition)),
			attribute.Int64("messaging.kafka.offset", r.Offset))
	}
	ev, err := kafkarecord.Decode(r)
	if err != nil {
		return n.deadLetter(ctx, r, err.Error())
	}
	pl, ok := ev.Payload.(envelope.Notification)
	if !ok {
		return n.deadLetter(ctx, r, fmt.Sprintf("unexpected %s event on %s", ev.EventType, r.Topic))
	}
	note, err := FromEvent(envelope.Envelope[envelope.Notification]{EventID: ev.EventID, EventType: ev.EventType,
		SubType: ev.SubType, Timestamp: ev.Timestamp, Payload: pl}, n.cfg.lang, n.cfg.loc)
	if err != nil {
		return n.deadLetter(ctx, r, err.Error())
	}
	published := false
	err = n.retry(ctx, "inbox", func() error { return n.deliver(ctx, r, note, &published) })
	var perm permanent
	if errors.As(err, &perm) {
		return n.deadLetter(ctx, r, perm.Error())
	}
	return err
}

// deliver is one attempt: dedupe, store, hand on. published survives
// attempts, so a retry after a failed MarkDelivered does not push twice.
func (n *Notifier) deliver(ctx context.Context, r *kgo.Record, note Notification, published *bool) error {
	var claim idempotency.Claim
	g := n.cfg.guard
	if g != nil {
		c, err := g.Claim(ctx, idempotency.Key(n.cfg.group, note.DedupeKey))
		switch {
		case errors.Is(err, idempotency.ErrInvalid):
			g = nil // key too long for the guard: the inbox alone dedupes
		case err != nil:
			return err
		case c.Outcome == idempotency.Done:
			n.notified(ctx, note, 0, Duplicate)
			return nil
		case c.Outcome == idempotency.InProgress:
			return fmt.Errorf("notify: %s is being handled elsewhere (lease ends in %v)", note.EventID, c.RetryAfter)
		default:
			claim = c
		}
	}
	release := func() {
		if g != nil {
			rctx, cancel := finishing(ctx)
			defer cancel()
			if err := g.Release(rctx, claim); err != nil {
				n.cfg.log.Warn("notify: release claim", "event", note.EventID, "err", err)
			}
		}
	}
	stored, _, err := n.store.Add(ctx, note)
	if err != nil {
		release()
		if sqldialect.IsPermanent(err) {
			return permanent{err}
		}
		return err
	}
	outcome := Duplicate
	if stored.EventID == note.EventID && stored.DeliveredAt == nil {
		if !*published {
			n.hub.PublishContext(ctx, stored)
			for _, d := range n.disp {
				if d.kinds[string(stored.Kind)] {
					d.enqueue(job{n: stored, rec: r, span: trace.SpanContextFromContext(ctx)})
				}
			}
			*published = true
		}
		if err := n.store.MarkDelivered(ctx, stored.ID, n.cfg.now()); err != nil {
			release()
			return err
		}
		outcome = Delivered
	}
	if g != nil {
		// Completed even when ctx just ended: the work is done, and a claim
		// left behind would hold up the next notifier for the whole lease.
		cctx, cancel := finishing(ctx)
		err := g.Complete(cctx, claim, strconv.AppendInt(nil, stored.ID, 10))
		cancel()
		if err != nil {
			// The inbox row is the durable record; a lost claim only costs
			// a database lookup on the next replay.
			n.cfg.log.Warn("notify: complete claim", "event", note.EventID, "err", err)
		}
	}
	n.notified(ctx, note, stored.ID, outcome)
	return nil
}

func (n *Notifier) notified(ctx context.Context, note Notification, id int64, o Outcome) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String("dpcs.event_id", note.EventID), attribute.String("dpcs.notification.kind", string(note.Kind)),
			attribute.Int64("dpcs.family_id", note.FamilyID), attribute.Int64("dpcs.inbox_id", id), attribute.String("dpcs.outcome", string(o)))
	}
	if h := n.cfg.hooks.OnNotify; h != nil {
		h(NotifyInfo{EventID: note.EventID, Kind: note.Kind, FamilyID: note.FamilyID, InboxID: id, Outcome: o})
	}
}

// retry calls fn until it succeeds, fails permanently or ctx ends, pausing
// fetching while it waits.
func (n *Notifier) retry(ctx context.Context, what string, fn func() error) error {
	wait := n.cfg.backoffMin
	paused := false
	defer func() {
		if paused {
			n.cl.ResumeFetchTopics(n.cfg.topic)
		}
	}()
	for attempt := 1; ; attempt++ {
		err := fn()
		var perm permanent
		if err == nil || errors.As(err, &perm) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !paused {
			n.cl.PauseFetchTopics(n.cfg.topic)
			paused = true
		}
		if h := n.cfg.hooks.OnRetry; h != nil {
			h(RetryInfo{What: what, Attempt: attempt, Wait: wait, Err: err})
		}
		n.cfg.log.Warn("notify: retrying", "what", what, "attempt", attempt, "wait", wait, "err", err)
		if err := n.cfg.sleep(ctx, wait); err != nil {
			return err
		}
		wait = min(wait*2, n.cfg.backoffMax)
	}
}

func (n *Notifier) dltRecord(src *kgo.Record, channel, reason string) *kgo.Record {
	if channel != "" {
		return kafkarecord.DeadLetter(src, n.cfg.dlt, reason, kgo.RecordHeader{Key: HeaderDLTChannel, Value: []byte(channel)})
	}
	return kafkarecord.DeadLetter(src, n.cfg.dlt, reason)
}

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

// deadLetter sends a record the notifier cannot handle to the DLT, retrying
// until it is acknowledged (the record's offset is committed after it).
func (n *Notifier) deadLetter(ctx context.Context, r *kgo.Record, reason string) error {
	trace.SpanFromContext(ctx).SetStatus(codes.Error, "dead-lettered: "+reason)
	out := n.dltRecord(r, "", reason)
	err := n.retry(ctx, "dead letter", func() error { return n.cl.ProduceSync(ctx, out).FirstErr() })
	if err == nil {
		n.deadLettered(r, "", reason, nil)
	}
	return err
}

// deadLetterSync dead-letters a failed channel delivery (bounded wait; the
// consumer has long committed the record, so a failure here is reported).
func (n *Notifier) deadLetterSync(r *kgo.Record, channel, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := n.cl.ProduceSync(ctx, n.dltRecord(r, channel, reason)).FirstErr()
	n.deadLettered(r, channel, reason, err)
}

// deadLetterAsync dead-letters without waiting (the consumer's path).
func (n *Notifier) deadLetterAsync(r *kgo.Record, channel, reason string) {
	n.cl.Produce(context.Background(), n.dltRecord(r, channel, reason), func(_ *kgo.Record, err error) {
		n.deadLettered(r, channel, reason, err)
	})
}
