package backoff

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Exact waits without jitter: a broken doubling (×3, +Min, no growth) or a
// broken cap (none, or capping too early) changes at least one row.
func TestDelayDoublesToTheCap(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Policy
		want []time.Duration // Delay(1), Delay(2), …
	}{
		{"100ms to 5s", Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second},
			[]time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000}},
		{"cap between doublings", Policy{Min: 3 * time.Millisecond, Max: 10 * time.Millisecond},
			[]time.Duration{3, 6, 10, 10}},
		{"min is max", Policy{Min: 7 * time.Millisecond, Max: 7 * time.Millisecond},
			[]time.Duration{7, 7, 7}},
		{"1ms to 30s", Policy{Min: time.Millisecond, Max: 30 * time.Second},
			[]time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 30000, 30000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got, want []time.Duration
			for i, w := range tc.want {
				got = append(got, tc.p.Delay(i+1))
				want = append(want, w*time.Millisecond)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Delay(1…) (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDelayEdges(t *testing.T) {
	p := Policy{Min: time.Second, Max: time.Minute}
	for _, attempt := range []int{0, -5} {
		if got := p.Delay(attempt); got != time.Second {
			t.Errorf("Delay(%d) = %v, want Min", attempt, got)
		}
	}
	// No overflow however many attempts, however large the cap.
	huge := Policy{Min: time.Nanosecond, Max: math.MaxInt64}
	for _, attempt := range []int{62, 63, 64, 100, 1 << 20} {
		if got := huge.Delay(attempt); got <= 0 || got > huge.Max {
			t.Errorf("Delay(%d) = %v, out of (0, Max]", attempt, got)
		}
	}
	if got := huge.Delay(1 << 20); got != huge.Max {
		t.Errorf("Delay(2^20) = %v, want the cap", got)
	}
	big := Policy{Min: math.MaxInt64/2 + 1, Max: math.MaxInt64}
	if got := big.Delay(3); got != big.Max {
		t.Errorf("Delay(3) of a huge min = %v, want the cap", got)
	}
}

// Jittered waits stay within [(1−j)·d, d] and do vary.
func TestDelayJitter(t *testing.T) {
	p := Policy{Min: 100 * time.Millisecond, Max: time.Second, Jitter: 0.2}
	for attempt, d := range map[int]time.Duration{1: 100 * time.Millisecond, 3: 400 * time.Millisecond, 10: time.Second} {
		seen := map[time.Duration]bool{}
		for range 200 {
			got := p.Delay(attempt)
			if got > d || got < d*8/10 {
				t.Fatalf("Delay(%d) = %v, want %v − up to 20 %%", attempt, got, d)
			}
			seen[got] = true
		}
		if len(seen) < 10 {
			t.Errorf("Delay(%d): only %d distinct waits in 200: no jitter", attempt, len(seen))
		}
	}
	full := Policy{Min: time.Millisecond, Max: time.Millisecond, Jitter: 1}
	for range 100 {
		if got := full.Delay(1); got < 0 || got > time.Millisecond {
			t.Fatalf("full jitter: %v", got)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		p  Policy
		ok bool
	}{
		{Policy{Min: 1, Max: 1}, true},
		{Policy{Min: 1, Max: 2, Jitter: 1}, true},
		{Policy{}, false},
		{Policy{Min: -1, Max: 1}, false},
		{Policy{Min: 2, Max: 1}, false},
		{Policy{Min: 1, Max: 1, Jitter: -0.1}, false},
		{Policy{Min: 1, Max: 1, Jitter: 1.5}, false},
		{Policy{Min: 1, Max: 1, Jitter: math.NaN()}, false},
	} {
		if err := tc.p.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate() = %v", tc.p, err)
		}
	}
}

type codeError struct{ code int }

func (e codeError) Error() string { return fmt.Sprint("code ", e.code) }

func TestPermanent(t *testing.T) {
	if Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
	inner := fmt.Errorf("open: %w", fs.ErrNotExist)
	p := fmt.Errorf("context: %w", Permanent(inner))
	if !IsPermanent(p) || !errors.Is(p, fs.ErrNotExist) || p.Error() != "context: open: file does not exist" {
		t.Errorf("wrapped permanent %q: IsPermanent %v, Is %v", p, IsPermanent(p), errors.Is(p, fs.ErrNotExist))
	}
	var ce codeError
	if !errors.As(Permanent(codeError{7}), &ce) || ce.code != 7 {
		t.Errorf("errors.As through Permanent: %v", ce)
	}
	if IsPermanent(inner) || IsPermanent(nil) {
		t.Error("a plain error is permanent")
	}
}

type wait struct {
	Attempt int
	Wait    time.Duration
	Err     string
}

// Retry calls until success, telling onWait each failed attempt and the
// wait before the next, and really waits that long.
func TestRetryUntilSuccess(t *testing.T) {
	p := Policy{Min: 2 * time.Millisecond, Max: 5 * time.Millisecond}
	calls := 0
	var got []wait
	start := time.Now()
	err := Retry(context.Background(), p, func() error {
		calls++
		if calls < 5 {
			return fmt.Errorf("down %d", calls)
		}
		return nil
	}, func(attempt int, d time.Duration, err error) { got = append(got, wait{attempt, d, err.Error()}) })
	elapsed := time.Since(start)
	if err != nil || calls != 5 {
		t.Fatalf("Retry = %v after %d calls", err, calls)
	}
	want := []wait{{1, 2 * time.Millisecond, "down 1"}, {2, 4 * time.Millisecond, "down 2"},
		{3, 5 * time.Millisecond, "down 3"}, {4, 5 * time.Millisecond, "down 4"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("waits (-want +got):\n%s", diff)
	}
	if elapsed < 16*time.Millisecond {
		t.Errorf("Retry took %v, less than the 16 ms of waits", elapsed)
	}
}

func TestRetryStops(t *testing.T) {
	p := Policy{Min: time.Millisecond, Max: time.Millisecond}
	t.Run("permanent", func(t *testing.T) {
		calls := 0
		err := Retry(context.Background(), p, func() error {
			calls++
			if calls == 3 {
				return Permanent(codeError{3})
			}
			return errors.New("transient")
		}, nil)
		var ce codeError
		if calls != 3 || !IsPermanent(err) || !errors.As(err, &ce) || ce.code != 3 {
			t.Errorf("after %d calls: %v", calls, err)
		}
	})
	t.Run("success first", func(t *testing.T) {
		waited := false
		if err := Retry(context.Background(), p, func() error { return nil }, func(int, time.Duration, error) { waited = true }); err != nil || waited {
			t.Errorf("Retry = %v, waited %v", err, waited)
		}
	})
	t.Run("context ends during the wait", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		last := errors.New("still down")
		err := Retry(ctx, Policy{Min: time.Hour, Max: time.Hour}, func() error { return last },
			func(int, time.Duration, error) { cancel() })
		if !errors.Is(err, context.Canceled) || !errors.Is(err, last) {
			t.Errorf("Retry = %v, want Canceled and the last error", err)
		}
	})
	t.Run("context ended during the attempt", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		calls := 0
		err := Retry(ctx, p, func() error { calls++; cancel(); return errors.New("interrupted") }, nil)
		if calls != 1 || !errors.Is(err, context.Canceled) {
			t.Errorf("after %d calls: %v", calls, err)
		}
	})
}

func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Microsecond); err != nil {
		t.Error(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Error(err)
	}
}
