package judge

import (
	"context"
	"errors"
	"fmt"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// Family writes through the door: each claims its family, settles it from
// SQL when it was not restored, writes, and says ErrUnsettled when it could
// not (service/family decides what that means for the caller).

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
