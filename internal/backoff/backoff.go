// Package backoff is the one retry policy of DPCS: exponential waits from a
// minimum, doubling per failed attempt up to a cap, optionally jittered, and
// Retry, which calls a function until it succeeds, fails permanently or its
// context ends.
//
// Every retry loop of the module waits through a Policy: the Kafka consumer
// lifecycle (envelope/consumer), the write-behind sink and the notifier's
// consumer. A loop that must do more between attempts than wait (poll Kafka
// so that rebalances can run, for instance) asks Policy.Delay for the wait
// and waits its own way; the others call Retry.
package backoff

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Policy is an exponential backoff: the wait after the n-th consecutive
// failed attempt is Min·2^(n−1), at most Max. With Jitter j > 0 a random
// part of up to j of that wait is taken off, so that many clients failing
// together do not retry in step: waits fall in [(1−j)·d, d]. The zero Policy
// is invalid (see Validate).
type Policy struct {
	Min    time.Duration // the first wait, > 0
	Max    time.Duration // the largest wait, ≥ Min
	Jitter float64       // the random fraction of each wait, 0 to 1
}

// Validate reports whether p can be used: 0 < Min ≤ Max and 0 ≤ Jitter ≤ 1.
func (p Policy) Validate() error {
	if p.Min <= 0 || p.Max < p.Min {
		return fmt.Errorf("backoff: need 0 < min ≤ max, got %v and %v", p.Min, p.Max)
	}
	if !(p.Jitter >= 0 && p.Jitter <= 1) { // also refuses NaN
		return fmt.Errorf("backoff: jitter must be 0 to 1, got %v", p.Jitter)
	}
	return nil
}

// Delay returns the wait after the attempt-th consecutive failure (attempt
// ≥ 1; lower counts as 1): Min doubled attempt−1 times, capped at Max, less
// the jitter. It never overflows, whatever the attempt.
func (p Policy) Delay(attempt int) time.Duration {
	d := p.Min
	for i := 1; i < attempt && d < p.Max; i++ {
		if d > math.MaxInt64/2 {
			d = p.Max
			break
		}
		d *= 2
	}
	d = min(d, p.Max)
	if p.Jitter > 0 {
		if j := int64(float64(d) * p.Jitter); j > 0 {
			d -= time.Duration(rand.Int64N(j + 1))
		}
	}
	return d
}

// PermanentError marks an error that retrying cannot fix; Retry returns it
// at once. Make one with Permanent; errors.Is and errors.As see through it
// to the error it wraps.
type PermanentError struct {
	Err error
}

func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as permanent (nil stays nil).
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err is, or wraps, an error marked Permanent.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// Retry calls fn until it returns nil, an error marked Permanent (returned as
// it is), or ctx ends; then it returns an error wrapping both context.Cause(ctx)
// and fn's last error. Between attempts it waits p.Delay(attempt); onWait,
// when not nil, is called before each wait with the failed attempt (from 1),
// the wait and fn's error, so a caller can pause work, log or call hooks.
// fn is always called at least once.
func Retry(ctx context.Context, p Policy, fn func() error, onWait func(attempt int, wait time.Duration, err error)) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || IsPermanent(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w; last attempt: %w", context.Cause(ctx), err)
		}
		d := p.Delay(attempt)
		if onWait != nil {
			onWait(attempt, d, err)
		}
		if serr := Sleep(ctx, d); serr != nil {
			return fmt.Errorf("%w; last attempt: %w", context.Cause(ctx), err)
		}
	}
}

// Sleep waits d, or until ctx ends (then it returns ctx's error).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
