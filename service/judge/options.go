package judge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/consumer"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// TracerName is the instrumentation scope of the processor's spans.
const TracerName = "github.com/dabom/dpcs/service/judge"

// Options are typed per component, as franz-go's kgo.ProducerOpt and
// kgo.ConsumerOpt are: an Opt configures both a Processor and Decisions, a
// ProcessorOpt only a Processor, a DecisionsOpt only Decisions, so an option
// the component would ignore does not compile. Each is checked once, by the
// constructor, and its comment states its default.

// ProcessorOpt configures a Processor (NewProcessor): an Opt or one of the
// processor's own (WithMaxPollRecords, WithApplyConcurrency, …).
type ProcessorOpt interface {
	applyProcessor(*processorConfig) error
}

// DecisionsOpt configures Decisions (NewDecisions): an Opt or one of the
// decisions' own (WithLinger, WithSpool, …).
type DecisionsOpt interface {
	applyDecisions(*decisionsConfig) error
}

// Opt configures a Processor and Decisions alike (WithLogger, WithClock,
// WithLocation, WithApps, …).
type Opt interface {
	ProcessorOpt
	DecisionsOpt
}

type (
	opt          func(*common) error
	processorOpt func(*processorConfig) error
	decisionsOpt func(*decisionsConfig) error
)

func (o opt) applyProcessor(c *processorConfig) error { return o(&c.common) }
func (o opt) applyDecisions(c *decisionsConfig) error { return o(&c.common) }

func (o processorOpt) applyProcessor(c *processorConfig) error { return o(c) }
func (o decisionsOpt) applyDecisions(c *decisionsConfig) error { return o(c) }

// common is what a Processor and Decisions are both configured with (Opt).
type common struct {
	log             *slog.Logger
	now             func() time.Time
	loc             *time.Location
	apps            *Apps
	maxAge, maxSkew time.Duration
	maxAgeSet       bool // WithMaxEventAge was given (fitWindow)
	alertText       func(percent int) string
	guard           StateGuard
	grantCharged    func(appID string, cat policy.Category) bool
}

// processorConfig is a Processor's configuration (ProcessorOpt).
type processorConfig struct {
	common
	// tracer starts the records' process spans; nil: tracing off.
	tracer                 trace.Tracer
	hooks                  ProcessorHooks
	maxPoll                int
	groups, minGroup       int
	backoffMin, backoffMax time.Duration
	fetch                  consumer.Option // the fetch wait
	commitEvery            time.Duration
}

// decisionsConfig is the configuration of Decisions (DecisionsOpt).
type decisionsConfig struct {
	common
	hooks    DecisionHooks
	gens     GenerationSource
	linger   time.Duration
	maxBatch int
	timeout  time.Duration
	slots    int
	spool    Spool
}

func commonDefaults() (common, error) {
	loc, err := policy.LoadZone(policy.DefaultZone)
	if err != nil {
		return common{}, err
	}
	return common{
		log:       slog.New(slog.DiscardHandler),
		now:       time.Now,
		loc:       loc,
		apps:      NewApps(policy.NewCatalog(policy.DefaultApps())),
		maxAge:    23 * time.Hour,
		maxSkew:   5 * time.Minute,
		alertText: policy.ThresholdAlertText,
	}, nil
}

func newProcessorConfig(opts []ProcessorOpt) (processorConfig, error) {
	com, err := commonDefaults()
	if err != nil {
		return processorConfig{}, err
	}
	c := processorConfig{common: com, maxPoll: 2000, groups: 4, minGroup: 64,
		backoffMin: 100 * time.Millisecond, backoffMax: 5 * time.Second,
		fetch: consumer.WithFetchWait(consumer.MinFetchWait, 64<<10), commitEvery: 100 * time.Millisecond}
	for _, o := range opts {
		if err := o.applyProcessor(&c); err != nil {
			return processorConfig{}, err
		}
	}
	return c, nil
}

func newDecisionsConfig(opts []DecisionsOpt) (decisionsConfig, error) {
	com, err := commonDefaults()
	if err != nil {
		return decisionsConfig{}, err
	}
	c := decisionsConfig{common: com, linger: 200 * time.Microsecond, maxBatch: 256, timeout: 2 * time.Second, slots: 4}
	for _, o := range opts {
		if err := o.applyDecisions(&c); err != nil {
			return decisionsConfig{}, err
		}
	}
	if c.gens == nil && c.guard != nil {
		c.gens = c.guard
	}
	return c, nil
}

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Opt {
	return opt(func(c *common) error {
		if l == nil {
			return errors.New("judge: nil logger")
		}
		c.log = l
		return nil
	})
}

// WithClock sets the clock events' timestamps are judged by (WithMaxEventAge,
// WithMaxClockSkew). Default: time.Now.
func WithClock(now func() time.Time) Opt {
	return opt(func(c *common) error {
		if now == nil {
			return errors.New("judge: nil clock")
		}
		c.now = now
		return nil
	})
}

// WithLocation sets the service time zone, which names the period (YYYY-MM)
// of threshold alerts. It must be the quota engine's. Default: Asia/Seoul.
func WithLocation(loc *time.Location) Opt {
	return opt(func(c *common) error {
		if loc == nil {
			return errors.New("judge: nil location")
		}
		c.loc = loc
		return nil
	})
}

// WithCatalog sets the app catalog that names an event's category.
// Default: policy.DefaultApps().
func WithCatalog(cat policy.Catalog) Opt {
	return opt(func(c *common) error { c.apps = NewApps(cat); return nil })
}

// WithGrantCharged names the traffic the network charges through grants
// (the charging interface's online rating groups, doc/wire-format.md
// "Charged once"): a usage event for which covered(appID, category)
// holds — its category named from the catalog (WithApps) — is judged
// like any other (blocks, windows, the pool's end) but charges nothing,
// and its usage-persist record carries what it reported as
// grantChargedBytes beside bytesUsed 0. The same traffic is then never
// charged twice, once by a grant's report and once by its event. Default:
// nil, every event charges what it reports.
func WithGrantCharged(covered func(appID string, category policy.Category) bool) Opt {
	return opt(func(c *common) error {
		c.grantCharged = covered
		return nil
	})
}

// WithApps names events' categories from apps, a catalog that may be
// replaced while judging (Apps.Set): the catalog the back office edits.
// Several judges may share one. Default: a fixed policy.DefaultApps().
func WithApps(apps *Apps) Opt {
	return opt(func(c *common) error {
		if apps == nil {
			return errors.New("judge: nil Apps")
		}
		c.apps = apps
		return nil
	})
}

// Apps is an app catalog (app id → category) that can be replaced while
// events are judged: an operator's edit reaches every judge of a process
// at once, without a restart. Safe for concurrent use.
type Apps struct {
	p atomic.Pointer[policy.Catalog]
}

// NewApps returns apps holding a copy of c.
func NewApps(c policy.Catalog) *Apps {
	a := &Apps{}
	a.Set(c)
	return a
}

// Set replaces the catalog with a copy of c.
func (a *Apps) Set(c policy.Catalog) {
	cp := maps.Clone(c)
	a.p.Store(&cp)
}

// Category is app's category ("" when the catalog does not know it).
func (a *Apps) Category(app string) policy.Category { return (*a.p.Load()).Category(app) }

// Catalog is a copy of the catalog held.
func (a *Apps) Catalog() policy.Catalog { return maps.Clone(*a.p.Load()) }

// WithMaxEventAge refuses usage events stamped longer ago than d (the
// processor dead-letters them, Decisions answers an invalid event). With
// the max clock skew (WithMaxClockSkew) it must fit the quota engine's
// dedupe window, or a late replay could be counted twice: NewProcessor and
// NewDecisions refuse a d and a skew longer together than the window.
// Default: 23/24 of the engine's window less the skew, at most 23 h (22 h
// 55 min for the engine's default 24 h window and 5 min skew).
func WithMaxEventAge(d time.Duration) Opt {
	return opt(func(c *common) error {
		if d <= 0 {
			return errors.New("judge: max event age must be > 0")
		}
		c.maxAge, c.maxAgeSet = d, true
		return nil
	})
}

// fitWindow fits the max event age to the engine's dedupe window w (see
// WithMaxEventAge); an engine that names no window (w ≤ 0) is taken as is.
// An event is taken until its max age after its stamp, and its stamp may
// be the max clock skew ahead of the clock that first took it: the engine
// finds a replay only within its window of the first arrival, so the age
// and the skew together must fit it.
func (c *common) fitWindow(w time.Duration) error {
	if w <= 0 {
		return nil
	}
	if !c.maxAgeSet {
		c.maxAge = min(c.maxAge, w-w/24-c.maxSkew)
		if c.maxAge <= 0 {
			return fmt.Errorf("judge: the quota engine's dedupe window %s leaves no event age beside the max clock skew %s: lengthen the window or shorten the skew (WithMaxClockSkew)", w, c.maxSkew)
		}
	}
	if c.maxAge+c.maxSkew > w {
		return fmt.Errorf("judge: max event age %s and max clock skew %s exceed the quota engine's dedupe window %s: a replay that late would be counted twice", c.maxAge, c.maxSkew, w)
	}
	return nil
}

// WithMaxClockSkew refuses usage events stamped further than d in the
// future. Default: 5 min.
func WithMaxClockSkew(d time.Duration) Opt {
	return opt(func(c *common) error {
		if d < 0 {
			return errors.New("judge: max clock skew must be ≥ 0")
		}
		c.maxSkew = d
		return nil
	})
}

// WithAlertText sets the message of the THRESHOLD_ALERT records the judges
// produce (envelope.ThresholdAlert.Message) for a threshold of percent %.
// Default: policy.ThresholdAlertText (Korean).
func WithAlertText(text func(percent int) string) Opt {
	return opt(func(c *common) error {
		if text == nil {
			return errors.New("judge: nil alert text")
		}
		c.alertText = text
		return nil
	})
}

// WithStateGuard makes the processor judge only from a Redis state it can
// trust: every batch is judged marked with its Kafka positions
// (quota.Engine.ApplyMarked); when the state is reported stale (Redis came
// back empty, from an older snapshot or another generation), the processor
// pauses fetching, says so (log at error level, OnStale, Stale), lets g
// bring Redis back, and judges the batch again. The synchronous decisions
// take g as their generation source (WithGenerations) and, when a batch is
// refused as stale, ask g in the background to bring Redis back, answering
// every caller with the stale error meanwhile. Default: none (the state is
// trusted).
func WithStateGuard(g StateGuard) Opt {
	return opt(func(c *common) error {
		if g == nil {
			return errors.New("judge: nil state guard")
		}
		c.guard = g
		return nil
	})
}

// Spool keeps, durably, the records of judged decisions that Kafka did not
// acknowledge, and publishes them later: service/outbox's Spool writes them
// to the SQL outbox, whose relay produces them in order once Kafka takes
// them. Spool returns nil only once every record is stored (a record stored
// before counts: ids are deterministic). It may be called concurrently.
type Spool interface {
	Spool(ctx context.Context, recs []*kgo.Record) error
}

// WithSpool makes a decision whose records Kafka does not acknowledge still
// answered: its records go to sp instead, and until Kafka acknowledges again
// (the instance tries it in the background with the latest spooled records)
// every batch's records go to sp without waiting for Kafka. Without a spool,
// or while sp fails too, the batch's callers wait until Kafka or sp takes
// the records, and new callers are refused unjudged (ErrKafkaUnavailable).
// Default: none.
func WithSpool(sp Spool) DecisionsOpt {
	return decisionsOpt(func(c *decisionsConfig) error {
		if sp == nil {
			return errors.New("judge: nil spool")
		}
		c.spool = sp
		return nil
	})
}

// WithDecisionHooks sets the synchronous decisions' hooks. Default: none.
func WithDecisionHooks(h DecisionHooks) DecisionsOpt {
	return decisionsOpt(func(c *decisionsConfig) error { c.hooks = h; return nil })
}

// WithGenerations judges only from a Redis state of the generation g names
// (quota.Engine.ApplyMarked): a state that is stale, being rebuilt or of
// another generation is answered with an error wrapping quota.ErrStale,
// never a guess. When g has a Forget method it is called after a stale
// answer. Default: none (the state is trusted), or the state guard
// (WithStateGuard) when there is one.
func WithGenerations(g GenerationSource) DecisionsOpt {
	return decisionsOpt(func(c *decisionsConfig) error {
		if g == nil {
			return errors.New("judge: nil generation source")
		}
		c.gens = g
		return nil
	})
}

// WithLinger is how long a group commit waits for more callers after the
// first, 0 to 100 ms. Default: 200 µs.
func WithLinger(d time.Duration) DecisionsOpt {
	return decisionsOpt(func(c *decisionsConfig) error {
		if d < 0 || d > 100*time.Millisecond {
			return errors.New("judge: decision linger must be 0 to 100ms")
		}
		c.linger = d
		return nil
	})
}

// WithMaxBatch ends a group commit's lingering once it holds n events.
// Default: 256.
func WithMaxBatch(n int) DecisionsOpt {
	return decisionsOpt(func(c *decisionsConfig) error {
		if n < 1 {
			return errors.New("judge: decision max batch must be ≥ 1")
		}
		c.maxBatch = n
		return nil
	})
}

// WithConcurrency is how many group commits run at once (each one pipeline
// on its own connection); callers arriving meanwhile join the next.
// Default: 4.
func WithConcurrency(n int) DecisionsOpt {
	return decisionsOpt(func(c *decisionsConfig) error {
		if n < 1 {
			return errors.New("judge: decision concurrency must be ≥ 1")
		}
		c.slots = n
		return nil
	})
}

// WithTimeout bounds one group commit: judging and producing its records
// until Kafka acknowledged them; past it the batch's records go to the spool
// (WithSpool; which has as long again), or the batch waits until they are
// stored (an error of Redis's is answered at once). Keep it below the recovery's
// quiet window (3 s). Default: 2 s.
func WithTimeout(d time.Duration) DecisionsOpt {
	return decisionsOpt(func(c *decisionsConfig) error {
		if d <= 0 {
			return errors.New("judge: decision timeout must be > 0")
		}
		c.timeout = d
		return nil
	})
}

// InvalidEventError is a usage event that cannot be judged: the field at
// fault, named as in the envelope (payload.bytesUsed), and why. It wraps
// quota.ErrInvalid. The processor dead-letters the record with its text;
// Decisions refuses the caller's events with it.
type InvalidEventError struct {
	// Index is the event's position in the caller's events (Decisions).
	Index         int
	Field, Reason string
}

func (e *InvalidEventError) Error() string { return e.Field + ": " + e.Reason }
func (e *InvalidEventError) Unwrap() error { return quota.ErrInvalid }

// checkUsage is the one rule for which usage events are judged, beside the
// engine's own checks: nil, or an *InvalidEventError.
func (s *common) checkUsage(e envelope.Envelope[envelope.UsagePayload], now time.Time) error {
	pl := e.Payload
	bad := func(field, reason string) error { return &InvalidEventError{Field: field, Reason: reason} }
	switch {
	case e.EventID == "" || len(e.EventID) > quota.MaxEventIDLen:
		return bad("eventId", fmt.Sprintf("1 to %d bytes", quota.MaxEventIDLen))
	case pl.FamilyID <= 0:
		return bad("payload.familyId", "must be > 0")
	case pl.CustomerID <= 0:
		return bad("payload.customerId", "must be > 0")
	case pl.AppID == "" || len(pl.AppID) > policy.MaxAppIDLen:
		// The bound every sink of the id holds (usage_record.app_id, a
		// block's rule): an id the truth cannot store is never charged.
		return bad("payload.appId", fmt.Sprintf("1 to %d bytes", policy.MaxAppIDLen))
	case pl.BytesUsed < 0 || pl.BytesUsed > policy.MaxBytes:
		return bad("payload.bytesUsed", fmt.Sprintf("must be 0 to %d", policy.MaxBytes))
	case e.Timestamp.IsZero():
		return bad("timestamp", "required")
	case e.Timestamp.Before(now.Add(-s.maxAge)):
		return bad("timestamp", fmt.Sprintf("older than the dedupe window (%s); a replay this late could be counted twice", s.maxAge))
	case e.Timestamp.After(now.Add(s.maxSkew)):
		return bad("timestamp", fmt.Sprintf("more than %s in the future", s.maxSkew))
	}
	return nil
}

// InvalidStepError is a grant step that cannot be judged: the field at
// fault, named as quota.GrantOp's in JSON (grantId, used, at, …), and why.
// It wraps quota.ErrInvalid. Decisions.Charge refuses the caller's steps
// with it.
type InvalidStepError struct {
	// Index is the step's position in the caller's steps.
	Index         int
	Field, Reason string
}

func (e *InvalidStepError) Error() string { return e.Field + ": " + e.Reason }
func (e *InvalidStepError) Unwrap() error { return quota.ErrInvalid }

// checkStep is the one rule for which grant steps are judged, beside the
// engine's own checks (the bounds every sink of their ids holds, the age
// and skew of their time as an event's): nil, or an *InvalidStepError.
func (s *common) checkStep(op quota.GrantOp, now time.Time) error {
	bad := func(field, reason string) error { return &InvalidStepError{Field: field, Reason: reason} }
	idRule := fmt.Sprintf("1 to %d bytes of printable ASCII without spaces, '|' or ','", quota.MaxGrantIDLen)
	switch {
	case !quota.ValidGrantID(op.ID):
		return bad("id", idRule)
	case !quota.ValidGrantID(op.GrantID):
		return bad("grantId", idRule)
	case op.FamilyID <= 0:
		return bad("familyId", "must be > 0")
	case op.CustomerID <= 0:
		return bad("customerId", "must be > 0")
	case len(op.AppID) > policy.MaxAppIDLen:
		return bad("appId", fmt.Sprintf("at most %d bytes", policy.MaxAppIDLen))
	case op.Category != "" && !op.Category.Valid():
		return bad("category", "not a category")
	case op.Used < 0 || op.Used > policy.MaxBytes:
		return bad("used", fmt.Sprintf("must be 0 to %d", policy.MaxBytes))
	case op.Requested < 0 || op.Requested > policy.MaxBytes:
		return bad("requested", fmt.Sprintf("must be 0 to %d", policy.MaxBytes))
	case op.At.IsZero():
		return bad("at", "required")
	case op.At.Before(now.Add(-s.maxAge)):
		return bad("at", fmt.Sprintf("older than the dedupe window (%s): a retry this late could be charged twice", s.maxAge))
	case op.At.After(now.Add(s.maxSkew)):
		return bad("at", fmt.Sprintf("more than %s in the future", s.maxSkew))
	}
	if err := op.Validate(); err != nil { // the engine's own, which the cases above cover
		return bad("step", err.Error())
	}
	return nil
}

// event is the engine's event for a checked usage envelope.
// The one place that decides whether a usage event charges: traffic the
// network charges through grants (WithGrantCharged) is judged with 0 bytes
// and recorded with what it reported (grantChargedBytes); the rest charges
// what it reports.
func (s *common) event(e envelope.Envelope[envelope.UsagePayload]) quota.Event {
	pl := e.Payload
	cat := s.apps.Category(pl.AppID)
	bytes := pl.BytesUsed
	if s.grantCharged != nil && s.grantCharged(pl.AppID, cat) {
		bytes = 0
	}
	return quota.Event{ID: e.EventID, FamilyID: pl.FamilyID, CustomerID: pl.CustomerID, Bytes: bytes,
		AppID: pl.AppID, Category: cat, At: e.Timestamp}
}
