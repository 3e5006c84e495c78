package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A wait goes on as long as the work advances — far past its stall window —
// retries failed and slow looks, and when the work stops it says what it
// awaited, what it saw last and for how long nothing moved.
func TestWaitUntil(t *testing.T) {
	// Long enough that a loaded machine's scheduling hiccups between two
	// looks stay well under it.
	const stall = 500 * time.Millisecond
	start := time.Now()
	tests := []struct {
		name string
		// look is called with the look's number, from 0.
		look    func(ctx context.Context, n int) (Progress, error)
		wantErr []string // substrings of the error; nil: no error
	}{
		{
			name: "advancing past the stall window",
			look: func(_ context.Context, n int) (Progress, error) {
				time.Sleep(10 * time.Millisecond)
				return Progress{Done: time.Since(start) > 3*stall, At: int64(n)}, nil
			},
		},
		{
			name: "failed looks are retried",
			look: func(_ context.Context, n int) (Progress, error) {
				if n < 5 {
					return Progress{}, fmt.Errorf("ListOffsets: %w", context.DeadlineExceeded)
				}
				return Progress{Done: true}, nil
			},
		},
		{
			name: "a look that hangs runs out of its own time and is retried",
			look: func(ctx context.Context, n int) (Progress, error) {
				if n == 0 {
					<-ctx.Done()
					return Progress{}, ctx.Err()
				}
				return Progress{Done: true}, nil
			},
		},
		{
			name: "stalled",
			look: func(_ context.Context, n int) (Progress, error) {
				return Progress{At: int64(min(n, 3)), Seen: fmt.Sprintf("group g: p0 committed %d of 9", min(n, 3))}, nil
			},
			wantErr: []string{"waiting for the thing: no progress for ", "last seen (at 3): group g: p0 committed 3 of 9"},
		},
		{
			name: "stalled on errors after progress",
			look: func(_ context.Context, n int) (Progress, error) {
				if n > 2 {
					return Progress{}, errors.New("broker gone")
				}
				return Progress{At: int64(n), Seen: fmt.Sprint("rows ", n)}, nil
			},
			wantErr: []string{"last seen (at 2): rows 2", "failed looks since the last progress): broker gone"},
		},
		{
			name: "nothing ever answered",
			look: func(context.Context, int) (Progress, error) {
				return Progress{}, errors.New("connection refused")
			},
			wantErr: []string{"no look succeeded", "connection refused"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := 0
			err := Wait{What: "the thing", Stall: stall, Call: 100 * time.Millisecond, Poll: time.Millisecond}.Until(
				context.Background(), func(ctx context.Context) (Progress, error) {
					defer func() { n++ }()
					return tt.look(ctx, n)
				})
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Until: %v", err)
				}
				return
			}
			var se *StallError
			if !errors.As(err, &se) {
				t.Fatalf("Until: %v, want a *StallError", err)
			}
			if se.Stalled < stall {
				t.Errorf("gave up after %v without progress, want ≥ %v", se.Stalled, stall)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}

// The caller's context still ends a wait, and the error says so.
func TestWaitUntilCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Wait{What: "x"}.Until(ctx, func(context.Context) (Progress, error) { return Progress{Seen: "nothing"}, nil })
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "last seen (at 0): nothing") {
		t.Fatalf("Until on a canceled context: %v", err)
	}
}
