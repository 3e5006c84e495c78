package family

import (
	"context"
	"errors"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// AddMember records a member (store.Store.AddMember), then provisions it
// through the door.
func (s *Service) AddMember(ctx context.Context, m store.NewMember, by store.Actor) (store.Member, error) {
	var mem store.Member
	err := s.unrelayed(ctx, m.FamilyID, func() (Change, error) {
		var err error
		mem, err = s.store.AddMember(ctx, m, by)
		return Change{Kind: KindMember, FamilyID: m.FamilyID, Members: []int64{mem.ID}, By: by}, err
	}, func(ctx context.Context) error {
		return s.door.AddMember(ctx, m.FamilyID, mem.ID)
	})
	return mem, err
}

// RemoveMember records a member's removal (its usage history stays; its
// logins and sessions end), then removes it through the door: its next
// event is BLOCKED_NOT_MEMBER. A member SQL already holds as removed is
// removed through the door again and the call answers store.ErrNotFound
// as before, so a retry of a removal whose door step failed converges.
func (s *Service) RemoveMember(ctx context.Context, fid, cid int64, by store.Actor) error {
	err := s.unrelayed(ctx, fid, func() (Change, error) {
		return Change{Kind: KindRemoved, FamilyID: fid, Members: []int64{cid}, By: by}, s.store.RemoveMember(ctx, fid, cid, by)
	}, func(ctx context.Context) error {
		return s.door.RemoveMember(ctx, fid, cid)
	})
	if errors.Is(err, store.ErrNotFound) && s.removed(ctx, fid, cid) {
		// A retry of a removal SQL holds: its first door step may have
		// failed before it claimed the family (a door with a family
		// source settles the family from SQL).
		if derr := s.door.RemoveMember(ctx, fid, cid); derr != nil {
			s.log.WarnContext(ctx, "family: removing a removed member again", "family", fid, "member", cid, "err", derr)
		}
	}
	return err
}

// removed says whether SQL holds cid as a removed member of fid.
func (s *Service) removed(ctx context.Context, fid, cid int64) bool {
	ms, err := s.store.ListMembers(ctx, fid, true)
	if err != nil {
		return false
	}
	for _, m := range ms {
		if m.ID == cid {
			return m.DeletedAt != nil
		}
	}
	return false
}

// SetRole promotes a member to OWNER or demotes an owner (the family keeps
// at least one owner; mayChangeRole says who may). A promotion marks the
// member as one who was an owner for good (store.Member.EverOwner): its
// password is the back office's to reset from then on, also after a
// demotion. Roles are not part of the quota state: nothing goes through
// the door.
func (s *Service) SetRole(ctx context.Context, fid, cid int64, role policy.Role, by store.Actor) (store.Member, error) {
	if err := mayChangeRole(by); err != nil {
		return store.Member{}, err
	}
	m, err := s.store.SetRole(ctx, fid, cid, role, by)
	if err != nil {
		return m, err
	}
	s.changed(ctx, Change{Kind: KindRole, FamilyID: fid, Members: []int64{cid}, Applied: true, By: by})
	return m, nil
}

// SetMinor marks a member as under 19 or not (mayChangeRole says who may):
// under the carriers' gift rules a minor only receives gifts. Not part of
// the quota state: nothing goes through the door.
func (s *Service) SetMinor(ctx context.Context, fid, cid int64, minor bool, by store.Actor) (store.Member, error) {
	if err := mayChangeRole(by); err != nil {
		return store.Member{}, err
	}
	m, err := s.store.SetMinor(ctx, fid, cid, minor, by)
	if err != nil {
		return m, err
	}
	s.changed(ctx, Change{Kind: KindMinor, FamilyID: fid, Members: []int64{cid}, Applied: true, By: by})
	return m, nil
}

// SetIMSI provisions the IMSI the network names member cid of family fid
// by (store.Store.SetMemberIMSI; "" removes it): the charging interface
// finds the member an SMF charges by it. The operator's provisioning does
// it, so only the back office (or the system) may: ErrNotYours for anyone
// else. An IMSI another current member has is a conflict.
func (s *Service) SetIMSI(ctx context.Context, fid, cid int64, imsi string, by store.Actor) error {
	if by.Role != policy.RoleAdmin && by != store.System {
		return ErrNotYours
	}
	if err := s.store.SetMemberIMSI(ctx, fid, cid, imsi, by); err != nil {
		return err
	}
	s.changed(ctx, Change{Kind: KindIMSI, FamilyID: fid, Members: []int64{cid}, Applied: true, By: by})
	return nil
}

// AddNote records a care agent's note on a family.
func (s *Service) AddNote(ctx context.Context, fid int64, body string, by store.Actor) (store.FamilyNote, error) {
	n, err := s.store.AddFamilyNote(ctx, fid, body, by)
	if err != nil {
		return n, err
	}
	s.changed(ctx, Change{Kind: KindNote, FamilyID: fid, Applied: true, By: by})
	return n, nil
}

// ResetPassword sets another member's password (store.Store.ResetPassword
// ends the member's sessions). mayResetPassword decides who may, inside
// the store's transaction that writes it (no role change comes between);
// a refusal is audited (store.ActionPasswordRefused).
func (s *Service) ResetPassword(ctx context.Context, fid, cid int64, password string, by store.Actor) error {
	if _, err := s.store.ResetPassword(ctx, fid, cid, password, by, func(m store.Member) error {
		return mayResetPassword(by, m)
	}); err != nil {
		return err
	}
	s.changed(ctx, Change{Kind: KindPassword, FamilyID: fid, Members: []int64{cid}, Applied: true, By: by})
	return nil
}

// Refusals of ResetPassword and SetRole.
var (
	ErrOwnPassword   = errors.New("family: change your own password with the current one")
	ErrOwnerPassword = errors.New("family: the password of a member who is or was an owner is reset by the back office")
	ErrNotYours      = errors.New("family: only an owner of the family or the back office may do this")
)
