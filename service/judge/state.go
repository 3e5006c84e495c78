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
	// Configs is Families without what a settle keeps (usage, judged
	// events, threshold arms): the configuration a committed change
	// touches (quota.Engine.Settle).
	Configs(ctx context.Context, ids []int64) (states map[int64]quota.FamilyState, bad map[int64]error, err error)
}

// TouchInfo describes one restore on touch, for WithTouchHook.
type TouchInfo struct {
	Generation string
	// Families asked for; Restored and Settled how many of them this call
	// restored or settled (others were restored or settled first by
	// another caller); Bad the families whose rows could not be read,
	// restored empty.
	Families, Restored, Settled int
	Bad                         []int64
	Duration                    time.Duration
	Err                         error
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

// touch brings fids to what the family source holds before they are
// judged in generation gen: a family the generation has not restored is
// restored (quota.Engine.RestoreUnrestored), one claimed for a committed
// change is settled (quota.Engine.Settle), each only while its token is
// still the one seen before the source was read. A family whose token
// moved meanwhile (claimed again) is left to the next look: its claimer,
// or the next touch, applies a later read.
func (s *State) touch(ctx context.Context, gen string, fids []int64, seen map[int64]string) (err error) {
	start := time.Now()
	info := TouchInfo{Generation: gen, Families: len(fids)}
	defer func() {
		if s.touched != nil {
			info.Duration, info.Err = time.Since(start), err
			s.touched(info)
		}
	}()
	var restore, settle []int64
	for _, fid := range fids {
		switch quota.FamilyNeeds(gen, seen[fid]) {
		case quota.NeedRestore:
			restore = append(restore, fid)
		case quota.NeedSettle:
			settle = append(settle, fid)
		}
	}
	if len(restore) > 0 {
		states, bad, err := s.src.Families(ctx, restore)
		if err != nil {
			return fmt.Errorf("judge: reading families to restore: %w", err)
		}
		for _, fid := range restore {
			st, ok := states[fid]
			if _, isBad := bad[fid]; isBad || !ok {
				if isBad {
					info.Bad = append(info.Bad, fid)
				}
				st = quota.FamilyState{FamilyID: fid}
			}
			st.Generation = gen
			restored, err := s.restoreUnrestored(ctx, st, seen[fid])
			if errors.Is(err, quota.ErrInvalid) { // rows the engine refuses
				info.Bad = append(info.Bad, fid)
				restored, err = s.restoreUnrestored(ctx, quota.FamilyState{FamilyID: fid, Generation: gen}, seen[fid])
			}
			switch {
			case errors.Is(err, quota.ErrMoved):
			case err != nil:
				return err
			case restored:
				info.Restored++
			}
		}
	}
	for _, fid := range settle {
		_, bad, err := s.settleFrom(ctx, gen, fid, seen[fid])
		if bad {
			info.Bad = append(info.Bad, fid)
		}
		switch {
		case errors.Is(err, quota.ErrMoved):
		case err != nil:
			return err
		default:
			info.Settled++
		}
	}
	return nil
}

// settleFrom reads family fid's configuration from the source and settles
// it while its token is seen; bad says its rows could not be read or the
// engine refused them (it is settled as an empty family then).
func (s *State) settleFrom(ctx context.Context, gen string, fid int64, seen string) (quota.Settled, bool, error) {
	states, bads, err := s.src.Configs(ctx, []int64{fid})
	if err != nil {
		return quota.Settled{}, false, fmt.Errorf("judge: reading family %d to settle: %w", fid, err)
	}
	st, ok := states[fid]
	_, bad := bads[fid]
	if bad || !ok {
		st = quota.FamilyState{FamilyID: fid}
	}
	st.Generation = gen
	done, err := s.settle(ctx, st, seen)
	if errors.Is(err, quota.ErrInvalid) {
		bad = true
		done, err = s.settle(ctx, quota.FamilyState{FamilyID: fid, Generation: gen}, seen)
	}
	return done, bad, err
}

// settle applies st's configuration while the family's token is seen
// (quota.Engine.Settle) and records the thresholds it re-armed.
func (s *State) settle(ctx context.Context, st quota.FamilyState, seen string) (quota.Settled, error) {
	// The settle's re-arms are recorded before it lands (under its WATCH):
	// one whose re-arms could not be recorded leaves the family claimed,
	// and the next settle finds and records them again.
	return s.eng.Settle(ctx, st, seen, func(rearmed map[string]map[int]int) error {
		if s.rearms == nil {
			return nil
		}
		for _, month := range slices.Sorted(maps.Keys(rearmed)) {
			if err := s.rearms.RecordRearms(ctx, st.FamilyID, month, rearmed[month]); err != nil {
				return fmt.Errorf("%w: recording the re-armed thresholds: %w", ErrNotMarked, err)
			}
		}
		return nil
	})
}

// RestoreOnTouch restores or settles the families an *UnrestoredError of
// generation gen met (seen: their tokens), as a judgement that met them
// does. It is for a state guard whose caller's door has no family source.
// Without one it does nothing.
func (s *State) RestoreOnTouch(ctx context.Context, gen string, seen map[int64]string) error {
	if s.src == nil {
		return errors.New("judge: the door has no family source")
	}
	return s.touch(ctx, gen, slices.Sorted(maps.Keys(seen)), seen)
}

// restoreUnrestored restores st unless its generation restored it first or
// its token moved from seen (quota.Engine.RestoreUnrestored) and records
// its re-arms as Restore does.
func (s *State) restoreUnrestored(ctx context.Context, st quota.FamilyState, seen string) (bool, error) {
	// Recorded first: a restore whose re-arms could not be recorded must
	// not land (no later touch would restore it again to record them).
	if err := s.recordRestoredRearms(ctx, st); err != nil {
		return false, err
	}
	return s.eng.RestoreUnrestored(ctx, st, seen)
}

// RestoreUnrestored restores a family for a generation restored on touch,
// unless a restore of that generation came first or its token moved from
// seen, the token read before st was read (the rebuild's sweep;
// quota.Engine.RestoreUnrestored, quota.Engine.FamilyTokens).
func (s *State) RestoreUnrestored(ctx context.Context, st quota.FamilyState, seen string) (bool, error) {
	return s.restoreUnrestored(ctx, st, seen)
}

// Fence claims family fid for an operator's rebuild of it
// (quota.Engine.Claim): no judgement charges it until RestoreClaimed
// restores it (or a judgement's touch settles it: a family change
// committed meanwhile). It returns the claim's token.
func (s *State) Fence(ctx context.Context, fid int64) (string, error) {
	_, token, err := s.eng.Claim(ctx, fid)
	return token, err
}

// RestoreClaimed restores a family Fence claimed, while its token is still
// seen (quota.Engine.RestoreClaimed), and records its re-arms as Restore
// does.
func (s *State) RestoreClaimed(ctx context.Context, st quota.FamilyState, seen string) error {
	if err := s.recordRestoredRearms(ctx, st); err != nil {
		return err
	}
	return s.eng.RestoreClaimed(ctx, st, seen)
}

// FamilyTokens returns the families' tokens (quota.Engine.FamilyTokens):
// a sweep reads them before it reads the families from SQL.
func (s *State) FamilyTokens(ctx context.Context, fids []int64) (map[int64]string, error) {
	return s.eng.FamilyTokens(ctx, fids)
}

// ensureRestored brings fid to what SQL holds before it is read or before
// a write that needs no claim (the processor's versioned policy updates):
// restored if the generation has not restored it, settled if a change was
// claimed and not applied (touch).
func (s *State) ensureRestored(ctx context.Context, fid int64) error {
	if s.src == nil {
		return nil
	}
	// The generation the family's node names now, not a cached one: a
	// write must not land on a family that a restore of the current
	// generation has yet to overwrite with what SQL held before it.
	gen, token, err := s.eng.FamilyToken(ctx, fid)
	if err != nil {
		if errors.Is(err, quota.ErrStale) {
			return nil // a node without a marker: judging refuses it until a rebuild
		}
		return err
	}
	if quota.FamilyNeeds(gen, token) == quota.NeedNothing {
		// Restored and settled, or no generation restored on touch (none
		// yet, or a rebuild began: it restores the family).
		return nil
	}
	err = s.touch(ctx, gen, []int64{fid}, map[int64]string{fid: token})
	if errors.Is(err, quota.ErrStale) {
		return nil // a rebuild began (or gen is old): it restores the family
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

// ErrUnsettled is wrapped by the error of a family change the source of
// truth committed but the door could not apply: the family is claimed (or,
// when the claim itself failed, the state is marked stale: Unsettled), so
// the change is in effect before the family's next judgement, whatever
// happens to this process; answer that it is recorded and will take effect.
var ErrUnsettled = errors.New("judge: family change recorded but not applied to the quota state yet")

// Settle brings family fid to what the family source holds after a change
// the source committed: it claims the family, reads it back and applies
// it (see the rule above), and marks the write. It returns the family's
// pool of the current month afterwards. A door without a family source
// cannot read the family back: it answers an error wrapping ErrInvalid.
// A retry of a change the source finds already made (a member already
// removed, a request answered) calls Settle too: a change whose first door
// call failed before its claim then takes effect.
func (s *State) Settle(ctx context.Context, fid int64) (quota.PoolState, error) {
	if s.src == nil {
		return quota.PoolState{}, fmt.Errorf("%w: judge: the door has no family source to settle family %d from", quota.ErrInvalid, fid)
	}
	ps, _, err := s.claimed(ctx, fid, nil)
	return ps, err
}

// claimed is Settle; direct, when set, is the change applied as it was
// given on a state no generation vouches for (none yet, or being rebuilt:
// the rebuild reads the change from the source). It reports whether the
// family was restored or settled from the source.
func (s *State) claimed(ctx context.Context, fid int64, direct func() (quota.PoolState, error)) (quota.PoolState, bool, error) {
	gen, token, err := s.eng.Claim(ctx, fid)
	if err != nil {
		return quota.PoolState{}, false, s.unsettled(ctx, fid, err)
	}
	ps, applied, err := s.settleClaimed(ctx, fid, gen, token, direct)
	if err != nil {
		// Claimed: not judged until a judgement, write or read settles it.
		return ps, applied, fmt.Errorf("%w: family %d: %w", ErrUnsettled, fid, err)
	}
	if err := s.mark(ctx, fid); err != nil {
		return ps, applied, err
	}
	return ps, applied, nil
}

// settleClaimed applies the family a claim left with token: restored or
// settled from the source (touch), or, on a state no generation vouches
// for, the change as given (direct). A token that moved meanwhile was
// claimed again, by a change committed after this one whose claimer reads
// the source after it: the door looks again and settles what is pending.
func (s *State) settleClaimed(ctx context.Context, fid int64, gen, token string, direct func() (quota.PoolState, error)) (quota.PoolState, bool, error) {
	for attempt := 0; attempt < touchAttempts; attempt++ {
		if attempt > 0 {
			var err error
			if gen, token, err = s.eng.FamilyToken(ctx, fid); err != nil {
				return quota.PoolState{}, false, err
			}
		}
		if quota.FamilyNeeds(gen, token) == quota.NeedNothing {
			// Settled (attempt > 0), or no generation vouches for the
			// state (none yet, a rebuild runs, the family is another
			// generation's and the next judgement finds it stale): the
			// rebuild reads the change from the source; meanwhile the
			// change is applied as given.
			if attempt == 0 && direct != nil {
				ps, err := direct()
				return ps, false, err
			}
			ps, err := s.pool(ctx, fid)
			return ps, attempt > 0, err
		}
		if quota.FamilyNeeds(gen, token) == quota.NeedSettle {
			done, _, err := s.settleFrom(ctx, gen, fid, token)
			if err == nil {
				return done.Pool, true, nil
			}
			if !errors.Is(err, quota.ErrMoved) {
				return quota.PoolState{}, false, err
			}
			continue
		}
		err := s.touch(ctx, gen, []int64{fid}, map[int64]string{fid: token})
		if err != nil && !errors.Is(err, quota.ErrStale) { // stale: a rebuild began, look again
			return quota.PoolState{}, false, err
		}
	}
	return quota.PoolState{}, false, fmt.Errorf("judge: family %d kept being claimed (%d attempts)", fid, touchAttempts)
}

// pool is the family's pool of the current month.
func (s *State) pool(ctx context.Context, fid int64) (quota.PoolState, error) {
	f, err := s.eng.Family(ctx, fid)
	if err != nil {
		return quota.PoolState{}, err
	}
	return quota.PoolState{Remaining: f.Remaining, Total: f.Total, Month: f.Month}, nil
}

// Unsettled is for a caller whose change the source of truth committed but
// whose door call failed before it reached the door (its process stopped
// waiting, the call returned early): it claims the family, so the change
// is in effect before the family is judged again (its next judgement,
// write or read settles it from the source). When even the claim fails
// (Redis cannot be reached) it records, with the mark store, a family-write
// mark no Redis node holds (WithMarkStore), so every judgement finds the
// state stale and Redis is rebuilt from the source before the next
// decision. Its error wraps ErrUnsettled unless one of those held.
func (s *State) Unsettled(ctx context.Context, fid int64) error {
	if _, _, err := s.eng.Claim(ctx, fid); err != nil {
		return s.unsettled(ctx, fid, err)
	}
	return nil
}

// unsettled records that family fid's change could not be claimed
// (cause): a family-write mark no node holds (staleMark).
func (s *State) unsettled(ctx context.Context, fid int64, cause error) error {
	if err := s.staleMark(ctx); err != nil {
		return fmt.Errorf("%w: family %d: claiming it: %w; marking the state stale: %w", ErrUnsettled, fid, cause, err)
	}
	return nil
}

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

// Enforce applies a member's whole constraints, parsed once by the caller
// (policy.ParseConstraints), at version (ignored when the state holds a
// newer one) and reports the member's standing after it: retroactive
// enforcement. With a family source the door settles the family from it
// instead (Settle), the constraints and version SQL committed.
func (s *State) Enforce(ctx context.Context, fid, cid, version int64, c policy.Constraints) (quota.Enforcement, error) {
	if s.src != nil {
		var enf quota.Enforcement
		_, applied, err := s.claimed(ctx, fid, func() (quota.PoolState, error) {
			var err error
			enf, err = s.eng.Enforce(ctx, fid, cid, version, c)
			return quota.PoolState{}, err
		})
		if err != nil {
			return enf, err
		}
		if enf.Status.CustomerID == 0 {
			st, err := s.eng.Status(ctx, fid, cid)
			if err != nil {
				return enf, err
			}
			enf = quota.Enforcement{Applied: applied, Status: st}
		}
		return enf, nil
	}
	enf, err := s.eng.Enforce(ctx, fid, cid, version, c)
	if err != nil {
		return enf, err
	}
	return enf, s.mark(ctx, fid)
}

// enforce is Enforce without a family-write mark: the processor's
// policy-updated records, whose partitions' watermarks mark them. Versions
// order them; the family is brought to the source first.
func (s *State) enforce(ctx context.Context, fid, cid, version int64, c policy.Constraints) (quota.Enforcement, error) {
	if err := s.ensureRestored(ctx, fid); err != nil {
		return quota.Enforcement{}, err
	}
	return s.eng.Enforce(ctx, fid, cid, version, c)
}

// SetPlan sets the family's monthly plan (quota.Engine.SetPlan). With a
// family source the door settles the family from it instead (Settle): the
// plan SQL committed last, whatever order concurrent changes reach the
// door in; bytes is used only on a state no generation vouches for.
func (s *State) SetPlan(ctx context.Context, fid, bytes int64) (quota.PoolState, error) {
	return s.poolChange(ctx, fid, func() (quota.PoolState, error) { return s.eng.SetPlan(ctx, fid, bytes) })
}

// SetTopUps raises month's top-ups to the total SQL recorded
// (quota.Engine.SetTopUps); with a family source, as SetPlan.
func (s *State) SetTopUps(ctx context.Context, fid int64, month string, total int64) (quota.PoolState, error) {
	return s.poolChange(ctx, fid, func() (quota.PoolState, error) { return s.eng.SetTopUps(ctx, fid, month, total) })
}

func (s *State) poolChange(ctx context.Context, fid int64, change func() (quota.PoolState, error)) (quota.PoolState, error) {
	if s.src != nil {
		var direct quota.PoolState
		ps, _, err := s.claimed(ctx, fid, func() (quota.PoolState, error) {
			var err error
			direct, err = change()
			if err == nil && s.rearms != nil && len(direct.Rearmed) > 0 {
				if err := s.rearms.RecordRearms(ctx, fid, direct.Month, direct.Rearmed); err != nil {
					return direct, fmt.Errorf("%w: recording the re-armed thresholds: %w", ErrNotMarked, err)
				}
			}
			return direct, err
		})
		return ps, err
	}
	ps, err := change()
	if err != nil {
		return ps, err
	}
	return ps, s.poolWritten(ctx, fid, ps)
}

// SetThresholds sets the family's alert levels (quota.Engine.SetThresholds);
// with a family source, as SetPlan.
func (s *State) SetThresholds(ctx context.Context, fid int64, t policy.Thresholds) error {
	return s.familyChange(ctx, fid, func() error { return s.eng.SetThresholds(ctx, fid, t) })
}

// AddMember provisions a member (quota.Engine.AddMember); with a family
// source, as SetPlan.
func (s *State) AddMember(ctx context.Context, fid, cid int64) error {
	return s.familyChange(ctx, fid, func() error { return s.eng.AddMember(ctx, fid, cid) })
}

// RemoveMember removes a member; its next event is BLOCKED_NOT_MEMBER
// (quota.Engine.RemoveMember); with a family source, as SetPlan.
func (s *State) RemoveMember(ctx context.Context, fid, cid int64) error {
	return s.familyChange(ctx, fid, func() error { return s.eng.RemoveMember(ctx, fid, cid) })
}

func (s *State) familyChange(ctx context.Context, fid int64, change func() error) error {
	if s.src != nil {
		_, _, err := s.claimed(ctx, fid, func() (quota.PoolState, error) { return quota.PoolState{}, change() })
		return err
	}
	if err := change(); err != nil {
		return err
	}
	return s.mark(ctx, fid)
}

// Rebuilds: service/recovery.

// Restore writes a family's whole state read from SQL (quota.Engine.Restore)
// and, with a re-arm store (WithRearmStore), records the thresholds the
// restore re-armed (quota.Engine.RestoredRearms).
func (s *State) Restore(ctx context.Context, st quota.FamilyState) error {
	if err := s.recordRestoredRearms(ctx, st); err != nil {
		return err
	}
	return s.eng.Restore(ctx, st)
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
