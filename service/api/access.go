package api

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

// AccessEvent says that some access changed, so the live SSE streams it
// concerns must be checked against the store again: a stream whose member
// was removed, whose role changed or whose session ended is closed (the
// client reconnects and is refused, or gets its new role's filter).
type AccessEvent struct {
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

// AccessEvents carries AccessEvents to every API instance: each instance's
// SSE hub only knows its own streams.
type AccessEvents interface {
	// Publish delivers e to this instance's subscribers at once and then to
	// every other instance's. An error means other instances may miss it;
	// their streams' periodic re-check still ends what it concerns.
	Publish(ctx context.Context, e AccessEvent) error
	// Subscribe calls fn with every event delivered from now on until the
	// returned func is called. fn must not block.
	Subscribe(fn func(AccessEvent)) (unsubscribe func())
}

var (
	_ AccessEvents = (*LocalAccessEvents)(nil)
	_ AccessEvents = (*RedisAccessEvents)(nil)
)

// LocalAccessEvents delivers events within one process: enough for a single
// API instance, and the default of Config.AccessEvents.
type LocalAccessEvents struct {
	mu   sync.RWMutex
	next int
	subs map[int]func(AccessEvent)
}

// NewLocalAccessEvents returns an in-process AccessEvents.
func NewLocalAccessEvents() *LocalAccessEvents {
	return &LocalAccessEvents{subs: map[int]func(AccessEvent){}}
}

// Publish calls every subscriber with e before it returns; it never fails.
func (l *LocalAccessEvents) Publish(_ context.Context, e AccessEvent) error {
	l.deliver(e)
	return nil
}

func (l *LocalAccessEvents) deliver(e AccessEvent) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, fn := range l.subs {
		fn(e)
	}
}

// Subscribe implements AccessEvents.
func (l *LocalAccessEvents) Subscribe(fn func(AccessEvent)) func() {
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

// DefaultAccessChannel is the Redis pub/sub channel of RedisAccessEvents.
const DefaultAccessChannel = "dpcs:access-events"

// RedisAccessEvents carries AccessEvents between API instances over Redis
// pub/sub (on a Redis Cluster PUBLISH reaches every node's subscribers).
// Redis pub/sub delivers at most once: a message published while an
// instance is disconnected is lost to it, so after every re-subscription the
// instance's subscribers get an AccessEvent{All: true}, and the streams'
// periodic re-check bounds what a lost message can keep open. Close stops it.
type RedisAccessEvents struct {
	rdb     redis.UniversalClient
	channel string
	origin  string // this instance: its own messages were delivered by Publish
	log     *slog.Logger
	local   *LocalAccessEvents
	ps      *redis.PubSub
	done    chan struct{}
	close   sync.Once
}

// accessMessage is an AccessEvent on the wire.
type accessMessage struct {
	Origin string `json:"origin"`
	AccessEvent
}

// NewRedisAccessEvents subscribes to channel (DefaultAccessChannel when
// empty) on rdb and returns once the subscription is confirmed. log (nil:
// discard) reports messages it cannot read.
func NewRedisAccessEvents(ctx context.Context, rdb redis.UniversalClient, channel string, log *slog.Logger) (*RedisAccessEvents, error) {
	if rdb == nil {
		return nil, errors.New("api: NewRedisAccessEvents: nil redis client")
	}
	if channel == "" {
		channel = DefaultAccessChannel
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("api: access events: %w", err)
	}
	ps := rdb.Subscribe(ctx, channel)
	if _, err := ps.Receive(ctx); err != nil {
		ps.Close()
		return nil, fmt.Errorf("api: access events: subscribe %s: %w", channel, err)
	}
	r := &RedisAccessEvents{rdb: rdb, channel: channel, origin: hex.EncodeToString(id[:]), log: log,
		local: NewLocalAccessEvents(), ps: ps, done: make(chan struct{})}
	go r.run(ps.ChannelWithSubscriptions())
	return r, nil
}

// run delivers the channel's messages until Close closes the subscription.
// The subscription's confirmation was read by the constructor: every later
// one is a re-subscription after a lost connection.
func (r *RedisAccessEvents) run(ch <-chan any) {
	defer close(r.done)
	for msg := range ch {
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				r.log.Warn("access events: re-subscribed; re-checking every stream", "channel", r.channel)
				r.local.deliver(AccessEvent{All: true})
			}
		case *redis.Message:
			var am accessMessage
			if err := json.Unmarshal([]byte(m.Payload), &am); err != nil {
				r.log.Warn("access events: unreadable message", "channel", r.channel, "err", err)
				continue
			}
			if am.Origin != r.origin {
				r.local.deliver(am.AccessEvent)
			}
		}
	}
}

// Publish delivers e to this instance's subscribers, then publishes it.
func (r *RedisAccessEvents) Publish(ctx context.Context, e AccessEvent) error {
	r.local.deliver(e)
	if e.All {
		return nil
	}
	b, err := json.Marshal(accessMessage{Origin: r.origin, AccessEvent: e})
	if err != nil {
		return fmt.Errorf("api: access events: %w", err)
	}
	if err := r.rdb.Publish(ctx, r.channel, b).Err(); err != nil {
		return fmt.Errorf("api: access events: publish: %w", err)
	}
	return nil
}

// Subscribe implements AccessEvents.
func (r *RedisAccessEvents) Subscribe(fn func(AccessEvent)) func() { return r.local.Subscribe(fn) }

// Close ends the subscription and waits for its goroutine. Publish still
// reaches this instance's subscribers afterwards. Close is idempotent.
func (r *RedisAccessEvents) Close() error {
	var err error
	r.close.Do(func() {
		err = r.ps.Close()
		<-r.done
	})
	return err
}

// liveStreams are this instance's open SSE streams by member, so that an
// AccessEvent reaches the ones it concerns, within its limits.
type liveStreams struct {
	limits   StreamLimits
	mu       sync.Mutex
	total    int
	byMember map[int64]map[*liveStream]struct{}
}

// liveStream is one open SSE stream: recheck (buffered 1) asks its goroutine
// to check the stream's access against the store again.
type liveStream struct {
	member  int64
	session string
	recheck chan struct{}
}

// newLiveStreams holds streams within limits (defaults applied).
func newLiveStreams(limits StreamLimits) *liveStreams {
	return &liveStreams{limits: limits, byMember: map[int64]map[*liveStream]struct{}{}}
}

// streamLimitError is a stream refused by a bound of StreamLimits: Of says
// whose ("session", "member" or "instance") and Limit how many it may hold.
type streamLimitError struct {
	Of    string
	Limit int
}

func (e *streamLimitError) Error() string {
	n := fmt.Sprintf("%d live streams", e.Limit)
	if e.Limit == 1 {
		n = "1 live stream"
	}
	switch e.Of {
	case "session":
		return "this session has " + n + " open, the most it may: close one (another tab) before opening another"
	case "member":
		return "this member has " + n + " open over all its sessions, the most it may: close one (on another device) before opening another"
	}
	return "this server holds " + n + ", the most it may: retry later"
}

// open registers a stream of member in session, or refuses it with a
// *streamLimitError when the instance, the member or the session holds as
// many as it may; the returned func unregisters it.
func (l *liveStreams) open(member int64, session string) (*liveStream, func(), error) {
	s := &liveStream{member: member, session: session, recheck: make(chan struct{}, 1)}
	l.mu.Lock()
	defer l.mu.Unlock()
	set := l.byMember[member]
	inSession := 0
	for o := range set {
		if o.session == session {
			inSession++
		}
	}
	switch {
	case l.total >= l.limits.Total:
		return nil, nil, &streamLimitError{Of: "instance", Limit: l.limits.Total}
	case len(set) >= l.limits.PerMember:
		return nil, nil, &streamLimitError{Of: "member", Limit: l.limits.PerMember}
	case inSession >= l.limits.PerSession:
		return nil, nil, &streamLimitError{Of: "session", Limit: l.limits.PerSession}
	}
	if set == nil {
		set = map[*liveStream]struct{}{}
		l.byMember[member] = set
	}
	set[s] = struct{}{}
	l.total++
	return s, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		cur := l.byMember[member] // holds s: a set leaves the map only when empty
		delete(cur, s)
		l.total--
		if len(cur) == 0 {
			delete(l.byMember, member)
		}
	}, nil
}

// kick asks every stream e concerns to re-check its access; it never blocks.
func (l *liveStreams) kick(e AccessEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	poke := func(set map[*liveStream]struct{}) {
		for s := range set {
			if e.Session != "" && !e.All && s.session != e.Session {
				continue
			}
			select {
			case s.recheck <- struct{}{}:
			default: // a re-check is already pending
			}
		}
	}
	if e.All {
		for _, set := range l.byMember {
			poke(set)
		}
		return
	}
	poke(l.byMember[e.Member])
}

// OpenStreams is the number of live SSE streams this instance holds (at
// most Config.Streams.Total), for metrics.
func (a *Server) OpenStreams() int { return a.streams.count() }

// count is the number of open streams (for tests and metrics).
func (l *liveStreams) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// StreamLimits bound the live SSE streams one API instance holds; zero
// fields take the defaults. Beyond PerSession or PerMember a new stream is
// answered 429, beyond Total 503 with Retry-After (doc/security.md,
// "Limits"). Each instance counts its own streams: behind a load balancer
// a member may hold PerMember on each.
type StreamLimits struct {
	// PerSession bounds the streams opened with one session's access
	// tokens (one login: its tabs). Default: DefaultStreamsPerSession.
	PerSession int `envconfig:"PER_SESSION" doc_default:"5" deployables:"server, all-in-one" desc:"live notification streams (SSE) one session may hold open on an API instance (1 to 1000); one more is answered 429"`
	// PerMember bounds a member's streams over all its sessions (its
	// devices). Default: DefaultStreamsPerMember.
	PerMember int `envconfig:"PER_MEMBER" doc_default:"10" deployables:"server, all-in-one" desc:"live notification streams one member may hold open on an API instance over all its sessions (1 to 1000); one more is answered 429"`
	// Total bounds every stream of the instance (each holds a goroutine,
	// a connection and buffers). Default: DefaultStreamsTotal.
	Total int `envconfig:"MAX" doc_default:"2000" deployables:"server, all-in-one" desc:"live notification streams an API instance holds open in all (1 to 1000000); one more is answered 503 with Retry-After"`
}

// Defaults of StreamLimits.
const (
	DefaultStreamsPerSession = 5
	DefaultStreamsPerMember  = 10
	DefaultStreamsTotal      = 2000
)

// withDefaults fills zero fields with the defaults and refuses negative
// ones.
func (l StreamLimits) withDefaults() (StreamLimits, error) {
	for _, f := range []struct {
		n   *int
		def int
	}{{&l.PerSession, DefaultStreamsPerSession}, {&l.PerMember, DefaultStreamsPerMember}, {&l.Total, DefaultStreamsTotal}} {
		switch {
		case *f.n < 0:
			return l, errors.New("api: Config.Streams: limits must not be negative")
		case *f.n == 0:
			*f.n = f.def
		}
	}
	return l, nil
}
