package store

import (
	"context"
	"errors"
	"time"
)

// ActionLockout is the audit action of a login locked after repeated failed
// attempts.
const ActionLockout = "auth.lockout"

// Lockout is a login's temporary lockout, as the API decided it.
type Lockout struct {
	// Login is the login as it was presented. AuditLockout keeps it only
	// when it reads as a member id or a phone number (their grammars:
	// digits, at most 32 bytes); anything else is free text typed by
	// anyone — a password typed into the login field, control characters —
	// and is not written.
	Login string `json:"login,omitempty"`
	// Kind is what Login read as: "id", "phone" or "other" (then Login is
	// not kept). Set by AuditLockout.
	Kind string `json:"kind,omitempty"`
	// Failures is how many consecutive failed attempts locked it.
	Failures int `json:"failures"`
	// Until is when the lockout ends.
	Until time.Time `json:"until"`
	// Address is the client address of the attempt that locked it.
	Address string `json:"address,omitempty"`
}

// AuditLockout writes an auth.lockout audit row by System (the attempts are
// anonymous). When the login names a member (as Authenticate resolves it,
// removed members included) the row is the member's (target member:<id>,
// its family); otherwise the target is "login". The row's after JSON is l
// with its login kept only as a member id or a phone (Lockout.Login): never
// a password, never free text.
func (s *Store) AuditLockout(ctx context.Context, l Lockout) error {
	switch id, phone := loginKind(l.Login); {
	case id > 0:
		l.Kind = "id"
	case phone && checkPhone(l.Login) == nil:
		l.Kind = "phone"
	default:
		l.Kind, l.Login = "other", ""
	}
	target, fid := "login", int64(0)
	m, err := s.memberByLogin(ctx, l.Login)
	switch {
	case err == nil:
		target, fid = memberTarget(m.ID), m.FamilyID
	case !errors.Is(err, ErrNotFound):
		return err
	}
	return s.audit(ctx, s.db, fid, System, ActionLockout, target, nil, l)
}
