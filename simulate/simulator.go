package simulate

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// MaxRate is the highest rate a Simulator accepts, in events per second.
const MaxRate = 10_000_000

// MaxBurst is the most events one Burst call may add.
const MaxBurst = 10_000_000

// ErrRunning is returned by Start when the simulator is already running.
var ErrRunning = errors.New("simulate: already running")

// Source produces the events a Simulator sends; *Generator is one.
type Source interface {
	Next() Event
}

// Sink receives the events a Simulator generates; *Publisher is the Kafka
// sink.
type Sink interface {
	// Send hands ev over for delivery. It may block for back-pressure but must
	// return promptly once ctx is done. It calls done exactly once with the
	// outcome (nil when delivered), before or after returning, from any
	// goroutine.
	Send(ctx context.Context, ev Event, done func(error))
}

// SinkFunc adapts a function to a Sink.
type SinkFunc func(ctx context.Context, ev Event, done func(error))

// Send calls f.
func (f SinkFunc) Send(ctx context.Context, ev Event, done func(error)) { f(ctx, ev, done) }

// Clock is the time a Simulator paces by; tests pass a fake one.
type Clock interface {
	Now() time.Time
	// After is like time.After.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Second is one second of a Simulator's history.
type Second struct {
	Start    time.Time `json:"start"`    // the second, truncated
	Sent     uint64    `json:"sent"`     // events handed to the sink
	Produced uint64    `json:"produced"` // events delivered
	Errors   uint64    `json:"errors"`   // events that failed
}

// Stats is a snapshot of a Simulator.
type Stats struct {
	Running bool `json:"running"`
	// Rate is the target rate in events per second; EffectiveRate is Rate
	// times the hour-of-day factor when a curve is set (else equal).
	Rate          float64 `json:"rate"`
	EffectiveRate float64 `json:"effectiveRate"`
	// Sent counts events handed to the sink, Produced those delivered, Errors
	// those that failed, since the simulator was created.
	Sent     uint64 `json:"sent"`
	Produced uint64 `json:"produced"`
	Errors   uint64 `json:"errors"`
	// InFlight is Sent minus the events whose outcome is known.
	InFlight int64 `json:"inFlight"`
	// BurstPending counts burst events not yet sent.
	BurstPending int64 `json:"burstPending"`
	// LastError is the message of the most recent failure, "" if none.
	LastError string `json:"lastError,omitempty"`
	// History holds the last complete seconds, oldest first.
	History []Second `json:"history"`
}

// LastSecond returns the most recent complete second of the history (zero
// when there is none).
func (s Stats) LastSecond() Second {
	if len(s.History) == 0 {
		return Second{}
	}
	return s.History[len(s.History)-1]
}

// RateInfo is passed to Hooks.OnRate when the rate changes.
type RateInfo struct {
	Old, New float64
}

// Hooks are optional callbacks; nil funcs are skipped. They run on the
// goroutine that noticed the event (the simulator's, or the caller of
// SetRate, Stats or Stop) and must not block.
type Hooks struct {
	// OnSecond is called with every completed second of history.
	OnSecond func(Second)
	// OnRate is called after SetRate.
	OnRate func(RateInfo)
}

// Option configures a Simulator.
type Option func(*Simulator) error

// WithRate sets the initial rate in events per second (0 sends nothing until
// SetRate). Default: 1000.
func WithRate(r float64) Option {
	return func(s *Simulator) error {
		if err := checkRate(r); err != nil {
			return err
		}
		s.target = r
		return nil
	}
}

// WithBucket sets how much unused rate the token bucket keeps, as a span of
// time at the current rate: after a stall of up to d the simulator catches
// up; beyond it, the excess is dropped. The bucket starts empty, so a start
// or a rate change never spikes. Default: 100 ms.
func WithBucket(d time.Duration) Option {
	return func(s *Simulator) error {
		if d <= 0 || d > time.Minute {
			return invalidf("bucket must be in (0, 1m], got %s", d)
		}
		s.bucket = d
		return nil
	}
}

// WithClock sets the clock the simulator paces by. Default: the system
// clock.
func WithClock(c Clock) Option {
	return func(s *Simulator) error {
		if c == nil {
			return invalidf("nil clock")
		}
		s.clock = c
		return nil
	}
}

// WithHourlyCurve makes the effective rate follow c: the target rate times
// c.Factor of the current hour in loc, so the day's average is the target.
// Default: none (the rate is flat).
func WithHourlyCurve(c Curve, loc *time.Location) Option {
	return func(s *Simulator) error {
		if !c.valid() || loc == nil {
			return invalidf("hourly curve needs valid weights and a location")
		}
		s.curve, s.curveLoc = &c, loc
		return nil
	}
}

// WithHistory sets how many seconds of history Stats keeps. Default: 60.
func WithHistory(seconds int) Option {
	return func(s *Simulator) error {
		if seconds < 1 || seconds > 86400 {
			return invalidf("history must be 1…86400 seconds, got %d", seconds)
		}
		s.historyLen = seconds
		return nil
	}
}

// WithHooks sets the hooks. Default: none.
func WithHooks(h Hooks) Option {
	return func(s *Simulator) error { s.hooks = h; return nil }
}

// WithLogger sets the logger for start, stop and rate changes. Default: a
// discard logger.
func WithLogger(l *slog.Logger) Option {
	return func(s *Simulator) error {
		if l == nil {
			return invalidf("nil logger")
		}
		s.log = l
		return nil
	}
}

func checkRate(r float64) error {
	if math.IsNaN(r) || r < 0 || r > MaxRate {
		return invalidf("rate must be 0…%d events/s, got %v", MaxRate, r)
	}
	return nil
}

// maxChunk is the most events sent per pacing step.
const maxChunk = 1024

// Simulator sends events from a Source to a Sink at a rate that can be
// changed at any time from any goroutine: a token bucket
// (golang.org/x/time/rate) paced by a Clock, plus bursts sent on top of the
// rate. Start begins sending; Stop ends it and waits for every event in
// flight.
type Simulator struct {
	src   Source
	sink  Sink
	clock Clock
	log   *slog.Logger
	hooks Hooks

	bucket     time.Duration
	historyLen int
	curve      *Curve
	curveLoc   *time.Location

	lim  *rate.Limiter
	wake chan struct{}

	mu       sync.Mutex // guards the fields below
	target   float64
	factor   float64
	hour     int
	running  bool
	stop     chan struct{}
	loopDone chan struct{}
	cancel   context.CancelFunc
	lastErr  string
	history  []Second
	curSec   time.Time
	snap     [3]uint64 // sent, produced, errors at curSec

	stopping atomic.Bool
	burst    atomic.Int64
	sent     atomic.Uint64
	produced atomic.Uint64
	errs     atomic.Uint64
	inflight atomic.Int64
	done     func(error)
}

// New returns a stopped simulator sending events from src to sink.
func New(src Source, sink Sink, opts ...Option) (*Simulator, error) {
	if src == nil || sink == nil {
		return nil, invalidf("nil source or sink")
	}
	s := &Simulator{
		src: src, sink: sink, clock: realClock{},
		log:    slog.New(slog.DiscardHandler),
		bucket: 100 * time.Millisecond, historyLen: 60,
		target: 1000, factor: 1, hour: -1,
		wake: make(chan struct{}, 1),
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	s.done = s.complete
	now := s.clock.Now()
	s.lim = rate.NewLimiter(0, 1)
	s.mu.Lock()
	s.updateFactor(now)
	s.apply(now)
	s.mu.Unlock()
	return s, nil
}

// effective returns the paced rate; s.mu held.
func (s *Simulator) effective() float64 { return s.target * s.factor }

// apply pushes the effective rate into the limiter; s.mu held.
func (s *Simulator) apply(now time.Time) {
	eff := s.effective()
	s.lim.SetLimitAt(now, rate.Limit(eff))
	s.lim.SetBurstAt(now, max(1, int(math.Ceil(eff*s.bucket.Seconds()))))
}

// updateFactor recomputes the curve factor when the hour changed; s.mu held.
func (s *Simulator) updateFactor(now time.Time) bool {
	if s.curve == nil {
		return false
	}
	h := now.In(s.curveLoc).Hour()
	if h == s.hour {
		return false
	}
	s.hour, s.factor = h, s.curve.Factor(h)
	return true
}

// SetRate changes the target rate (events per second, 0…MaxRate; 0 pauses).
// It takes effect at once: the simulator is woken and paces by the new rate
// from its next step.
func (s *Simulator) SetRate(r float64) error {
	if err := checkRate(r); err != nil {
		return err
	}
	s.mu.Lock()
	old := s.target
	s.target = r
	s.apply(s.clock.Now())
	s.mu.Unlock()
	s.notify()
	s.log.Info("simulator rate changed", "old", old, "new", r)
	if s.hooks.OnRate != nil {
		s.hooks.OnRate(RateInfo{Old: old, New: r})
	}
	return nil
}

// Rate returns the target rate in events per second.
func (s *Simulator) Rate() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.target
}

// Burst sends n (1…MaxBurst) events on top of the rate, as fast as the sink
// accepts them; bursts add up. It returns the burst events now pending.
func (s *Simulator) Burst(n int64) (int64, error) {
	if n < 1 || n > MaxBurst {
		return 0, invalidf("burst must be 1…%d events, got %d", MaxBurst, n)
	}
	pending := s.burst.Add(n)
	s.notify()
	s.log.Info("simulator burst", "events", n, "pending", pending)
	return pending, nil
}

func (s *Simulator) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Running reports whether the simulator is started.
func (s *Simulator) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}

// Start begins sending on a new goroutine; Stop ends it. A stopped
// simulator may be started again.
func (s *Simulator) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return ErrRunning
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.running, s.cancel = true, cancel
	s.stop, s.loopDone = make(chan struct{}), make(chan struct{})
	s.stopping.Store(false)
	go s.loop(ctx, s.stop, s.loopDone)
	s.log.Info("simulator started", "rate", s.target)
	return nil
}

// Stop stops sending and waits until every event sent has its outcome (the
// sink delivered or failed it). If ctx ends first, the events still in the
// sink are cancelled (the context passed to Sink.Send is cancelled) and
// ctx's error is returned. Stop on a stopped simulator returns nil.
func (s *Simulator) Stop(ctx context.Context) error {
	s.mu.Lock()
	if !s.running {
		s.mu.Unlock()
		return nil
	}
	s.running = false
	s.stopping.Store(true)
	close(s.stop)
	loopDone, cancel := s.loopDone, s.cancel
	s.mu.Unlock()
	defer cancel()

	var err error
	select {
	case <-loopDone:
	case <-ctx.Done():
		cancel()
		<-loopDone
		err = ctx.Err()
	}
	for err == nil && s.inflight.Load() > 0 {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	s.mu.Lock()
	completed := s.record(s.clock.Now())
	s.mu.Unlock()
	s.fire(completed)
	s.log.Info("simulator stopped", "sent", s.sent.Load(), "produced", s.produced.Load(), "errors", s.errs.Load(), "err", err)
	return err
}

func (s *Simulator) loop(ctx context.Context, stop, done chan struct{}) {
	defer close(done)
	for {
		select {
		case <-stop:
			return
		default:
		}
		now := s.clock.Now()
		s.mu.Lock()
		completed := s.record(now)
		if s.updateFactor(now) {
			s.apply(now)
		}
		eff := s.effective()
		s.mu.Unlock()
		s.fire(completed)

		n, wait := 0, time.Second
		if eff > 0 {
			tokens := s.lim.TokensAt(now)
			if tokens >= 1 {
				n = min(int(tokens), maxChunk)
				if !s.lim.AllowN(now, n) { // the rate changed in between
					n = 0
				}
			} else {
				wait = time.Duration((1 - tokens) / eff * float64(time.Second))
			}
		}
		if b := s.burst.Load(); b > 0 && n < maxChunk {
			take := min(b, int64(maxChunk-n))
			s.burst.Add(-take)
			n += int(take)
		}
		if n > 0 {
			s.send(ctx, n)
			continue
		}
		select {
		case <-stop:
			return
		case <-s.wake:
		case <-s.clock.After(min(max(wait, time.Millisecond), time.Second)):
		}
	}
}

func (s *Simulator) send(ctx context.Context, n int) {
	for range n {
		if s.stopping.Load() {
			return
		}
		ev := s.src.Next()
		s.sent.Add(1)
		s.inflight.Add(1)
		s.sink.Send(ctx, ev, s.done)
	}
}

func (s *Simulator) complete(err error) {
	if err != nil {
		s.errs.Add(1)
		s.mu.Lock()
		s.lastErr = err.Error()
		s.mu.Unlock()
	} else {
		s.produced.Add(1)
	}
	s.inflight.Add(-1)
}

// record closes the seconds that ended before now and returns them; s.mu
// held.
func (s *Simulator) record(now time.Time) []Second {
	sec := now.Truncate(time.Second)
	if s.curSec.IsZero() {
		s.curSec = sec
		s.snap = [3]uint64{s.sent.Load(), s.produced.Load(), s.errs.Load()}
		return nil
	}
	if !sec.After(s.curSec) {
		return nil
	}
	cur := [3]uint64{s.sent.Load(), s.produced.Load(), s.errs.Load()}
	var out []Second
	// The counts since the last snapshot belong to the second that ended;
	// seconds skipped entirely (the simulator slept) are empty.
	if gap := sec.Sub(s.curSec) / time.Second; gap > 1 {
		skip := min(int(gap)-1, s.historyLen)
		for i := skip; i >= 1; i-- {
			out = append(out, Second{Start: sec.Add(-time.Duration(i) * time.Second)})
		}
	}
	out = append([]Second{{Start: s.curSec, Sent: cur[0] - s.snap[0], Produced: cur[1] - s.snap[1], Errors: cur[2] - s.snap[2]}}, out...)
	s.curSec, s.snap = sec, cur
	s.history = append(s.history, out...)
	if over := len(s.history) - s.historyLen; over > 0 {
		s.history = append(s.history[:0], s.history[over:]...)
	}
	return out
}

func (s *Simulator) fire(completed []Second) {
	if s.hooks.OnSecond == nil {
		return
	}
	for _, sec := range completed {
		s.hooks.OnSecond(sec)
	}
}

// Stats returns a snapshot.
func (s *Simulator) Stats() Stats {
	s.mu.Lock()
	completed := s.record(s.clock.Now())
	st := Stats{
		Running:       s.running,
		Rate:          s.target,
		EffectiveRate: s.effective(),
		Sent:          s.sent.Load(),
		Produced:      s.produced.Load(),
		Errors:        s.errs.Load(),
		InFlight:      s.inflight.Load(),
		BurstPending:  s.burst.Load(),
		LastError:     s.lastErr,
		History:       append([]Second{}, s.history...),
	}
	s.mu.Unlock()
	s.fire(completed)
	return st
}
