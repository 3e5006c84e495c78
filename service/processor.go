package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// ProcessorGroup is the consumer group of the processor (seed §9.3).
const ProcessorGroup = "processor-usage-group"

// Headers on dead-letter records.
const (
	HeaderDLTReason    = kafkarecord.HeaderDLTReason
	HeaderDLTTopic     = kafkarecord.HeaderDLTTopic
	HeaderDLTPartition = kafkarecord.HeaderDLTPartition
	HeaderDLTOffset    = kafkarecord.HeaderDLTOffset
)

// Decider is what the processor needs from the quota engine.
type Decider interface {
	ApplyBatch(ctx context.Context, evs []quota.Event) ([]quota.Result, error)
	Enforce(ctx context.Context, fid, cid, version int64, constraints map[string]string) (quota.Enforcement, error)
}

var _ Decider = (*quota.Engine)(nil)

// MarkedDecider is what the processor needs from the quota engine to judge
// only from a Redis state it can trust (WithStateGuard): quota.Engine's
// ApplyMarked, CheckState and Advance.
type MarkedDecider interface {
	Decider
	ApplyMarked(ctx context.Context, gen string, marks []quota.Mark, evs []quota.Event) ([]quota.Result, error)
	CheckState(ctx context.Context, gen string, marks []quota.Mark) error
	Advance(ctx context.Context, gen string, marks []quota.Mark) error
}

var _ MarkedDecider = (*quota.Engine)(nil)

// StateGuard keeps the processor from judging with a Redis state that lost
// writes (SPEC §6): it knows the state generation to judge with and brings
// Redis back when the engine reports the state stale. *Recovery is the
// implementation; it must be safe for concurrent use.
type StateGuard interface {
	// Generation returns the generation to judge with; "" when Redis was
	// never rebuilt from SQL (the processor then asks Recover for one).
	Generation(ctx context.Context) (string, error)
	// Recover is called with the engine's *quota.StaleError for a batch
	// judged with generation used; it returns once Redis can be trusted
	// again, with the generation to judge with (it waits for a rebuild by
	// another processor or an operator, or runs one).
	Recover(ctx context.Context, used string, cause error) (string, error)
}

// BatchInfo describes one processed poll, for ProcessorHooks.OnBatch.
type BatchInfo struct {
	Records       int
	Usage         int
	Policies      int
	Duplicates    int
	DeadLettered  int
	Decisions     map[policy.Decision]int
	Crossings     int
	ScriptLatency time.Duration
	Duration      time.Duration
	// Lag is how many records the polled partitions still hold after this
	// batch (high watermark − next offset), summed.
	Lag int64
}

// ApplyInfo describes one ApplyBatch call (the quota script on one group of
// partitions), for ProcessorHooks.OnApply.
type ApplyInfo struct {
	Events   int           // usage events judged
	Duration time.Duration // from the call to the results, retries included
}

// StaleInfo describes a pause of judging because Redis could not be trusted.
type StaleInfo struct {
	// Stale is true when judging pauses and false when it resumes.
	Stale  bool
	Reason string
	// Paused is how long judging was paused (when resuming).
	Paused time.Duration
}

// RetryInfo describes a failed attempt that will be retried.
type RetryInfo struct {
	What    string
	Attempt int
	Wait    time.Duration
	Err     error
}

// ProcessorHooks are optional callbacks; nil funcs are skipped.
type ProcessorHooks struct {
	OnBatch func(BatchInfo)
	OnRetry func(RetryInfo)
	// OnDeadLetter is called for every record sent to a DLT, with the reason.
	// It and OnDecided may be called concurrently (one call per partition
	// group of a poll).
	OnDeadLetter func(topic string, reason string)
	// OnStale is called when the engine reports the Redis state stale
	// (judging pauses until Recover returns) and, with Stale false, when
	// judging resumes.
	OnStale func(StaleInfo)
	// OnDecided is called once the engine judged a poll's usage records,
	// before their outputs are produced, with those records (read them, do
	// not modify or retain them) and the time the engine returned: the
	// decision time for produce→decision latency.
	OnDecided func(records []*kgo.Record, decidedAt time.Time)
	// OnApply is called after every ApplyBatch that judged events; like
	// OnDecided it may be called concurrently.
	OnApply func(ApplyInfo)
}

// ProcessorOption configures a Processor.
type ProcessorOption func(*Processor) error

// WithProcessorLogger sets the logger. Default: discard.
func WithProcessorLogger(l *slog.Logger) ProcessorOption {
	return func(p *Processor) error { p.log = l; return nil }
}

// WithProcessorHooks sets the hooks. Default: none.
func WithProcessorHooks(h ProcessorHooks) ProcessorOption {
	return func(p *Processor) error { p.hooks = h; return nil }
}

// WithMaxEventAge rejects usage events stamped longer ago than d to the DLT.
// It must not exceed the quota engine's dedupe window, or a late replay could
// be counted twice. Default: 23 h (the engine's default window is 24 h).
func WithMaxEventAge(d time.Duration) ProcessorOption {
	return func(p *Processor) error {
		if d <= 0 {
			return errors.New("service: max event age must be > 0")
		}
		p.maxAge = d
		return nil
	}
}

// WithMaxClockSkew rejects usage events stamped further than d in the
// future to the DLT. Default: 5 min.
func WithMaxClockSkew(d time.Duration) ProcessorOption {
	return func(p *Processor) error {
		if d < 0 {
			return errors.New("service: max clock skew must be ≥ 0")
		}
		p.maxSkew = d
		return nil
	}
}

// WithMaxPollRecords bounds the records judged per poll. Larger polls
// amortise the per-poll round trips (commit, flush) under load; a quiet
// stream yields small polls whatever the bound. Default: 2000.
func WithMaxPollRecords(n int) ProcessorOption {
	return func(p *Processor) error {
		if n < 1 {
			return errors.New("service: max poll records must be ≥ 1")
		}
		p.maxPoll = n
		return nil
	}
}

// WithApplyConcurrency splits each poll's usage events into up to n groups
// of whole partitions, judged concurrently (one ApplyBatch each, on separate
// connections) with each group's outputs produced as soon as it is judged.
// A family's events share a partition, so they stay in one group, in order.
// Default: 4; 1 judges a poll in one ApplyBatch.
func WithApplyConcurrency(n int) ProcessorOption {
	return func(p *Processor) error {
		if n < 1 {
			return errors.New("service: apply concurrency must be ≥ 1")
		}
		p.groups = n
		return nil
	}
}

// WithRetryBackoff sets the first and the largest wait between attempts when
// Redis or Kafka fail. Default: 100 ms, 5 s.
func WithRetryBackoff(first, max time.Duration) ProcessorOption {
	return func(p *Processor) error {
		if first <= 0 || max < first {
			return errors.New("service: retry backoff must satisfy 0 < first ≤ max")
		}
		p.backoffMin, p.backoffMax = first, max
		return nil
	}
}

// WithStateGuard makes the processor judge only from a Redis state it can
// trust (SPEC §6): every batch is judged with quota.Engine.ApplyMarked,
// marked with its Kafka positions; when the engine reports the state stale
// (Redis came back empty, from an older snapshot or another generation), the
// processor pauses fetching, says so (log at error level, OnStale, Stale),
// lets g bring Redis back, and judges the batch again. The decider must be a
// MarkedDecider. Default: none (the state is trusted).
func WithStateGuard(g StateGuard) ProcessorOption {
	return func(p *Processor) error {
		if g == nil {
			return errors.New("service: nil state guard")
		}
		p.guard = g
		return nil
	}
}

// WithProcessorClock sets the clock used to judge event age. Default: time.Now.
func WithProcessorClock(now func() time.Time) ProcessorOption {
	return func(p *Processor) error { p.now = now; return nil }
}

// WithProcessorLocation sets the service time zone, which names the period
// (YYYY-MM) of threshold alerts. It must be the quota engine's. Default: Asia/Seoul.
func WithProcessorLocation(loc *time.Location) ProcessorOption {
	return func(p *Processor) error {
		if loc == nil {
			return errors.New("service: nil location")
		}
		p.loc = loc
		return nil
	}
}

// WithCatalog sets the app catalog used to find an event's category.
// Default: policy.DefaultApps().
func WithCatalog(c policy.Catalog) ProcessorOption {
	return func(p *Processor) error { p.catalog = c; return nil }
}

// WithProcessorTracerProvider traces the processor with tp: every consumed
// record is judged in a span of its own ("usage-events process",
// "policy-updated process"; decision, family, member and the engine batch it
// was judged in as attributes), a child of the trace the record carries
// (record.Context, set by the Kafka client's tracing hooks — give the
// processor's kgo options TracingKafkaOpts(tp), which NewWorkers does), and
// the records it causes (usage-persist, notification-events, dead letters)
// are produced in that span, so their consumers continue the same trace.
// Default: no tracing (a no-op provider costs nothing on the judging path).
func WithProcessorTracerProvider(tp trace.TracerProvider) ProcessorOption {
	return func(p *Processor) error {
		if tp == nil {
			return errors.New("service: nil tracer provider")
		}
		p.tracer = nil
		if tracingOn(tp) {
			p.tracer = tp.Tracer(TracerName)
		}
		return nil
	}
}

// Processor consumes usage-events and policy-updated, judges each usage event
// with the quota engine and emits usage-persist and notification-events.
// At least once delivered, exactly once in effect: offsets are committed only
// after the engine ran and every emitted record was acknowledged; a replay
// yields the stored decision and re-emits identical records (same ids).
type Processor struct {
	cl      *kgo.Client
	dec     Decider
	breaker *gobreaker.CircuitBreaker[any]
	catalog policy.Catalog
	log     *slog.Logger
	hooks   ProcessorHooks
	now     func() time.Time
	loc     *time.Location
	// tracer starts the records' process spans; nil: tracing off.
	tracer trace.Tracer

	maxAge, maxSkew        time.Duration
	maxPoll                int
	groups                 int
	backoffMin, backoffMax time.Duration

	guard  StateGuard
	marked MarkedDecider
	// positions is, per "topic/partition", where this processor's next batch
	// begins: the end of its last judged batch (cleared when the partition
	// is revoked), for the marks of WithStateGuard.
	posMu     sync.Mutex
	positions map[string]int64
	paused    atomic.Bool
	// recoveries counts the recoveries this processor waited for.
	recoveries atomic.Int64

	stop     chan struct{}
	stopOnce sync.Once // guards stop and the client's close
	running  sync.WaitGroup
}

// Stale reports whether judging is paused because Redis cannot be trusted
// (for readiness).
func (p *Processor) Stale() bool { return p.paused.Load() }

// ProcessorTopics are the topics the processor consumes.
func ProcessorTopics() []string {
	return []string{envelope.TopicUsageEvents, envelope.TopicPolicyUpdated}
}

// NewProcessor returns a processor judging with dec. kopts must name the
// seed brokers (kgo.SeedBrokers) and may add TLS/SASL or tuning; the consumer
// group, topics and commit mode are the processor's own. Call Run to start.
func NewProcessor(dec Decider, kopts []kgo.Opt, opts ...ProcessorOption) (*Processor, error) {
	if dec == nil {
		return nil, errors.New("service: nil decider")
	}
	loc, err := policy.LoadZone(policy.DefaultZone)
	if err != nil {
		return nil, err
	}
	p := &Processor{
		dec:        dec,
		loc:        loc,
		catalog:    policy.NewCatalog(policy.DefaultApps()),
		log:        slog.New(slog.DiscardHandler),
		now:        time.Now,
		maxAge:     23 * time.Hour,
		maxSkew:    5 * time.Minute,
		maxPoll:    2000,
		groups:     4,
		backoffMin: 100 * time.Millisecond,
		backoffMax: 5 * time.Second,
		stop:       make(chan struct{}),
	}
	for _, o := range opts {
		if err := o(p); err != nil {
			return nil, err
		}
	}
	if p.guard != nil {
		md, ok := dec.(MarkedDecider)
		if !ok {
			return nil, errors.New("service: a state guard needs a decider with ApplyMarked (quota.Engine)")
		}
		p.marked, p.positions = md, map[string]int64{}
	}
	p.breaker = gobreaker.NewCircuitBreaker[any](gobreaker.Settings{
		Name:    "redis",
		Timeout: 2 * time.Second,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= 3
		},
		// Bad input and a stale state are not Redis failures.
		IsSuccessful: func(err error) bool {
			return err == nil || errors.Is(err, quota.ErrInvalid) || errors.Is(err, quota.ErrStale)
		},
		OnStateChange: func(_ string, from, to gobreaker.State) {
			p.log.Warn("redis circuit breaker", "from", from.String(), "to", to.String())
		},
	})
	all := append(ProducerOpts(), kopts...)
	all = append(all,
		kgo.ConsumerGroup(ProcessorGroup),
		kgo.ConsumeTopics(ProcessorTopics()...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		// Never charge records of an aborted producer transaction.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) { p.forget(lost) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) { p.forget(lost) }),
	)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("service: processor kafka client: %w", err)
	}
	p.cl = cl
	return p, nil
}

// ProducerOpts are the seed's producer settings (seed 000 §8.1): lz4, linger
// 5 ms, 64 KB batches, all in-sync replicas acknowledge, idempotent writes. The
// default partitioner hashes keys with murmur2 like Kafka's Java client.
func ProducerOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.ProducerBatchCompression(kgo.Lz4Compression(), kgo.NoCompression()),
		kgo.ProducerLinger(5 * time.Millisecond),
		kgo.ProducerBatchMaxBytes(64 << 10),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	}
}

// Client returns the processor's Kafka client (for metrics such as lag).
func (p *Processor) Client() *kgo.Client { return p.cl }

// Run consumes until ctx is done or Close is called. It returns nil on a
// clean stop. Records of a poll not yet committed are redelivered to whoever
// owns their partitions next; that is safe (dedupe in the engine).
func (p *Processor) Run(ctx context.Context) error {
	p.running.Add(1)
	defer p.running.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // ends with Run
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	// A poll blocks rebalances until AllowRebalance; leaving the group on
	// Close needs it allowed.
	defer p.cl.AllowRebalance()
	// Polls overlap by one: while a poll's outputs are acknowledged and its
	// offsets committed (its tail), the next poll is judged. Commits stay in
	// poll order, and rebalances are let in only with no tail running, at
	// least every drainEvery.
	var tail chan error
	var tailOver context.Context // done once the running tail finished
	waitTail := func() error {
		if tail == nil {
			return nil
		}
		err := <-tail
		tail = nil
		return err
	}
	defer func() { _ = waitTail() }() // ctx is cancelled by Close first
	lastDrain := time.Now()
	for {
		// With a tail running (and so a rebalance held off), wait for
		// records only until the tail finished: waiting longer could wait
		// for records that only the held-off rebalance would bring. An empty
		// poll joins the tail and lets the rebalance in before blocking.
		pollCtx := ctx
		if tail != nil {
			pollCtx = tailOver
		}
		fetches := p.cl.PollRecords(pollCtx, p.maxPoll)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			return nil
		}
		fetches.EachError(func(t string, part int32, err error) {
			if pollCtx != ctx && errors.Is(err, context.Canceled) {
				return // the tail finished first
			}
			p.log.Warn("fetch error", "topic", t, "partition", part, "err", err)
		})
		recs := fetches.Records()
		if len(recs) == 0 {
			if err := waitTail(); err != nil {
				return nil // only ctx ends a tail early
			}
			p.cl.AllowRebalance()
			lastDrain = time.Now()
			continue
		}
		var lag int64
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if n := len(fp.Records); n > 0 {
				lag += max(fp.HighWatermark-fp.Records[n-1].Offset-1, 0)
			}
		})
		w, err := p.process(ctx, recs, lag)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := waitTail(); err != nil { // the previous commit goes first
			return nil
		}
		tail = make(chan error, 1)
		var over context.CancelFunc
		tailOver, over = context.WithCancel(ctx)
		go func(tail chan<- error) { // joined by waitTail
			tail <- p.finish(ctx, w)
			over()
		}(tail)
		if time.Since(lastDrain) >= drainEvery {
			if err := waitTail(); err != nil {
				return nil
			}
			p.cl.AllowRebalance()
			lastDrain = time.Now()
		}
	}
}

// drainEvery bounds how long a busy processor holds off a rebalance.
const drainEvery = 250 * time.Millisecond

// poll is a judged poll whose outputs are in flight.
type poll struct {
	recs  []*kgo.Record
	info  BatchInfo
	start time.Time
	out   sent
}

// sent tracks produced records until Kafka acknowledged or failed each.
type sent struct {
	wg     sync.WaitGroup
	mu     sync.Mutex
	failed []*kgo.Record
}

func (s *sent) send(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) {
	s.wg.Add(len(recs))
	for _, r := range recs {
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				s.mu.Lock()
				s.failed = append(s.failed, r)
				s.mu.Unlock()
			}
			s.wg.Done()
		})
	}
}

// finish waits until every output of w is acknowledged (producing the failed
// ones again), then commits w's offsets. It returns only ctx's error.
func (p *Processor) finish(ctx context.Context, w *poll) error {
	// Send what lingers now: the commit waits for these acknowledgements.
	if err := p.cl.Flush(ctx); err != nil {
		return err
	}
	w.out.wg.Wait() // every promise has run once Flush returned
	if err := p.produce(ctx, w.out.failed); err != nil {
		return err
	}
	if err := p.retry(ctx, "commit", func() error { return p.cl.CommitRecords(ctx, w.recs...) }); err != nil {
		return err
	}
	w.info.Duration = time.Since(w.start)
	if p.hooks.OnBatch != nil {
		p.hooks.OnBatch(w.info)
	}
	return nil
}

// Close stops Run, waits for it to return, leaves the group and closes the
// client. Records polled but not committed are redelivered to the next owner
// of their partitions.
func (p *Processor) Close() {
	p.stopOnce.Do(func() {
		close(p.stop)
		p.running.Wait()
		p.cl.AllowRebalance()
		p.cl.Close()
	})
}

type usageIn struct {
	rec *kgo.Record
	env envelope.Envelope[envelope.UsagePayload]
}

// process judges one poll's records and starts producing everything they
// cause; finish waits for the acknowledgements and commits.
func (p *Processor) process(ctx context.Context, recs []*kgo.Record, lag int64) (*poll, error) {
	w := &poll{recs: recs, start: time.Now(), info: BatchInfo{Records: len(recs), Decisions: map[policy.Decision]int{}, Lag: lag}}
	info := &w.info
	var out []*kgo.Record
	var usageRecs []*kgo.Record
	now := p.now()
	// Policy updates (and strays) first, in order; usage records are decoded
	// and judged by the partition groups below.
	var policyRecs []*kgo.Record
	for _, r := range recs {
		if r.Topic == envelope.TopicUsageEvents {
			usageRecs = append(usageRecs, r)
		} else {
			policyRecs = append(policyRecs, r)
		}
	}
	epoch := p.recoveries.Load()
	policyOut, policies, err := p.policies(ctx, policyRecs)
	if err != nil {
		return nil, err
	}
	info.Policies, out = policies, policyOut
	groups := p.split(usageRecs)
	type judged struct {
		results      []quota.Result
		usage        int
		latency      time.Duration
		deadLettered int
		err          error
	}
	done := make([]judged, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Add(1)
		go func() { // joined below
			defer wg.Done()
			j := &done[i]
			if p.tracer != nil {
				p.startSpans(g)
				defer endSpans(g, &j.err)
			}
			usage, dead := p.decodeUsage(g, now)
			j.usage = len(usage)
			scriptStart := time.Now()
			results, judgedUsage, rejected, err := p.apply(ctx, usage, p.marksOf(g))
			if err != nil {
				j.err = err
				return
			}
			dead = append(dead, rejected...)
			decidedAt := time.Now()
			j.latency, j.results = decidedAt.Sub(scriptStart), results
			if p.hooks.OnApply != nil && len(judgedUsage) > 0 {
				p.hooks.OnApply(ApplyInfo{Events: len(judgedUsage), Duration: j.latency})
			}
			if p.hooks.OnDecided != nil && len(judgedUsage) > 0 {
				recs := make([]*kgo.Record, len(judgedUsage))
				for k, u := range judgedUsage {
					recs[k] = u.rec
				}
				p.hooks.OnDecided(recs, decidedAt)
			}
			// The group's outputs go out while other groups are judged.
			outs := dead
			for k, u := range judgedUsage {
				recs, err := usageOutputs(u.env, results[k], p.loc)
				if err != nil {
					// Every field comes from a validated event and the engine; a
					// failure here is a bug, not bad input. Stop rather than lose it.
					j.err = fmt.Errorf("service: build outputs of %s: %w", u.env.EventID, err)
					return
				}
				if p.tracer != nil {
					judgedSpan(u, results[k], len(judgedUsage))
					causedBy(recs, u.rec)
				}
				outs = append(outs, recs...)
			}
			j.deadLettered = len(dead)
			w.out.send(ctx, p.cl, outs)
		}()
	}
	wg.Wait()
	for _, j := range done {
		if j.err != nil {
			return nil, j.err
		}
	}
	if p.guard != nil && p.recoveries.Load() != epoch {
		// Redis was rebuilt while this poll was judged: policy updates and
		// groups judged before the rebuild produced decisions the rebuilt
		// state holds (it waited for them to reach SQL), but its watermarks
		// stop at the committed offsets. Raise them to this poll's end, which
		// is committed next, or the next poll would find the state "behind".
		if err := p.raise(ctx, recs); err != nil {
			return nil, err
		}
	}
	for _, j := range done {
		info.Usage += j.usage
		info.ScriptLatency = max(info.ScriptLatency, j.latency)
		info.DeadLettered += j.deadLettered
		for _, res := range j.results {
			info.Decisions[res.Decision]++
			info.Crossings += len(res.Crossed)
			if res.Duplicate {
				info.Duplicates++
			}
		}
	}
	for _, r := range out {
		if r.Topic != envelope.TopicUsagePersist && r.Topic != envelope.TopicNotificationEvents {
			info.DeadLettered++
		}
	}
	w.out.send(ctx, p.cl, out)
	return w, nil
}

// policies handles a poll's policy-updated records (and strays) in order and
// returns what they cause and how many policy updates there were. With a
// state guard the state is checked before and the watermarks advanced after;
// if the state went stale meanwhile, Redis is recovered and the records are
// handled again (versioned updates are idempotent).
func (p *Processor) policies(ctx context.Context, recs []*kgo.Record) ([]*kgo.Record, int, error) {
	if len(recs) == 0 {
		return nil, 0, nil
	}
	if p.tracer != nil {
		p.startSpans(recs)
		var err error
		defer endSpans(recs, &err)
		out, n, perr := p.judgePolicies(ctx, recs)
		err = perr
		return out, n, perr
	}
	return p.judgePolicies(ctx, recs)
}

// judgePolicies is policies without the spans.
func (p *Processor) judgePolicies(ctx context.Context, recs []*kgo.Record) ([]*kgo.Record, int, error) {
	marks := p.marksOf(recs)
	for {
		var gen string
		if p.guard != nil {
			err := p.retry(ctx, "redis state check", func() error {
				var err error
				if gen, err = p.generation(ctx); err == nil {
					err = p.marked.CheckState(ctx, gen, marks)
				}
				return stalePermanent(err)
			})
			if p.stale(ctx, gen, err) {
				continue
			}
			if err != nil {
				return nil, 0, err
			}
		}
		var out []*kgo.Record
		policies := 0
		for _, r := range recs {
			ev, err := kafkarecord.Decode(r)
			if err != nil {
				out = append(out, p.deadLetter(r, err.Error()))
				continue
			}
			switch pl := ev.Payload.(type) {
			case envelope.UsagePayload:
				out = append(out, p.deadLetter(r, "DATA_USAGE event on topic "+r.Topic))
			case envelope.PolicyUpdatedPayload:
				if r.Topic != envelope.TopicPolicyUpdated {
					out = append(out, p.deadLetter(r, "POLICY_UPDATED event on topic "+r.Topic))
					continue
				}
				policies++
				recs, err := p.policyUpdated(ctx, r, ev, pl)
				if err != nil {
					return nil, 0, err
				}
				if p.tracer != nil {
					causedBy(recs, r)
					if span := trace.SpanFromContext(r.Context); span.IsRecording() {
						span.SetAttributes(attribute.String("dpcs.event_id", ev.EventID),
							attribute.Int64("dpcs.family_id", pl.FamilyID), attribute.Int64("dpcs.customer_id", pl.TargetCustomerID),
							attribute.Int64("dpcs.policy_version", pl.Version), attribute.Int("dpcs.blocked_notifications", len(recs)))
					}
				}
				out = append(out, recs...)
			default:
				out = append(out, p.deadLetter(r, fmt.Sprintf("unexpected %s event on topic %s", ev.EventType, r.Topic)))
			}
		}
		if p.guard != nil {
			err := p.retry(ctx, "redis state advance", func() error {
				return stalePermanent(p.marked.Advance(ctx, gen, marks))
			})
			if p.stale(ctx, gen, err) {
				continue
			}
			if err != nil {
				return nil, 0, err
			}
			p.advanced(marks)
		}
		return out, policies, nil
	}
}

// raise advances the watermarks of recs' partitions to after their last
// record under the current generation (see process), recovering again if the
// state went stale meanwhile.
func (p *Processor) raise(ctx context.Context, recs []*kgo.Record) error {
	for {
		marks := p.marksOf(recs)
		if len(marks) == 0 {
			return nil
		}
		var gen string
		err := p.retry(ctx, "redis state advance", func() error {
			var err error
			if gen, err = p.generation(ctx); err == nil {
				err = p.marked.Advance(ctx, gen, marks)
			}
			return stalePermanent(err)
		})
		if p.stale(ctx, gen, err) {
			continue
		}
		if err != nil {
			return err
		}
		p.advanced(marks)
		return nil
	}
}

// stalePermanent makes a stale state a permanent error for retry: waiting
// does not fix it, a rebuild does.
func stalePermanent(err error) error {
	if errors.Is(err, quota.ErrStale) {
		return permanent{err}
	}
	return err
}

// generation is the state generation to judge with.
func (p *Processor) generation(ctx context.Context) (string, error) {
	gen, err := p.guard.Generation(ctx)
	if err == nil && gen == "" {
		err = &quota.StaleError{Reason: "Redis was never rebuilt from SQL (no state generation yet)"}
	}
	return gen, err
}

// stale reports whether err says the Redis state is stale; if so it pauses
// fetching, says so, and returns once the guard recovered Redis (true: judge
// again). With ctx done it returns false and err stands.
func (p *Processor) stale(ctx context.Context, used string, err error) bool {
	var se *quota.StaleError
	if !errors.As(err, &se) {
		return false
	}
	start := time.Now()
	if !p.paused.Swap(true) {
		p.log.Error("the Redis state cannot be trusted: judging paused until Redis is rebuilt from SQL", "reason", se.Reason)
		if p.hooks.OnStale != nil {
			p.hooks.OnStale(StaleInfo{Stale: true, Reason: se.Reason})
		}
	}
	p.cl.PauseFetchTopics(ProcessorTopics()...)
	defer p.cl.ResumeFetchTopics(ProcessorTopics()...)
	// Outputs of batches judged before the state went stale are in flight:
	// have them in Kafka before the recovery waits for SQL to hold them.
	if ferr := p.cl.Flush(ctx); ferr != nil {
		return false
	}
	gen, rerr := p.guard.Recover(ctx, used, err)
	if rerr != nil {
		if ctx.Err() == nil {
			p.log.Error("recovering the Redis state failed", "err", rerr)
		}
		return false
	}
	// The rebuilt state's watermarks are the group's committed offsets: the
	// next batches begin there, not where this processor's last ones ended.
	p.posMu.Lock()
	clear(p.positions)
	p.posMu.Unlock()
	p.recoveries.Add(1)
	if p.paused.Swap(false) {
		p.log.Warn("the Redis state is trusted again: judging resumes", "generation", gen, "paused", time.Since(start))
		if p.hooks.OnStale != nil {
			p.hooks.OnStale(StaleInfo{Reason: se.Reason, Paused: time.Since(start)})
		}
	}
	return true
}

// marksOf returns the marks of a batch's records: per partition, from where
// this processor's previous batch ended (or its committed offset, or the
// first record) to after the last record.
func (p *Processor) marksOf(recs []*kgo.Record) []quota.Mark {
	if p.guard == nil {
		return nil
	}
	var committed map[string]map[int32]kgo.EpochOffset
	idx := map[string]int{}
	var marks []quota.Mark
	p.posMu.Lock()
	defer p.posMu.Unlock()
	for _, r := range recs {
		key := r.Topic + "/" + strconv.Itoa(int(r.Partition))
		i, ok := idx[key]
		if !ok {
			from := r.Offset
			if pos, ok := p.positions[key]; ok {
				from = min(from, pos)
			} else {
				if committed == nil {
					committed = p.cl.CommittedOffsets()
				}
				if c, ok := committed[r.Topic][r.Partition]; ok && c.Offset >= 0 {
					from = min(from, c.Offset)
				}
			}
			idx[key] = len(marks)
			marks = append(marks, quota.Mark{Stream: key, From: from, To: r.Offset + 1})
			continue
		}
		marks[i].To = max(marks[i].To, r.Offset+1)
	}
	return marks
}

// advanced records where this processor's next batches begin.
func (p *Processor) advanced(marks []quota.Mark) {
	p.posMu.Lock()
	defer p.posMu.Unlock()
	for _, m := range marks {
		p.positions[m.Stream] = m.To
	}
}

// forget drops the positions of revoked or lost partitions: their next
// batches begin where the group committed.
func (p *Processor) forget(parts map[string][]int32) {
	if p.positions == nil {
		return
	}
	p.posMu.Lock()
	defer p.posMu.Unlock()
	for t, ps := range parts {
		for _, part := range ps {
			delete(p.positions, t+"/"+strconv.Itoa(int(part)))
		}
	}
}

// split divides a poll's usage records into at most p.groups groups of
// whole partitions, balanced by record count, each keeping the poll's order.
func (p *Processor) split(recs []*kgo.Record) [][]*kgo.Record {
	if len(recs) == 0 {
		return nil
	}
	count := map[int32]int{}
	var parts []int32
	for _, r := range recs {
		if count[r.Partition] == 0 {
			parts = append(parts, r.Partition)
		}
		count[r.Partition]++
	}
	n := min(p.groups, len(parts))
	if n <= 1 {
		return [][]*kgo.Record{recs}
	}
	// Largest partitions first, each to the lightest group.
	slices.SortFunc(parts, func(a, b int32) int { return count[b] - count[a] })
	load := make([]int, n)
	groupOf := make(map[int32]int, len(parts))
	for _, part := range parts {
		g := slices.Index(load, slices.Min(load))
		groupOf[part] = g
		load[g] += count[part]
	}
	groups := make([][]*kgo.Record, n)
	for g := range groups {
		groups[g] = make([]*kgo.Record, 0, load[g])
	}
	for _, r := range recs {
		g := groupOf[r.Partition]
		groups[g] = append(groups[g], r)
	}
	return groups
}

// decodeUsage decodes usage-events records; what cannot be judged is
// dead-lettered with the reason.
func (p *Processor) decodeUsage(recs []*kgo.Record, now time.Time) (usage []usageIn, dead []*kgo.Record) {
	usage = make([]usageIn, 0, len(recs))
	for _, r := range recs {
		ev, err := kafkarecord.Decode(r)
		if err != nil {
			dead = append(dead, p.deadLetter(r, err.Error()))
			continue
		}
		pl, ok := ev.Payload.(envelope.UsagePayload)
		if !ok {
			reason := fmt.Sprintf("unexpected %s event on topic %s", ev.EventType, r.Topic)
			if _, policy := ev.Payload.(envelope.PolicyUpdatedPayload); policy {
				reason = "POLICY_UPDATED event on topic " + r.Topic
			}
			dead = append(dead, p.deadLetter(r, reason))
			continue
		}
		if reason := p.usageProblem(ev, pl, now); reason != "" {
			dead = append(dead, p.deadLetter(r, reason))
			continue
		}
		usage = append(usage, usageIn{rec: r, env: envelope.New(ev.EventID, ev.Timestamp, pl)})
	}
	return usage, dead
}

func (p *Processor) usageProblem(ev envelope.Event, pl envelope.UsagePayload, now time.Time) string {
	switch {
	case len(ev.EventID) > 200:
		return "eventId: longer than 200 bytes"
	case pl.BytesUsed > policy.MaxBytes:
		return fmt.Sprintf("payload.bytesUsed: must be ≤ %d", policy.MaxBytes)
	case ev.Timestamp.Before(now.Add(-p.maxAge)):
		return fmt.Sprintf("timestamp: older than the dedupe window (%s); a replay this late could be counted twice", p.maxAge)
	case ev.Timestamp.After(now.Add(p.maxSkew)):
		return fmt.Sprintf("timestamp: more than %s in the future", p.maxSkew)
	}
	return ""
}

// apply runs the batch through the engine, retrying Redis failures with
// backoff behind the circuit breaker (fetching paused meanwhile). Events the
// engine rejects as invalid are dead-lettered and the rest applied again
// (already-applied ones come back as duplicates with their original result).
// With a state guard the batch is judged with its marks (even when no event
// is left, so the watermarks move); a stale state is recovered and the batch
// judged again.
func (p *Processor) apply(ctx context.Context, usage []usageIn, marks []quota.Mark) ([]quota.Result, []usageIn, []*kgo.Record, error) {
	var dead []*kgo.Record
	for len(usage) > 0 || len(marks) > 0 {
		evs := make([]quota.Event, len(usage))
		for i, u := range usage {
			pl := u.env.Payload
			evs[i] = quota.Event{
				ID: u.env.EventID, FamilyID: pl.FamilyID, CustomerID: pl.CustomerID, Bytes: pl.BytesUsed,
				AppID: pl.AppID, Category: p.catalog.Category(pl.AppID), At: u.env.Timestamp,
			}
		}
		var results []quota.Result
		var gen string
		err := p.retry(ctx, "redis apply", func() error {
			r, err := p.breaker.Execute(func() (any, error) {
				if p.guard == nil {
					return p.dec.ApplyBatch(ctx, evs)
				}
				var err error
				gen, err = p.generation(ctx)
				if err != nil {
					return nil, err
				}
				return p.marked.ApplyMarked(ctx, gen, marks, evs)
			})
			if err == nil {
				results, _ = r.([]quota.Result)
			}
			if errors.Is(err, quota.ErrInvalid) {
				return permanent{err}
			}
			return stalePermanent(err)
		})
		var ee *quota.EventError
		if errors.As(err, &ee) && ee.Index < len(usage) {
			dead = append(dead, p.deadLetter(usage[ee.Index].rec, ee.Err.Error()))
			usage = append(usage[:ee.Index:ee.Index], usage[ee.Index+1:]...)
			continue
		}
		if p.stale(ctx, gen, err) {
			continue
		}
		if err != nil {
			return nil, nil, nil, err
		}
		if p.guard != nil {
			p.advanced(marks)
		}
		return results, usage, dead, nil
	}
	return nil, nil, dead, nil
}

func (p *Processor) policyUpdated(ctx context.Context, r *kgo.Record, ev envelope.Event, pl envelope.PolicyUpdatedPayload) ([]*kgo.Record, error) {
	var enf quota.Enforcement
	err := p.retry(ctx, "redis enforce", func() error {
		v, err := p.breaker.Execute(func() (any, error) {
			return p.dec.Enforce(ctx, pl.FamilyID, pl.TargetCustomerID, pl.Version, pl.Constraints)
		})
		if err == nil {
			enf = v.(quota.Enforcement)
		}
		if errors.Is(err, quota.ErrInvalid) {
			return permanent{err}
		}
		return err
	})
	var perm permanent
	if errors.As(err, &perm) {
		return []*kgo.Record{p.deadLetter(r, perm.err.Error())}, nil
	}
	if err != nil {
		return nil, err
	}
	st := enf.Status
	if !st.Blocked() || st.Decision == policy.BlockedNotMember {
		return nil, nil
	}
	// Retroactive enforcement (SPEC §6): the member is blocked now.
	rec, err := kafkarecord.New(envelope.TopicNotificationEvents, envelope.New(
		envelope.DerivedID(envelope.PrefixNotification, ev.EventID, "customer-blocked"), ev.Timestamp,
		envelope.CustomerBlocked{FamilyID: pl.FamilyID, CustomerID: pl.TargetCustomerID,
			BlockReason: st.Rule, BlockedAt: ev.Timestamp, Decision: string(st.Decision)}))
	if err != nil {
		return nil, fmt.Errorf("service: build CUSTOMER_BLOCKED for %s: %w", ev.EventID, err)
	}
	return []*kgo.Record{rec}, nil
}

// usageOutputs are the records one judged usage event causes: usage-persist
// always, and QUOTA_UPDATED (allowed) or CUSTOMER_BLOCKED (blocked), and a
// THRESHOLD_ALERT per crossed threshold. Ids derive from the origin event id
// and timestamps are the event's own, so a replay re-emits identical records.
func usageOutputs(in envelope.Envelope[envelope.UsagePayload], res quota.Result, loc *time.Location) ([]*kgo.Record, error) {
	pl, id, at := in.Payload, in.EventID, in.Timestamp
	recs := make([]*kgo.Record, 0, 2+len(res.Crossed))
	add := func(r *kgo.Record, err error) error {
		if err != nil {
			return err
		}
		recs = append(recs, r)
		return nil
	}
	// The persist record carries the whole result, so Redis can be rebuilt
	// from usage_record with each event's dedupe record and each
	// threshold's arm count.
	var crossed []envelope.Crossing
	for i, pct := range res.Crossed {
		arm := 1
		if i < len(res.Arms) {
			arm = res.Arms[i]
		}
		crossed = append(crossed, envelope.Crossing{Percent: pct, Arm: arm})
	}
	err := add(kafkarecord.New(envelope.TopicUsagePersist, envelope.New(
		envelope.DerivedID(envelope.PrefixPersist, id, "persist"), at,
		envelope.UsagePersistPayload{OriginEventID: id, FamilyID: pl.FamilyID, CustomerID: pl.CustomerID,
			BytesUsed: pl.BytesUsed, AppID: pl.AppID, ProcessResult: string(res.Decision),
			RemainingAfter: res.Remaining, EventTime: at, Rule: res.Rule,
			TotalBytes: res.Total, DailyUsedBytes: res.DailyUsed, MonthlyUsedBytes: res.MonthlyUsed,
			ThrottleKbps: res.ThrottleKbps, Crossed: crossed})))
	if err != nil {
		return nil, err
	}
	if res.Decision == policy.Allowed {
		err = add(kafkarecord.New(envelope.TopicNotificationEvents, envelope.New(
			envelope.DerivedID(envelope.PrefixNotification, id, "quota-updated"), at,
			envelope.QuotaUpdated{FamilyID: pl.FamilyID, CustomerID: pl.CustomerID,
				FamilyRemainingBytes: res.Remaining, FamilyUsedPercent: res.UsedPercent(),
				CustomerUsedBytesToday: res.DailyUsed})))
	} else {
		err = add(kafkarecord.New(envelope.TopicNotificationEvents, envelope.New(
			envelope.DerivedID(envelope.PrefixNotification, id, "customer-blocked"), at,
			envelope.CustomerBlocked{FamilyID: pl.FamilyID, CustomerID: pl.CustomerID,
				BlockReason: res.Rule, BlockedAt: at, Decision: string(res.Decision)})))
	}
	if err != nil {
		return nil, err
	}
	for i, pct := range res.Crossed {
		// The period names the month and, when a top-up re-armed the
		// threshold and the pool fell again, the arm: "2026-02#2". The
		// notifier announces each (family, threshold, period) once.
		period := at.In(loc).Format("2006-01")
		if i < len(res.Arms) && res.Arms[i] > 1 {
			period += "#" + strconv.Itoa(res.Arms[i])
		}
		err := add(kafkarecord.New(envelope.TopicNotificationEvents, envelope.New(
			envelope.DerivedID(envelope.PrefixNotification, id, "threshold:"+strconv.Itoa(pct)), at,
			envelope.ThresholdAlert{FamilyID: pl.FamilyID, ThresholdPercent: pct,
				Message: thresholdText(pct), Period: period})))
		if err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// thresholdText is the alert's message in the seed's default language.
func thresholdText(pct int) string {
	_, body := notify.Text(envelope.ThresholdAlert{ThresholdPercent: pct}, notify.Korean)
	return body
}

func (p *Processor) deadLetter(r *kgo.Record, reason string) *kgo.Record {
	if p.hooks.OnDeadLetter != nil {
		p.hooks.OnDeadLetter(r.Topic, reason)
	}
	p.log.Warn("dead-lettered", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", reason)
	dlt := kafkarecord.DeadLetter(r, envelope.DLT(r.Topic), reason)
	if p.tracer != nil {
		trace.SpanFromContext(r.Context).SetStatus(codes.Error, "dead-lettered: "+reason)
		causedBy([]*kgo.Record{dlt}, r)
	}
	return dlt
}

// startSpans starts a process span for each record, a child of the trace
// the record carries, and keeps it in the record's Context: what the
// record causes is produced in it (causedBy), and endSpans ends it.
func (p *Processor) startSpans(recs []*kgo.Record) {
	for _, r := range recs {
		parent := r.Context
		if parent == nil {
			parent = context.Background()
		}
		var span trace.Span
		r.Context, span = p.tracer.Start(parent, r.Topic+" process", trace.WithSpanKind(trace.SpanKindConsumer))
		if span.IsRecording() { // attributes only for recorded spans: an unsampled one costs little
			span.SetAttributes(
				attribute.String("messaging.system", "kafka"),
				attribute.String("messaging.operation.type", "process"),
				attribute.String("messaging.destination.name", r.Topic),
				attribute.String("messaging.consumer.group.name", ProcessorGroup),
				attribute.Int("messaging.destination.partition.id", int(r.Partition)),
				attribute.Int64("messaging.kafka.offset", r.Offset),
				attribute.String("messaging.kafka.message.key", string(r.Key)))
		}
	}
}

// endSpans ends the records' process spans, marking them failed when *err
// is set (the poll was not judged: it is redelivered).
func endSpans(recs []*kgo.Record, err *error) {
	for _, r := range recs {
		span := trace.SpanFromContext(r.Context)
		if *err != nil {
			span.SetStatus(codes.Error, (*err).Error())
		}
		span.End()
	}
}

// causedBy makes outs carry the trace of the record that caused them: they
// are produced in its process span.
func causedBy(outs []*kgo.Record, origin *kgo.Record) {
	for _, o := range outs {
		o.Context = origin.Context
	}
}

// judgedSpan records the decision on u's process span.
func judgedSpan(u usageIn, res quota.Result, batch int) {
	span := trace.SpanFromContext(u.rec.Context)
	if !span.IsRecording() {
		return
	}
	pl := u.env.Payload
	span.SetAttributes(
		attribute.String("dpcs.event_id", u.env.EventID),
		attribute.Int64("dpcs.family_id", pl.FamilyID),
		attribute.Int64("dpcs.customer_id", pl.CustomerID),
		attribute.Int64("dpcs.bytes", pl.BytesUsed),
		attribute.String("dpcs.decision", string(res.Decision)),
		attribute.Bool("dpcs.duplicate", res.Duplicate),
		attribute.Int64("dpcs.remaining_bytes", res.Remaining),
		attribute.Int("dpcs.engine_batch", batch),
	)
	if res.Rule != "" {
		span.SetAttributes(attribute.String("dpcs.rule", res.Rule))
	}
}

// produce sends every record and waits for all acknowledgements, retrying the
// ones that failed (duplicates in Kafka are harmless: ids are deterministic).
// It flushes instead of waiting out the producer's linger: the poll is not
// committed before these are acknowledged. Safe for concurrent use.
func (p *Processor) produce(ctx context.Context, recs []*kgo.Record) error {
	pending := recs
	return p.retry(ctx, "kafka produce", func() error {
		if len(pending) == 0 {
			return nil
		}
		var mu sync.Mutex
		var failed []*kgo.Record
		var firstErr error
		var wg sync.WaitGroup
		wg.Add(len(pending))
		for _, r := range pending {
			p.cl.Produce(ctx, r, func(r *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					failed = append(failed, r)
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
				wg.Done()
			})
		}
		if err := p.cl.Flush(ctx); err != nil {
			return err
		}
		wg.Wait() // every promise has run once Flush returned
		pending = failed
		return firstErr
	})
}

// permanent marks an error that retrying cannot fix.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// retry calls fn until it succeeds, returns a permanent error, or ctx is done;
// waits grow exponentially from backoffMin to backoffMax. While it waits, the
// processor fetches nothing more (Kafka buffers), and it never skips.
func (p *Processor) retry(ctx context.Context, what string, fn func() error) error {
	wait := p.backoffMin
	paused := false
	defer func() {
		if paused {
			p.cl.ResumeFetchTopics(ProcessorTopics()...)
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
			p.cl.PauseFetchTopics(ProcessorTopics()...)
			paused = true
		}
		if p.hooks.OnRetry != nil {
			p.hooks.OnRetry(RetryInfo{What: what, Attempt: attempt, Wait: wait, Err: err})
		}
		p.log.Warn("retrying", "what", what, "attempt", attempt, "wait", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, p.backoffMax)
	}
}
