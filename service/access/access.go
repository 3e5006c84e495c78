package access

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Event says that some access changed, so the live SSE streams it
// concerns must be checked against the store again: a stream whose member
// was removed, whose role changed or whose session ended is closed (the
// client reconnects and is refused, or gets its new role's filter).
type Event struct {
	// Member is the member whose access changed.
	Member int64 `json:"member,omitempty"`
	// Session, when set, narrows the event to the streams opened with an
	// access token of that session (refresh rotation id, the token's sid):
	// a logout or a refresh-token reuse.
	Session string `json:"session,omitempty"`
	// All asks for every stream to be checked: events may have been lost
	// (the subscription was re-established). Never sent between instances.
	All bool `json:"-"`
}

// Events carries Events to every API instance: each instance's
// SSE hub only knows its own streams.
type Events interface {
	// Publish delivers e to this instance's subscribers at once and then to
	// every other instance's. An error means other instances may miss it;
	// their streams' periodic re-check still ends what it concerns.
	Publish(ctx context.Context, e Event) error
	// Subscribe calls fn with every event delivered from now on until the
	// returned func is called. fn must not block.
	Subscribe(fn func(Event)) (unsubscribe func())
}

var (
	_ Events = (*Local)(nil)
	_ Events = (*Redis)(nil)
)

// Local delivers events within one process: enough for a single
// API instance, and the default of api.Config.AccessEvents.
type Local struct {
	mu   sync.RWMutex
	next int
	subs map[int]func(Event)
}

// NewLocal returns an in-process Events.
func NewLocal() *Local {
	return &Local{subs: map[int]func(Event){}}
}

// Publish calls every subscriber with e before it returns; it never fails.
func (l *Local) Publish(_ context.Context, e Event) error {
	l.deliver(e)
	return nil
}

func (l *Local) deliver(e Event) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, fn := range l.subs {
		fn(e)
	}
}

// Subscribe implements Events.
func (l *Local) Subscribe(fn func(Event)) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := l.next
	l.next++
	l.subs[id] = fn
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.subs, id)
	}
}

// Redis carries Events between API instances over Redis
// pub/sub (on a Redis Cluster PUBLISH reaches every node's subscribers).
// Redis pub/sub delivers at most once: a message published while an
// instance is disconnected is lost to it, so after every re-subscription the
// instance's subscribers get an Event{All: true}, and the streams'
// periodic re-check bounds what a lost message can keep open. Close stops it.
type Redis struct {
	rdb     redis.UniversalClient
	channel string
	origin  string // this instance: its own messages were delivered by Publish
	log     *slog.Logger
	local   *Local
	ps      *redis.PubSub
	done    chan struct{}
	close   sync.Once
}

// accessMessage is an Event on the wire.
type accessMessage struct {
	Origin string `json:"origin"`
	Event
}

// NewRedis subscribes to channel (DefaultChannel when
// empty) on rdb and returns once the subscription is confirmed. log (nil:
// discard) reports messages it cannot read.
func NewRedis(ctx context.Context, rdb redis.UniversalClient, channel string, log *slog.Logger) (*Redis, error) {
	if rdb == nil {
		return nil, errors.New("access: NewRedis: nil redis client")
	}
	if channel == "" {
		channel = DefaultChannel
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("access: access events: %w", err)
	}
	ps := rdb.Subscribe(ctx, channel)
	if _, err := ps.Receive(ctx); err != nil {
		ps.Close()
		return nil, fmt.Errorf("access: access events: subscribe %s: %w", channel, err)
	}
	r := &Redis{rdb: rdb, channel: channel, origin: hex.EncodeToString(id[:]), log: log,
		local: NewLocal(), ps: ps, done: make(chan struct{})}
	go r.run(ps.ChannelWithSubscriptions())
	return r, nil
}

// run delivers the channel's messages until Close closes the subscription.
// The subscription's confirmation was read by the constructor: every later
// one is a re-subscription after a lost connection.
func (r *Redis) run(ch <-chan any) {
	defer close(r.done)
	for msg := range ch {
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				r.log.Warn("access events: re-subscribed; re-checking every stream", "channel", r.channel)
				r.local.deliver(Event{All: true})
			}
		case *redis.Message:
			var am accessMessage
			if err := json.Unmarshal([]byte(m.Payload), &am); err != nil {
				r.log.Warn("access events: unreadable message", "channel", r.channel, "err", err)
				continue
			}
			if am.Origin != r.origin {
				r.local.deliver(am.Event)
			}
		}
	}
}

// Publish delivers e to this instance's subscribers, then publishes it.
func (r *Redis) Publish(ctx context.Context, e Event) error {
	r.local.deliver(e)
	if e.All {
		return nil
	}
	b, err := json.Marshal(accessMessage{Origin: r.origin, Event: e})
	if err != nil {
		return fmt.Errorf("access: access events: %w", err)
	}
	if err := r.rdb.Publish(ctx, r.channel, b).Err(); err != nil {
		return fmt.Errorf("access: access events: publish: %w", err)
	}
	return nil
}

// Subscribe implements Events.
func (r *Redis) Subscribe(fn func(Event)) func() { return r.local.Subscribe(fn) }

// Close ends the subscription and waits for its goroutine. Publish still
// reaches this instance's subscribers afterwards. Close is idempotent.
func (r *Redis) Close() error {
	var err error
	r.close.Do(func() {
		err = r.ps.Close()
		<-r.done
	})
	return err
}

// DefaultChannel is the Redis pub/sub channel of Redis.
const DefaultChannel = "dpcs:access-events"
