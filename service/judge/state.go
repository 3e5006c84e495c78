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
	RestoreNeeded(ctx context.Context, fid int64) (gen string, needed bool, err error)
	Restore(ctx context.Context, st quota.FamilyState) error
	RestoreUnrestored(ctx context.Context, st quota.FamilyState) (bool, error)
	RestoredRearms(st quota.FamilyState) map[string]map[int]int
	BeginRebuild(ctx context.Context, next string) (map[string]int64, error)
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
		if err := s.restoreOnTouch(ctx, gen, un.Families); err != nil {
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

// touchAttempts bounds how often one batch restores families on touch.
const touchAttempts = 3

// PartlyJudgedError: in a generation restored on touch, some events (and
// grant steps) of a batch were judged (and charged) and the others
// (Pending, GrantPending) were not, since their families could not be
// restored (the family source or Redis failed, or a rebuild began: Err).
// Applying the batch again is safe: the judged ones come back as
// duplicates with their results.
type PartlyJudgedError struct {
	// Results has the judged events' results; the pending ones' are zero.
	Results []quota.Result
	Pending []int
	// GrantResults and GrantPending are the grant steps' (nil without).
	GrantResults []quota.GrantResult
	GrantPending []int
	Err          error
}

func (e *PartlyJudgedError) Error() string {
	return fmt.Sprintf("judge: %d of %d events and %d of %d grant steps not judged: restoring their families: %v",
		len(e.Pending), len(e.Results), len(e.GrantPending), len(e.GrantResults), e.Err)
}

func (e *PartlyJudgedError) Unwrap() error { return e.Err }

// FamilySource reads families' states from the source of truth for a
// restore on touch (recovery.NewFamilySource over the SQL store): states of
// the families found, bad those whose rows cannot be read or parsed (each
// is restored as an empty family: its members' events are refused as not
// members until an operator fixes it, as a rebuild does), and an error
// when the source itself failed. A family in neither is not known (an empty
// family too).
type FamilySource interface {
	Families(ctx context.Context, ids []int64) (states map[int64]quota.FamilyState, bad map[int64]error, err error)
}

// TouchInfo describes one restore on touch, for WithTouchHook.
type TouchInfo struct {
	Generation string
	// Families asked for; Restored how many of them this call wrote
	// (others were restored first by another caller); Bad the families
	// whose rows could not be read, restored empty.
	Families, Restored int
	Bad                []int64
	Duration           time.Duration
	Err                error
}

// WithFamilySource has the door restore on touch, in a generation restored
// on touch (quota.OnTouch), every family a judgement or a family write
// meets before the rebuild's sweep restored it: read from fs, written with
// quota.Engine.RestoreUnrestored (never over a restore of the generation
// that came first). Every door that judges in such a generation needs one:
// without it an unrestored family is a stale state.
func WithFamilySource(fs FamilySource) StateOption {
	return func(s *State) { s.src, s.srcSet = fs, true }
}

// RestoresOnTouch says whether the door restores families on touch
// (WithFamilySource): a rebuild may then name a generation restored on
// touch (quota.OnTouch) as soon as SQL holds every judged event.
func (s *State) RestoresOnTouch() bool { return s.src != nil }

// WithTouchHook has the door call fn after every restore on touch.
func WithTouchHook(fn func(TouchInfo)) StateOption { return func(s *State) { s.touched = fn } }

// restoreOnTouch restores fids for generation gen from the family source.
func (s *State) restoreOnTouch(ctx context.Context, gen string, fids []int64) (err error) {
	start := time.Now()
	info := TouchInfo{Generation: gen, Families: len(fids)}
	defer func() {
		if s.touched != nil {
			info.Duration, info.Err = time.Since(start), err
			s.touched(info)
		}
	}()
	states, bad, err := s.src.Families(ctx, fids)
	if err != nil {
		return fmt.Errorf("judge: reading families to restore: %w", err)
	}
	for _, fid := range fids {
		st, ok := states[fid]
		if _, isBad := bad[fid]; isBad || !ok {
			if isBad {
				info.Bad = append(info.Bad, fid)
			}
			st = quota.FamilyState{FamilyID: fid}
		}
		st.Generation = gen
		restored, err := s.restoreUnrestored(ctx, st)
		if errors.Is(err, quota.ErrInvalid) { // rows the engine refuses
			info.Bad = append(info.Bad, fid)
			restored, err = s.restoreUnrestored(ctx, quota.FamilyState{FamilyID: fid, Generation: gen})
		}
		if err != nil {
			return err
		}
		if restored {
			info.Restored++
		}
	}
	return nil
}

// RestoreOnTouch restores the families fids for generation gen from the
// family source, each unless a restore of gen came first: what a judgement
// that met them (quota.UnrestoredError) does. It is for a state guard whose
// caller's door has no family source. Without one it does nothing.
func (s *State) RestoreOnTouch(ctx context.Context, gen string, fids []int64) error {
	if s.src == nil {
		return errors.New("judge: the door has no family source")
	}
	return s.restoreOnTouch(ctx, gen, fids)
}

// restoreUnrestored restores st unless its generation restored it first
// (quota.Engine.RestoreUnrestored) and records its re-arms as Restore does.
func (s *State) restoreUnrestored(ctx context.Context, st quota.FamilyState) (bool, error) {
	restored, err := s.eng.RestoreUnrestored(ctx, st)
	if err != nil || !restored {
		return restored, err
	}
	return true, s.recordRestoredRearms(ctx, st)
}

// RestoreUnrestored restores a family for a generation restored on touch,
// unless a restore of that generation came first (the rebuild's sweep;
// quota.Engine.RestoreUnrestored).
func (s *State) RestoreUnrestored(ctx context.Context, st quota.FamilyState) (bool, error) {
	return s.restoreUnrestored(ctx, st)
}

// ensureRestored restores fid before a family write in a generation
// restored on touch, so the write lands on the family's state of the
// generation (SQL recorded it first: a restore after it holds it, and the
// write itself, applied again, changes nothing then).
func (s *State) ensureRestored(ctx context.Context, fid int64) error {
	if s.src == nil {
		return nil
	}
	// The generation the family's node names now, not a cached one: a
	// write must not land on a family that a restore of the current
	// generation has yet to overwrite with what SQL held before it.
	gen, needed, err := s.eng.RestoreNeeded(ctx, fid)
	if err != nil {
		if errors.Is(err, quota.ErrStale) {
			return nil // a node without a marker: judging refuses it until a rebuild
		}
		return err
	}
	if !needed {
		// Restored, or no generation restored on touch (none yet, or a
		// rebuild began: it restores the write).
		return nil
	}
	err = s.restoreOnTouch(ctx, gen, []int64{fid})
	if errors.Is(err, quota.ErrStale) {
		return nil // a rebuild began (or gen is old): it restores the write
	}
	return err
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

// Enforce applies a member's whole constraints, parsed once by the caller
// (policy.ParseConstraints), at version (ignored when the state holds a
// newer one) and reports the member's standing after it: retroactive
// enforcement.
func (s *State) Enforce(ctx context.Context, fid, cid, version int64, c policy.Constraints) (quota.Enforcement, error) {
	if err := s.ensureRestored(ctx, fid); err != nil {
		return quota.Enforcement{}, err
	}
	enf, err := s.eng.Enforce(ctx, fid, cid, version, c)
	if err != nil {
		return enf, err
	}
	return enf, s.mark(ctx, fid)
}

// enforce is Enforce without a family-write mark: the processor's
// policy-updated records, whose partitions' watermarks mark them.
func (s *State) enforce(ctx context.Context, fid, cid, version int64, c policy.Constraints) (quota.Enforcement, error) {
	if err := s.ensureRestored(ctx, fid); err != nil {
		return quota.Enforcement{}, err
	}
	return s.eng.Enforce(ctx, fid, cid, version, c)
}

// SetPlan sets the family's monthly plan (quota.Engine.SetPlan).
func (s *State) SetPlan(ctx context.Context, fid, bytes int64) (quota.PoolState, error) {
	if err := s.ensureRestored(ctx, fid); err != nil {
		return quota.PoolState{}, err
	}
	ps, err := s.eng.SetPlan(ctx, fid, bytes)
	if err != nil {
		return ps, err
	}
	return ps, s.poolWritten(ctx, fid, ps)
}

// SetTopUps raises month's top-ups to the total SQL recorded
// (quota.Engine.SetTopUps).
func (s *State) SetTopUps(ctx context.Context, fid int64, month string, total int64) (quota.PoolState, error) {
	if err := s.ensureRestored(ctx, fid); err != nil {
		return quota.PoolState{}, err
	}
	ps, err := s.eng.SetTopUps(ctx, fid, month, total)
	if err != nil {
		return ps, err
	}
	return ps, s.poolWritten(ctx, fid, ps)
}

// SetThresholds sets the family's alert levels (quota.Engine.SetThresholds).
func (s *State) SetThresholds(ctx context.Context, fid int64, t policy.Thresholds) error {
	if err := s.ensureRestored(ctx, fid); err != nil {
		return err
	}
	if err := s.eng.SetThresholds(ctx, fid, t); err != nil {
		return err
	}
	return s.mark(ctx, fid)
}

// AddMember provisions a member (quota.Engine.AddMember).
func (s *State) AddMember(ctx context.Context, fid, cid int64) error {
	if err := s.ensureRestored(ctx, fid); err != nil {
		return err
	}
	if err := s.eng.AddMember(ctx, fid, cid); err != nil {
		return err
	}
	return s.mark(ctx, fid)
}

// RemoveMember removes a member; its next event is BLOCKED_NOT_MEMBER
// (quota.Engine.RemoveMember).
func (s *State) RemoveMember(ctx context.Context, fid, cid int64) error {
	if err := s.ensureRestored(ctx, fid); err != nil {
		return err
	}
	if err := s.eng.RemoveMember(ctx, fid, cid); err != nil {
		return err
	}
	return s.mark(ctx, fid)
}

// Rebuilds: service/recovery.

// Restore writes a family's whole state read from SQL (quota.Engine.Restore)
// and, with a re-arm store (WithRearmStore), records the thresholds the
// restore re-armed (quota.Engine.RestoredRearms).
func (s *State) Restore(ctx context.Context, st quota.FamilyState) error {
	if err := s.eng.Restore(ctx, st); err != nil {
		return err
	}
	return s.recordRestoredRearms(ctx, st)
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

// Family is a snapshot of the family's pool and members (quota.Engine.Family).
func (s *State) Family(ctx context.Context, fid int64) (quota.FamilyStatus, error) {
	if err := s.ensureRestored(ctx, fid); err != nil {
		return quota.FamilyStatus{}, err
	}
	return s.eng.Family(ctx, fid)
}

// Status is a member's standing now (quota.Engine.Status).
func (s *State) Status(ctx context.Context, fid, cid int64) (quota.MemberStatus, error) {
	if err := s.ensureRestored(ctx, fid); err != nil {
		return quota.MemberStatus{}, err
	}
	return s.eng.Status(ctx, fid, cid)
}
