package writebehind

import (
	"context"
	"errors"
)

type slotState uint8

const (
	pending  slotState = iota // not written yet
	written                   // durably written
	rejected                  // can never be written; not yet handed to the reject handler
	handled                   // rejected and handed over (dead-lettered)
)

// slot is one item of a batch being written and what became of it.
type slot[T any] struct {
	item   T
	state  slotState
	reason error // why it was rejected
}

// writeOnce makes one attempt to write the pending slots of ss, in order.
// With isolate set, items the writer reports as never writable become
// rejected and the rest is written at once: *ItemErrors name them, a
// Permanent error is bisected down to single items. It returns the first
// transient error; the slots it did not write stay pending, in order.
func writeOnce[T any](ctx context.Context, w Writer[T], ss []*slot[T], isolate bool) error {
	var todo []*slot[T]
	for _, s := range ss {
		if s.state == pending {
			todo = append(todo, s)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	items := make([]T, len(todo))
	for i, s := range todo {
		items[i] = s.item
	}
	err := w.Write(ctx, items)
	if err == nil {
		for _, s := range todo {
			s.state = written
		}
		return nil
	}
	if !isolate || ctx.Err() != nil {
		return err
	}
	if bad := itemErrors(err, len(todo)); len(bad) > 0 {
		for i, e := range bad {
			todo[i].state, todo[i].reason = rejected, e
		}
		return writeOnce(ctx, w, todo, isolate)
	}
	if !errors.Is(err, ErrPermanent) {
		return err
	}
	if len(todo) == 1 {
		todo[0].state, todo[0].reason = rejected, err
		return nil
	}
	mid := len(todo) / 2
	if err := writeOnce(ctx, w, todo[:mid], isolate); err != nil {
		return err
	}
	return writeOnce(ctx, w, todo[mid:], isolate)
}

// count returns how many slots are in state st.
func count[T any](ss []*slot[T], st slotState) int {
	n := 0
	for _, s := range ss {
		if s.state == st {
			n++
		}
	}
	return n
}
