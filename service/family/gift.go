package family

import (
	"context"
	"errors"

	"github.com/dabom/dpcs/service/store"
)

// GiftResult is a gift made: the gifts row, what the giver has left, and
// both members' policies after it (for the door and the hooks; what a
// caller is shown of them is the caller's to decide: the receiver's rules
// are not the giver's to read).
type GiftResult struct {
	Gift     store.GiftRecord
	Month    string
	From, To PolicyResult
	// Left is what the giver has left to give and use this month after the
	// gift (its monthly allowance without a day's extra, less its usage).
	Left int64
	// GiftsLeft is how many more gifts the giver may give this month (-1:
	// no rule counts them).
	GiftsLeft int
}

// Gift moves data from one member's monthly allowance to another's for
// this month under the carriers' rules (WithGiftRules; every refusal a
// *store.GiftRefusal naming its rule), judged in store.Store.GiftData's
// transaction: both policies, the gifts row, the audit rows, both
// policy-updated events and both members' DATA_GIFTED notifications (the
// receiver's and the giver's confirmation, in the outbox; the relay
// publishes them) at once. What the giver has used is read from the
// quota state through the door; the giver's cut is applied before the
// receiver's raise, so the family's members together are never allowed
// more than before. Gifts are never cancelled.
func (s *Service) Gift(ctx context.Context, g store.Gift) (GiftResult, error) {
	st, err := s.door.Status(ctx, g.FamilyID, g.From)
	if err != nil {
		return GiftResult{}, err
	}
	g.GiverUsed, g.Rules = st.MonthlyUsed, s.gifts
	res, err := s.store.GiftData(ctx, g)
	if err != nil {
		return GiftResult{}, err
	}
	out := GiftResult{Gift: res.Gift, Month: res.Month, Left: res.Left, GiftsLeft: res.GiftsLeft}
	dctx, cancel := doorContext(ctx)
	defer cancel()
	var errFrom, errTo error
	out.From, errFrom = s.applyPolicy(dctx, res.From)
	out.To, errTo = s.applyPolicy(dctx, res.To)
	return out, s.settled(ctx, Change{Kind: KindGift, FamilyID: g.FamilyID, Members: []int64{g.From, g.To}, By: g.By},
		true, errors.Join(errFrom, errTo))
}

// GiftRules are the rules Gift keeps (WithGiftRules).
func (s *Service) GiftRules() store.GiftRules { return s.gifts }
