package family

import (
	"context"
	"errors"

	"github.com/dabom/dpcs/service/store"
)

// GiftResult is a gift made: both members' policies after it.
type GiftResult struct {
	Month    string
	From, To PolicyResult
	// Left is what the giver has left to use this month after the gift.
	Left int64
}

// Gift moves data from one member's monthly allowance to another's for
// this month (store.Store.GiftData: both policies, the audit rows and both
// policy-updated events in one transaction). What the giver has left is
// read from the quota state through the door; the giver's cut is applied
// before the receiver's raise, so the family's members together are never
// allowed more than before.
func (s *Service) Gift(ctx context.Context, g store.Gift) (GiftResult, error) {
	st, err := s.door.Status(ctx, g.FamilyID, g.From)
	if err != nil {
		return GiftResult{}, err
	}
	g.GiverUsed = st.MonthlyUsed
	res, err := s.store.GiftData(ctx, g)
	if err != nil {
		return GiftResult{}, err
	}
	out := GiftResult{Month: res.Month, Left: res.Left}
	var errFrom, errTo error
	out.From, errFrom = s.applyPolicy(ctx, res.From)
	out.To, errTo = s.applyPolicy(ctx, res.To)
	return out, s.settled(ctx, Change{Kind: KindGift, FamilyID: g.FamilyID, Members: []int64{g.From, g.To}, By: g.By},
		true, errors.Join(errFrom, errTo))
}
