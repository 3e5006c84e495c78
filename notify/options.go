package notify

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/consumer"
	"github.com/dabom/dpcs/idempotency"
	"github.com/dabom/dpcs/policy"
)

// DefaultGroup is the Notifier's consumer group (doc/deploy.md, "Kafka").
const DefaultGroup = "notification-group"

// Topics are the topics the Notifier consumes: notification-events, and
// usage-persist, whose decision records stand for their QUOTA_UPDATED and
// CUSTOMER_BLOCKED (doc/wire-format.md, "One record per decision").
func Topics() []string {
	return []string{envelope.TopicNotificationEvents, envelope.TopicUsagePersist}
}

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
	// Unwatched: a live-only QUOTA_UPDATED (not stored, taken by no
	// channel) of a family no subscriber of this notifier's hub watches;
	// read by its headers and key only (its EventID is not reported),
	// nothing pushed.
	Unwatched Outcome = "unwatched"
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
// a poll whose store or guard operations failed (What "inbox") or whose
// dead letters the broker did not take ("dead letter"); fetching is paused
// meanwhile. A refused commit is reported by OnCommit.
type RetryInfo struct {
	What    string
	Attempt int // consecutive failures of the poll, from 1
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
	group       string // the consumer's, once it is built
	consumer    []consumer.Option
	guard       *idempotency.Guard
	channels    []channelCfg
	queue       int
	familyLimit int
	workers     int
	schedule    []time.Duration
	sendTimeout time.Duration
	sleep       func(context.Context, time.Duration) error
	storeQuota  bool
	lang        Lang
	loc         *time.Location
	now         func() time.Time
	log         *slog.Logger
	hooks       Hooks
	tracer      trace.Tracer
	names       Names
	apps        Apps
}

// Option configures a Notifier.
type Option func(*config) error

// WithConsumer configures the notifier's Kafka consumer (package
// envelope/consumer): its group, topic, dead-letter topic, poll size,
// backoff, drain timeout, consumer hooks and the rest, e.g.
// WithConsumer(consumer.WithGroup("g"), consumer.WithMaxPoll(1000)). The
// notifier's defaults come first — group DefaultGroup
// ("notification-group"), topic notification-events, dead letters to
// "<topic>.DLT" (the channels' too), 500 records per poll (each poll is
// deduped in one guard round trip and stored in one inbox transaction;
// larger polls cost fewer round trips per event and replay more after a
// crash), fetches that wait up to 100 ms for 64 KiB (consumer.WithFetchWait:
// at moderate rates a poll carries a batch, not the few events produced
// since the last one; live subscribers get a notification at most 100 ms
// later), backoff 100 ms doubling to 5 s while the inbox or the guard
// fails, WithLogger's logger — and these options after them, so they win.
// May be given more than once. Default: none.
func WithConsumer(opts ...consumer.Option) Option {
	return func(c *config) error {
		c.consumer = append(c.consumer, opts...)
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

// WithChannelQueue sets how many notifications may wait for each channel's
// workers, all families together; a notification that finds its channel's
// queue full is dead-lettered instead. Default: 1024.
func WithChannelQueue(n int) Option {
	return func(c *config) error {
		if n < 1 || n > 1<<20 {
			return fmt.Errorf("%w: channel queue must be 1..%d", ErrInvalid, 1<<20)
		}
		c.queue = n
		return nil
	}
}

// WithChannelFamilyLimit sets how many notifications of one family each
// channel holds at once: waiting, being delivered or waiting to retry. A
// family's notification beyond it is dead-lettered instead, so no family
// fills a channel's queue (WithChannelQueue) and keeps others' out.
// Default: 64.
func WithChannelFamilyLimit(n int) Option {
	return func(c *config) error {
		if n < 1 || n > 1<<20 {
			return fmt.Errorf("%w: channel family limit must be 1..%d", ErrInvalid, 1<<20)
		}
		c.familyLimit = n
		return nil
	}
}

// WithChannelWorkers sets how many deliveries of one channel run at once.
// The workers take the families with notifications waiting in turn, one
// delivery of a family at a time, and a delivery waiting to retry holds no
// worker: a family whose deliveries hang holds one worker, not all of them.
// Default: 4.
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
// dead-letter topic. Default: 1 s, 5 s, 30 s (three failed retries, four
// attempts in all; doc/architecture.md, Notifications). A fixed schedule,
// not an exponential backoff: the waits are the product's, not a doubling.
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

// WithSleep sets how the channel workers wait between attempts (see
// WithRetrySchedule); it must return ctx's error when ctx ends first. Tests
// pass a fake. (The consumer's backoff while the inbox fails waits in its
// polls: consumer.WithBackoff.) Default: a timer.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(c *config) error {
		if sleep == nil {
			return fmt.Errorf("%w: nil sleep", ErrInvalid)
		}
		c.sleep = sleep
		return nil
	}
}

// WithBackoff sets the waits between retries of a poll while the inbox,
// the guard or the dead-letter topic fails: from min doubling to max, for as
// long as it takes (fetching paused). It is short for
// WithConsumer(consumer.WithBackoff(min, max, 0)). Default: 100 ms … 5 s.
//
// Deprecated: use WithConsumer(consumer.WithBackoff(min, max, jitter)).
func WithBackoff(min, max time.Duration) Option {
	return WithConsumer(consumer.WithBackoff(min, max, 0))
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

// Names looks up members' display names for the texts that name a member
// (a block, a request for more data): service/store's MemberNames. Ids it
// does not know are left out of the map.
type Names interface {
	MemberNames(ctx context.Context, ids []int64) (map[int64]string, error)
}

// WithNames makes the texts of blocks and requests for more data name their
// member ("민지님 데이터 차단") instead of the member's id: the notifier asks
// nm once per poll for the members its notifications name, and goes on with
// ids when that fails (logged). Default: none (ids).
func WithNames(nm Names) Option {
	return func(c *config) error {
		if nm == nil {
			return fmt.Errorf("%w: nil names", ErrInvalid)
		}
		c.names = nm
		return nil
	}
}

// Apps looks up how people know apps, for the texts that name one (a block
// of an app, a request for an app's time): the operator's catalog,
// service/store's AppLabels. Ids it does not know are left out of the map.
type Apps interface {
	AppLabels(ctx context.Context, ids []string) (map[string]policy.AppLabel, error)
}

// WithApps makes the texts name apps as the operator's catalog does
// ("유튜브 앱 사용이 차단되었습니다"): the notifier asks a once per poll for
// the apps its notifications name. Without it, or when the lookup fails
// (logged), apps are named by policy.DefaultAppLabels, and an app no
// catalog knows as "앱": never by its package id. Default: none.
func WithApps(a Apps) Option {
	return func(c *config) error {
		if a == nil {
			return fmt.Errorf("%w: nil apps", ErrInvalid)
		}
		c.apps = a
		return nil
	}
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

// WithTracerProvider traces the notifier with tp: a span per record read
// (none for one skipped unread, Unwatched) ("notification-events process", a child of the record's context —
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
