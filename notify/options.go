package notify

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/idempotency"
)

// DefaultGroup is the Notifier's consumer group (doc/deploy.md, "Kafka").
const DefaultGroup = "notification-group"

// Outcome says what the notifier did with a notification event.
type Outcome string

// The outcomes reported to Hooks.OnNotify.
const (
	// Delivered: stored in the inbox (a live-only QUOTA_UPDATED is not, see
	// WithStoreQuotaUpdated), published to the hub, queued for the channels.
	Delivered Outcome = "delivered"
	// Duplicate: the event (or, for a threshold alert, its family, threshold
	// and period) was handled before; nothing was stored or pushed.
	Duplicate Outcome = "duplicate"
)

// NotifyInfo is passed to Hooks.OnNotify for every notification event
// handled.
type NotifyInfo struct {
	EventID  string
	Kind     envelope.SubType
	FamilyID int64
	InboxID  int64 // the inbox row (for a duplicate, the existing one; 0 when the guard answered or the update was live-only)
	Outcome  Outcome
}

// DeadLetterInfo is passed to Hooks.OnDeadLetter for every record sent (or
// failed to be sent) to the dead-letter topic.
type DeadLetterInfo struct {
	Channel string // "" for a record that could not be handled at all
	Reason  string
	Record  *kgo.Record // the original record
	Err     error       // the produce error, if the dead letter itself failed
}

// RetryInfo is passed to Hooks.OnRetry before the notifier waits to retry
// a failed store, guard, commit or dead-letter operation (fetching is
// paused meanwhile).
type RetryInfo struct {
	What    string
	Attempt int
	Wait    time.Duration
	Err     error
}

// SendInfo is passed to Hooks.OnSend after every channel attempt.
type SendInfo struct {
	Channel  string
	EventID  string
	Attempt  int // from 1
	Duration time.Duration
	Err      error
}

// CommitInfo is passed to Hooks.OnCommit after the notifier committed (or
// failed to commit) the offsets of handled records.
type CommitInfo struct {
	Records int
	Err     error
}

// Hooks are optional callbacks for observability; nil funcs are skipped.
// They run on the notifier's goroutines and must be quick.
type Hooks struct {
	OnNotify     func(NotifyInfo)
	OnDeadLetter func(DeadLetterInfo)
	OnRetry      func(RetryInfo)
	OnSend       func(SendInfo)
	OnCommit     func(CommitInfo)
}

type channelCfg struct {
	name  string
	ch    Channel
	kinds []envelope.SubType
}

type config struct {
	group, topic, dlt      string
	guard                  *idempotency.Guard
	channels               []channelCfg
	queue, workers         int
	schedule               []time.Duration
	sendTimeout            time.Duration
	sleep                  func(context.Context, time.Duration) error
	backoffMin, backoffMax time.Duration
	maxPoll                int
	storeQuota             bool
	lang                   Lang
	loc                    *time.Location
	now                    func() time.Time
	log                    *slog.Logger
	hooks                  Hooks
	tracer                 trace.Tracer
}

// Option configures a Notifier.
type Option func(*config) error

// WithGroup sets the consumer group. Default: DefaultGroup
// ("notification-group").
func WithGroup(group string) Option {
	return func(c *config) error {
		if group == "" {
			return fmt.Errorf("%w: empty group", ErrInvalid)
		}
		c.group = group
		return nil
	}
}

// WithTopic sets the topic consumed. Default: notification-events; its
// dead-letter topic follows (envelope.DLT) unless WithDLT is given.
func WithTopic(topic string) Option {
	return func(c *config) error {
		if topic == "" {
			return fmt.Errorf("%w: empty topic", ErrInvalid)
		}
		c.topic = topic
		return nil
	}
}

// WithDLT sets the dead-letter topic. Default: "<topic>.DLT"
// (notification-events.DLT).
func WithDLT(topic string) Option {
	return func(c *config) error {
		if topic == "" {
			return fmt.Errorf("%w: empty DLT topic", ErrInvalid)
		}
		c.dlt = topic
		return nil
	}
}

// WithGuard dedupes with an idempotency guard before touching the inbox,
// under idempotency.Key(group, dedupe key): the event id, or for a
// THRESHOLD_ALERT its family/threshold/period (ThresholdKey). A replay
// then costs one Redis round trip instead of database queries; the inbox's
// unique keys stay the durable line. Default: none (the inbox alone
// dedupes).
func WithGuard(g *idempotency.Guard) Option {
	return func(c *config) error {
		if g == nil {
			return fmt.Errorf("%w: nil guard", ErrInvalid)
		}
		c.guard = g
		return nil
	}
}

// WithChannel adds an external channel named name (for hooks and
// dead-letter reasons), delivering the given kinds. Default kinds:
// CUSTOMER_BLOCKED and THRESHOLD_ALERT (QUOTA_UPDATED comes with every
// allowed usage event: live updates, not pushes). Default: no channels.
func WithChannel(name string, ch Channel, kinds ...envelope.SubType) Option {
	return func(c *config) error {
		if name == "" || ch == nil {
			return fmt.Errorf("%w: channel needs a name and a Channel", ErrInvalid)
		}
		for _, o := range c.channels {
			if o.name == name {
				return fmt.Errorf("%w: channel %q added twice", ErrInvalid, name)
			}
		}
		if len(kinds) == 0 {
			kinds = []envelope.SubType{envelope.SubCustomerBlocked, envelope.SubThresholdAlert}
		}
		c.channels = append(c.channels, channelCfg{name: name, ch: ch, kinds: kinds})
		return nil
	}
}

// WithChannelQueue sets each channel's queue length; a notification that
// finds its channel's queue full is dead-lettered instead. Default: 1024.
func WithChannelQueue(n int) Option {
	return func(c *config) error {
		if n < 1 || n > 1<<20 {
			return fmt.Errorf("%w: channel queue must be 1..%d", ErrInvalid, 1<<20)
		}
		c.queue = n
		return nil
	}
}

// WithChannelWorkers sets how many deliveries of one channel run at once
// (each retrying on its own schedule). Default: 4.
func WithChannelWorkers(n int) Option {
	return func(c *config) error {
		if n < 1 || n > 1024 {
			return fmt.Errorf("%w: channel workers must be 1..1024", ErrInvalid)
		}
		c.workers = n
		return nil
	}
}

// WithRetrySchedule sets the waits before each retry of a failed channel
// delivery; after the last retry fails, the notification goes to the
// dead-letter topic. Default: 1 s, 5 s, 30 s (doc/architecture.md,
// "Notifications": three failed retries, four attempts in all).
func WithRetrySchedule(waits ...time.Duration) Option {
	return func(c *config) error {
		for _, w := range waits {
			if w < 0 {
				return fmt.Errorf("%w: negative retry wait", ErrInvalid)
			}
		}
		c.schedule = append([]time.Duration(nil), waits...)
		return nil
	}
}

// WithSendTimeout bounds each channel attempt. Default: 10 s.
func WithSendTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: send timeout must be > 0", ErrInvalid)
		}
		c.sendTimeout = d
		return nil
	}
}

// WithSleep sets how the notifier waits (channel retries and store
// backoff); it must return ctx's error when ctx ends first. Tests pass a
// fake. Default: a timer.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(c *config) error {
		if sleep == nil {
			return fmt.Errorf("%w: nil sleep", ErrInvalid)
		}
		c.sleep = sleep
		return nil
	}
}

// WithBackoff sets the waits between retries of a failing inbox, guard,
// commit or dead-letter write: from min doubling to max, for as long as it
// takes (fetching paused). Default: 100 ms … 5 s.
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) error {
		if min <= 0 || max < min {
			return fmt.Errorf("%w: backoff needs 0 < min ≤ max", ErrInvalid)
		}
		c.backoffMin, c.backoffMax = min, max
		return nil
	}
}

// WithMaxPollRecords caps the records handled between commits: each poll's
// records are deduped in one guard round trip and stored in one inbox
// transaction. Larger polls cost fewer round trips per event (and replay
// more after a crash). Default: 500.
func WithMaxPollRecords(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: max poll records must be ≥ 1", ErrInvalid)
		}
		c.maxPoll = n
		return nil
	}
}

// WithStoreQuotaUpdated says whether QUOTA_UPDATED notifications are
// stored in the inbox too. They come with every allowed usage event, and the
// dashboard shows the pool anyway, so by default they are live-only: pushed
// to the hub (SSE) and the channels that take them, with no inbox row (their
// SSE messages carry no id, and a client reconnecting with Last-Event-ID
// does not get them again). With a guard (WithGuard) a live-only update is
// still pushed once; without one a redelivered record is pushed again.
// CUSTOMER_BLOCKED and THRESHOLD_ALERT are always stored. Default: false.
func WithStoreQuotaUpdated(store bool) Option {
	return func(c *config) error { c.storeQuota = store; return nil }
}

// WithLang sets the language of the texts stored in the inbox.
// Default: Korean.
func WithLang(l Lang) Option {
	return func(c *config) error {
		if l != Korean && l != English {
			return fmt.Errorf("%w: language %q", ErrInvalid, l)
		}
		c.lang = l
		return nil
	}
}

// WithLocation sets the zone of the period ("YYYY-MM") of a threshold
// alert that carries none. Default: Asia/Seoul.
func WithLocation(loc *time.Location) Option {
	return func(c *config) error {
		if loc == nil {
			return fmt.Errorf("%w: nil location", ErrInvalid)
		}
		c.loc = loc
		return nil
	}
}

// WithClock sets the clock of delivered_at stamps. Default: time.Now.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalid)
		}
		c.now = now
		return nil
	}
}

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalid)
		}
		c.log = l
		return nil
	}
}

// WithHooks sets observability callbacks. Default: none.
func WithHooks(h Hooks) Option {
	return func(c *config) error { c.hooks = h; return nil }
}

// WithTracerProvider traces the notifier with tp: a span per handled
// record ("notification-events process", a child of the record's context —
// the trace the processor's record carries when the Kafka client has
// tracing hooks, e.g. service.TracingKafkaOpts), its hub publish as a child
// (give the hub the same provider, WithHubTracerProvider), and a span per
// channel attempt ("notify channel send"). Default: a no-op provider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error {
		if tp == nil {
			return fmt.Errorf("%w: nil tracer provider", ErrInvalid)
		}
		c.tracer = tp.Tracer(TracerName)
		return nil
	}
}

// TracerName is the instrumentation scope of the notifier's and the hub's
// spans.
const TracerName = "github.com/dabom/dpcs/notify"

func sleepTimer(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
