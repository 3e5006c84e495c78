package judge

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/dabom/dpcs/quota"
)

// Restore on touch: a family the state generation has not restored yet is
// restored from SQL (FamilySource) when a judgement or a write first
// touches it, under the family's claim.

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

// RestoreUnrestoredBatch is RestoreUnrestored for many families, seen[i]
// the token of sts[i] (quota.Engine.RestoreUnrestoredBatch: each restored
// or not on its own, a few round trips for the batch; the sweep's),
// every family's re-arms recorded before any is restored.
func (s *State) RestoreUnrestoredBatch(ctx context.Context, sts []quota.FamilyState, seen []string) ([]quota.RestoreOutcome, error) {
	for _, st := range sts {
		if err := s.recordRestoredRearms(ctx, st); err != nil {
			return nil, err
		}
	}
	return s.eng.RestoreUnrestoredBatch(ctx, sts, seen)
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
