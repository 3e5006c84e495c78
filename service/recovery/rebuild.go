package recovery

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/store"
)

// ErrIncomplete: Rebuild restored some families but not all; its Report
// lists the ones that failed and why.
var ErrIncomplete = errors.New("recovery: rebuild incomplete")

// Report is what Rebuild did.
type Report struct {
	// Rebuilt counts the families whose Redis state was restored.
	Rebuilt int
	// Moved counts the families a sweep left to their first touch: each
	// was claimed for a change (quota.Engine.Claim) every time the sweep
	// read it, so what it read was older than the change.
	Moved int
	// Failed lists the families that could not be restored, in the order
	// they were tried. Without a generation their Redis state is whatever it
	// was before; in a generation rebuild each is
	// replaced by an empty family of the new generation, so its members'
	// events are refused (BLOCKED_NOT_MEMBER, never charged) until it is
	// fixed and rebuilt — a state from an older generation would otherwise
	// be refused as stale on every event, and every rebuild would fail on it
	// again.
	Failed []FamilyError
}

// FamilySource is the door's source of families to restore on touch
// (judge.WithFamilySource): store.Store.ReadFamilies over the window w (the
// engine's accepted months and dedupe window).
type FamilySource struct {
	st *store.Store
	w  store.Window
}

// NewFamilySource returns the family source reading st for the engine w.
func NewFamilySource(st *store.Store, w store.Window) *FamilySource {
	return &FamilySource{st: st, w: w}
}

// Families reads ids from SQL, rebuildNamed at a time.
func (f *FamilySource) Families(ctx context.Context, ids []int64) (map[int64]quota.FamilyState, map[int64]error, error) {
	return f.read(ctx, ids, func(ctx context.Context, ids []int64) (map[int64]quota.FamilyState, map[int64]error, error) {
		return f.st.ReadFamilies(ctx, f.w, ids, false)
	})
}

// Configs reads ids' configurations from SQL (store.ReadFamilyConfigs),
// rebuildNamed at a time.
func (f *FamilySource) Configs(ctx context.Context, ids []int64) (map[int64]quota.FamilyState, map[int64]error, error) {
	return f.read(ctx, ids, func(ctx context.Context, ids []int64) (map[int64]quota.FamilyState, map[int64]error, error) {
		return f.st.ReadFamilyConfigs(ctx, f.w, ids)
	})
}

func (f *FamilySource) read(ctx context.Context, ids []int64,
	read func(context.Context, []int64) (map[int64]quota.FamilyState, map[int64]error, error)) (map[int64]quota.FamilyState, map[int64]error, error) {
	states, bad := map[int64]quota.FamilyState{}, map[int64]error{}
	for len(ids) > 0 {
		n := min(len(ids), rebuildNamed)
		s, b, err := read(ctx, ids[:n])
		if errors.Is(err, store.ErrUnreadable) && n > 1 {
			// One family's rows: read them one by one to find it.
			for _, id := range ids[:n] {
				s, b, err := read(ctx, []int64{id})
				switch {
				case errors.Is(err, store.ErrUnreadable):
					bad[id] = err
				case err != nil:
					return nil, nil, err
				default:
					maps.Copy(states, s)
					maps.Copy(bad, b)
				}
			}
		} else if errors.Is(err, store.ErrUnreadable) {
			bad[ids[0]] = err
		} else if err != nil {
			return nil, nil, err
		} else {
			maps.Copy(states, s)
			maps.Copy(bad, b)
		}
		ids = ids[n:]
	}
	return states, bad, nil
}

var _ judge.FamilySource = (*FamilySource)(nil)

// FamilyError is why one family could not be rebuilt: its SQL rows could
// not be read, or the engine refused them (quota.ErrInvalid, e.g. a plan plus
// top-ups over policy.MaxBytes).
type FamilyError struct {
	FamilyID int64
	Err      error
}

func (e FamilyError) Error() string { return fmt.Sprintf("family %d: %v", e.FamilyID, e.Err) }

// Unwrap returns the family's error.
func (e FamilyError) Unwrap() error { return e.Err }

// Rebuild recomputes the Redis state of the given families (every family
// when none is given) from SQL after Redis lost data, each family read by
// store.ReadFamilies and written atomically through the door
// (judge.State.Restore) with state generation gen ("" for none, as the
// rebuild of a single family by an operator). Run it after the
// write-behind drained usage-persist, so usage_record holds every judged
// event (Guard does).
//
// One family's failure (rows that cannot be read, a state the engine
// refuses) does not stop the others: every family is tried, and when some
// failed the error wraps ErrIncomplete and every FamilyError (so errors.Is
// sees their causes too), and the report lists them. A failure of SQL or
// Redis themselves is no family's: the rebuild stops with an error that
// does not wrap ErrIncomplete and blames no family, and what it restored
// stays to be restored again by the next attempt. In a
// generation rebuild each failed family is replaced by an empty family of
// the new generation (see Report). Failing to list the families and a
// cancelled ctx stop the rebuild at once with an error that does not wrap
// ErrIncomplete; the report then covers what was done before.
//
// Families are read a page at a time, one query per table for the whole
// page, and restored by rebuildWorkers concurrent Restore calls: one round
// trip per family and table made the rebuild of 100,000 families take ten
// minutes (doc/benchmarks.md, "Recovery time"). A page of every family is
// an id range (rebuildPage families), which every table reads through its
// family index; named families go rebuildNamed at a time in IN lists
// (MariaDB turns an IN list of 1,000 values into a join it answers by
// scanning the whole of usage_record, and plans even shorter lists that way
// when its statistics say so). When a page cannot be read as a whole, its
// families are read one by one, so the failure is charged to the family
// that causes it.
func Rebuild(ctx context.Context, st *store.Store, qs *judge.State, gen string, families ...int64) (Report, error) {
	var rep Report
	if st == nil || qs == nil {
		return rep, errors.New("recovery: rebuild needs a store and a quota state")
	}
	rb := rebuilder{st: st, qs: qs, gen: gen}
	if len(families) > 0 {
		// Named families (an operator's, for a family fixed after it
		// failed) are restored whatever the generation holds.
		rb.force = true
		for ids := families; len(ids) > 0; {
			n := min(len(ids), rebuildNamed)
			if err := rb.families(ctx, ids[:n], false, &rep); err != nil {
				return rep, err
			}
			ids = ids[n:]
		}
		return rep, rep.err()
	}
	// The next pages are listed and read while this one is restored.
	pages, stop := rb.pages(ctx)
	defer stop()
	for next := range pages {
		l := <-next
		if l.err != nil {
			return rep, fmt.Errorf("recovery: rebuild: list families: %w", l.err)
		}
		if len(l.p.ids) > 0 {
			if err := rb.restore(ctx, l.p, &rep); err != nil {
				return rep, err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("recovery: rebuild: %w", err)
	}
	return rep, rep.err()
}

// listed is a page of every family read from SQL, or why it could not be
// listed.
type listed struct {
	p   page
	err error
}

// pages lists every family a page at a time (store.FamilyIDs) and reads
// up to rebuildReadAhead pages at once beside the one its caller
// restores, each in a goroutine of its own. The pages come in id order,
// each as a channel that delivers it once read; the last is the one
// listed short (or with the listing's error). stop ends the listing and
// the reads and waits for them.
func (b rebuilder) pages(ctx context.Context) (<-chan chan listed, func()) {
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan chan listed, rebuildReadAhead)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(out)
		for after := int64(0); ; {
			ids, err := b.st.FamilyIDs(ctx, after, rebuildPage)
			next := make(chan listed, 1)
			select {
			case out <- next:
			case <-ctx.Done():
				return
			}
			if err != nil || len(ids) == 0 {
				next <- listed{p: page{ids: ids}, err: err}
				return
			}
			wg.Go(func() { next <- listed{p: b.read(ctx, ids, true)} })
			if len(ids) < rebuildPage {
				return
			}
			after = ids[len(ids)-1]
		}
	})
	return out, func() { cancel(); wg.Wait() }
}

// rebuilder reads families from SQL and restores them through the door.
type rebuilder struct {
	st  *store.Store
	qs  *judge.State
	gen string
	// force restores even a family the generation restored already.
	force bool
}

const (
	// rebuildPage is how many families one set of queries reads when
	// rebuilding every family; rebuildNamed when rebuilding named ones.
	rebuildPage  = 1000
	rebuildNamed = 100
	// rebuildBatch is how many families one batch restore writes
	// (quota.Engine.RestoreBatch, RestoreUnrestoredBatch: a few round trips
	// for all); rebuildWorkers how many batches are restored at once:
	// enough to keep Redis busy while each waits for its round trips.
	rebuildBatch   = 100
	rebuildWorkers = 4
	// rebuildReadAhead is how many pages are read from SQL at once while
	// one is restored: reading a page (MariaDB and scanning its rows) costs
	// about as much as restoring it.
	rebuildReadAhead = 2
)

// err is nil when every family was rebuilt, else ErrIncomplete
// wrapping every failure.
func (r Report) err() error {
	if len(r.Failed) == 0 {
		return nil
	}
	errs := make([]error, len(r.Failed))
	for i, f := range r.Failed {
		errs[i] = f
	}
	return fmt.Errorf("%w: %d of %d families failed: %w", ErrIncomplete, len(r.Failed), r.Rebuilt+len(r.Failed), errors.Join(errs...))
}

// families reads and restores ids, adding to rep in the order of ids.
// span says ids are every family from ids[0] to ids[len(ids)-1], ascending
// (a page of FamilyIDs). It returns an error only when ctx ends; rep then
// counts the families restored before.
func (b rebuilder) families(ctx context.Context, ids []int64, span bool, rep *Report) error {
	return b.restore(ctx, b.read(ctx, ids, span), rep)
}

// page is families read from SQL for restoring (store.ReadFamilies).
type page struct {
	ids    []int64
	span   bool
	states map[int64]quota.FamilyState
	bad    map[int64]error
	err    error // the page could not be read as a whole
	// changes are the families' change counts (store.FamilyChanges) taken
	// before they were read.
	changes map[int64]int64
	// tokens are the families' tokens read from Redis before they were
	// read from SQL (a sweep: quota.Engine.FamilyTokens): each is
	// restored only while its token holds.
	tokens map[int64]string
}

func (b rebuilder) read(ctx context.Context, ids []int64, span bool) page {
	if err := ctx.Err(); err != nil {
		return page{ids: ids, span: span, err: err}
	}
	var tokens map[int64]string
	if b.sweep() {
		// Before SQL is read: a family claimed for a change committed
		// after this read has another token by the restore, which then
		// leaves it (quota.ErrMoved).
		var err error
		if tokens, err = b.qs.FamilyTokens(ctx, ids); err != nil {
			return page{ids: ids, span: span, err: err}
		}
	}
	changes, err := b.st.FamilyChanges(ctx, ids, span)
	if err != nil {
		return page{ids: ids, span: span, err: err}
	}
	states, bad, err := b.st.ReadFamilies(ctx, b.qs, ids, span)
	for fid, st := range states {
		st.Generation = b.gen
		states[fid] = st
	}
	return page{ids: ids, span: span, states: states, bad: bad, err: err, changes: changes, tokens: tokens}
}

// sweep says whether the rebuild is a sweep of a generation restored on
// touch: each family restored once, never over a restore that came first,
// only while its token holds.
func (b rebuilder) sweep() bool { return quota.OnTouch(b.gen) && !b.force }

// settleRounds bounds how often a family that keeps changing is restored
// again within one rebuild; its own writes bring Redis up to date after
// that (each API write goes to Redis after its transaction).
const settleRounds = 5

// restore restores a page read by read, as families, then restores again
// the families that changed while they were read and restored.
func (b rebuilder) restore(ctx context.Context, p page, rep *Report) error {
	failed := len(rep.Failed)
	moved, err := b.restoreOnce(ctx, p, rep)
	if err != nil {
		return err
	}
	if b.sweep() {
		// A sweep of a generation restored on touch: each family is
		// restored once (never over a restore that came first), and every
		// family write claims its family before it reads it (the door),
		// so no write can be overwritten by an older read: a family
		// claimed since it was read is read again, and left to its first
		// touch if it keeps moving.
		for round := 0; len(moved) > 0 && round < settleRounds; round++ {
			if moved, err = b.restoreOnce(ctx, b.read(ctx, moved, false), rep); err != nil {
				return err
			}
		}
		rep.Moved += len(moved)
		return nil
	}
	skip := map[int64]bool{}
	for _, f := range rep.Failed[failed:] {
		skip[f.FamilyID] = true
	}
	return b.settle(ctx, p, skip, rep)
}

// settle reads and restores again, until they stop changing, the families
// of p (but those in failed) whose change count moved since p was read: a
// change committed between the read and the restore may have reached Redis
// first and been overwritten by the older state read.
func (b rebuilder) settle(ctx context.Context, p page, failed map[int64]bool, rep *Report) error {
	if p.err != nil || p.changes == nil {
		return nil // read one by one, each settled on its own
	}
	before := p.changes
	ids, span := p.ids, p.span
	for range settleRounds {
		now, err := b.st.FamilyChanges(ctx, ids, span)
		if err != nil {
			return fmt.Errorf("recovery: rebuild: reading SQL: %w", err)
		}
		var moved []int64
		for _, fid := range ids {
			if now[fid] != before[fid] && !failed[fid] {
				moved = append(moved, fid)
			}
		}
		if len(moved) == 0 {
			return nil
		}
		again := b.read(ctx, moved, false)
		var scratch Report
		if _, err := b.restoreOnce(ctx, again, &scratch); err != nil {
			return err
		}
		// A family restored before and failing now is failed.
		for _, f := range scratch.Failed {
			rep.Rebuilt--
			rep.Failed = append(rep.Failed, f)
			failed[f.FamilyID] = true
		}
		if again.changes == nil { // read one by one: nothing to compare
			return nil
		}
		ids, span, before = moved, false, again.changes
	}
	return nil
}

// writeBatch restores families as write does each (seen: their tokens, a
// sweep's), in one batch call.
func (b rebuilder) writeBatch(ctx context.Context, sts []quota.FamilyState, seen []string) ([]quota.RestoreOutcome, error) {
	if b.sweep() {
		return b.qs.RestoreUnrestoredBatch(ctx, sts, seen)
	}
	return b.qs.RestoreBatch(ctx, sts)
}

// write restores one family: in a sweep only if no restore of the
// generation came first (a judgement or a family write restored it on
// touch, and may have changed it since) and its token is still seen
// (quota.ErrMoved when not).
func (b rebuilder) write(ctx context.Context, st quota.FamilyState, seen string) error {
	if b.sweep() {
		_, err := b.qs.RestoreUnrestored(ctx, st, seen)
		return err
	}
	return b.qs.Restore(ctx, st)
}

// restoreOnce restores a page read by read, as families. It returns the
// families a sweep left because they were claimed since they were read.
func (b rebuilder) restoreOnce(ctx context.Context, p page, rep *Report) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("recovery: rebuild: %w", err)
	}
	ids, states, bad, err := p.ids, p.states, p.bad, p.err
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("recovery: rebuild: %w", ctx.Err())
	case err != nil && !errors.Is(err, store.ErrUnreadable):
		// The database failed, not a family's rows: stop, blame no one.
		return nil, fmt.Errorf("recovery: rebuild: reading SQL: %w", err)
	case err != nil && len(ids) > 1:
		for _, fid := range ids {
			if err := b.families(ctx, []int64{fid}, false, rep); err != nil {
				return nil, err
			}
		}
		return nil, nil
	case err != nil:
		bad = map[int64]error{ids[0]: fmt.Errorf("recovery: rebuild family %d: %w", ids[0], err)}
	}

	errs := make([]error, len(ids))
	done := make([]bool, len(ids))
	transient := make([]bool, len(ids))
	moved := make([]bool, len(ids))
	// restoreBatch restores the families ids[from:to] but the bad ones,
	// rebuildBatch at a time in one batch call (a few round trips for all).
	restoreBatch := func(from, to int) {
		var idx []int
		var sts []quota.FamilyState
		var seen []string
		for i := from; i < to; i++ {
			fid := ids[i]
			if e, ok := bad[fid]; ok {
				errs[i] = e
				continue
			}
			idx, sts, seen = append(idx, i), append(sts, states[fid]), append(seen, p.tokens[fid])
		}
		if len(idx) == 0 {
			return
		}
		out, err := b.writeBatch(ctx, sts, seen)
		for k, i := range idx {
			e := err
			if err == nil {
				e = out[k].Err
			}
			switch {
			case errors.Is(e, quota.ErrMoved):
				moved[i] = true
			case e != nil:
				errs[i] = fmt.Errorf("recovery: rebuild family %d: %w", ids[i], e)
				// Redis failed, not the family's rows: stop.
				transient[i] = !errors.Is(e, quota.ErrInvalid)
			}
		}
	}
	// finish ends the restore of family i: one that failed is replaced by
	// an empty family of the generation (Report.Failed).
	finish := func(i int) {
		fid := ids[i]
		if moved[i] || transient[i] {
			done[i] = true
			return
		}
		if errs[i] != nil && b.gen != "" && ctx.Err() == nil {
			if e := b.write(ctx, quota.FamilyState{FamilyID: fid, Generation: b.gen}, p.tokens[fid]); errors.Is(e, quota.ErrMoved) {
				moved[i], done[i] = true, true
				return
			} else if e != nil {
				errs[i] = errors.Join(errs[i], fmt.Errorf("recovery: empty family %d of generation %s: %w", fid, b.gen, e))
			}
		}
		done[i] = true
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(rebuildWorkers, (len(ids)+rebuildBatch-1)/rebuildBatch) {
		wg.Go(func() {
			for from := range next {
				to := min(from+rebuildBatch, len(ids))
				restoreBatch(from, to)
				for i := from; i < to; i++ {
					finish(i)
				}
			}
		})
	}
feed:
	for from := 0; from < len(ids); from += rebuildBatch {
		select {
		case next <- from:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	stopped := ctx.Err()
	var redisErr error
	var left []int64
	for i, fid := range ids {
		switch {
		case !done[i]:
		case moved[i]:
			left = append(left, fid)
		case errs[i] == nil:
			rep.Rebuilt++
		case transient[i]:
			redisErr = errs[i]
		case stopped != nil: // the family is not to blame
		default:
			rep.Failed = append(rep.Failed, FamilyError{FamilyID: fid, Err: errs[i]})
		}
	}
	if stopped != nil {
		return nil, fmt.Errorf("recovery: rebuild: %w", stopped)
	}
	if redisErr != nil {
		return nil, fmt.Errorf("recovery: rebuild: writing Redis: %w", redisErr)
	}
	return left, nil
}
