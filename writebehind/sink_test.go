package writebehind

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/dabom/dpcs/internal/testenv"
)

func newSink[T any](tb testing.TB, w Writer[T], opts ...Option) *Sink[T] {
	tb.Helper()
	s, err := New(w, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func TestSinkFlushesAtSize(t *testing.T) {
	w := &memWriter[int]{}
	s := newSink[int](t, w, WithBatchSize(10), WithInterval(time.Hour))
	if err := s.Add(context.Background(), seq(25)...); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "two full batches", 5*time.Second, func() bool { return len(w.sizes()) == 2 })
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{10, 10, 5}, w.sizes()); diff != "" {
		t.Errorf("batch sizes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(seq(25), w.all()); diff != "" {
		t.Errorf("items (-want +got):\n%s", diff)
	}
}

func TestSinkFlushesAtInterval(t *testing.T) {
	w := &memWriter[int]{}
	var reasons []string
	var mu sync.Mutex
	// Add sends the items one by one: an interval longer than a busy
	// machine's stall between two sends keeps them in one flush.
	s := newSink[int](t, w, WithBatchSize(100), WithInterval(300*time.Millisecond),
		WithHooks(Hooks{OnFlush: func(f FlushInfo) { mu.Lock(); reasons = append(reasons, f.Reason); mu.Unlock() }}))
	start := time.Now()
	_ = s.Add(context.Background(), 1, 2, 3)
	testenv.Eventually(t, "interval flush", 5*time.Second, func() bool { return len(w.all()) == 3 })
	if el := time.Since(start); el < 250*time.Millisecond {
		t.Errorf("flushed after %v, before the interval", el)
	}
	_ = s.Add(context.Background(), 4)
	testenv.Eventually(t, "second interval flush", 5*time.Second, func() bool { return len(w.all()) == 4 })
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{"interval", "interval"}, reasons); diff != "" {
		t.Errorf("reasons (-want +got):\n%s", diff)
	}
}

func TestSinkFlushAndClose(t *testing.T) {
	w := &memWriter[int]{}
	s := newSink[int](t, w, WithBatchSize(100), WithInterval(time.Hour))
	ctx := context.Background()
	_ = s.Add(ctx, 1, 2)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{1, 2}, w.all()); diff != "" {
		t.Errorf("after Flush (-want +got):\n%s", diff)
	}
	if err := s.Flush(ctx); err != nil { // nothing to write
		t.Fatal(err)
	}
	_ = s.Add(ctx, 3)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{1, 2, 3}, w.all()); diff != "" {
		t.Errorf("after Close (-want +got):\n%s", diff)
	}
	if err := s.Add(ctx, 4); !errors.Is(err, ErrClosed) {
		t.Errorf("Add after Close: %v", err)
	}
	if err := s.Flush(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Flush after Close: %v", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestSinkBackPressure(t *testing.T) {
	w := &memWriter[int]{block: make(chan struct{})}
	s := newSink[int](t, w, WithBatchSize(2), WithBuffer(3), WithInterval(time.Hour))
	ctx := context.Background()
	// 2 in the blocked write, 3 in the buffer: the 6th Add must wait.
	if err := s.Add(ctx, 1, 2, 3, 4, 5); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "buffer full", 5*time.Second, func() bool { return len(s.in) == 3 })
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := s.Add(short, 6); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Add into a full buffer: %v, want DeadlineExceeded", err)
	}
	added := make(chan error, 1)
	go func() { added <- s.Add(ctx, 6) }()
	select {
	case err := <-added:
		t.Fatalf("Add returned %v while the buffer was full", err)
	case <-time.After(30 * time.Millisecond):
	}
	close(w.block)
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(seq(7)[1:], w.all()); diff != "" {
		t.Errorf("items (-want +got):\n%s", diff)
	}
}

// A failing writer: every batch is retried whole, in order, nothing lost,
// hooks report errors and retries.
func TestSinkRetriesKeepOrder(t *testing.T) {
	var errs, retries atomic.Int64
	var flushes []FlushInfo
	w := &memWriter[int]{fail: func(call int, _ []int) error {
		if call%3 != 0 { // two failures before every success
			return fmt.Errorf("db down (call %d)", call)
		}
		return nil
	}}
	s := newSink[int](t, w, WithBatchSize(4), WithInterval(time.Hour), WithBackoff(time.Millisecond, 4*time.Millisecond),
		WithHooks(Hooks{
			OnError: func(e ErrorInfo) {
				errs.Add(1)
				if e.Backoff <= 0 || e.Backoff > 4*time.Millisecond || e.Err == nil {
					t.Errorf("ErrorInfo %+v", e)
				}
			},
			OnRetry: func(RetryInfo) { retries.Add(1) },
			OnFlush: func(f FlushInfo) { flushes = append(flushes, f) },
		}))
	if err := s.Add(context.Background(), seq(10)...); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(seq(10), w.all()); diff != "" {
		t.Errorf("items (-want +got):\n%s", diff)
	}
	if errs.Load() != 6 || retries.Load() != 6 {
		t.Errorf("%d errors, %d retries; want 6, 6", errs.Load(), retries.Load())
	}
	for _, f := range flushes {
		if f.Attempts != 3 {
			t.Errorf("flush %+v: want 3 attempts", f)
		}
	}
}

// Close with a deadline while the writer keeps failing: it gives up, says
// how many items were not written, and stops its goroutine.
func TestSinkCloseGivesUp(t *testing.T) {
	w := &memWriter[int]{fail: func(int, []int) error { return errors.New("down") }}
	s := newSink[int](t, w, WithBatchSize(2), WithBackoff(time.Millisecond, time.Millisecond))
	_ = s.Add(context.Background(), 1, 2, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := s.Close(ctx)
	if !errors.Is(err, ErrNotWritten) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v", err)
	}
	if s.notWrote != 3 {
		t.Errorf("not written: %d, want 3", s.notWrote)
	}
}

func TestSinkRejectIsolates(t *testing.T) {
	// Items ≥ 100 can never be written: one via ItemError, the rest found
	// by bisection of a Permanent error.
	w := &memWriter[int]{fail: func(_ int, b []int) error {
		for i, v := range b {
			if v == 100 {
				return &ItemError{Index: i, Err: errors.New("bad 100")}
			}
		}
		for _, v := range b {
			if v > 100 {
				return Permanent(errors.New("bad data somewhere"))
			}
		}
		return nil
	}}
	var rejected []int
	var mu sync.Mutex
	var hooked atomic.Int64
	s := newSink[int](t, w, WithBatchSize(8), WithInterval(time.Hour),
		WithReject(func(_ context.Context, v int, reason error) error {
			if !errors.Is(reason, ErrPermanent) {
				t.Errorf("reason %v is not permanent", reason)
			}
			mu.Lock()
			rejected = append(rejected, v)
			mu.Unlock()
			return nil
		}),
		WithHooks(Hooks{OnReject: func(RejectInfo) { hooked.Add(1) }}))
	in := []int{1, 2, 100, 3, 101, 4, 5, 102, 6, 7}
	_ = s.Add(context.Background(), in...)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{1, 2, 3, 4, 5, 6, 7}, w.all()); diff != "" {
		t.Errorf("written (-want +got):\n%s", diff)
	}
	slices.Sort(rejected)
	if diff := cmp.Diff([]int{100, 101, 102}, rejected); diff != "" {
		t.Errorf("rejected (-want +got):\n%s", diff)
	}
	if hooked.Load() != 3 {
		t.Errorf("OnReject fired %d times", hooked.Load())
	}
}

// Without WithReject a permanent error is retried like any other: nothing
// is dropped.
func TestSinkWithoutRejectRetries(t *testing.T) {
	w := &memWriter[int]{fail: func(call int, _ []int) error {
		if call < 3 {
			return Permanent(errors.New("bad"))
		}
		return nil
	}}
	s := newSink[int](t, w, WithBackoff(time.Millisecond, time.Millisecond))
	_ = s.Add(context.Background(), 1, 2, 3)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{1, 2, 3}, w.all()); diff != "" {
		t.Errorf("written (-want +got):\n%s", diff)
	}
}

func TestOptionsValidate(t *testing.T) {
	w := WriterFunc[int](func(context.Context, []int) error { return nil })
	for name, o := range map[string]Option{
		"batch":   WithBatchSize(0),
		"int":     WithInterval(0),
		"buffer":  WithBuffer(0),
		"backoff": WithBackoff(time.Second, time.Millisecond),
		"logger":  WithLogger(nil),
		"reject":  WithReject[int](nil),
	} {
		if _, err := New[int](w, o); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := New[int](nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil writer: %v", err)
	}
}

func TestBackoffGrowsToCap(t *testing.T) {
	c := defaults()
	for attempt, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 5: 1600 * time.Millisecond, 20: 30 * time.Second} {
		got := c.backoff.Delay(attempt)
		if got > want || got < want*8/10 {
			t.Errorf("backoff(%d) = %v, want %v − 20 %%", attempt, got, want)
		}
	}
}

// Property: whatever the failures, concurrent producers' items are each
// written exactly once, every producer's in its own order, in batches no
// larger than the batch size.
func TestPropertySinkNoLossNoReorder(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		size := rapid.IntRange(1, 8).Draw(rt, "batch")
		producers := rapid.IntRange(1, 3).Draw(rt, "producers")
		per := rapid.IntRange(0, 30).Draw(rt, "items")
		failEvery := rapid.IntRange(0, 3).Draw(rt, "failEvery")
		w := &memWriter[[2]int]{fail: func(call int, _ [][2]int) error {
			if failEvery > 0 && call%(failEvery+1) == 0 {
				return errors.New("flaky")
			}
			return nil
		}}
		s, err := New[[2]int](w, WithBatchSize(size), WithBuffer(rapid.IntRange(1, 5).Draw(rt, "buffer")),
			WithInterval(time.Millisecond), WithBackoff(time.Microsecond, time.Microsecond))
		if err != nil {
			rt.Fatal(err)
		}
		var wg sync.WaitGroup
		for p := range producers {
			wg.Go(func() {
				for i := range per {
					if err := s.Add(context.Background(), [2]int{p, i}); err != nil {
						rt.Error(err)
					}
				}
			})
		}
		wg.Wait()
		if err := s.Close(context.Background()); err != nil {
			rt.Fatal(err)
		}
		next := make([]int, producers)
		for _, it := range w.all() {
			if it[1] != next[it[0]] {
				rt.Fatalf("producer %d: got item %d, want %d", it[0], it[1], next[it[0]])
			}
			next[it[0]]++
		}
		for p, n := range next {
			if n != per {
				rt.Fatalf("producer %d: %d of %d items written", p, n, per)
			}
		}
		for _, n := range w.sizes() {
			if n > size {
				rt.Fatalf("batch of %d > %d", n, size)
			}
		}
	})
}
