package family

import (
	"context"

	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/store"
)

// PolicyResult is a member's policy after a change and its standing as
// the quota state reports it.
type PolicyResult struct {
	store.PolicyUpdate
	// Standing is the member's standing after the change; nil when the
	// quota state did not report it (the change then reaches it through
	// its policy-updated event).
	Standing *quota.MemberStatus
}

// ChangePolicy sets and removes a member's constraint keys, or replaces
// them (store.Store.UpdatePolicy: the policy row, its audit row and a
// policy-updated event in one transaction), then applies the member's
// whole constraints at the new version through the door (retroactive
// enforcement: Standing says whether the member is blocked now) and wakes
// the relay.
func (s *Service) ChangePolicy(ctx context.Context, c store.PolicyChange) (PolicyResult, error) {
	up, err := s.store.UpdatePolicy(ctx, c)
	if err != nil {
		return PolicyResult{}, err
	}
	return s.enforce(ctx, up, c.By)
}

// ApplyTemplate copies a template's rules into a member's policy
// (store.Store.ApplyTemplate), then as ChangePolicy.
func (s *Service) ApplyTemplate(ctx context.Context, fid, cid, templateID, expectedVersion int64, by store.Actor) (PolicyResult, error) {
	up, err := s.store.ApplyTemplate(ctx, fid, cid, templateID, expectedVersion, by)
	if err != nil {
		return PolicyResult{}, err
	}
	return s.enforce(ctx, up, by)
}

// Reapplied is one member's outcome of ReapplyTemplate: its policy after
// it, or why it was not re-applied.
type Reapplied struct {
	store.Reapply
	PolicyResult
	Err error
}

// ReapplyTemplate applies a template again to each member (each in its own
// transaction, store.Store.ReapplyTemplate), then as ChangePolicy for each
// member it changed or left as it was.
func (s *Service) ReapplyTemplate(ctx context.Context, templateID int64, ms []store.Reapply, by store.Actor) ([]Reapplied, error) {
	res, err := s.store.ReapplyTemplate(ctx, templateID, ms, by)
	if err != nil {
		return nil, err
	}
	out := make([]Reapplied, len(res))
	for i, r := range res {
		out[i] = Reapplied{Reapply: r.Reapply, Err: r.Err}
		if r.Err == nil {
			out[i].PolicyResult, out[i].Err = s.enforce(ctx, r.Update, by)
		}
	}
	return out, nil
}

// GrantException lifts a member's downtime (kind TIME) or an app's block
// (APP) for minutes (store.Store.GrantException), then as ChangePolicy.
func (s *Service) GrantException(ctx context.Context, fid, cid int64, kind, app string, minutes int64, by store.Actor) (PolicyResult, error) {
	up, _, err := s.store.GrantException(ctx, fid, cid, kind, app, minutes, by)
	if err != nil {
		return PolicyResult{}, err
	}
	return s.enforce(ctx, up, by)
}

// enforce brings a committed policy update to the quota state and tells
// the hooks. An update that changed nothing is applied too, at the current
// version (the door ignores a version it holds): a change whose door step
// failed converges when it is sent again.
func (s *Service) enforce(ctx context.Context, up store.PolicyUpdate, by store.Actor) (PolicyResult, error) {
	dctx, cancel := doorContext(ctx)
	defer cancel()
	out, err := s.applyPolicy(dctx, up)
	if up.Unchanged {
		// Nothing was written: nobody to tell, no event to relay.
		return out, nil
	}
	fid, cid := up.Policy.FamilyID, up.Policy.CustomerID
	return out, s.settled(ctx, Change{Kind: KindPolicy, FamilyID: fid, Members: []int64{cid}, By: by}, true, err)
}

// applyPolicy applies a member's whole constraints at the update's version
// through the door: the result with the member's standing, and the door's
// error.
func (s *Service) applyPolicy(ctx context.Context, up store.PolicyUpdate) (PolicyResult, error) {
	out := PolicyResult{PolicyUpdate: up}
	fid, cid := up.Policy.FamilyID, up.Policy.CustomerID
	if up.Policy.Version == 0 {
		// No policy was ever written: nothing to apply, only a standing.
		st, err := s.door.Status(ctx, fid, cid)
		if err == nil {
			out.Standing = &st
		}
		return out, err
	}
	enf, err := s.door.Enforce(ctx, fid, cid, up.Policy.Version, up.Constraints)
	if err == nil {
		st := enf.Status
		out.Standing = &st
	}
	return out, err
}
