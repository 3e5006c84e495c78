package writebehind

import (
	"context"
	"errors"
	"fmt"
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrInvalid is wrapped by every error about bad arguments or options.
	ErrInvalid = errors.New("writebehind: invalid argument")

	// ErrClosed is returned by Add and Flush after Close.
	ErrClosed = errors.New("writebehind: closed")

	// ErrNotWritten is wrapped by Close (and Runner.Run) when items were
	// still unwritten as its context ended; they are lost from the sink's
	// memory (a Runner's are still in Kafka: their offsets were not
	// committed).
	ErrNotWritten = errors.New("writebehind: items not written")

	// ErrPermanent marks a write error that retrying the same items cannot
	// fix: some item can never be written. The sink then isolates the
	// offending items (see Writer) instead of retrying the batch forever.
	// Wrap with Permanent.
	ErrPermanent = errors.New("writebehind: permanent write error")
)

// Writer writes batches. It is implemented by the caller (SQLWriter is one).
//
// The contract:
//   - Write returns nil only when every item of batch is durably written.
//   - Writing the same items again must be harmless (a UNIQUE key with
//     insert-ignore semantics): after an error, and after a crash before
//     offsets were committed, the same items come again.
//   - An error is transient by default: the sink retries the same batch, in
//     the same order, with exponential backoff, for ever.
//   - An error that retrying cannot fix is reported as an *ItemError per bad
//     item (joined with errors.Join) or, when the writer cannot tell which
//     item is bad, wrapped with Permanent. The sink then rejects exactly those
//     items (found by bisecting the batch for Permanent) and writes the
//     rest, if it was given a way to reject (WithReject; a Runner sends them
//     to the dead-letter topic). Without one, every error is retried.
//
// Write is called from one goroutine at a time per Sink or Runner.
type Writer[T any] interface {
	Write(ctx context.Context, batch []T) error
}

// WriterFunc adapts a function to Writer.
type WriterFunc[T any] func(ctx context.Context, batch []T) error

// Write calls f.
func (f WriterFunc[T]) Write(ctx context.Context, batch []T) error { return f(ctx, batch) }

// ItemError reports that the item at Index of the batch passed to Write can
// never be written. It is a permanent error (errors.Is(err, ErrPermanent)).
type ItemError struct {
	Index int
	Err   error
}

// Error returns "item N: cause".
func (e *ItemError) Error() string { return fmt.Sprintf("item %d: %v", e.Index, e.Err) }

// Unwrap returns the cause.
func (e *ItemError) Unwrap() error { return e.Err }

// Is makes every ItemError match ErrPermanent.
func (e *ItemError) Is(target error) bool { return target == ErrPermanent }

// Permanent wraps err so that errors.Is(err, ErrPermanent) holds. nil stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string        { return e.err.Error() }
func (e *permanentError) Unwrap() error        { return e.err }
func (e *permanentError) Is(target error) bool { return target == ErrPermanent }

// itemErrors returns the *ItemErrors in err (a single one or joined) whose
// index is valid for a batch of n items.
func itemErrors(err error, n int) map[int]error {
	var out map[int]error
	var walk func(error)
	walk = func(err error) {
		if ie, ok := err.(*ItemError); ok {
			if ie.Index >= 0 && ie.Index < n {
				if out == nil {
					out = map[int]error{}
				}
				out[ie.Index] = ie
			}
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return out
}
