package notify

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

// DefaultBridgeChannel is the Redis pub/sub channel of a RedisBridge.
const DefaultBridgeChannel = "dpcs:live"

// BridgeOption configures a RedisBridge.
type BridgeOption func(*RedisBridge) error

// WithBridgeChannel sets the Redis pub/sub channel the bridge publishes on
// and listens to; every process of one deployment must use the same.
// Default: DefaultBridgeChannel ("dpcs:live").
func WithBridgeChannel(name string) BridgeOption {
	return func(b *RedisBridge) error {
		if name == "" {
			return fmt.Errorf("%w: empty bridge channel", ErrInvalid)
		}
		b.channel = name
		return nil
	}
}

// WithBridgeLogger reports messages the bridge cannot read and lost
// subscriptions. Default: discard.
func WithBridgeLogger(l *slog.Logger) BridgeOption {
	return func(b *RedisBridge) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalid)
		}
		b.log = l
		return nil
	}
}

// RedisBridge carries live notifications between the processes that serve
// a deployment's SSE streams: each process has its own Hub, which knows
// only its own subscribers. Publish hands a notification to this process's
// hub at once and publishes it on a Redis pub/sub channel; every other
// process's bridge hands what it receives there to its hub (on a Redis
// Cluster PUBLISH reaches the subscribers of every node). Redis pub/sub
// delivers at most once: a process disconnected from Redis misses what was
// published meanwhile, so the bridge suits live-only messages a client
// can do without (a screen re-reads its data on reconnect), not the
// inbox's. Close stops it.
type RedisBridge struct {
	rdb     redis.UniversalClient
	hub     *Hub
	channel string
	origin  string // this process: its own messages were delivered by Publish
	log     *slog.Logger
	ps      *redis.PubSub
	done    chan struct{}
	close   sync.Once
}

// bridgeMessage is a notification on the bridge's channel.
type bridgeMessage struct {
	Origin string       `json:"origin"`
	Note   Notification `json:"note"`
}

// NewRedisBridge subscribes to the bridge channel on rdb and returns once
// the subscription is confirmed; what it receives from other processes is
// published to hub.
func NewRedisBridge(ctx context.Context, rdb redis.UniversalClient, hub *Hub, opts ...BridgeOption) (*RedisBridge, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalid)
	}
	if hub == nil {
		return nil, fmt.Errorf("%w: nil hub", ErrInvalid)
	}
	b := &RedisBridge{rdb: rdb, hub: hub, channel: DefaultBridgeChannel, log: slog.New(slog.DiscardHandler), done: make(chan struct{})}
	for _, o := range opts {
		if err := o(b); err != nil {
			return nil, err
		}
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("notify: bridge: %w", err)
	}
	b.origin = hex.EncodeToString(id[:])
	b.ps = rdb.Subscribe(ctx, b.channel)
	if _, err := b.ps.Receive(ctx); err != nil {
		b.ps.Close()
		return nil, fmt.Errorf("notify: bridge: subscribe %s: %w", b.channel, err)
	}
	go b.run(b.ps.ChannelWithSubscriptions())
	return b, nil
}

// run hands what other processes publish to the hub until Close closes the
// subscription.
func (b *RedisBridge) run(ch <-chan any) {
	defer close(b.done)
	for msg := range ch {
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				b.log.Warn("notify: bridge re-subscribed; live messages published meanwhile were missed", "channel", b.channel)
			}
		case *redis.Message:
			var bm bridgeMessage
			if err := json.Unmarshal([]byte(m.Payload), &bm); err != nil || bm.Note.FamilyID <= 0 {
				b.log.Warn("notify: bridge: unreadable message", "channel", b.channel, "err", err)
				continue
			}
			if bm.Origin != b.origin {
				b.hub.Publish(bm.Note)
			}
		}
	}
}

// Publish hands n to this process's hub (returning how many of its
// subscribers it was queued for), then publishes it for the other
// processes. An error means they may miss it.
func (b *RedisBridge) Publish(ctx context.Context, n Notification) (int, error) {
	if n.FamilyID <= 0 {
		return 0, fmt.Errorf("%w: family id must be > 0", ErrInvalid)
	}
	delivered := b.hub.PublishContext(ctx, n)
	msg, err := json.Marshal(bridgeMessage{Origin: b.origin, Note: n})
	if err != nil {
		return delivered, fmt.Errorf("notify: bridge: %w", err)
	}
	if err := b.rdb.Publish(ctx, b.channel, msg).Err(); err != nil {
		return delivered, fmt.Errorf("notify: bridge: publish: %w", err)
	}
	return delivered, nil
}

// Close ends the subscription and waits for its goroutine; Publish still
// reaches this process's hub afterwards. It is idempotent.
func (b *RedisBridge) Close() error {
	var err error
	b.close.Do(func() {
		err = b.ps.Close()
		<-b.done
		if errors.Is(err, redis.ErrClosed) {
			err = nil
		}
	})
	return err
}
