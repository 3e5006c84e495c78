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
	// Login is the login as it was presented (a member id or a phone).
	Login string `json:"login"`
	// Failures is how many consecutive failed attempts locked it.
	Failures int `json:"failures"`
	// Until is when the lockout ends.
	Until time.Time `json:"until"`
	// Address is the client address of the attempt that locked it.
	Address string `json:"address,omitempty"`
}

// AuditLockout writes an auth.lockout audit row by System. When the login
// names a member (as Authenticate resolves it, removed members included) the
// row is the member's (target member:<id>, its family); otherwise the target
// is "login". The row's after JSON is l: never a password.
func (s *Store) AuditLockout(ctx context.Context, l Lockout) error {
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
