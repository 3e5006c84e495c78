package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// EventName is the SSE event name of every notification message; the kind
// is in the data ("kind"). With huma: sse.Register(api, op,
// map[string]any{notify.EventName: notify.Notification{}}, …) and
// send(sse.Message{ID: int(m.ID), Data: m.Data}).
const EventName = "notification"

// Message is one live message: the SSE id (the inbox row id, so a client
// reconnecting with Last-Event-ID resumes with Query.After), the event name
// and the notification as JSON data.
type Message struct {
	ID    int64
	Event string
	Data  Notification
}

// WriteTo writes m as one SSE frame ("id: …\nevent: …\ndata: {…}\n\n").
// The JSON holds no raw newlines, so it is one data line.
func (m Message) WriteTo(w io.Writer) (int64, error) {
	data, err := json.Marshal(m.Data)
	if err != nil {
		return 0, fmt.Errorf("notify: encode message %d: %w", m.ID, err)
	}
	buf := make([]byte, 0, len(data)+64)
	if m.ID > 0 {
		buf = append(strconv.AppendInt(append(buf, "id: "...), m.ID, 10), '\n')
	}
	if m.Event != "" {
		buf = append(append(append(buf, "event: "...), m.Event...), '\n')
	}
	buf = append(append(append(buf, "data: "...), data...), "\n\n"...)
	n, err := w.Write(buf)
	return int64(n), err
}

// DropInfo is passed to HubHooks.OnDrop when a subscription ends for a
// reason other than its own Close.
type DropInfo struct {
	FamilyID int64
	Filter   Filter
	Reason   error // ErrSlowSubscriber or ErrClosed
}

// PublishInfo is passed to HubHooks.OnPublish after every Publish.
type PublishInfo struct {
	FamilyID  int64
	Delivered int // subscribers the message was queued for
	Dropped   int // slow subscribers dropped by this publish
}

// HubHooks are optional callbacks; nil funcs are skipped. They run on the
// publisher's goroutine and must be quick.
type HubHooks struct {
	OnPublish func(PublishInfo)
	OnDrop    func(DropInfo)
}

// HubOption configures a Hub.
type HubOption func(*Hub) error

// WithBuffer sets each subscription's buffer (messages); a subscriber whose
// buffer is full when a message arrives is dropped. Default: 64.
func WithBuffer(n int) HubOption {
	return func(h *Hub) error {
		if n < 1 || n > 1<<20 {
			return fmt.Errorf("%w: buffer must be 1..%d", ErrInvalid, 1<<20)
		}
		h.buffer = n
		return nil
	}
}

// WithHubHooks sets observability callbacks. Default: none.
func WithHubHooks(hk HubHooks) HubOption {
	return func(h *Hub) error { h.hooks = hk; return nil }
}

// WithHubTracerProvider traces every publish with tp: a span "notify.Hub
// publish" (family, kind, subscribers reached, dropped), a child of the
// context given to PublishContext — for the notifier, the span of the
// record that caused the notification. Default: a no-op provider.
func WithHubTracerProvider(tp trace.TracerProvider) HubOption {
	return func(h *Hub) error {
		if tp == nil {
			return fmt.Errorf("%w: nil tracer provider", ErrInvalid)
		}
		h.tracer = tp.Tracer(TracerName)
		return nil
	}
}

// Hub fans notifications out to live subscribers in this process, per
// family and filtered by viewer (Filter.Sees). Publish never blocks: each
// subscription has a bounded buffer, and a subscriber that has not kept up
// is dropped (its channel closed, Err = ErrSlowSubscriber) so others never
// wait. It is safe for concurrent use.
type Hub struct {
	buffer int
	hooks  HubHooks
	tracer trace.Tracer

	mu     sync.RWMutex // held for reading while sending, for writing while closing channels
	fams   map[int64]map[*Subscription]struct{}
	closed bool
}

// NewHub returns an empty hub.
func NewHub(opts ...HubOption) (*Hub, error) {
	h := &Hub{buffer: 64, fams: map[int64]map[*Subscription]struct{}{}, tracer: noop.NewTracerProvider().Tracer(TracerName)}
	for _, o := range opts {
		if err := o(h); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Subscription is one live subscriber. Read C until it is closed, then Err
// says why: nil after Close, ErrSlowSubscriber, or ErrClosed when the hub
// closed. Messages buffered before the close can still be read.
type Subscription struct {
	hub      *Hub
	familyID int64
	filter   Filter
	ch       chan Message
	C        <-chan Message

	mu  sync.Mutex
	err error
	end bool
}

// Subscribe adds a subscriber to familyID's notifications as seen by f.
func (h *Hub) Subscribe(familyID int64, f Filter) (*Subscription, error) {
	if familyID <= 0 {
		return nil, fmt.Errorf("%w: family id must be > 0", ErrInvalid)
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	ch := make(chan Message, h.buffer)
	s := &Subscription{hub: h, familyID: familyID, filter: f, ch: ch, C: ch}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if h.fams[familyID] == nil {
		h.fams[familyID] = map[*Subscription]struct{}{}
	}
	h.fams[familyID][s] = struct{}{}
	return s, nil
}

// Err returns why the subscription ended (see Subscription); nil while it
// is open or after its own Close.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close unsubscribes and closes C. It is idempotent.
func (s *Subscription) Close() {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	s.hub.removeLocked(s, nil)
}

// removeLocked ends s with reason; h.mu is held for writing.
func (h *Hub) removeLocked(s *Subscription, reason error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.end {
		return false
	}
	s.end, s.err = true, reason
	close(s.ch)
	if subs := h.fams[s.familyID]; subs != nil {
		delete(subs, s)
		if len(subs) == 0 {
			delete(h.fams, s.familyID)
		}
	}
	if reason != nil && h.hooks.OnDrop != nil {
		h.hooks.OnDrop(DropInfo{FamilyID: s.familyID, Filter: s.filter, Reason: reason})
	}
	return true
}

// Publish queues n for every subscriber of its family that may see it and
// returns how many it was queued for. Subscribers whose buffer is full are
// dropped with ErrSlowSubscriber. After Close it does nothing.
func (h *Hub) Publish(n Notification) int { return h.PublishContext(context.Background(), n) }

// PublishContext is Publish with the context of the work that caused n:
// the publish span (WithHubTracerProvider) is its child.
func (h *Hub) PublishContext(ctx context.Context, n Notification) int {
	_, span := h.tracer.Start(ctx, "notify.Hub publish")
	defer span.End()
	m := Message{ID: n.ID, Event: EventName, Data: n}
	var slow []*Subscription
	delivered := 0
	h.mu.RLock()
	for s := range h.fams[n.FamilyID] {
		if !s.filter.Sees(n) {
			continue
		}
		select {
		case s.ch <- m:
			delivered++
		default:
			slow = append(slow, s)
		}
	}
	h.mu.RUnlock()
	dropped := 0
	if len(slow) > 0 {
		h.mu.Lock()
		for _, s := range slow {
			if h.removeLocked(s, ErrSlowSubscriber) {
				dropped++
			}
		}
		h.mu.Unlock()
	}
	if h.hooks.OnPublish != nil {
		h.hooks.OnPublish(PublishInfo{FamilyID: n.FamilyID, Delivered: delivered, Dropped: dropped})
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.Int64("dpcs.family_id", n.FamilyID), attribute.String("dpcs.notification.kind", string(n.Kind)),
			attribute.String("dpcs.event_id", n.EventID), attribute.Int("dpcs.hub.delivered", delivered), attribute.Int("dpcs.hub.dropped", dropped))
	}
	return delivered
}

// Subscribers returns the number of live subscriptions of familyID (0 for
// every family).
func (h *Hub) Subscribers(familyID int64) int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if familyID != 0 {
		return len(h.fams[familyID])
	}
	n := 0
	for _, subs := range h.fams {
		n += len(subs)
	}
	return n
}

// Close ends every subscription with ErrClosed and refuses new ones, then
// waits until subscribers have read what was buffered for them, or ctx
// ends (returning its error).
func (h *Hub) Close(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	var all []*Subscription
	for _, subs := range h.fams {
		for s := range subs {
			all = append(all, s)
		}
	}
	for _, s := range all {
		h.removeLocked(s, ErrClosed)
	}
	h.mu.Unlock()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		left := 0
		for _, s := range all {
			left += len(s.ch)
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
