package main

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// call makes one call of a step: it asks the server about n decisions and
// returns an error when the server did not answer all of them.
type call func(ctx context.Context, rng *rand.Rand) error

// window is what one step measured.
type window struct {
	Calls, Errors int64
	Elapsed       time.Duration
	// Latencies of the calls that ended in the window, sorted.
	lat []time.Duration
	// FirstErr is the first error seen, for the report.
	FirstErr error
}

// percentile returns the q-quantile (0..1) of the sorted latencies.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// recorder collects the latencies of the calls that end while it is open.
type recorder struct {
	open  atomic.Bool
	mu    sync.Mutex
	lat   []time.Duration
	calls atomic.Int64
	errs  atomic.Int64
	first atomic.Pointer[error]
}

func (r *recorder) record(d time.Duration, err error) {
	if !r.open.Load() {
		return
	}
	r.calls.Add(1)
	if err != nil {
		r.errs.Add(1)
		r.first.CompareAndSwap(nil, &err)
		return
	}
	r.mu.Lock()
	r.lat = append(r.lat, d)
	r.mu.Unlock()
}

// measure runs warmup, then opens the recorder for d, calling mark at the
// window's start and end (the CPU readings), and returns the window.
func (r *recorder) measure(ctx context.Context, warmup, d time.Duration, mark func()) (window, error) {
	if err := sleep(ctx, warmup); err != nil {
		return window{}, err
	}
	mark()
	start := time.Now()
	r.open.Store(true)
	err := sleep(ctx, d)
	r.open.Store(false)
	elapsed := time.Since(start)
	mark()
	r.mu.Lock()
	lat := r.lat
	r.mu.Unlock()
	slices.Sort(lat)
	w := window{Calls: r.calls.Load(), Errors: r.errs.Load(), Elapsed: elapsed, lat: lat}
	if p := r.first.Load(); p != nil {
		w.FirstErr = *p
	}
	return w, err
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// closedLoop runs c callers, each calling again as soon as its call ends,
// for warmup + d; the window is the last d.
func closedLoop(ctx context.Context, c int, warmup, d time.Duration, f call, mark func()) (window, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var r recorder
	var wg sync.WaitGroup
	for i := range c {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			for ctx.Err() == nil {
				t := time.Now()
				err := f(ctx, rng)
				if ctx.Err() != nil {
					return
				}
				r.record(time.Since(t), err)
			}
		})
	}
	w, err := r.measure(ctx, warmup, d, mark)
	cancel()
	wg.Wait()
	return w, err
}

// openLoop starts calls at rate per second whatever the server's answers,
// for warmup + d: each call's latency counts from the time it was
// scheduled, so a server that falls behind is charged for the calls that
// waited (no coordinated omission). At most inFlight calls run at once; a
// call that finds none free waits, its wait counted.
func openLoop(ctx context.Context, rate float64, inFlight int, warmup, d time.Duration, f call, mark func()) (window, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var r recorder
	due := make(chan time.Time, inFlight)
	var wg sync.WaitGroup
	for i := range inFlight {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			for at := range due {
				if wait := time.Until(at); wait > 0 {
					time.Sleep(wait)
				}
				err := f(ctx, rng)
				if ctx.Err() != nil {
					continue
				}
				r.record(time.Since(at), err)
			}
		})
	}
	wg.Go(func() {
		defer close(due)
		interval := time.Duration(float64(time.Second) / rate)
		start := time.Now()
		for i := int64(0); ; i++ {
			at := start.Add(time.Duration(i) * interval)
			select {
			case due <- at:
			case <-ctx.Done():
				return
			}
		}
	})
	w, err := r.measure(ctx, warmup, d, mark)
	cancel()
	wg.Wait()
	return w, err
}
