package e2e

import (
	"context"
	"fmt"
	"time"
)

// Defaults of a Wait. A wait never guesses how long the work it waits for
// takes on the machine at hand (shared, loaded, under -race): it waits as
// long as the work advances and gives up only when it stopped advancing.
const (
	// DefaultStall is how long a wait goes on without seeing progress.
	DefaultStall = 90 * time.Second
	// DefaultCall bounds one look (a Kafka admin request, an SQL query); a
	// look that fails or runs out of time is retried.
	DefaultCall = 15 * time.Second
	// DefaultPoll is the pause between looks.
	DefaultPoll = 20 * time.Millisecond
)

// Progress is one look at what a wait waits for.
type Progress struct {
	// Done ends the wait.
	Done bool
	// At grows while the work advances: rows written, offsets committed,
	// records read. Any increase over the largest value seen so far is
	// progress; a wait whose work has no such measure leaves it 0 and then
	// waits the stall window in all.
	At int64
	// Seen says what the look saw, for the failure message.
	Seen string
}

// Wait waits on progress: it looks again and again until a look is done,
// and fails only after Stall passed without progress. Zero fields take the
// defaults.
type Wait struct {
	What  string        // what is awaited, for the failure message
	Stall time.Duration // DefaultStall
	Call  time.Duration // DefaultCall
	Poll  time.Duration // DefaultPoll
}

// StallError is a wait that gave up: nothing advanced for Stalled (or the
// caller's context ended).
type StallError struct {
	What string
	// Seen is what the last successful look saw ("" if none succeeded) and
	// At its measure.
	Seen string
	At   int64
	// Looks counts the looks, Failed those that failed since the last progress.
	Looks, Failed int
	// Err is the last failure of a look since the last progress, or the
	// caller's context's error.
	Err error
	// Stalled is the time since the last progress (since the start if there
	// was none), Waited the whole wait.
	Stalled, Waited time.Duration
}

func (e *StallError) Error() string {
	msg := fmt.Sprintf("waiting for %s: no progress for %v (waited %v, %d looks)", e.What,
		e.Stalled.Round(time.Millisecond), e.Waited.Round(time.Millisecond), e.Looks)
	if e.Seen != "" {
		msg += fmt.Sprintf("; last seen (at %d): %s", e.At, e.Seen)
	} else {
		msg += "; no look succeeded"
	}
	if e.Err != nil {
		msg += fmt.Sprintf("; last error (%d failed looks since the last progress): %v", e.Failed, e.Err)
	}
	return msg
}

func (e *StallError) Unwrap() error { return e.Err }

// Until looks with look until it reports done. Each look gets its own
// context bounded by w.Call; a look's error is remembered and the look
// retried. It returns a *StallError when w.Stall passed without progress
// or ctx ended.
func (w Wait) Until(ctx context.Context, look func(context.Context) (Progress, error)) error {
	stall, call, poll := w.Stall, w.Call, w.Poll
	if stall <= 0 {
		stall = DefaultStall
	}
	if call <= 0 {
		call = DefaultCall
	}
	if poll <= 0 {
		poll = DefaultPoll
	}
	start := time.Now()
	last := start // the last progress
	e := &StallError{What: w.What}
	seen := false
	for {
		cctx, cancel := context.WithTimeout(ctx, call)
		p, err := look(cctx)
		cancel()
		e.Looks++
		switch {
		case err != nil:
			e.Err = err
			e.Failed++
		case p.Done:
			return nil
		default:
			if !seen || p.At > e.At {
				if seen {
					last = time.Now()
				}
				seen, e.At, e.Err, e.Failed = true, p.At, nil, 0
			}
			e.Seen = p.Seen
		}
		now := time.Now()
		if now.Sub(last) >= stall {
			e.Stalled, e.Waited = now.Sub(last), now.Sub(start)
			return e
		}
		select {
		case <-ctx.Done():
			e.Stalled, e.Waited, e.Err = time.Since(last), time.Since(start), ctx.Err()
			return e
		case <-time.After(poll):
		}
	}
}
