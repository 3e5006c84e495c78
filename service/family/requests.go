package family

import (
	"context"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/store"
)

// CreateRequest records a member's request for more data or time
// (store.Store.CreateDataRequest: the row, its audit row and the owners'
// DATA_REQUESTED notification in one transaction) and wakes the relay.
// created is false when the request is the replay of one recorded with the
// same idempotency key.
func (s *Service) CreateRequest(ctx context.Context, r store.NewDataRequest, by store.Actor) (store.DataRequest, bool, error) {
	out, created, err := s.store.CreateDataRequest(ctx, r)
	if err != nil || !created {
		return out, created, err
	}
	s.wake()
	s.changed(ctx, Change{Kind: KindRequest, FamilyID: out.FamilyID, Members: []int64{out.CustomerID}, Applied: true, By: by})
	return out, true, nil
}

// Answer is an answered request and what the grant did.
type Answer struct {
	store.AnsweredDataRequest
	// Standing is the member's standing after an approval; nil when the
	// quota state did not report it.
	Standing *quota.MemberStatus
	// PolicyVersion is the member's policy version after a grant of data
	// or time (0: none).
	PolicyVersion int64
	// Pool is the pool after a TOPUP grant (nil: none, or not applied).
	Pool *quota.PoolState
}

// AnswerRequest records an answer (store.Store.AnswerDataRequest: one
// transaction with the grant, the audit rows and the member's
// notification), then brings the grant to the quota state — the policy
// with the extra allowance or exception (as ChangePolicy), or the top-up
// (as TopUp) — and wakes the relay. An identical retry applies the
// member's current policy again (the door ignores a version it holds), so
// a grant whose door step failed converges; a top-up is never added twice.
func (s *Service) AnswerRequest(ctx context.Context, ans store.DataRequestAnswer) (Answer, error) {
	if ans.Approve && ans.Grant == envelope.GrantTopUp {
		var out Answer
		err := s.unrelayed(ctx, ans.FamilyID, func() (Change, error) {
			var err error
			out, err = s.answer(ctx, ans)
			return Change{Kind: KindTopUp, FamilyID: ans.FamilyID, By: ans.By}, err
		}, func(ctx context.Context) error {
			if out.TopUp == nil {
				return nil // answered before: nothing to add
			}
			t := *out.TopUp
			pool, err := s.door.SetTopUps(ctx, t.FamilyID, t.Month, t.MonthTotal)
			if err == nil {
				out.Pool = &pool
			}
			return err
		})
		s.answered(ctx, ans, &out)
		return out, err
	}
	out, err := s.answer(ctx, ans)
	if err != nil {
		return out, err
	}
	if out.Policy != nil {
		pr, err := s.enforce(ctx, *out.Policy, ans.By)
		out.Standing, out.PolicyVersion = pr.Standing, pr.Policy.Version
		if err != nil {
			return out, err
		}
	}
	s.answered(ctx, ans, &out)
	return out, nil
}

// answer records the answer; a replay of an approval of data or time
// applies the member's current policy again.
func (s *Service) answer(ctx context.Context, ans store.DataRequestAnswer) (Answer, error) {
	res, err := s.store.AnswerDataRequest(ctx, ans)
	if err != nil {
		return Answer{}, err
	}
	out := Answer{AnsweredDataRequest: res}
	r := res.Request
	if res.Replayed && r.Status == store.RequestApproved && r.Grant != envelope.GrantTopUp {
		if err := s.reenforce(ctx, r.FamilyID, r.CustomerID, &out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// answered completes an answer: the member's standing after an approval,
// the relay woken and the hooks told.
func (s *Service) answered(ctx context.Context, ans store.DataRequestAnswer, out *Answer) {
	r := out.Request
	if r.Status == store.RequestApproved && out.Standing == nil && !out.Replayed {
		if st, err := s.door.Status(ctx, r.FamilyID, r.CustomerID); err == nil {
			out.Standing = &st
		}
	}
	if !out.Replayed {
		s.wake()
		s.changed(ctx, Change{Kind: KindRequest, FamilyID: r.FamilyID, Members: []int64{r.CustomerID}, Applied: true, By: ans.By})
	}
}

// reenforce applies the member's current policy from SQL again for a
// replayed approval (its first door step may have failed; a door with a
// family source settles the whole family from SQL) and reads the member's
// standing.
func (s *Service) reenforce(ctx context.Context, fid, cid int64, out *Answer) error {
	pol, err := s.store.GetPolicy(ctx, fid, cid)
	if err != nil || pol.Version == 0 {
		return nil // the member is gone or has no policy: nothing to apply
	}
	c, err := policy.ParseConstraints(pol.Rules)
	if err != nil {
		s.log.WarnContext(ctx, "family: stored policy does not parse", "family", fid, "customer", cid, "err", err)
		return nil
	}
	// Unchanged: the grant was recorded and told before.
	pr, err := s.enforce(ctx, store.PolicyUpdate{Policy: pol, Constraints: c, Unchanged: true}, store.System)
	out.Standing, out.PolicyVersion = pr.Standing, pol.Version
	return err
}
