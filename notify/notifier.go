package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/consumer"
	"github.com/dabom/dpcs/idempotency"
	"github.com/dabom/dpcs/internal/backoff"
	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/policy"
)

// HeaderDLTChannel names the channel whose delivery failed on a record the
// notifier dead-lettered for a channel. The other dead-letter headers are
// kafkarecord's (dlt-reason, dlt-topic, dlt-partition, dlt-offset).
const HeaderDLTChannel = "dlt-channel"

// Notifier consumes notification-events, and the decisions' usage-persist
// records for the notifications they stand for (Topics), in the consumer
// group notification-group: for each event it dedupes, stores the notification in
// the inbox, publishes it to the hub and queues it for the channels, and
// commits offsets only after all of that (see the package documentation).
// The Kafka side is package envelope/consumer's lifecycle (configured with
// WithConsumer); the notifier is its handler.
type Notifier struct {
	c     *consumer.Consumer
	store Store
	hub   *Hub
	cfg   config
	disp  []*dispatcher
	// recent holds the dedupe keys of the live-only notifications this
	// notifier pushed lately, which the guard does not claim (see
	// deliverBatch). cur is the poll being handled, kept across the
	// consumer's retries of it. The consumer calls the handler one batch
	// at a time; only it touches them.
	recent recentKeys
	cur    *poll
}

// New returns a notifier storing into store and publishing to hub. kopts
// configure the Kafka client (kgo.SeedBrokers and whatever else the
// deployment needs); the consumer adds its group, topic,
// kgo.DisableAutoCommit, kgo.BlockRebalanceOnPoll and its partition
// callbacks, which must not be overridden. The channel workers start here;
// Run starts consuming; Close stops both.
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
	if cfg.loc == nil {
		loc, err := policy.LoadZone(policy.DefaultZone)
		if err != nil {
			return nil, err
		}
		cfg.loc = loc
	}
	n := &Notifier{store: store, hub: hub, cfg: cfg}
	copts := append([]consumer.Option{
		consumer.WithGroup(DefaultGroup),
		consumer.WithTopics(Topics()...),
		consumer.WithMaxPoll(500),
		consumer.WithFetchWait(100*time.Millisecond, 64<<10),
		consumer.WithBackoff(100*time.Millisecond, 5*time.Second, 0),
		consumer.WithLogger(cfg.log),
		consumer.WithHooks(n.consumerHooks()),
		consumer.WithBeforeClose(n.closeChannels),
	}, cfg.consumer...)
	c, err := consumer.New(consumer.HandlerFunc(n.handle), kopts, copts...)
	if err != nil {
		return nil, notifyErr(err)
	}
	n.c = c
	n.cfg.group = c.Group()
	for _, ch := range cfg.channels {
		d := newDispatcher(n, ch)
		d.start(cfg.workers)
		n.disp = append(n.disp, d)
	}
	return n, nil
}

func defaultConfig() config {
	return config{
		group:       DefaultGroup,
		queue:       1024,
		familyLimit: 64,
		workers:     4,
		schedule:    []time.Duration{time.Second, 5 * time.Second, 30 * time.Second},
		sendTimeout: 10 * time.Second,
		sleep:       backoff.Sleep,
		lang:        Korean,
		now:         time.Now,
		log:         slog.New(slog.DiscardHandler),
		tracer:      noop.NewTracerProvider().Tracer(TracerName),
	}
}

// Run consumes until ctx ends or Close is called, then drains: it finishes
// and commits the poll in hand (bounded by Close's context, or by
// consumer.WithDrainTimeout, 30 s, after ctx ended), lets the channel
// workers finish their queues (what is left when that ends is
// dead-lettered), leaves the group and closes the Kafka client. It returns
// nil on a clean stop; an error wrapping consumer.ErrUncommitted when
// records were left uncommitted (they are redelivered to the group and
// deduped). Run may be called once.
func (n *Notifier) Run(ctx context.Context) error { return notifyErr(n.c.Run(ctx)) }

// Close stops Run and waits for its drain (bounded by ctx; see Run) and
// returns what Run returned, with the channels' errors (ctx's error if a
// channel worker was still busy when ctx ended). Without Run, it stops the
// channel workers and closes the client. The hub is the caller's to close.
func (n *Notifier) Close(ctx context.Context) error { return notifyErr(n.c.Close(ctx)) }

// notifyErr maps the consumer's errors onto the package's.
func notifyErr(err error) error {
	if errors.Is(err, consumer.ErrInvalid) {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return err
}

// closeChannels lets the channel workers finish their queues, retries
// included, until ctx ends; what they still hold then is dead-lettered.
// The consumer calls it once it stopped, before it closes the client the
// dead letters go through.
func (n *Notifier) closeChannels(ctx context.Context) error {
	var errs []error
	for _, d := range n.disp {
		if err := d.close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("channel %s: %w", d.name, err))
		}
	}
	return errors.Join(errs...)
}

// consumerHooks turns the consumer's events into the notifier's Hooks.
func (n *Notifier) consumerHooks() consumer.Hooks {
	h := n.cfg.hooks
	return consumer.Hooks{
		OnRetry: func(i consumer.RetryInfo) {
			if h.OnRetry != nil {
				what := "inbox"
				if i.Step == consumer.StepDeadLetter {
					what = "dead letter"
				}
				h.OnRetry(RetryInfo{What: what, Attempt: i.Attempt, Wait: i.Wait, Err: i.Err})
			}
		},
		OnDeadLetter: func(i consumer.DeadLetterInfo) {
			if h.OnDeadLetter != nil {
				h.OnDeadLetter(DeadLetterInfo{Reason: i.Cause.Error(), Record: i.Record})
			}
		},
		OnCommit: func(i consumer.CommitInfo) {
			if h.OnCommit != nil {
				h.OnCommit(CommitInfo{Records: i.Records, Err: i.Err})
			}
		},
	}
}

// finishing is the context for recording what was done — completing or
// releasing a claim — which goes ahead even when ctx just ended, bounded
// to 5 s.
func finishing(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
}

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

// poll is a batch of records the consumer handed to the notifier and what
// became of each, kept while the consumer retries it.
type poll struct {
	b     *consumer.Batch
	items []*item
	n     int // len(b.Records) when items were matched to it
	// oneByOne: the store refused the poll as a whole for its data; it
	// goes record by record.
	oneByOne bool
	// unwatched are the families of the records skipped unread (unwatched),
	// reported once the poll is handled. Whether a record is skipped is
	// decided when the poll is first read, not again on its retries.
	unwatched []int64
}

// end ends the items' spans.
func (p *poll) end() {
	for _, it := range p.items {
		it.span.End()
	}
}

// handle processes one poll's records completely: it dead-letters those it
// cannot read, then dedupes the rest in one guard round trip, stores them in
// one inbox transaction and hands them on in order (deliverBatch); a poll
// the store refuses as a whole for its data goes again record by record,
// dead-lettering the records at fault. An error (the store or the guard
// failing) makes the consumer pause, back off and hand the same batch
// again: the poll's state is kept, so what was published is not published
// again. Each record read has its own span, a child of the trace it carries
// (r.Context, set by the Kafka client's tracing hooks), ended when the poll
// is done; a record skipped unread (unwatched) has none.
func (n *Notifier) handle(ctx context.Context, b *consumer.Batch) error {
	p := n.pollOf(b)
	if err := n.deliver(ctx, p); err != nil {
		return err
	}
	for _, fid := range p.unwatched {
		n.notified(context.Background(), Notification{Kind: envelope.SubQuotaUpdated, FamilyID: fid}, 0, Unwatched) // no span of its own
	}
	p.end()
	n.cur = nil
	return nil
}

// pollOf returns the state of b: kept from an earlier attempt (less the
// records of partitions revoked since), or new.
func (n *Notifier) pollOf(b *consumer.Batch) *poll {
	if p := n.cur; p != nil && p.b == b {
		if len(b.Records) != p.n {
			kept := make(map[*kgo.Record]bool, len(b.Records))
			for _, r := range b.Records {
				kept[r] = true
			}
			p.items = slices.DeleteFunc(p.items, func(it *item) bool {
				if kept[it.rec] {
					return false
				}
				it.span.End()
				return true
			})
			p.n = len(b.Records)
		}
		return p
	}
	if n.cur != nil { // a poll given up (its partitions revoked, or a stop)
		n.cur.end()
	}
	p := &poll{b: b, n: len(b.Records), items: make([]*item, 0, len(b.Records))}
	seen := make(map[string]*item, 2*len(b.Records))
	live := !n.cfg.storeQuota && !n.dispatched(envelope.SubQuotaUpdated)
	for _, r := range b.Records {
		if live {
			if fid, ok := n.unwatched(r); ok {
				p.unwatched = append(p.unwatched, fid)
				continue
			}
		}
		if standsFor(r) == "" {
			continue // a usage-persist record standing for no notification
		}
		notes, reason := n.decode(r)
		if reason == "" && len(notes) == 0 {
			continue // a decision's record that stands for none (an earlier release's)
		}
		if reason != "" {
			notes = []Notification{{}}
		}
		for _, note := range notes {
			it := &item{rec: r}
			it.ctx, it.span = n.cfg.tracer.Start(trace.ContextWithSpan(context.Background(), trace.SpanFromContext(r.Context)),
				r.Topic+" process", trace.WithSpanKind(trace.SpanKindConsumer))
			if it.span.IsRecording() {
				it.span.SetAttributes(attribute.String("messaging.system", "kafka"),
					attribute.String("messaging.destination.name", r.Topic),
					attribute.String("messaging.consumer.group.name", n.cfg.group),
					attribute.Int("messaging.destination.partition.id", int(r.Partition)),
					attribute.Int64("messaging.kafka.offset", r.Offset))
			}
			if reason != "" {
				n.deadLetter(b, it, reason)
				it.span.End()
				continue
			}
			n.prepare(it, note, seen)
			p.items = append(p.items, it)
		}
	}
	n.nameMembers(p.items)
	n.cur = p
	return p
}

// namesTimeout bounds each names lookup of a poll.
const namesTimeout = 2 * time.Second

// nameMembers renders again the texts of the poll's notifications that
// name a member (WithNames) or an app (WithApps) with their names: one
// lookup of each for the poll. When one fails the texts keep the member's
// id, and name apps by the default labels.
func (n *Notifier) nameMembers(items []*item) {
	if n.cfg.names == nil && n.cfg.apps == nil {
		return
	}
	named := func(it *item) bool {
		k := it.note.Kind
		return it.note.MemberID != 0 && (k == envelope.SubCustomerBlocked || k == envelope.SubDataRequested)
	}
	var ids []int64
	var apps []string
	for _, it := range items {
		if named(it) && !slices.Contains(ids, it.note.MemberID) {
			ids = append(ids, it.note.MemberID)
		}
		if a := appOf(it.note); a != "" && !slices.Contains(apps, a) {
			apps = append(apps, a)
		}
	}
	var names map[int64]string
	if len(ids) > 0 && n.cfg.names != nil {
		ctx, cancel := context.WithTimeout(context.Background(), namesTimeout)
		var err error
		names, err = n.cfg.names.MemberNames(ctx, ids)
		cancel()
		if err != nil {
			n.cfg.log.Warn("notify: member names not found; the texts name member ids", "members", len(ids), "err", err)
		}
	}
	var labels map[string]policy.AppLabel
	if len(apps) > 0 && n.cfg.apps != nil {
		ctx, cancel := context.WithTimeout(context.Background(), namesTimeout)
		var err error
		labels, err = n.cfg.apps.AppLabels(ctx, apps)
		cancel()
		if err != nil {
			n.cfg.log.Warn("notify: app names not found; the texts name apps by the default catalog", "apps", len(apps), "err", err)
		}
	}
	if len(names) == 0 && len(labels) == 0 {
		return
	}
	for _, it := range items {
		name := names[it.note.MemberID]
		if !named(it) {
			name = ""
		}
		a := appOf(it.note)
		l, ok := labels[a]
		if name == "" && !ok {
			continue
		}
		it.note.MemberName = name
		if ok {
			it.note.Apps = map[string]policy.AppLabel{a: l}
		}
		if r, err := it.note.Localized(n.cfg.lang); err == nil {
			it.note = r
		}
	}
}

// appOf is the app a notification's texts name: the app of a block of an
// app, or of a request for an app's time; "" for none.
func appOf(n Notification) string {
	var p struct {
		BlockReason string `json:"blockReason"`
		AppID       string `json:"appId"`
		Kind        string `json:"kind"`
	}
	switch n.Kind {
	case envelope.SubCustomerBlocked, envelope.SubDataRequested, envelope.SubDataRequestAnswered:
	default:
		return ""
	}
	if json.Unmarshal(n.Payload, &p) != nil {
		return ""
	}
	if a, ok := strings.CutPrefix(p.BlockReason, "BLOCK:APP:"); ok {
		return a
	}
	if p.Kind == envelope.KindApp {
		return p.AppID
	}
	return ""
}

// deliver is one attempt at the poll's items not yet done.
func (n *Notifier) deliver(ctx context.Context, p *poll) error {
	if !p.oneByOne {
		err := n.deliverBatch(ctx, p.items)
		if !backoff.IsPermanent(err) {
			return err
		}
		p.oneByOne = true
	}
	// The poll's data was refused: one by one, dead-lettering what is bad.
	for _, it := range p.items {
		if it.done || it.first != nil {
			continue
		}
		err := n.deliverBatch(ctx, []*item{it})
		var perm *backoff.PermanentError
		if errors.As(err, &perm) {
			n.deadLetter(p.b, it, perm.Err.Error())
			it.done, it.outcome = true, ""
			continue
		}
		if err != nil {
			return err
		}
	}
	for _, it := range p.items {
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
			return backoff.Permanent(err) // the poll goes record by record (deliver)
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
		row.MemberName = it.note.MemberName // not stored: channels render texts again with it
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
