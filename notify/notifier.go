package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
	// recent holds the dedupe keys of the live-only notifications this
	// notifier pushed lately, which the guard does not claim (see
	// deliverBatch); only Run's goroutine touches it.
	recent recentKeys

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
		maxPoll:     500,
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
		if err := n.handleBatch(ctx, recs); err != nil { // only ctx ends handling
			return nil // nothing of this poll committed: it is redelivered and deduped
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

// item is one record of a poll on its way through the notifier.
type item struct {
	rec  *kgo.Record
	ctx  context.Context // carries the record's span
	span trace.Span
	note Notification
	// first is the item of the same poll that first had this dedupe key or
	// event id (nil: this is it); a later one is a duplicate of it.
	first *item
	// live: a QUOTA_UPDATED pushed without an inbox row.
	live bool
	// unclaimed: live and taken by no channel, so deduped by recent
	// instead of the guard.
	unclaimed bool
	// claim is the guard's claim (Outcome 0: unguarded).
	claim idempotency.Claim
	// published survives attempts, so a retry after a failed
	// MarkDelivered does not push twice.
	published bool
	// done: handled (outcome and id set), nothing left to do.
	done    bool
	outcome Outcome
	id      int64
}

// handleBatch processes one poll's records completely: it dead-letters
// those it cannot read, then dedupes the rest in one guard round trip,
// stores them in one inbox transaction and hands them on in order
// (deliverBatch), retrying until that succeeds; a poll the store refuses
// as a whole for its data goes again record by record, dead-lettering the
// records at fault. Each record has its own span, a child of the trace it
// carries (r.Context, set by the Kafka client's tracing hooks). It returns
// an error only when ctx ended first.
func (n *Notifier) handleBatch(ctx context.Context, recs []*kgo.Record) error {
	items := make([]*item, 0, len(recs))
	defer func() {
		for _, it := range items {
			it.span.End()
		}
	}()
	seen := make(map[string]*item, 2*len(recs))
	for _, r := range recs {
		it := &item{rec: r}
		it.ctx, it.span = n.cfg.tracer.Start(trace.ContextWithSpan(ctx, trace.SpanFromContext(r.Context)), r.Topic+" process",
			trace.WithSpanKind(trace.SpanKindConsumer))
		if it.span.IsRecording() {
			it.span.SetAttributes(attribute.String("messaging.system", "kafka"),
				attribute.String("messaging.destination.name", r.Topic),
				attribute.String("messaging.consumer.group.name", n.cfg.group),
				attribute.Int("messaging.destination.partition.id", int(r.Partition)),
				attribute.Int64("messaging.kafka.offset", r.Offset))
		}
		note, reason := n.decode(r)
		if reason != "" {
			err := n.deadLetter(it.ctx, r, reason)
			it.span.End()
			if err != nil {
				return err
			}
			continue
		}
		n.prepare(it, note, seen)
		items = append(items, it)
	}
	err := n.retry(ctx, "inbox", func() error { return n.deliverBatch(ctx, items) })
	var perm permanent
	if !errors.As(err, &perm) {
		return err
	}
	// The poll's data was refused: one by one, dead-lettering what is bad.
	for _, it := range items {
		if it.done || it.first != nil {
			continue
		}
		err := n.retry(ctx, "inbox", func() error { return n.deliverBatch(ctx, []*item{it}) })
		if errors.As(err, &perm) {
			err = n.deadLetter(it.ctx, it.rec, perm.Error())
			it.done, it.outcome = true, ""
		}
		if err != nil {
			return err
		}
	}
	for _, it := range items {
		if it.first != nil && !it.done {
			n.duplicateOf(it)
		}
	}
	return nil
}

// prepare sets it up for deliverBatch: its notification, whether it is
// live-only, and which earlier item of the poll (seen, by dedupe key and
// event id) it duplicates.
func (n *Notifier) prepare(it *item, note Notification, seen map[string]*item) {
	it.note = note
	it.live = note.Kind == envelope.SubQuotaUpdated && !n.cfg.storeQuota
	if f := seen["k:"+note.DedupeKey]; f != nil {
		it.first = f
	} else if f := seen["e:"+note.EventID]; f != nil {
		it.first = f
	} else {
		seen["k:"+note.DedupeKey], seen["e:"+note.EventID] = it, it
	}
}

// decode reads a notification record; reason says why it cannot be.
func (n *Notifier) decode(r *kgo.Record) (Notification, string) {
	ev, err := kafkarecord.Decode(r)
	if err != nil {
		return Notification{}, err.Error()
	}
	pl, ok := ev.Payload.(envelope.Notification)
	if !ok {
		return Notification{}, fmt.Sprintf("unexpected %s event on %s", ev.EventType, r.Topic)
	}
	note, err := FromEvent(envelope.Envelope[envelope.Notification]{EventID: ev.EventID, EventType: ev.EventType,
		SubType: ev.SubType, Timestamp: ev.Timestamp, Payload: pl}, n.cfg.lang, n.cfg.loc)
	if err != nil {
		return Notification{}, err.Error()
	}
	return note, ""
}

// duplicateOf reports a later item of a poll as a duplicate of the first
// one with its dedupe key or event id, once that was handled (a first
// item dead-lettered leaves its duplicates reported as duplicates too).
func (n *Notifier) duplicateOf(it *item) {
	it.done, it.outcome, it.id = true, Duplicate, it.first.id
	n.notified(it.ctx, it.note, it.id, Duplicate)
}

// deliverBatch is one attempt at the items not yet done: claim them all
// from the guard in one round trip, store those not live-only in one inbox
// transaction, then in order publish each new one to the hub and queue it
// for the channels, mark them delivered (one statement) and complete the
// claims (one round trip). Items survive attempts: what was published is
// not published again. A failure releases the claims taken.
func (n *Notifier) deliverBatch(ctx context.Context, all []*item) error {
	var todo []*item
	for _, it := range all {
		if !it.done && it.first == nil {
			todo = append(todo, it)
		}
	}
	// A live-only notification that no channel takes is not claimed in the
	// guard, which would cost two Redis scripts per allowed usage event (a
	// third of the quota engine's own cost): it is a snapshot of the pool
	// for the open streams, deduped by the keys this notifier pushed lately.
	// So a duplicate is pushed once, as before, unless it arrives after its
	// partition moved to another notifier (a crash or a rebalance), which
	// then shows that snapshot again.
	todo = slices.DeleteFunc(todo, func(it *item) bool {
		it.unclaimed = it.live && !n.dispatched(it.note.Kind)
		if it.unclaimed && n.recent.has(it.note.DedupeKey) {
			it.done, it.outcome = true, Duplicate
			n.notified(it.ctx, it.note, 0, Duplicate)
			return true
		}
		return false
	})
	if len(todo) == 0 {
		return nil
	}
	var claimed []*item
	release := func() {
		if len(claimed) == 0 {
			return
		}
		cs := make([]idempotency.Claim, len(claimed))
		for i, it := range claimed {
			cs[i], it.claim = it.claim, idempotency.Claim{}
		}
		rctx, cancel := finishing(ctx)
		defer cancel()
		if err := n.cfg.guard.ReleaseBatch(rctx, cs); err != nil {
			n.cfg.log.Warn("notify: release claims", "claims", len(cs), "err", err)
		}
	}
	if g := n.cfg.guard; g != nil {
		var keys []string
		var guarded []*item
		for _, it := range todo {
			if it.unclaimed {
				continue
			}
			k := idempotency.Key(n.cfg.group, it.note.DedupeKey)
			if idempotency.ValidKey(k) != nil {
				continue // too long for the guard: the inbox alone dedupes
			}
			keys, guarded = append(keys, k), append(guarded, it)
		}
		cs, err := g.ClaimBatch(ctx, keys)
		if err != nil {
			return err
		}
		var busy *item
		for i, it := range guarded {
			switch cs[i].Outcome {
			case idempotency.Done:
				it.done, it.outcome = true, Duplicate
				n.notified(it.ctx, it.note, 0, Duplicate)
			case idempotency.InProgress:
				if busy == nil {
					busy = it
				}
				it.claim = cs[i]
			default:
				it.claim = cs[i]
				claimed = append(claimed, it)
			}
		}
		if busy != nil {
			release()
			return fmt.Errorf("notify: %s is being handled elsewhere (lease ends in %v)", busy.note.EventID, busy.claim.RetryAfter)
		}
		todo = slices.DeleteFunc(todo, func(it *item) bool { return it.done })
	}
	var store []*item
	var notes []Notification
	for _, it := range todo {
		if !it.live {
			store, notes = append(store, it), append(notes, it.note)
		}
	}
	stored, err := n.addAll(ctx, notes)
	if err != nil {
		release()
		if sqldialect.IsPermanent(err) {
			return permanent{err}
		}
		return err
	}
	rows := make(map[*item]Notification, len(store))
	for i, it := range store {
		rows[it] = stored[i]
	}
	var ids []int64
	for _, it := range todo {
		row, ok := rows[it]
		if it.live {
			row, ok = it.note, true
		}
		it.id, it.outcome = row.ID, Duplicate
		if ok && row.EventID == it.note.EventID && row.DeliveredAt == nil {
			if !it.published {
				n.hub.PublishContext(it.ctx, row)
				for _, d := range n.disp {
					if d.kinds[string(row.Kind)] {
						d.enqueue(job{n: row, rec: it.rec, span: trace.SpanContextFromContext(it.ctx)})
					}
				}
				it.published = true
				if it.unclaimed {
					n.recent.add(it.note.DedupeKey)
				}
			}
			if !it.live {
				ids = append(ids, row.ID)
			}
			it.outcome = Delivered
		}
	}
	if err := n.markAll(ctx, ids); err != nil {
		release()
		return err
	}
	if len(claimed) > 0 {
		// Completed even when ctx just ended: the work is done, and a claim
		// left behind would hold up the next notifier for the whole lease.
		cs := make([]idempotency.Claim, len(claimed))
		results := make([][]byte, len(claimed))
		for i, it := range claimed {
			cs[i], results[i] = it.claim, strconv.AppendInt(nil, it.id, 10)
		}
		cctx, cancel := finishing(ctx)
		err := n.cfg.guard.CompleteBatch(cctx, cs, results)
		cancel()
		if err != nil {
			// The inbox rows are the durable record; a lost claim only
			// costs a database lookup on the next replay.
			n.cfg.log.Warn("notify: complete claims", "claims", len(cs), "err", err)
		}
	}
	for _, it := range todo {
		it.done = true
		n.notified(it.ctx, it.note, it.id, it.outcome)
	}
	for _, it := range all {
		if it.first != nil && it.first.done && !it.done {
			n.duplicateOf(it)
		}
	}
	return nil
}

// recentKeys is a bounded set of dedupe keys: the oldest goes when it is
// full. The zero value holds recentCap keys.
type recentKeys struct {
	set  map[string]struct{}
	ring []string
	next int
}

// recentCap bounds recentKeys: at 20,000 live notifications/s, the last
// few seconds' (a duplicate comes with a retry or a replayed poll).
const recentCap = 1 << 16

func (r *recentKeys) has(k string) bool {
	_, ok := r.set[k]
	return ok
}

func (r *recentKeys) add(k string) {
	if r.set == nil {
		r.set, r.ring = make(map[string]struct{}, recentCap), make([]string, recentCap)
	}
	if _, ok := r.set[k]; ok {
		return
	}
	if old := r.ring[r.next]; old != "" {
		delete(r.set, old)
	}
	r.ring[r.next], r.set[k] = k, struct{}{}
	r.next = (r.next + 1) % len(r.ring)
}

// dispatched reports whether any channel takes notifications of kind.
func (n *Notifier) dispatched(kind envelope.SubType) bool {
	for _, d := range n.disp {
		if d.kinds[string(kind)] {
			return true
		}
	}
	return false
}

// addAll stores notes in one transaction when the store is a BatchStore,
// else one by one.
func (n *Notifier) addAll(ctx context.Context, notes []Notification) ([]Notification, error) {
	if len(notes) == 0 {
		return nil, nil
	}
	if bs, ok := n.store.(BatchStore); ok {
		return bs.AddBatch(ctx, notes)
	}
	out := make([]Notification, len(notes))
	for i, note := range notes {
		s, _, err := n.store.Add(ctx, note)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

// markAll marks ids delivered in one statement when the store is a
// BatchStore, else one by one.
func (n *Notifier) markAll(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	at := n.cfg.now()
	if bs, ok := n.store.(BatchStore); ok {
		return bs.MarkDeliveredBatch(ctx, ids, at)
	}
	for _, id := range ids {
		if err := n.store.MarkDelivered(ctx, id, at); err != nil {
			return err
		}
	}
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
