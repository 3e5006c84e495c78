package judge

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/dabom/dpcs/quota"
)

// MarkStore keeps, outside Redis, how far the door's family-write marks
// reached, so that every process that judges checks them
// (doc/architecture.md, "Writer by writer"). *recovery.Generations is the
// implementation over SQL. It must be safe for concurrent use.
type MarkStore interface {
	// Generation returns the state generation SQL names; "" before the
	// first rebuild.
	Generation(ctx context.Context) (string, error)
	// Forget drops a cached generation: the next Generation reads it again.
	Forget()
	// Floors returns the marks recorded under gen, each for one node, as
	// marks to check (From = the count recorded). It is called by every
	// judged batch, so it is cached; counts only grow, so an older answer is
	// weaker, never wrong.
	Floors(ctx context.Context, gen string) ([]quota.Mark, error)
	// RecordMark records that stream m.Stream reached m.To on node m.Node
	// under gen, keeping the highest count recorded.
	RecordMark(ctx context.Context, gen string, m quota.Mark) error
}

// ErrNotMarked is wrapped by the error of a family write through a door
// with a mark store (WithMarkStore) that was applied to Redis but whose mark
// could not be made or recorded (Redis or SQL failed): the change is in SQL
// and in effect, and a rebuild restores it, but a Redis rollback before the
// door's next recorded mark would go unnoticed until then.
var ErrNotMarked = errors.New("judge: family write applied but not marked")

// StateOption configures a State.
type StateOption func(*State)

// WithMarkStore has the door mark every family write it makes (plan,
// top-ups, thresholds, membership, constraints set through Enforce) and
// check the marks recorded in ms in every judgement: a Redis node that
// lost a family write answered to a caller is stale before the next
// decision on any path, in any process whose door has the same store.
//
// A write is marked after it is applied, on the marker of the node that
// holds the family (quota.Engine.FamilyMarker): one of the door's streams
// (FamilyWriteStream + a random id per door + a slot) is raised by one,
// checked to be where the door left it, and the count is recorded in ms.
// Redis writes a node's commands in order, so a node whose marker holds a
// count holds every write marked before it; a rollback that loses a marked
// write leaves that node's count below the one recorded, and the next
// judgement is refused as stale (quota.ErrStale) and Redis is rebuilt from
// SQL, which recorded the write first. A slot's marks are made one after
// another, so a later write cannot raise a count past a lost one (the
// decisions' slots, for the same reason).
func WithMarkStore(ms MarkStore) StateOption { return func(s *State) { s.marks = newWriteMarks(ms) } }

// FamilyWriteStream starts the marker streams of a door's family writes:
// "family-writes/<16 hex digits, random per door>/<slot>".
const FamilyWriteStream = "family-writes/"

// markSlots is how many family writes a door marks at once.
const markSlots = 4

type writeMarks struct {
	ms     MarkStore
	stream string
	slots  chan int

	// unsettled counts the changes this door could not claim (Unsettled).
	unsettled atomic.Int64

	mu     sync.Mutex
	gen    string
	counts [markSlots]map[string]int64 // per slot: node → count under gen
}

func newWriteMarks(ms MarkStore) *writeMarks {
	w := &writeMarks{ms: ms, stream: FamilyWriteStream + instanceID() + "/", slots: make(chan int, markSlots)}
	for i := range markSlots {
		w.slots <- i
	}
	return w
}

// count returns the slot's count on node under gen, starting every count
// again when gen is new.
func (w *writeMarks) count(gen string, slot int, node string) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gen != gen {
		w.gen = gen
		for i := range w.counts {
			w.counts[i] = map[string]int64{}
		}
	}
	return w.counts[slot][node]
}

func (w *writeMarks) set(gen string, slot int, node string, n int64) {
	w.mu.Lock()
	if w.gen == gen {
		w.counts[slot][node] = n
	}
	w.mu.Unlock()
}

// mark marks a family write of fid that was applied (WithMarkStore). On a
// state that is stale or being rebuilt it counts and records the write all
// the same, a count the node does not hold (the judges refuse the state
// until a rebuild, which reads the write from SQL); with no generation yet
// it records nothing (the first rebuild reads SQL). It returns an error
// when Redis or the store failed.
func (s *State) mark(ctx context.Context, fid int64) error {
	w := s.marks
	if w == nil {
		return nil
	}
	var slot int
	select {
	case slot = <-w.slots:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrNotMarked, ctx.Err())
	}
	m, gen, err := s.advanceMark(ctx, fid, slot)
	w.slots <- slot
	if err != nil || m.Stream == "" {
		return err
	}
	if err := w.ms.RecordMark(ctx, gen, m); err != nil {
		return fmt.Errorf("%w: recording the mark: %w", ErrNotMarked, err)
	}
	return nil
}

// advanceMark raises the slot's stream on fid's node by one and returns the
// mark to record; a zero mark when none is to be recorded.
func (s *State) advanceMark(ctx context.Context, fid int64, slot int) (quota.Mark, string, error) {
	w := s.marks
	for attempt := 0; ; attempt++ {
		gen, err := w.ms.Generation(ctx)
		if err != nil {
			return quota.Mark{}, "", fmt.Errorf("%w: state generation: %w", ErrNotMarked, err)
		}
		if gen == "" {
			return quota.Mark{}, "", nil // never rebuilt: the first rebuild reads the write from SQL
		}
		node, err := s.eng.FamilyMarker(ctx, fid)
		if errors.Is(err, quota.ErrStale) {
			return quota.Mark{}, "", nil
		}
		if err != nil {
			return quota.Mark{}, "", fmt.Errorf("%w: %w", ErrNotMarked, err)
		}
		from := w.count(gen, slot, node)
		m := quota.Mark{Stream: w.stream + strconv.Itoa(slot), From: from, To: from + 1, Node: node}
		err = s.eng.Advance(ctx, gen, []quota.Mark{m})
		switch {
		case err == nil:
			w.set(gen, slot, node, m.To)
			return m, gen, nil
		case !errors.Is(err, quota.ErrStale):
			return quota.Mark{}, "", fmt.Errorf("%w: %w", ErrNotMarked, err)
		case attempt == 0:
			w.ms.Forget() // a rebuild may have named a new generation
		default:
			// The write stands on a state that lost writes (or is being
			// rebuilt): the door counts it all the same and records the
			// count, which the node does not hold, so the judges find the
			// state stale even if a rollback made it look whole again, and
			// the slot's next marks fail too, until a rebuild's new
			// generation starts the counts again.
			w.set(gen, slot, node, m.To)
			return m, gen, nil
		}
	}
}

// withFloors returns marks and the family-write marks recorded under gen.
func (s *State) withFloors(ctx context.Context, gen string, marks []quota.Mark) ([]quota.Mark, error) {
	if s.marks == nil {
		return marks, nil
	}
	fl, err := s.marks.ms.Floors(ctx, gen)
	if err != nil {
		return nil, fmt.Errorf("judge: family write marks: %w", err)
	}
	if len(fl) == 0 {
		return marks, nil
	}
	return append(append(make([]quota.Mark, 0, len(marks)+len(fl)), marks...), fl...), nil
}
