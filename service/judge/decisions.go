package judge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/backoff"
	"github.com/dabom/dpcs/quota"
)

// Errors of Decisions.Decide; the API answers each with 503 (fail closed:
// no grant). A Redis state that cannot be trusted wraps quota.ErrStale.
var (
	// ErrKafkaUnavailable: the decisions' records (usage-persist,
	// notifications) could not be produced, or earlier ones are still
	// waiting to be; nothing is granted until Kafka acknowledges them.
	ErrKafkaUnavailable = errors.New("judge: kafka unavailable: decisions are not granted")
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
	Requests, Events, Duplicates int
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
// records are produced again (same ids), so a retry after a failed produce
// still brings them to Kafka. Fail closed: when Kafka does not acknowledge,
// the batch's callers get ErrKafkaUnavailable, the records are produced again
// in the background, and until they are acknowledged every caller gets
// ErrKafkaUnavailable without Redis being touched.
type Decisions struct {
	settings
	qs  *State
	cl  *kgo.Client
	sem chan struct{}

	in       chan *asking
	stop     chan struct{}
	stopOnce sync.Once
	batches  sync.WaitGroup // the collector and running batches

	// kafkaDown is set while records of answered-refused batches wait to be
	// produced again (redo); no batch is judged meanwhile.
	kafkaDown atomic.Bool
	redoMu    sync.Mutex
	redo      []*kgo.Record
	redoing   bool
}

// asking is one caller's events waiting for their group commit.
type asking struct {
	evs  []quota.Event
	envs []envelope.Envelope[envelope.UsagePayload]
	done chan answered // buffered: the batch never blocks on a caller gone
}

type answered struct {
	results []quota.Result
	err     error
}

// NewDecisions returns Decisions judging through qs and producing with its
// own Kafka client: kopts name the seed brokers (and TLS/SASL); the
// producer settings (acks all, no linger: a caller waits for them, not
// idempotent) are its own. Close stops it.
func NewDecisions(qs *State, kopts []kgo.Opt, opts ...Option) (*Decisions, error) {
	if qs == nil {
		return nil, errors.New("judge: nil quota state")
	}
	set, err := newSettings(opts)
	if err != nil {
		return nil, err
	}
	s := &Decisions{settings: set, qs: qs, sem: make(chan struct{}, set.slots),
		in: make(chan *asking), stop: make(chan struct{})}
	all := slices.Concat([]kgo.Opt{
		kgo.ProducerBatchCompression(kgo.Lz4Compression(), kgo.NoCompression()),
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
	if s.kafkaDown.Load() {
		return nil, ErrKafkaUnavailable
	}
	select {
	case s.in <- a:
	case <-s.stop:
		return nil, ErrDecisionsClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case r := <-a.done:
		return r.results, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
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
		n := len(batch[0].evs)
		if s.linger > 0 {
			timer.Reset(s.linger)
		linger:
			for n < s.maxBatch {
				select {
				case a := <-s.in:
					batch, n = append(batch, a), n+len(a.evs)
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
			case s.sem <- struct{}{}:
				s.batches.Add(1)
				go func() { // joined by Close
					defer s.batches.Done()
					defer func() { <-s.sem }()
					s.run(batch, n)
				}()
			case a := <-in:
				batch, n = append(batch, a), n+len(a.evs)
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
func (s *Decisions) run(batch []*asking, n int) {
	start := time.Now()
	info := DecisionBatchInfo{Requests: len(batch), Events: n}
	defer func() {
		info.Duration = time.Since(start)
		if s.decHooks.OnBatch != nil {
			s.decHooks.OnBatch(info)
		}
	}()
	fail := func(err error) {
		info.Err = err
		for _, a := range batch {
			a.done <- answered{err: err}
		}
	}
	if s.kafkaDown.Load() {
		fail(ErrKafkaUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	evs := make([]quota.Event, 0, n)
	for _, a := range batch {
		evs = append(evs, a.evs...)
	}
	results, err := s.judge(ctx, evs)
	info.Judge = time.Since(start)
	if err != nil {
		if !errors.Is(err, quota.ErrStale) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		fail(err)
		return
	}
	// Each caller's records, then all produced at once.
	recs := make([][]*kgo.Record, len(batch))
	k := 0
	for i, a := range batch {
		for j, e := range a.envs {
			res := results[k+j]
			if res.Duplicate {
				info.Duplicates++
			}
			out, err := usageOutputs(e, res, s.loc)
			if err != nil {
				// Every field comes from a checked event and the engine.
				fail(fmt.Errorf("%w: build outputs of %s: %w", ErrUnavailable, e.EventID, err))
				return
			}
			recs[i] = append(recs[i], out...)
		}
		k += len(a.envs)
	}
	failed := s.produce(ctx, recs)
	k = 0
	for i, a := range batch {
		if failed[i] {
			a.done <- answered{err: ErrKafkaUnavailable}
			info.Err = ErrKafkaUnavailable
		} else {
			a.done <- answered{results: results[k : k+len(a.envs) : k+len(a.envs)]}
		}
		k += len(a.envs)
	}
}

// judge runs evs through the engine, with the state guard when set.
func (s *Decisions) judge(ctx context.Context, evs []quota.Event) ([]quota.Result, error) {
	if s.gens == nil {
		return s.qs.apply(ctx, evs)
	}
	gen, err := s.gens.Generation(ctx)
	if err != nil {
		return nil, fmt.Errorf("judge: state generation: %w", err)
	}
	if gen == "" {
		return nil, &quota.StaleError{Reason: "Redis was never rebuilt from SQL (no state generation yet)"}
	}
	res, err := s.qs.applyMarked(ctx, gen, nil, evs)
	if errors.Is(err, quota.ErrStale) {
		if f, ok := s.gens.(interface{ Forget() }); ok {
			f.Forget()
		}
	}
	return res, err
}

// produce sends every caller's records and waits for Kafka; it reports per
// caller whether any of its records failed. Failed records are produced
// again in the background (redeliver), and until they are acknowledged no
// batch is judged.
func (s *Decisions) produce(ctx context.Context, recs [][]*kgo.Record) []bool {
	var flat []*kgo.Record
	owner := []int{}
	for i, rs := range recs {
		for range rs {
			owner = append(owner, i)
		}
		flat = append(flat, rs...)
	}
	failed := make([]bool, len(recs))
	bad := s.send(ctx, flat)
	var redo []*kgo.Record
	for k, b := range bad {
		if b {
			failed[owner[k]] = true
			redo = append(redo, flat[k])
		}
	}
	if len(redo) > 0 {
		s.log.Warn("synchronous decisions: records not acknowledged by Kafka; refusing decisions until they are", "records", len(redo))
		s.redeliver(redo)
	}
	return failed
}

// send produces recs and waits until Kafka acknowledged or failed each, or
// ctx ends; it reports which were not acknowledged. kgo may still deliver a
// record it holds past ctx (an idempotent producer does not drop what it
// sent): such a record is reported failed, produced again, and its copy in
// Kafka is harmless (ids are deterministic; consumers dedupe).
func (s *Decisions) send(ctx context.Context, recs []*kgo.Record) []bool {
	var mu sync.Mutex
	bad := make([]bool, len(recs))
	for k := range bad {
		bad[k] = true
	}
	pending := len(recs)
	done := make(chan struct{})
	over := false
	for k, r := range recs {
		// Not ctx: a record failed by its context left kgo's partition
		// stuck (measured on kfake); the client's delivery timeout, which
		// is the decision timeout, fails it instead.
		s.cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if over {
				return
			}
			bad[k] = err != nil
			if pending--; pending == 0 {
				close(done)
			}
		})
	}
	if len(recs) == 0 {
		return bad
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	over = true
	return slices.Clone(bad)
}

// redeliver keeps recs to be produced again and starts the background
// producer if it is not running. Records are never dropped: a judged event
// whose records are lost would be in Redis and never in SQL.
func (s *Decisions) redeliver(recs []*kgo.Record) {
	s.redoMu.Lock()
	defer s.redoMu.Unlock()
	s.kafkaDown.Store(true)
	s.redo = append(s.redo, copies(recs)...)
	if s.redoing {
		return
	}
	s.redoing = true
	s.batches.Add(1)
	go s.redeliverLoop() // joined by Close
}

// copies are fresh records with recs' contents: a record handed to kgo
// keeps its partition, offset and producer fields.
func copies(recs []*kgo.Record) []*kgo.Record {
	out := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		out[i] = &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp}
	}
	return out
}

// redoBackoff paces the background producer of refused records.
var redoBackoff = backoff.Policy{Min: 100 * time.Millisecond, Max: 2 * time.Second}

func (s *Decisions) redeliverLoop() {
	defer s.batches.Done()
	for attempt := 1; ; attempt++ {
		t := time.NewTimer(redoBackoff.Delay(attempt))
		select {
		case <-s.stop:
			t.Stop()
			s.redoMu.Lock()
			s.redoing = false
			s.redoMu.Unlock()
			return
		case <-t.C:
		}
		s.redoMu.Lock()
		recs := s.redo
		s.redo = nil
		s.redoMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		bad := s.send(ctx, recs)
		cancel()
		var failed []*kgo.Record
		for k, b := range bad {
			if b {
				failed = append(failed, recs[k])
			}
		}
		s.redoMu.Lock()
		s.redo = append(copies(failed), s.redo...)
		if len(s.redo) == 0 {
			s.redoing = false
			s.kafkaDown.Store(false)
			s.redoMu.Unlock()
			s.log.Info("synchronous decisions: Kafka acknowledged the waiting records; deciding again")
			return
		}
		s.redoMu.Unlock()
	}
}

// Available reports whether decisions are being granted (false while
// records wait for Kafka).
func (s *Decisions) Available() bool { return !s.kafkaDown.Load() }

// Close stops accepting callers, waits for the running batches (each
// bounded by the decision timeout), tries once more, within ctx, to produce
// records still waiting for Kafka, and closes the Kafka client.
func (s *Decisions) Close(ctx context.Context) error {
	var err error
	s.stopOnce.Do(func() {
		close(s.stop)
		s.batches.Wait()
		s.redoMu.Lock()
		recs := s.redo
		s.redo = nil
		s.redoMu.Unlock()
		if len(recs) > 0 {
			res := s.cl.ProduceSync(ctx, recs...)
			if perr := res.FirstErr(); perr != nil {
				err = fmt.Errorf("judge: %d judged events' records not produced to Kafka (Redis holds them, SQL does not: rebuild or replay): %w", len(recs), perr)
			}
		}
		s.cl.Close()
	})
	return err
}
