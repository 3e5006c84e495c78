package judge

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// Engine is what the door needs of the quota engine: *quota.Engine. It is
// an interface so that tests can wrap the engine to inject faults.
type Engine interface {
	ApplyBatch(ctx context.Context, evs []quota.Event) ([]quota.Result, error)
	ApplyMarked(ctx context.Context, gen string, marks []quota.Mark, evs []quota.Event) ([]quota.Result, error)
	Judge(ctx context.Context, evs []quota.Event, ops []quota.GrantOp) ([]quota.Result, []quota.GrantResult, error)
	JudgeMarked(ctx context.Context, gen string, marks []quota.Mark, evs []quota.Event, ops []quota.GrantOp) ([]quota.Result, []quota.GrantResult, error)
	CheckState(ctx context.Context, gen string, marks []quota.Mark) error
	Advance(ctx context.Context, gen string, marks []quota.Mark) error
	Enforce(ctx context.Context, fid, cid, version int64, c policy.Constraints) (quota.Enforcement, error)
	SetPlan(ctx context.Context, fid, bytes int64) (quota.PoolState, error)
	SetTopUps(ctx context.Context, fid int64, month string, total int64) (quota.PoolState, error)
	SetThresholds(ctx context.Context, fid int64, t policy.Thresholds) error
	AddMember(ctx context.Context, fid, cid int64) error
	RemoveMember(ctx context.Context, fid, cid int64) error
	FamilyMarker(ctx context.Context, fid int64) (string, error)
	FamilyToken(ctx context.Context, fid int64) (gen, token string, err error)
	FamilyTokens(ctx context.Context, fids []int64) (map[int64]string, error)
	Claim(ctx context.Context, fid int64) (gen, token string, err error)
	Settle(ctx context.Context, st quota.FamilyState, seen string, record func(rearmed map[string]map[int]int) error) (quota.Settled, error)
	Restore(ctx context.Context, st quota.FamilyState) error
	RestoreUnrestored(ctx context.Context, st quota.FamilyState, seen string) (bool, error)
	RestoreBatch(ctx context.Context, sts []quota.FamilyState) ([]quota.RestoreOutcome, error)
	RestoreUnrestoredBatch(ctx context.Context, sts []quota.FamilyState, seen []string) ([]quota.RestoreOutcome, error)
	RestoreClaimed(ctx context.Context, st quota.FamilyState, seen string) error
	RestoredRearms(st quota.FamilyState) map[string]map[int]int
	BeginRebuild(ctx context.Context, next string) (map[string]int64, error)
	Distrust(ctx context.Context) error
	FinishRebuild(ctx context.Context, gen string, watermarks map[string]int64) error
	Family(ctx context.Context, fid int64) (quota.FamilyStatus, error)
	Status(ctx context.Context, fid, cid int64) (quota.MemberStatus, error)
	AcceptedMonths() (months []string, from, to time.Time)
	DedupeWindow() time.Duration
	Location() *time.Location
}

var _ Engine = (*quota.Engine)(nil)

// State is the one door to the quota state in Redis: every write DPCS makes
// to it goes through a State — the processor's and the synchronous
// decisions' judgements (in this package), the API's policy, plan, top-up,
// threshold and membership changes, and the rebuilds of service/recovery —
// so that what is promised about that state (doc/architecture.md, "Never
// trust Redis blindly") is argued about one type. With WithMarkStore it
// marks every family write and checks the marks recorded in every
// judgement. It is safe for concurrent use.
type State struct {
	eng    Engine
	marks  *writeMarks // nil: family writes are not marked
	rearms RearmStore  // nil: re-armed thresholds are not recorded
	// rearmsSet: WithRearmStore was given (a nil store is refused).
	rearmsSet bool
	src       FamilySource // nil: families are not restored on touch
	srcSet    bool
	touched   func(TouchInfo)
}

// NewState returns the door to the quota state eng keeps.
func NewState(eng Engine, opts ...StateOption) (*State, error) {
	if eng == nil {
		return nil, errors.New("judge: nil quota engine")
	}
	s := &State{eng: eng}
	for _, o := range opts {
		o(s)
	}
	if s.marks != nil && s.marks.ms == nil {
		return nil, errors.New("judge: nil mark store")
	}
	if s.rearmsSet && s.rearms == nil {
		return nil, errors.New("judge: nil re-arm store")
	}
	if s.srcSet && s.src == nil {
		return nil, errors.New("judge: nil family source")
	}
	return s, nil
}

// RearmStore records the alert thresholds a pool change re-armed
// (quota.PoolState.Rearmed; store.Store.RecordRearms), which a rebuild reads
// back (quota.FamilyState.Rearmed): without them it cannot tell a threshold
// a top-up re-armed from one that fired, and the next alert is lost.
type RearmStore interface {
	RecordRearms(ctx context.Context, fid int64, month string, rearmed map[int]int) error
}

// WithRearmStore has the door record in rs the thresholds each pool change
// it makes (plan, top-ups) re-armed, before marking the write. A failure to
// record wraps ErrNotMarked: the change is in effect, and a rebuild before
// the next pool change may take a re-armed threshold for a fired one.
func WithRearmStore(rs RearmStore) StateOption {
	return func(s *State) { s.rearms, s.rearmsSet = rs, true }
}

// poolWritten records what a pool change re-armed and marks the write.
func (s *State) poolWritten(ctx context.Context, fid int64, ps quota.PoolState) error {
	if s.rearms != nil && len(ps.Rearmed) > 0 {
		if err := s.rearms.RecordRearms(ctx, fid, ps.Month, ps.Rearmed); err != nil {
			return fmt.Errorf("%w: recording the re-armed thresholds: %w", ErrNotMarked, err)
		}
	}
	return s.mark(ctx, fid)
}

// Location is the service time zone the state's days and months are in.
func (s *State) Location() *time.Location { return s.eng.Location() }

// Judging: the processor and the synchronous decisions.

// apply judges evs with no state check (no guard configured).
func (s *State) apply(ctx context.Context, evs []quota.Event) ([]quota.Result, error) {
	return s.eng.ApplyBatch(ctx, evs)
}

// applyMarked judges evs only on a state of generation gen whose watermarks
// are not behind marks, and advances them (quota.Engine.ApplyMarked). The
// family-write marks recorded under gen are checked too (WithMarkStore).
// In a generation restored on touch, the families of the batch not restored
// yet are restored from the family source (WithFamilySource) and their
// events judged then; when that fails the error is a *PartlyJudgedError.
func (s *State) applyMarked(ctx context.Context, gen string, marks []quota.Mark, evs []quota.Event) ([]quota.Result, error) {
	res, _, err := s.judgeMarked(ctx, gen, marks, evs, nil)
	return res, err
}

// judge judges events and grant steps in one pipeline with no state check
// (no guard configured).
func (s *State) judge(ctx context.Context, evs []quota.Event, ops []quota.GrantOp) ([]quota.Result, []quota.GrantResult, error) {
	if len(ops) == 0 {
		res, err := s.eng.ApplyBatch(ctx, evs)
		return res, nil, err
	}
	return s.eng.Judge(ctx, evs, ops)
}

// judgeMarked is applyMarked for events and grant steps judged in one
// pipeline (quota.Engine.JudgeMarked): the synchronous decisions' and
// grants' group commits.
func (s *State) judgeMarked(ctx context.Context, gen string, marks []quota.Mark, evs []quota.Event, ops []quota.GrantOp) ([]quota.Result, []quota.GrantResult, error) {
	marks, err := s.withFloors(ctx, gen, marks)
	if err != nil {
		return nil, nil, err
	}
	run := func(evs []quota.Event, ops []quota.GrantOp) ([]quota.Result, []quota.GrantResult, error) {
		if len(ops) == 0 {
			res, err := s.eng.ApplyMarked(ctx, gen, marks, evs)
			return res, nil, err
		}
		return s.eng.JudgeMarked(ctx, gen, marks, evs, ops)
	}
	res, gres, err := run(evs, ops)
	var un *quota.UnrestoredError
	if !errors.As(err, &un) {
		return res, gres, err
	}
	partly := func(results []quota.Result, pending []int, gresults []quota.GrantResult, gpending []int, err error) error {
		return &PartlyJudgedError{Results: results, Pending: pending, GrantResults: gresults, GrantPending: gpending, Err: err}
	}
	if s.src == nil {
		// The events and steps judged are charged: their callers must be
		// answered (the state guard restores the others' families, Recover).
		return nil, nil, partly(un.Results, un.Pending, un.GrantResults, un.GrantPending, un)
	}
	results, gresults := un.Results, un.GrantResults
	pending, gpending := un.Pending, un.GrantPending
	if gresults == nil {
		gresults = make([]quota.GrantResult, len(ops))
	}
	for attempt := 0; ; attempt++ {
		if err := s.touch(ctx, gen, un.Families, un.Seen); err != nil {
			return nil, nil, partly(results, pending, gresults, gpending, err)
		}
		sub := make([]quota.Event, len(pending))
		for i, at := range pending {
			sub[i] = evs[at]
		}
		subG := make([]quota.GrantOp, len(gpending))
		for i, at := range gpending {
			subG[i] = ops[at]
		}
		rs, grs, err := run(sub, subG)
		switch {
		case err == nil:
			for i, at := range pending {
				results[at] = rs[i]
			}
			for i, at := range gpending {
				gresults[at] = grs[i]
			}
			if len(ops) == 0 {
				gresults = nil
			}
			return results, gresults, nil
		case errors.As(err, &un):
			// Restored and rolled back meanwhile, or a restore of
			// another process not yet seen: restore what is left.
			for i, at := range pending {
				results[at] = un.Results[i]
			}
			for i, at := range gpending {
				if i < len(un.GrantResults) {
					gresults[at] = un.GrantResults[i]
				}
			}
			left := make([]int, len(un.Pending))
			for i, at := range un.Pending {
				left[i] = pending[at]
			}
			gleft := make([]int, len(un.GrantPending))
			for i, at := range un.GrantPending {
				gleft[i] = gpending[at]
			}
			pending, gpending = left, gleft
			if attempt+1 >= touchAttempts {
				return nil, nil, partly(results, pending, gresults, gpending, un)
			}
		default:
			return nil, nil, partly(results, pending, gresults, gpending, err)
		}
	}
}

func (s *State) checkState(ctx context.Context, gen string, marks []quota.Mark) error {
	marks, err := s.withFloors(ctx, gen, marks)
	if err != nil {
		return err
	}
	return s.eng.CheckState(ctx, gen, marks)
}

func (s *State) advance(ctx context.Context, gen string, marks []quota.Mark) error {
	marks, err := s.withFloors(ctx, gen, marks)
	if err != nil {
		return err
	}
	return s.eng.Advance(ctx, gen, marks)
}

// Family changes: the API and the processor's policy-updated records.
//
// The rule for a family change (doc/architecture.md, "Writer by writer",
// family writes): the source of truth commits it first; then the door is
// told, by Settle or one of the changes below. With a family source
// (WithFamilySource, every deployable's door) the door claims the family
// (quota.Engine.Claim), reads it back from the source and applies what it
// read (quota.Engine.Settle, or a restore when the generation has not
// restored it yet), so concurrent changes land in the order the source
// committed them, whatever order their door calls take, and no restore
// that read the source before the change lands after it. When a step
// after the claim fails, the family stays claimed: it is not judged until
// a judgement, a write or a read settles it from the source, and the
// error wraps ErrUnsettled. When the door cannot be reached at all, the
// caller calls Unsettled.

// staleMark records, with the mark store, a family-write mark no Redis
// node holds, for every node: every judgement finds the state stale and
// Redis is rebuilt from SQL (this process's judges at once, the others'
// within the marks' refresh). Without a mark store, or before the first
// generation (whose rebuild reads SQL anyway), it records nothing and
// says so.
func (s *State) staleMark(ctx context.Context) error {
	if s.marks == nil {
		return errors.New("judge: no mark store to mark the state stale in")
	}
	gen, err := s.marks.ms.Generation(ctx)
	if err != nil {
		return err
	}
	if gen == "" {
		return nil // never rebuilt: the first rebuild reads SQL
	}
	n := s.marks.unsettled.Add(1)
	if err := s.marks.ms.RecordMark(ctx, gen, quota.Mark{Stream: s.marks.stream + "unsettled", From: n, To: n}); err != nil {
		return err
	}
	s.marks.ms.Forget()
	return nil
}

// Distrust makes the state stale everywhere until a rebuild reads it back
// from SQL: for charges a judge made but could not record (their records
// stored nowhere), or records SQL learns only after a rebuild that did not
// read them (recovery.LateRecords). The markers first
// (quota.Engine.Distrust), and when Redis cannot be reached a mark no node
// holds (staleMark).
func (s *State) Distrust(ctx context.Context) error {
	err := s.eng.Distrust(ctx)
	if err == nil {
		return nil
	}
	if merr := s.staleMark(ctx); merr != nil {
		return errors.Join(err, merr)
	}
	return nil
}

// Restore writes a family's whole state read from SQL (quota.Engine.Restore)
// and, with a re-arm store (WithRearmStore), records the thresholds the
// restore re-armed (quota.Engine.RestoredRearms).
func (s *State) Restore(ctx context.Context, st quota.FamilyState) error {
	if err := s.recordRestoredRearms(ctx, st); err != nil {
		return err
	}
	return s.eng.Restore(ctx, st)
}

// RestoreBatch is Restore for many families (quota.Engine.RestoreBatch:
// each restored or refused on its own, a few round trips for the batch),
// every family's re-arms recorded before any is restored.
func (s *State) RestoreBatch(ctx context.Context, sts []quota.FamilyState) ([]quota.RestoreOutcome, error) {
	for _, st := range sts {
		if err := s.recordRestoredRearms(ctx, st); err != nil {
			return nil, err
		}
	}
	return s.eng.RestoreBatch(ctx, sts)
}

func (s *State) recordRestoredRearms(ctx context.Context, st quota.FamilyState) error {
	if s.rearms == nil {
		return nil
	}
	// A restore re-arms what fired and the pool is above (a pool change
	// the rebuilt state never saw): recorded as a pool change's re-arms.
	rearmed := s.eng.RestoredRearms(st)
	for _, month := range slices.Sorted(maps.Keys(rearmed)) {
		if err := s.rearms.RecordRearms(ctx, st.FamilyID, month, rearmed[month]); err != nil {
			return fmt.Errorf("judge: recording the thresholds the restore of family %d re-armed: %w", st.FamilyID, err)
		}
	}
	return nil
}

// BeginRebuild marks every node as being rebuilt to generation next, so
// every judgement is refused until FinishRebuild (quota.Engine.BeginRebuild).
func (s *State) BeginRebuild(ctx context.Context, next string) (map[string]int64, error) {
	return s.eng.BeginRebuild(ctx, next)
}

// FinishRebuild names generation gen with watermarks on every node
// (quota.Engine.FinishRebuild).
func (s *State) FinishRebuild(ctx context.Context, gen string, watermarks map[string]int64) error {
	return s.eng.FinishRebuild(ctx, gen, watermarks)
}

// AcceptedMonths are the months a rebuild restores: those the engine still
// accepts events for (quota.Engine.AcceptedMonths).
func (s *State) AcceptedMonths() (months []string, from, to time.Time) { return s.eng.AcceptedMonths() }

// DedupeWindow is how long an event id is remembered; a rebuild restores
// the dedupe records of the events judged within it.
func (s *State) DedupeWindow() time.Duration { return s.eng.DedupeWindow() }

// Reads.
//
// Every answer computed from a read is made on a checked state
// (doc/architecture.md, "Every decision is made on a checked state"): with
// a mark store (WithMarkStore, every deployable's door) a read is followed
// by the check every judgement makes — the markers name the generation SQL
// names and the node's identity it was named on, and hold every mark SQL
// recorded — and its answer is used only if the check passed. The check
// comes after the read: a node that rolled back before the read has a new
// identity or lacks a mark by the check; one that rolled back between them
// fails it too. A door without a mark store knows no generation: its reads
// are not checked.

// Family is a snapshot of the family's pool and members (quota.Engine.Family),
// read from a checked state.
func (s *State) Family(ctx context.Context, fid int64) (quota.FamilyStatus, error) {
	if err := s.ensureRestored(ctx, fid); err != nil {
		return quota.FamilyStatus{}, err
	}
	f, err := s.eng.Family(ctx, fid)
	if err != nil {
		return f, err
	}
	return f, s.checkRead(ctx)
}

// Status is a member's standing now (quota.Engine.Status), read from a
// checked state: what a decision made from a read (a gift's "what the
// giver has left") must use.
func (s *State) Status(ctx context.Context, fid, cid int64) (quota.MemberStatus, error) {
	if err := s.ensureRestored(ctx, fid); err != nil {
		return quota.MemberStatus{}, err
	}
	st, err := s.eng.Status(ctx, fid, cid)
	if err != nil {
		return st, err
	}
	return st, s.checkRead(ctx)
}

// checkRead checks the state after a read: nil, or an error wrapping
// quota.ErrStale (the read must not be used).
func (s *State) checkRead(ctx context.Context) error {
	if s.marks == nil {
		return nil
	}
	for attempt := 0; ; attempt++ {
		gen, err := s.marks.ms.Generation(ctx)
		if err != nil {
			return fmt.Errorf("judge: state generation: %w", err)
		}
		if gen == "" {
			return nil // never rebuilt: nothing is judged on a generation yet
		}
		err = s.checkState(ctx, gen, nil)
		if err == nil || !errors.Is(err, quota.ErrStale) || attempt > 0 {
			return err
		}
		s.marks.ms.Forget() // a rebuild may have named a new generation
	}
}
