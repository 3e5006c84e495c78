// Package family is DPCS's application layer: every change to a family —
// a member's policy (set, template, re-apply, exception, a request's
// grant), the plan, the alert levels, a top-up, a gift, members added,
// removed or given another role, a password reset, a request made or
// answered, a care agent's note — is one method of Service, which owns the
// whole sequence once:
//
//  1. the truth first: service/store writes the change, its audit rows and
//     its outbox events in one transaction (and refuses what the quota
//     engine would refuse, before writing);
//  2. then the door: the change is applied to the quota state through
//     judge.State (Door), so the family's next decision sees it;
//  3. then the relay is woken (outbox events) and the hooks are told
//     (WithOnChange: live screens, the charging function's
//     re-authorisations).
//
// What happens when the door step fails after the truth committed is
// decided in one place (Service.settled, doc/architecture.md "One place
// for each family change"): a change that also travels as an event is in
// effect once the processors apply it; any other is answered with
// ErrNotApplied — recorded, not yet in effect — and converges when it is
// sent again, because every method applies the truth's current state to
// the door even when SQL says nothing changed.
//
// The HTTP API (service/api) decodes and authorizes a request and calls
// one method; it holds no door write (its configuration takes the door's
// reads only), so a handler cannot skip a step. The charging interface
// (service/charging) and the back office call the same methods.
//
//	fam, err := family.New(st, door, family.WithWake(relay.Wake))
//	res, err := fam.ChangePolicy(ctx, store.PolicyChange{FamilyID: 100, CustomerID: 1,
//		Set: map[string]string{"BLOCK:ACCESS": "1"}, By: owner})
//	// res.Standing.Decision == policy.BlockedAccess: the child is blocked now
package family
