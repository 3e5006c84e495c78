package writebehind

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dabom/dpcs/internal/backoff"
)

// Sink batches items in memory and writes them with a Writer: a batch is
// written when it holds the batch size (WithBatchSize, 100) or when its
// first item has waited the interval (WithInterval, 5 s), on Flush and on
// Close. A failed write is retried, same batch, same order, with exponential
// backoff (WithBackoff, 100 ms … 30 s) until it succeeds: a Sink never drops
// or reorders items on its own. While a batch is being retried, Add blocks
// once the buffer (WithBuffer) is full, so memory stays bounded.
//
// A Sink is safe for concurrent use. Items from one goroutine are written in
// the order they were added. A Sink holds items only in memory: to survive a
// crash, feed it from a log that is committed after the write (Runner).
type Sink[T any] struct {
	w   Writer[T]
	cfg config

	in       chan T
	flushReq chan chan error
	closing  chan struct{}
	done     chan struct{}

	mu       sync.Mutex // guards closed and adders.Add
	closed   bool
	adders   sync.WaitGroup
	cancel   context.CancelFunc // aborts the writer goroutine's retries
	notWrote int                // items lost when aborted; read after done
}

// New returns a Sink writing with w and starts its writer goroutine; Close
// stops it.
func New[T any](w Writer[T], opts ...Option) (*Sink[T], error) {
	if w == nil {
		return nil, fmt.Errorf("%w: nil writer", ErrInvalid)
	}
	cfg := defaults()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sink[T]{
		w:        w,
		cfg:      cfg,
		in:       make(chan T, cfg.buffer),
		flushReq: make(chan chan error),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
		cancel:   cancel,
	}
	go s.run(ctx)
	return s, nil
}

// Add queues items for writing. It blocks while the buffer is full (the
// writer is behind or failing) until there is room, ctx ends (ctx.Err() is
// returned; items before the failing one were queued) or the sink is closed
// (ErrClosed).
func (s *Sink[T]) Add(ctx context.Context, items ...T) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.adders.Add(1)
	s.mu.Unlock()
	defer s.adders.Done()
	for i, it := range items {
		select {
		case s.in <- it:
		case <-ctx.Done():
			return fmt.Errorf("writebehind: add: %d of %d items queued: %w", i, len(items), ctx.Err())
		case <-s.closing:
			return fmt.Errorf("%w (%d of %d items queued)", ErrClosed, i, len(items))
		}
	}
	return nil
}

// Flush writes every item added before the call and returns when they are
// written, or when ctx ends (the write goes on in the background).
func (s *Sink[T]) Flush(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case s.flushReq <- reply:
	case <-s.closing:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops accepting items, writes everything queued (retrying as long as
// it takes) and stops the writer goroutine. If ctx ends first, retries stop,
// the unwritten items are dropped and Close returns an error wrapping
// ErrNotWritten and ctx.Err(). Close is idempotent.
func (s *Sink[T]) Close(ctx context.Context) error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.closing)
	}
	s.mu.Unlock()
	select {
	case <-s.done:
	case <-ctx.Done():
		s.cancel()
		<-s.done
	}
	s.cancel()
	if s.notWrote > 0 {
		return fmt.Errorf("%w: %d items: %w", ErrNotWritten, s.notWrote, context.Cause(ctx))
	}
	return nil
}

func (s *Sink[T]) run(ctx context.Context) {
	defer close(s.done)
	batch := make([]T, 0, s.cfg.batchSize)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var deadline <-chan time.Time
	write := func(reason string) error {
		if len(batch) == 0 {
			return nil
		}
		deadline = nil
		timer.Stop()
		err := s.write(ctx, batch, reason)
		if err != nil {
			return err
		}
		batch = batch[:0]
		return nil
	}
	add := func(it T, reason string) error {
		batch = append(batch, it)
		if len(batch) == 1 {
			timer.Reset(s.cfg.interval)
			deadline = timer.C
		}
		if len(batch) >= s.cfg.batchSize {
			return write(reason)
		}
		return nil
	}
	// drain queues everything in s.in now, writing full batches.
	drain := func(reason string) error {
		for {
			select {
			case it := <-s.in:
				if err := add(it, reason); err != nil {
					return err
				}
			default:
				return nil
			}
		}
	}
	abort := func() { s.notWrote = len(batch) + len(s.in) }
	for {
		select {
		case it := <-s.in:
			if add(it, "size") != nil {
				abort()
				return
			}
		case <-deadline:
			deadline = nil
			if write("interval") != nil {
				abort()
				return
			}
		case reply := <-s.flushReq:
			err := drain("flush")
			if err == nil {
				err = write("flush")
			}
			reply <- err
			if err != nil {
				abort()
				return
			}
		case <-s.closing:
			s.adders.Wait() // no Add is left that could still queue an item
			if drain("close") != nil || write("close") != nil {
				abort()
			}
			return
		}
	}
}

// write writes batch until it is written (or its rejected items handled),
// retrying with backoff; it fails only when ctx ends.
func (s *Sink[T]) write(ctx context.Context, batch []T, reason string) error {
	ss := make([]*slot[T], len(batch))
	for i, it := range batch {
		ss[i] = &slot[T]{item: it}
	}
	start := time.Now()
	attempt := 0
	err := backoff.Retry(ctx, s.cfg.backoff, func() error {
		attempt++
		if attempt > 1 && s.cfg.hooks.OnRetry != nil {
			s.cfg.hooks.OnRetry(RetryInfo{Items: count(ss, pending) + count(ss, rejected), Attempt: attempt})
		}
		err := writeOnce(ctx, s.w, ss, s.cfg.reject != nil)
		if err == nil {
			err = s.rejectAll(ctx, ss)
		}
		return err
	}, func(attempt int, d time.Duration, err error) {
		left := count(ss, pending) + count(ss, rejected)
		s.cfg.log.Warn("writebehind: write failed; retrying", "items", left, "attempt", attempt, "backoff", d, "err", err)
		if s.cfg.hooks.OnError != nil {
			s.cfg.hooks.OnError(ErrorInfo{Items: left, Attempt: attempt, Err: err, Backoff: d})
		}
	})
	if err != nil {
		return err
	}
	if s.cfg.hooks.OnFlush != nil {
		s.cfg.hooks.OnFlush(FlushInfo{Items: count(ss, written), Rejected: count(ss, handled),
			Attempts: attempt, Duration: time.Since(start), Reason: reason})
	}
	return nil
}

func (s *Sink[T]) rejectAll(ctx context.Context, ss []*slot[T]) error {
	for _, sl := range ss {
		if sl.state != rejected {
			continue
		}
		if err := s.cfg.reject(ctx, sl.item, sl.reason); err != nil {
			return errors.Join(fmt.Errorf("writebehind: reject: %w", err), sl.reason)
		}
		sl.state = handled
		if s.cfg.hooks.OnReject != nil {
			s.cfg.hooks.OnReject(RejectInfo{Reason: sl.reason})
		}
	}
	return nil
}
