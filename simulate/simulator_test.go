package simulate

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
)

// fakeClock advances only when the simulator waits: After(d) moves the time
// forward by d at once. The simulator then runs as fast as the CPU allows
// while its pacing is judged on simulated time, so rates are measured
// exactly and nothing depends on the machine's speed.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 2, 6, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.now = c.now.Add(d)
	t := c.now
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- t
	return ch
}

// counterSource makes minimal valid events cheaply.
type counterSource struct{ n int64 }

func (s *counterSource) Next() Event {
	s.n++
	return envelope.New("evt_x", time.Unix(0, 0), envelope.UsagePayload{FamilyID: s.n, CustomerID: 1, AppID: "a", BytesUsed: 1})
}

func mustSimulator(tb testing.TB, src Source, sink Sink, opts ...Option) *Simulator {
	tb.Helper()
	s, err := New(src, sink, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func stop(tb testing.TB, s *Simulator) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		tb.Fatal(err)
	}
}

// The achieved rate is within 2 % of the target in every second, and a rate
// change at t = 5 s holds from the very next second.
func TestRateAccuracyOnFakeClock(t *testing.T) {
	clk := newFakeClock()
	start := clk.Now()
	var (
		sim     *Simulator
		perSec  [12]int
		changed bool
		end     = make(chan struct{})
		once    sync.Once
	)
	sink := SinkFunc(func(_ context.Context, _ Event, done func(error)) {
		sec := int(clk.Now().Sub(start) / time.Second)
		switch {
		case sec >= len(perSec):
			once.Do(func() { close(end) })
		default:
			perSec[sec]++
		}
		if sec >= 5 && !changed {
			changed = true
			if err := sim.SetRate(5000); err != nil {
				t.Error(err)
			}
		}
		done(nil)
	})
	var seconds []Second
	sim = mustSimulator(t, &counterSource{}, sink, WithRate(1000), WithClock(clk),
		WithHooks(Hooks{OnSecond: func(s Second) { seconds = append(seconds, s) }}))
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	<-end
	stop(t, sim)
	for sec, n := range perSec {
		want := 1000.0
		if sec >= 5 {
			want = 5000
		}
		if !within(float64(n), want, want*0.02) {
			t.Errorf("second %d: %d events, want %v ± 2 %%", sec, n, want)
		}
	}
	st := sim.Stats()
	if st.Rate != 5000 || st.Produced != st.Sent || st.Errors != 0 || st.InFlight != 0 || st.Running {
		t.Errorf("stats %+v", st)
	}
	// The history and the hook saw the same seconds.
	if len(seconds) < 10 || seconds[2].Produced != uint64(perSec[2]) || seconds[7].Produced != uint64(perSec[7]) {
		t.Errorf("history %+v, want %v", seconds, perSec)
	}
	if got := st.History[len(st.History)-len(seconds):]; len(got) != len(seconds) || got[3] != seconds[3] {
		t.Errorf("Stats().History disagrees with OnSecond")
	}
}

// Bursts are sent on top of the rate; rate 0 pauses but bursts still go.
func TestBurstAndPause(t *testing.T) {
	clk := newFakeClock()
	var got atomic.Int64
	burstDone := make(chan struct{})
	sink := SinkFunc(func(_ context.Context, _ Event, done func(error)) {
		if got.Add(1) == 5000 {
			close(burstDone)
		}
		done(nil)
	})
	sim := mustSimulator(t, &counterSource{}, sink, WithRate(0), WithClock(clk))
	if _, err := sim.Burst(0); !errors.Is(err, ErrInvalid) {
		t.Errorf("Burst(0): %v", err)
	}
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	if err := sim.Start(); !errors.Is(err, ErrRunning) {
		t.Errorf("second Start: %v", err)
	}
	if !sim.Running() {
		t.Error("not running")
	}
	if _, err := sim.Burst(3000); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Burst(2000); err != nil {
		t.Fatal(err)
	}
	<-burstDone
	stop(t, sim)
	if n := got.Load(); n != 5000 {
		t.Errorf("sent %d, want exactly the 5000 burst events at rate 0", n)
	}
	if st := sim.Stats(); st.BurstPending != 0 || st.Sent != 5000 {
		t.Errorf("stats %+v", st)
	}
	// Stop twice is fine; a stopped simulator starts again.
	stop(t, sim)
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	stop(t, sim)
}

// Stop waits for events whose outcome comes later, from other goroutines,
// and counts failures; if its context ends first it cancels them.
func TestStopWaitsAndCountsErrors(t *testing.T) {
	var wg sync.WaitGroup
	var n atomic.Int64
	boom := errors.New("boom")
	sink := SinkFunc(func(_ context.Context, _ Event, done func(error)) {
		k := n.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(20 * time.Millisecond)
			if k%10 == 0 {
				done(boom)
			} else {
				done(nil)
			}
		}()
	})
	sim := mustSimulator(t, &counterSource{}, sink, WithRate(2000))
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	for n.Load() < 100 {
		time.Sleep(time.Millisecond)
	}
	stop(t, sim)
	st := sim.Stats()
	if st.InFlight != 0 || st.Produced+st.Errors != st.Sent || st.Errors != st.Sent/10 || st.LastError != "boom" {
		t.Errorf("after Stop: %+v", st)
	}
	wg.Wait()

	// A sink that never completes: Stop gives up when its context ends and
	// cancels the sink's context.
	cancelled := make(chan struct{})
	var once sync.Once
	stuck := SinkFunc(func(ctx context.Context, _ Event, done func(error)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-ctx.Done()
			once.Do(func() { close(cancelled) })
			done(ctx.Err())
		}()
	})
	sim = mustSimulator(t, &counterSource{}, stuck, WithRate(100))
	sim.Start()
	for sim.Stats().Sent == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := sim.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop: %v", err)
	}
	<-cancelled
	wg.Wait()
}

// With a curve the effective rate follows the hour in the zone.
func TestHourlyCurveRate(t *testing.T) {
	loc, _ := policy.LoadZone(policy.DefaultZone)
	clk := newFakeClock() // 00:00 UTC = 09:00 KST
	var rates []RateInfo
	sim := mustSimulator(t, &counterSource{}, SinkFunc(func(_ context.Context, _ Event, done func(error)) { done(nil) }),
		WithRate(1000), WithClock(clk), WithHourlyCurve(DefaultCurve(), loc), WithHooks(Hooks{OnRate: func(r RateInfo) { rates = append(rates, r) }}))
	c := DefaultCurve()
	if st := sim.Stats(); !within(st.EffectiveRate, 1000*c.Factor(9), 1e-9) {
		t.Errorf("effective %v at 09:00 KST", st.EffectiveRate)
	}
	clk.After(12 * time.Hour) // 21:00 KST
	sim.Start()
	for sim.Stats().Sent == 0 {
		time.Sleep(time.Millisecond)
	}
	stop(t, sim)
	if st := sim.Stats(); !within(st.EffectiveRate, 1000*c.Factor(21), 1e-9) {
		t.Errorf("effective %v at 21:00 KST", st.EffectiveRate)
	}
	if err := sim.SetRate(10); err != nil || len(rates) != 1 || rates[0] != (RateInfo{Old: 1000, New: 10}) || sim.Rate() != 10 {
		t.Errorf("SetRate: %v %+v", err, rates)
	}
}

func TestSimulatorOptions(t *testing.T) {
	sink := SinkFunc(func(_ context.Context, _ Event, done func(error)) { done(nil) })
	bad := []Option{
		WithRate(-1), WithRate(MaxRate + 1), WithBucket(0), WithClock(nil), WithHourlyCurve(Curve{}, time.UTC),
		WithHourlyCurve(DefaultCurve(), nil), WithHistory(0), WithLogger(nil),
	}
	for i, o := range bad {
		if _, err := New(&counterSource{}, sink, o); !errors.Is(err, ErrInvalid) {
			t.Errorf("option %d: %v", i, err)
		}
	}
	if _, err := New(nil, sink); !errors.Is(err, ErrInvalid) {
		t.Error("nil source")
	}
	s := mustSimulator(t, &counterSource{}, sink, nil, WithBucket(time.Second), WithHistory(3))
	if err := s.SetRate(-3); !errors.Is(err, ErrInvalid) {
		t.Errorf("SetRate(-3): %v", err)
	}
	if s.Rate() != 1000 || s.Running() {
		t.Error("defaults")
	}
}

// History keeps the last n seconds, with empty seconds where nothing ran.
func TestHistoryGaps(t *testing.T) {
	clk := newFakeClock()
	var sent atomic.Int64
	s := mustSimulator(t, &counterSource{}, SinkFunc(func(_ context.Context, _ Event, done func(error)) { sent.Add(1); done(nil) }),
		WithClock(clk), WithHistory(3))
	s.Stats()
	clk.After(10 * time.Second)
	st := s.Stats()
	if len(st.History) != 3 {
		t.Fatalf("history %+v", st.History)
	}
	for i, sec := range st.History {
		if want := clk.Now().Add(time.Duration(i-3) * time.Second); !sec.Start.Equal(want) || sec.Sent != 0 {
			t.Errorf("history[%d] = %+v, want start %s", i, sec, want)
		}
	}
	if (Stats{}).LastSecond() != (Second{}) || st.LastSecond() != st.History[2] {
		t.Error("LastSecond")
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
