package family

import (
	"context"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/store"
)

// CreateFamily records a family (store.Store.CreateFamily), then provisions
// its pool and alert levels through the door.
func (s *Service) CreateFamily(ctx context.Context, f store.NewFamily, by store.Actor) (store.Family, error) {
	var fam store.Family
	err := s.unrelayed(ctx, f.ID, func() (Change, error) {
		var err error
		fam, err = s.store.CreateFamily(ctx, f, by)
		return Change{Kind: KindPlan, FamilyID: fam.ID, By: by}, err
	}, func(ctx context.Context) error {
		if _, err := s.door.SetPlan(ctx, fam.ID, fam.PlanBytes); err != nil {
			return err
		}
		if f.Thresholds != nil {
			return s.door.SetThresholds(ctx, fam.ID, f.Thresholds)
		}
		return nil
	})
	return fam, err
}

// SetPlan records a family's monthly plan (store.Store.SetPlan refuses one
// the engine would refuse before writing), then sets it through the door.
func (s *Service) SetPlan(ctx context.Context, fid, bytes int64, by store.Actor) (store.Family, error) {
	var f store.Family
	err := s.unrelayed(ctx, fid, func() (Change, error) {
		var err error
		f, err = s.store.SetPlan(ctx, fid, bytes, by)
		return Change{Kind: KindPlan, FamilyID: fid, By: by}, err
	}, func(ctx context.Context) error {
		_, err := s.door.SetPlan(ctx, f.ID, f.PlanBytes)
		return err
	})
	return f, err
}

// SetThresholds records a family's alert levels (canonical: see
// policy.Thresholds.Canonical), then sets them through the door.
func (s *Service) SetThresholds(ctx context.Context, fid int64, t policy.Thresholds, by store.Actor) (store.Family, error) {
	var f store.Family
	err := s.unrelayed(ctx, fid, func() (Change, error) {
		var err error
		f, err = s.store.SetThresholds(ctx, fid, t, by)
		return Change{Kind: KindThresholds, FamilyID: fid, By: by}, err
	}, func(ctx context.Context) error {
		return s.door.SetThresholds(ctx, fid, f.Thresholds)
	})
	return f, err
}

// TopUpResult is a recorded top-up and the pool after it.
type TopUpResult struct {
	store.TopUp
	// Pool is the month's pool after the top-up; zero when the quota
	// state did not take it (ErrNotApplied).
	Pool quota.PoolState
}

// TopUp records bytes added to this month's pool — one of the operator's
// offers bought (p names it, its price and VAT: the row and its audit row
// record them) or, with a zero p, the back office's top-up outside the
// offers — and raises the pool's top-ups through the door to the month's
// total SQL recorded (so a top-up whose door step failed is made good by
// the next one). ownLimit > 0 is the most the family's own members may add
// in a month (an owner's top-up, store.Store.AddOwnTopUp); 0: the back
// office's, bounded only by the pool's maximum.
func (s *Service) TopUp(ctx context.Context, fid, bytes int64, p store.Purchase, by store.Actor, ownLimit int64) (TopUpResult, error) {
	var out TopUpResult
	err := s.unrelayed(ctx, fid, func() (Change, error) {
		var err error
		switch {
		case p != (store.Purchase{}):
			out.TopUp, err = s.store.BuyTopUp(ctx, fid, bytes, p, by, ownLimit)
		case ownLimit > 0:
			out.TopUp, err = s.store.AddOwnTopUp(ctx, fid, bytes, by, ownLimit)
		default:
			out.TopUp, err = s.store.AddTopUp(ctx, fid, bytes, by)
		}
		return Change{Kind: KindTopUp, FamilyID: fid, By: by}, err
	}, func(ctx context.Context) error {
		var err error
		out.Pool, err = s.door.SetTopUps(ctx, fid, out.Month, out.MonthTotal)
		return err
	})
	return out, err
}
