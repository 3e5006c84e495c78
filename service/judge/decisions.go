package judge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/quota"
)

// Errors of Decisions.Decide; the API answers each with 503 (fail closed:
// no grant). A Redis state that cannot be trusted wraps quota.ErrStale.
var (
	// ErrKafkaUnavailable: the records of a judged batch are in neither
	// Kafka nor the spool yet (its callers wait for them); nothing was
	// judged, nothing granted.
	ErrKafkaUnavailable = errors.New("judge: kafka unavailable: decisions are not granted")
	// ErrNotRecorded: Close ended the wait of a batch whose events were
	// judged and charged but whose records neither Kafka nor the spool
	// took; Close tries them once more. A retry with the same event ids
	// (on any instance) gets the original answers, flagged Duplicate.
	ErrNotRecorded = errors.New("judge: judged and charged, not yet recorded: retry with the same event ids")
	// ErrPartlyJudged: some of a request's events were judged and charged
	// (and recorded), the others could not be judged now (their families
	// could not be restored from SQL after a rebuild): retry with the same
	// event ids — the judged ones come back with their answers, flagged
	// duplicate, and the others are judged then.
	ErrPartlyJudged = errors.New("judge: some events judged and counted, others not judged: retry with the same event ids")
	// ErrDecisionsClosed: Close was called.
	ErrDecisionsClosed = errors.New("judge: synchronous decisions closed")
	// ErrUnavailable wraps any other failure to judge (Redis unreachable,
	// a state generation that cannot be read): nothing was granted.
	ErrUnavailable = errors.New("judge: cannot decide now")
)

// GenerationSource names the Redis state generation to judge with, "" when
// Redis was never rebuilt from SQL (doc/architecture.md, "Never trust Redis
// blindly"). service/recovery's Generations reads it from SQL.
type GenerationSource interface {
	Generation(ctx context.Context) (string, error)
}

// DecisionBatchInfo describes one group commit, for DecisionHooks.OnBatch.
type DecisionBatchInfo struct {
	// Events and Steps count the usage events (Decide) and grant steps
	// (Charge) judged together; Duplicates the retries among them.
	Requests, Events, Steps, Duplicates int
	// Spooled counts the batch's records written to the spool (WithSpool)
	// because Kafka did not acknowledge them.
	Spooled int
	// Judge is the time of the engine's pipeline; Duration the whole batch:
	// judging and producing its records until Kafka acknowledged them.
	Judge, Duration time.Duration
	// Err is why the batch was refused (nil: every caller was answered).
	Err error
}

// DecisionHooks are optional callbacks; nil funcs are skipped. OnBatch may be
// called concurrently.
type DecisionHooks struct {
	OnBatch func(DecisionBatchInfo)
}

// Decisions answers gateways that must ask before granting (doc/architecture.md,
// "Synchronous decisions"). Concurrent callers are group-committed: the
// first caller's events wait a linger for others, and the whole group is
// judged in one engine pipeline, its records (usage-persist, notifications:
// the processor's own, usageOutputs) produced to Kafka and acknowledged, and
// only then each caller answered. The engine's dedupe makes it idempotent by
// event id: a retry gets the original answer, flagged duplicate, and its
// records are produced again (same ids).
//
// What a caller is told is what the family is charged: an answer is given
// only once its records are stored, and a refusal leaves no charge. When
// Kafka does not acknowledge, the records go to the spool (WithSpool: the
// SQL outbox) and the callers are answered; until Kafka acknowledges again,
// batches spool without waiting for it. When the spool fails too (or there
// is none), the batch's callers wait while its records are tried again,
// Kafka then the spool, with backoff, and every new caller is refused
// unjudged (ErrKafkaUnavailable). A caller that leaves meanwhile was charged
// iff it would have been granted, and a retry with the same id gets that
// answer. Only Close ends such a wait, with ErrNotRecorded.
type Decisions struct {
	decisionsConfig
	qs   *State
	cl   *kgo.Client
	free chan int // the free slots: a batch runs in one

	in       chan *asking
	stop     chan struct{}
	stopOnce sync.Once
	batches  sync.WaitGroup  // the collector, running batches, redo and recovery
	ctx      context.Context // ends with Close: a recovery in the background
	cancel   context.CancelFunc

	// The instance's own watermarks (see judge): one stream per slot,
	// acked[i] batches of slot i used in generation markGen.
	stream     string
	markMu     sync.Mutex
	acked      []int64
	markGen    string
	recovering atomic.Bool
	// recorded[i]: slot i's count last recorded in the door's mark store
	// under recordedGen (recordMarks).
	recordMu    sync.Mutex
	recorded    []int64
	recordedGen string

	// kafkaDown: Kafka did not acknowledge the latest records; batches
	// spool theirs (WithSpool) and the background loop tries Kafka with
	// probe, the latest spooled records. stuck counts the batches whose
	// records neither took, waiting for one to; no batch is judged
	// meanwhile. held are the records Close ended such a wait on.
	kafkaDown atomic.Bool
	stuck     atomic.Int32
	redoMu    sync.Mutex
	held      []*kgo.Record
	probe     []*kgo.Record
	redoing   bool
}

// asking is one caller's events (Decide) or grant steps (Charge) waiting
// for their group commit.
type asking struct {
	evs  []quota.Event
	envs []envelope.Envelope[envelope.UsagePayload]
	ops  []quota.GrantOp
	done chan answered // buffered: the batch never blocks on a caller gone
}

// size is how many judgements the caller asks for.
func (a *asking) size() int { return len(a.evs) + len(a.ops) }

type answered struct {
	results []quota.Result
	grants  []quota.GrantResult
	err     error
}

// NewDecisions returns Decisions judging through qs and producing with its
// own Kafka client: kopts name the seed brokers (and TLS/SASL); the
// producer settings (snappy, acks all, no linger: a caller waits for them, not
// idempotent) are its own. Close stops it.
func NewDecisions(qs *State, kopts []kgo.Opt, opts ...DecisionsOpt) (*Decisions, error) {
	if qs == nil {
		return nil, errors.New("judge: nil quota state")
	}
	cfg, err := newDecisionsConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := cfg.fitWindow(qs.DedupeWindow()); err != nil {
		return nil, err
	}
	s := &Decisions{decisionsConfig: cfg, qs: qs, free: make(chan int, cfg.slots),
		in: make(chan *asking), stop: make(chan struct{}), stream: DecisionStream + instanceID(),
		acked: make([]int64, cfg.slots)}
	for i := range cfg.slots {
		s.free <- i
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	all := slices.Concat([]kgo.Opt{
		// Snappy, not lz4: a group commit's batches are a few records, and
		// lz4's frame costs 3-4 times snappy's per batch at that size for
		// the same ratio (doc/benchmarks.md, "Peers").
		kgo.ProducerBatchCompression(kgo.SnappyCompression(), kgo.NoCompression()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	}, kopts, []kgo.Opt{
		kgo.ProducerLinger(0),
		// Not idempotent: the delivery timeout must be able to fail records
		// (an idempotent producer holds what it sent until Kafka answers).
		// A record written twice is harmless: ids are deterministic and
		// every consumer dedupes by them.
		kgo.DisableIdempotentWrite(),
		// kgo allows no less than 1 s; the batch context ends sooner waits.
		kgo.RecordDeliveryTimeout(max(s.timeout, time.Second)),
	})
	if s.cl, err = kgo.NewClient(all...); err != nil {
		return nil, fmt.Errorf("judge: decisions kafka client: %w", err)
	}
	s.batches.Add(1)
	go s.collect() // ends with Close
	if s.gens != nil && qs.marks != nil {
		s.recorded = make([]int64, cfg.slots)
		s.batches.Add(1)
		go s.recordMarks() // ends with Close
	}
	return s, nil
}

// Decide judges evs (one caller's events, in order) in the next group commit
// and returns their results once their records are in Kafka. Invalid events
// are refused with an *InvalidEventError (wrapping quota.ErrInvalid, its
// Index the event's position) before anything is judged.
func (s *Decisions) Decide(ctx context.Context, envs []envelope.Envelope[envelope.UsagePayload]) ([]quota.Result, error) {
	now := s.now()
	a := &asking{envs: envs, evs: make([]quota.Event, len(envs)), done: make(chan answered, 1)}
	for i, e := range envs {
		if err := s.checkUsage(e, now); err != nil {
			ie := err.(*InvalidEventError)
			ie.Index = i
			return nil, ie
		}
		a.evs[i] = s.event(e)
	}
	if len(envs) == 0 {
		return nil, nil
	}
	r, err := s.ask(ctx, a)
	return r.results, err
}

// Charge judges ops (one caller's grant steps, in order: quota.GrantOp) in
// the next group commit, with whatever events and steps other callers ask
// for, and returns their results once their records are stored — the
// promise of Decide (doc/architecture.md, "Grants"): judged on the door's
// checked state, each step's records (its charge and its reservation
// after it, usage-persist with the member grant, and its notifications)
// acknowledged by Kafka or spooled to SQL before the answer, and a refusal
// (every error but a caller's cancellation) leaves no charge. A retry
// with the same step ids gets the original answers, flagged Duplicate.
// Invalid steps are refused with an *InvalidStepError (wrapping
// quota.ErrInvalid, its Index the step's position) before anything is
// judged. An empty Category is named from the app catalog, as for events.
func (s *Decisions) Charge(ctx context.Context, ops []quota.GrantOp) ([]quota.GrantResult, error) {
	now := s.now()
	a := &asking{ops: make([]quota.GrantOp, len(ops)), done: make(chan answered, 1)}
	for i, op := range ops {
		if err := s.checkStep(op, now); err != nil {
			se := err.(*InvalidStepError)
			se.Index = i
			return nil, se
		}
		if op.Category == "" {
			op.Category = s.apps.Category(op.AppID)
		}
		a.ops[i] = op
	}
	if len(ops) == 0 {
		return nil, nil
	}
	r, err := s.ask(ctx, a)
	return r.grants, err
}

// ask hands a to the next group commit and waits for its answer.
func (s *Decisions) ask(ctx context.Context, a *asking) (answered, error) {
	if s.stuck.Load() > 0 {
		return answered{}, ErrKafkaUnavailable
	}
	select {
	case s.in <- a:
	case <-s.stop:
		return answered{}, ErrDecisionsClosed
	case <-ctx.Done():
		return answered{}, ctx.Err()
	}
	select {
	case r := <-a.done:
		return r, r.err
	case <-ctx.Done():
		return answered{}, ctx.Err()
	}
}

// collect forms the group commits: the first caller, then whoever arrives
// within the linger (or until maxBatch events), then, while every slot is
// busy, whoever arrives until one frees.
func (s *Decisions) collect() {
	defer s.batches.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var batch []*asking
		select {
		case a := <-s.in:
			batch = append(batch, a)
		case <-s.stop:
			return
		}
		n := batch[0].size()
		if s.linger > 0 {
			timer.Reset(s.linger)
		linger:
			for n < s.maxBatch {
				select {
				case a := <-s.in:
					batch, n = append(batch, a), n+a.size()
				case <-timer.C:
					break linger
				}
			}
			timer.Stop()
		}
		for {
			in := s.in
			if n >= s.maxBatch {
				in = nil
			}
			select {
			case slot := <-s.free:
				s.batches.Add(1)
				go func() { // joined by Close
					defer s.batches.Done()
					defer func() { s.free <- slot }()
					s.run(batch, n, slot)
				}()
			case a := <-in:
				batch, n = append(batch, a), n+a.size()
				continue
			case <-s.stop:
				for _, a := range batch {
					a.done <- answered{err: ErrDecisionsClosed}
				}
				return
			}
			break
		}
	}
}

// run judges one group commit, produces its records and answers its callers.
func (s *Decisions) run(batch []*asking, n, slot int) {
	start := time.Now()
	info := DecisionBatchInfo{Requests: len(batch), Events: n}
	defer func() {
		info.Duration = time.Since(start)
		if s.hooks.OnBatch != nil {
			s.hooks.OnBatch(info)
		}
	}()
	fail := func(err error) {
		info.Err = err
		for _, a := range batch {
			a.done <- answered{err: err}
		}
	}
	if s.stuck.Load() > 0 {
		fail(ErrKafkaUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	evs := make([]quota.Event, 0, n)
	var ops []quota.GrantOp
	for _, a := range batch {
		evs = append(evs, a.evs...)
		ops = append(ops, a.ops...)
	}
	info.Events, info.Steps = len(evs), len(ops)
	results, grants, gen, err := s.judge(ctx, evs, ops, slot)
	info.Judge = time.Since(start)
	// Events and steps of families that could not be restored on touch
	// were not judged; the others were, and are recorded and answered.
	var pending, gpending map[int]bool
	var pj *PartlyJudgedError
	if errors.As(err, &pj) {
		results, grants = pj.Results, pj.GrantResults
		pending, gpending = make(map[int]bool, len(pj.Pending)), make(map[int]bool, len(pj.GrantPending))
		for _, at := range pj.Pending {
			pending[at] = true
		}
		for _, at := range pj.GrantPending {
			gpending[at] = true
		}
		info.Err = pj
	} else if err != nil {
		if !errors.Is(err, quota.ErrStale) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		fail(err)
		return
	}
	// Each caller's records, then all produced at once.
	recs := make([][]*kgo.Record, len(batch))
	unjudged := make([]int, len(batch)) // per caller, events and steps not judged
	k, g := 0, 0
	for i, a := range batch {
		for j, e := range a.envs {
			if pending[k+j] {
				unjudged[i]++
				continue
			}
			res := results[k+j]
			if res.Duplicate {
				info.Duplicates++
			}
			out, err := usageOutputs(e, a.evs[j].Bytes, res, gen, s.loc, s.alertText)
			if err != nil {
				// Every field comes from a checked event and the engine.
				fail(fmt.Errorf("%w: build outputs of %s: %w", ErrUnavailable, e.EventID, err))
				return
			}
			recs[i] = append(recs[i], out...)
		}
		for j, op := range a.ops {
			if gpending[g+j] {
				unjudged[i]++
				continue
			}
			res := grants[g+j]
			if res.Duplicate {
				info.Duplicates++
			}
			out, err := grantOutputs(op, res, gen, s.loc, s.alertText)
			if err != nil {
				// Every field comes from a checked step and the engine.
				fail(fmt.Errorf("%w: build outputs of step %s: %w", ErrUnavailable, op.ID, err))
				return
			}
			recs[i] = append(recs[i], out...)
		}
		k += len(a.envs)
		g += len(a.ops)
	}
	failed, spooled := s.record(ctx, recs)
	info.Spooled = spooled
	k, g = 0, 0
	for i, a := range batch {
		switch {
		case failed[i]:
			a.done <- answered{err: ErrNotRecorded}
			info.Err = ErrNotRecorded
		case unjudged[i] == a.size():
			a.done <- answered{err: fmt.Errorf("%w: %w", ErrUnavailable, pj.Err)}
		case unjudged[i] > 0:
			a.done <- answered{err: fmt.Errorf("%w: %w", ErrPartlyJudged, pj.Err)}
		default:
			var ans answered
			if len(a.envs) > 0 {
				ans.results = results[k : k+len(a.envs) : k+len(a.envs)]
			}
			if len(a.ops) > 0 {
				ans.grants = grants[g : g+len(a.ops) : g+len(a.ops)]
			}
			a.done <- ans
		}
		k += len(a.envs)
		g += len(a.ops)
	}
}

// judge runs evs through the engine, with the state guard when set.
//
// Under a generation, each batch carries the instance's own watermarks, one
// stream per slot (DecisionStream + a random id + the slot): the batches of
// a slot run one after another, like a partition's, and a slot's watermark
// counts those whose results were used. A batch is judged only if the
// marker holds every slot's count, and it raises its own slot's by one in
// the same pipeline as its charges. Redis rolled back past a granted batch
// (a failover to a lagging replica, a restart from an older snapshot) has a
// lower count or none, so the instance's next batch, in whatever slot, is
// refused as stale (quota.ErrStale) and Redis is recovered (WithStateGuard)
// before anything more is granted. A slot's own stream keeps a batch that
// was in flight when another slot's grant was lost from hiding that loss
// (a single counter raised by the later batch would). A new generation (a
// rebuild, which reads every granted batch back from SQL) starts the counts
// again.
func (s *Decisions) judge(ctx context.Context, evs []quota.Event, ops []quota.GrantOp, slot int) ([]quota.Result, []quota.GrantResult, string, error) {
	if s.gens == nil {
		res, gres, err := s.qs.judge(ctx, evs, ops)
		return res, gres, "", err
	}
	gen, err := s.gens.Generation(ctx)
	if err != nil {
		return nil, nil, "", fmt.Errorf("judge: state generation: %w", err)
	}
	if gen == "" {
		err := &quota.StaleError{Reason: "Redis was never rebuilt from SQL (no state generation yet)"}
		s.recover(gen, err)
		return nil, nil, "", err
	}
	s.markMu.Lock()
	if s.markGen != gen {
		s.markGen = gen
		clear(s.acked)
	}
	marks := make([]quota.Mark, len(s.acked))
	for i, n := range s.acked {
		marks[i] = quota.Mark{Stream: s.stream + "/" + strconv.Itoa(i), From: n, To: n}
	}
	marks[slot].To++
	s.markMu.Unlock()
	res, gres, err := s.qs.judgeMarked(ctx, gen, marks, evs, ops)
	var pj *PartlyJudgedError
	if errors.As(err, &pj) {
		// The judged events' batch raised the slot's count like any.
		s.markMu.Lock()
		if s.markGen == gen {
			s.acked[slot] = marks[slot].To
		}
		s.markMu.Unlock()
		if errors.Is(err, quota.ErrStale) { // a rebuild began meanwhile
			s.recover(gen, err)
		}
		return nil, nil, gen, err
	}
	if errors.Is(err, quota.ErrStale) {
		if f, ok := s.gens.(interface{ Forget() }); ok {
			f.Forget()
		}
		s.recover(gen, err)
	}
	if err != nil {
		return nil, nil, gen, err
	}
	s.markMu.Lock()
	if s.markGen == gen {
		s.acked[slot] = marks[slot].To
	}
	s.markMu.Unlock()
	return res, gres, gen, nil
}

// recover asks the state guard (WithStateGuard), in the background, to bring
// Redis back after a batch of generation used was refused as stale; callers
// meanwhile get the stale error. One recovery runs at a time; Close cancels it.
func (s *Decisions) recover(used string, cause error) {
	if s.guard == nil || !s.recovering.CompareAndSwap(false, true) {
		return
	}
	s.log.Error("synchronous decisions: the Redis state cannot be trusted; recovering it, nothing is granted meanwhile", "generation", used, "err", cause)
	s.batches.Add(1)
	go func() { // joined by Close
		defer s.batches.Done()
		defer s.recovering.Store(false)
		gen, err := s.guard.Recover(s.ctx, used, cause)
		switch {
		case err != nil && s.ctx.Err() == nil:
			s.log.Error("synchronous decisions: recovering the Redis state failed; the next stale answer tries again", "err", err)
		case err == nil:
			s.log.Warn("synchronous decisions: the Redis state is trusted again; deciding", "generation", gen)
		}
	}()
}

// Available reports whether decisions are being judged (false while
// records of earlier ones wait to be stored: ErrKafkaUnavailable).
func (s *Decisions) Available() bool { return s.stuck.Load() == 0 }

// Spooling reports whether records go to the spool because Kafka did not
// acknowledge the latest ones (WithSpool).
func (s *Decisions) Spooling() bool { return s.spool != nil && s.kafkaDown.Load() }

// Close stops accepting callers, waits for the running batches (each
// bounded by the decision timeout), tries once more, within ctx, to produce
// or spool the records still held, and closes the Kafka client.
func (s *Decisions) Close(ctx context.Context) error {
	var err error
	s.stopOnce.Do(func() {
		close(s.stop)
		s.cancel()
		s.batches.Wait()
		var merr error
		if s.recorded != nil {
			if merr = s.recordCounts(ctx); merr != nil {
				merr = fmt.Errorf("judge: recording the batches' marks: %w", merr)
			}
		}
		s.redoMu.Lock()
		recs := s.held
		s.held = nil
		s.redoMu.Unlock()
		if len(recs) > 0 {
			perr := s.cl.ProduceSync(ctx, recs...).FirstErr()
			if perr != nil && s.spool != nil {
				if serr := s.spool.Spool(ctx, recs); serr == nil {
					perr = nil
				} else {
					perr = errors.Join(perr, serr)
				}
			}
			if perr != nil {
				// Charged in Redis, in SQL never: the truth is restored
				// instead, by a rebuild before the next decision (their
				// callers were told to retry with the same ids).
				err = fmt.Errorf("judge: %d judged events' records neither produced to Kafka nor spooled: %w", len(recs), perr)
				if derr := s.qs.Distrust(ctx); derr != nil {
					err = fmt.Errorf("%w; marking Redis stale for a rebuild from SQL failed too (rebuild it): %w", err, derr)
				}
			}
		}
		s.cl.Close()
		err = errors.Join(err, merr)
	})
	return err
}
