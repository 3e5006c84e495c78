package judge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/consumer"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// ProcessorGroup is the consumer group of the processor (doc/deploy.md, "Kafka").
const ProcessorGroup = "processor-usage-group"

// Headers on dead-letter records.
const (
	HeaderDLTReason    = kafkarecord.HeaderDLTReason
	HeaderDLTTopic     = kafkarecord.HeaderDLTTopic
	HeaderDLTPartition = kafkarecord.HeaderDLTPartition
	HeaderDLTOffset    = kafkarecord.HeaderDLTOffset
)

// StateGuard keeps the processor from judging with a Redis state that lost
// writes (doc/architecture.md, "Never trust Redis blindly"): it knows the state generation to judge with and brings
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

// Processor consumes usage-events and policy-updated, judges each usage event
// with the quota engine and emits usage-persist and notification-events.
// At least once delivered, exactly once in effect: offsets are committed only
// after the engine ran and every emitted record was acknowledged; a replay
// yields the stored decision and re-emits identical records (same ids).
type Processor struct {
	processorConfig
	cl      *kgo.Client
	qs      *State
	breaker *gobreaker.CircuitBreaker[any]

	// positions is, per "topic/partition", where this processor's next batch
	// begins: the end of its last judged batch (cleared when the partition
	// is revoked), for the marks of WithStateGuard.
	posMu     sync.Mutex
	positions map[string]int64
	// posGen is the generation each position was judged under; recorded
	// the position last recorded in the door's mark store, per stream and
	// generation (recordPositions).
	posGen   map[string]string
	recorded map[string]int64
	recGen   map[string]string
	paused   atomic.Bool
	// recoveries counts the recoveries this processor waited for.
	recoveries atomic.Int64
	// rec is the recovery running in the background (nil: none); life is
	// its context, and bg its goroutine, both ended by Run's end.
	recMu sync.Mutex
	rec   *recovering
	life  context.Context
	bg    sync.WaitGroup

	// c is the consumer-group lifecycle the processor runs on
	// (envelope/consumer); cl is its client, which also produces.
	c *consumer.Consumer
}

// Stale reports whether judging is paused because Redis cannot be trusted
// (for readiness).
func (p *Processor) Stale() bool { return p.paused.Load() }

// ProcessorTopics are the topics the processor consumes.
func ProcessorTopics() []string {
	return []string{envelope.TopicUsageEvents, envelope.TopicPolicyUpdated}
}

// NewProcessor returns a processor judging through qs. kopts must name
// the seed brokers (kgo.SeedBrokers) and may add TLS/SASL or tuning; the
// consumer group, topics and commit mode are the processor's own. Call Run
// to start.
func NewProcessor(qs *State, kopts []kgo.Opt, opts ...ProcessorOpt) (*Processor, error) {
	if qs == nil {
		return nil, errors.New("judge: nil quota state")
	}
	cfg, err := newProcessorConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := cfg.fitWindow(qs.DedupeWindow()); err != nil {
		return nil, err
	}
	p := &Processor{processorConfig: cfg, qs: qs}
	if p.guard != nil {
		p.positions, p.posGen = map[string]int64{}, map[string]string{}
		p.recorded, p.recGen = map[string]int64{}, map[string]string{}
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
	c, err := consumer.New(consumer.HandlerFunc(p.handle), append(ProducerOpts(), kopts...),
		consumer.WithGroup(ProcessorGroup),
		consumer.WithTopics(ProcessorTopics()...),
		// Never charge records of an aborted producer transaction.
		consumer.WithReadCommitted(),
		consumer.WithMaxPoll(p.maxPoll),
		p.fetch,
		consumer.WithCommitEvery(p.commitEvery),
		// A batch given back while Redis is rebuilt is handed again within a
		// second of the rebuild's end.
		consumer.WithBackoff(p.backoffMin, min(p.backoffMax, time.Second), 0),
		consumer.WithRebalanceInterval(drainEvery),
		consumer.WithDrainTimeout(drainTimeout),
		consumer.WithLogger(p.log),
		consumer.WithHooks(consumer.Hooks{
			OnRevoked: func(i consumer.PartitionsInfo) { p.forget(i.Partitions) },
			OnLost:    func(i consumer.PartitionsInfo) { p.forget(i.Partitions) },
			OnRetry: func(i consumer.RetryInfo) {
				if p.hooks.OnRetry != nil {
					p.hooks.OnRetry(RetryInfo{What: "kafka " + i.Step, Attempt: i.Attempt, Wait: i.Wait, Err: i.Err})
				}
			},
			OnCommit: func(i consumer.CommitInfo) {
				if i.Err != nil && p.hooks.OnRetry != nil {
					p.hooks.OnRetry(RetryInfo{What: "commit", Attempt: 1, Err: i.Err})
				}
			},
		}))
	if err != nil {
		return nil, fmt.Errorf("judge: processor kafka client: %w", err)
	}
	p.c, p.cl = c, c.Client()
	return p, nil
}

// ProducerOpts are the seed's producer settings (doc/simulator.md, "Publisher"): lz4, linger
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
// clean stop, after finishing (within drainTimeout) what it judged: its
// outputs acknowledged and its offsets committed. Records polled but not
// committed are redelivered to whoever owns their partitions next; that is
// safe (dedupe in the engine).
func (p *Processor) Run(ctx context.Context) error {
	var stop context.CancelFunc
	p.life, stop = context.WithCancel(ctx)
	defer p.bg.Wait()
	defer stop()
	if p.guard != nil && p.qs.marks != nil {
		p.bg.Add(1)
		go p.recordPositions() // ends with Run
	}
	if err := p.c.Run(ctx); !errors.Is(err, consumer.ErrUncommitted) {
		return err
	}
	return nil
}

// handle judges one poll (the consumer's handler) and leaves waiting for its
// outputs to the finish step, which runs while the next poll is judged;
// the consumer commits the poll after it, in poll order.
func (p *Processor) handle(ctx context.Context, b *consumer.Batch) error {
	w, err := p.process(ctx, b.Records, b.Lag)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return ctx.Err() // stopping: the batch is redelivered
	case errors.Is(err, errRecovering):
		return err // handed again after a backoff
	default:
		return consumer.Permanent(err)
	}
	b.Finish(func(ctx context.Context) error { return p.finish(ctx, w) })
	return nil
}

// drainEvery bounds how long a busy processor holds off a rebalance;
// drainTimeout how long a stopping processor tries to finish what it judged.
const (
	drainEvery   = 250 * time.Millisecond
	drainTimeout = 5 * time.Second
)

// poll is a judged poll whose outputs are in flight.
type poll struct {
	recs  []*kgo.Record
	info  BatchInfo
	start time.Time
	out   sent
}

// sent is what a poll produced, until Kafka acknowledged or failed each
// record; the poll's groups add to it concurrently.
type sent struct {
	mu   sync.Mutex
	outs []*produced
}

// send produces recs with ctx and adds them to s.
//
// Each record keeps a context a stop does not cancel (kgo.Record.Context,
// unless a trace set it): kgo fails a record at every try once the context
// it keeps is done, and a stop's drain is to deliver and commit what the
// poll judged (finish waits with the drain's own context). ctx itself
// still bounds the hand-over, which blocks while kgo's buffer is full.
func (s *sent) send(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) {
	keep := context.WithoutCancel(ctx)
	for _, r := range recs {
		if r.Context == nil {
			r.Context = keep
		}
	}
	out := produce(ctx, cl, recs)
	s.mu.Lock()
	s.outs = append(s.outs, out)
	s.mu.Unlock()
}

// finish waits until every output of w is acknowledged (producing the failed
// ones again); the consumer commits w's offsets after it. It returns only
// ctx's error.
func (p *Processor) finish(ctx context.Context, w *poll) error {
	// Send what lingers now: the commit waits for these acknowledgements.
	if err := p.cl.Flush(ctx); err != nil {
		return err
	}
	var failed []*kgo.Record
	for _, out := range w.out.outs { // every record is answered once Flush returned
		at, _ := out.wait(ctx)
		failed = append(failed, pick(out.recs, at)...)
	}
	if err := p.produce(ctx, failed); err != nil {
		return err
	}
	w.info.Duration = time.Since(w.start)
	if p.hooks.OnBatch != nil {
		p.hooks.OnBatch(w.info)
	}
	return nil
}

// Close stops Run, finishes within ctx what it judged (outputs
// acknowledged, offsets committed), leaves the group and closes the client.
// Records polled but not committed are redelivered to the next owner of
// their partitions (the engine dedupes them): as for Run, that is no error.
func (p *Processor) Close(ctx context.Context) error {
	if err := p.c.Close(ctx); !errors.Is(err, consumer.ErrUncommitted) {
		return err
	}
	return nil
}

type usageIn struct {
	rec *kgo.Record
	env envelope.Envelope[envelope.UsagePayload]
	// charged is what the engine was given to charge (common.event).
	charged int64
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
	if p.guard != nil {
		p.settleRecovery()
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
			results, judgedUsage, rejected, gen, err := p.apply(ctx, usage, p.marksOf(g))
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
				recs, err := usageOutputs(u.env, u.charged, results[k], gen, p.loc, p.alertText)
				if err != nil {
					// Every field comes from a validated event and the engine; a
					// failure here is a bug, not bad input. Stop rather than lose it.
					j.err = fmt.Errorf("judge: build outputs of %s: %w", u.env.EventID, err)
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
