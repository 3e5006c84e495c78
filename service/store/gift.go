package store

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"

	"github.com/dabom/dpcs/policy"
)

// Gift is data one member gives another of its family this month
// ("데이터 선물하기"): the giver's monthly limit is lowered by Bytes and the
// receiver's raised by as much (each member's LIMIT:DATA:GIFT:<YYYYMM>,
// received less given); daily limits do not move (a gift of a month's
// data, received on one day, is not that much more every day), nor does
// the family pool.
type Gift struct {
	FamilyID int64
	From, To int64 // the giver and the receiver, two members of the family
	Bytes    int64 // 1 … what the giver has left this month
	// GiverUsed is the giver's usage this month (the quota engine's): a
	// gift is at most the giver's monthly limit in effect minus it.
	GiverUsed int64
	By        Actor
}

// GiftResult is a gift made: the month it is for and the two policy
// updates, to push to the quota engine — the giver's first, so the
// family's members together are never allowed more than before.
type GiftResult struct {
	Month    string
	From, To PolicyUpdate
	// Left is what the giver has left to use this month after the gift.
	Left int64
}

// GiftData records a gift in one transaction: both members' policies
// (version + 1, policy.update audit rows, policy-updated events) and a
// data.gift audit row naming giver, receiver, bytes and month. Both must
// have a monthly limit (the giver's is the allowance to give; a receiver
// without one may already use the rest of the pool this month: 409), and
// Bytes be at most what the giver has left (422 says how much).
func (s *Store) GiftData(ctx context.Context, g Gift) (GiftResult, error) {
	var out GiftResult
	switch {
	case g.From == g.To:
		return out, invalid("toCustomerId", "give to another member of the family")
	case g.GiverUsed < 0:
		return out, invalid("giverUsed", "must be ≥ 0")
	}
	if err := checkBytes("amountBytes", g.Bytes, 1); err != nil {
		return out, err
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		// Members are locked in id order: two gifts between the same two
		// members in opposite directions do not deadlock.
		first, second := min(g.From, g.To), max(g.From, g.To)
		for _, id := range []int64{first, second} {
			if _, err := s.currentMember(ctx, tx, g.FamilyID, id, s.d.ForUpdate()); err != nil {
				return err
			}
		}
		read := func(id int64) (Policy, policy.Constraints, error) {
			p, err := s.policy(ctx, tx, g.FamilyID, id, s.d.ForUpdate())
			if err != nil {
				return p, policy.Constraints{}, err
			}
			c, err := policy.ParseConstraints(p.Rules)
			if err != nil {
				return p, c, fmt.Errorf("store: policy of member %d: %w", id, err)
			}
			return p, c, nil
		}
		_, from, err := read(g.From)
		if err != nil {
			return err
		}
		_, to, err := read(g.To)
		if err != nil {
			return err
		}
		mo := policy.MomentOf(s.now(), s.loc)
		_, monthly := from.EffectiveLimits(mo)
		switch {
		case monthly == nil:
			return conflict("fromCustomerId", "the giver has no monthly limit: it shares the family pool, so there is no allowance of its own to give", nil)
		case to.MonthlyLimit == nil:
			return conflict("toCustomerId", "the receiver has no monthly limit: a gift raises a monthly limit, and without one it may already use the family pool", nil)
		}
		left := max(*monthly-g.GiverUsed, 0)
		if g.Bytes > left {
			return invalid("amountBytes", "the giver has %d bytes left this month: at most that can be given", left)
		}
		given, received := from.Gifts[mo.Month]-g.Bytes, to.Gifts[mo.Month]+g.Bytes
		if given < -policy.MaxBytes || received > policy.MaxBytes {
			return invalid("amountBytes", "a month's gifts are at most %d bytes", policy.MaxBytes)
		}
		key := policy.KeyLimitGiftPrefix + mo.Month
		if err := s.writePolicy(ctx, tx, PolicyChange{FamilyID: g.FamilyID, CustomerID: g.From,
			Set: map[string]string{key: strconv.FormatInt(given, 10)}, By: g.By}, "policy.update", 0, &out.From); err != nil {
			return err
		}
		if err := s.writePolicy(ctx, tx, PolicyChange{FamilyID: g.FamilyID, CustomerID: g.To,
			Set: map[string]string{key: strconv.FormatInt(received, 10)}, By: g.By}, "policy.update", 0, &out.To); err != nil {
			return err
		}
		type gift struct {
			From   int64  `json:"fromCustomerId"`
			To     int64  `json:"toCustomerId"`
			Bytes  int64  `json:"amountBytes"`
			Month  string `json:"month"`
			Before int64  `json:"giverLeftBefore"`
		}
		out.Month, out.Left = mo.Month, left-g.Bytes
		return s.audit(ctx, tx, g.FamilyID, g.By, "data.gift", memberTarget(g.To), nil,
			gift{From: g.From, To: g.To, Bytes: g.Bytes, Month: mo.Month, Before: left})
	})
	if err != nil {
		return GiftResult{}, err
	}
	return out, nil
}
