package family

import (
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// Who may do what with owners' roles and passwords (doc/security.md,
// "Who can do what"), decided here and nowhere else. The anchors: Family
// Link and Screen Time let a parent reset a child's password and never
// another parent's (a co-parent's account is its own), and let the family's
// parents promote and remove parents.
//
//   - Roles: an OWNER of the family or an ADMIN promotes a member to OWNER
//     or demotes an owner (the family keeps one: the store's rule).
//   - Passwords: an ADMIN resets anyone's. An OWNER resets the password of
//     a member who is a MEMBER and was never an owner (store.Member
//     .EverOwner) — never its own (POST /me/password asks for the current
//     one), never another owner's, and never a demoted owner's: demoting a
//     co-owner, resetting its password and promoting it back would hand
//     the co-owner's login to the owner who did it.
//
// The password rule is judged inside the store's transaction that writes
// the password, on the member as it is then, under the family's row lock a
// role change takes too (store.Store.ResetPassword): a promotion cannot
// come between the decision and the write.

// mayChangeRole says whether by may change a member's role.
func mayChangeRole(by store.Actor) error {
	if by.Role == policy.RoleOwner || by.Role == policy.RoleAdmin || by == store.System {
		return nil
	}
	return ErrNotYours
}

// mayResetPassword says whether by may reset m's password.
func mayResetPassword(by store.Actor, m store.Member) error {
	switch {
	case by.Role == policy.RoleAdmin || by == store.System:
		return nil
	case by.Role != policy.RoleOwner:
		return ErrNotYours
	case m.ID == by.ID:
		return ErrOwnPassword
	case m.Role != policy.RoleMember || m.EverOwner:
		return ErrOwnerPassword
	}
	return nil
}
