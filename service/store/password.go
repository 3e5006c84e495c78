package store

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/dabom/dpcs/internal/password"
)

// ActionPassword is the audit action of a password change or reset. Its
// after JSON is a PasswordAudit: never a hash or a password.
const ActionPassword = "member.password"

// PasswordAudit is the after JSON of a member.password audit row.
type PasswordAudit struct {
	// Change is "self" (the member, with its current password) or "reset"
	// (an owner or an admin).
	Change string `json:"change"`
	// SessionsEnded is how many of the member's sessions it ended.
	SessionsEnded int64 `json:"sessionsEnded"`
}

// CheckPassword applies the password rules (doc/security.md, "Passwords";
// package internal/password): at least 8 characters, at most 72 bytes, not
// a common or breached password, not one of context (the member's id, phone
// or name). A refusal is a *FieldError at "password" written for the caller.
func CheckPassword(pw string, context ...string) error {
	msg := ""
	switch err := password.Check(pw, context...); {
	case err == nil:
		return nil
	case errors.Is(err, password.ErrTooShort):
		msg = "must be at least 8 characters"
	case errors.Is(err, password.ErrTooLong):
		msg = "must be at most 72 bytes (a Korean character takes 3)"
	case errors.Is(err, password.ErrContext):
		msg = "must not be the member's id, phone number or name"
	default:
		msg = "is too common or easily guessed: choose another, e.g. a few unrelated words"
	}
	return &FieldError{Field: "password", Msg: msg, Kind: ErrInvalid}
}

// HashPassword returns the bcrypt hash of password at the store's cost,
// after CheckPassword.
func (s *Store) HashPassword(password string) (string, error) {
	return s.hashPassword(password)
}

func (s *Store) hashPassword(pw string, context ...string) (string, error) {
	if err := CheckPassword(pw, context...); err != nil {
		return "", err
	}
	h, err := bcrypt.GenerateFromPassword([]byte(pw), s.cost)
	if err != nil {
		return "", &FieldError{Field: "password", Msg: "cannot be used as a password", Kind: ErrInvalid, Cause: err}
	}
	return string(h), nil
}

// memberContext is what a member's password may not be.
func memberContext(m Member) []string {
	return []string{strconv.FormatInt(m.ID, 10), m.Phone, m.Name}
}

// ChangePassword replaces member cid's password when current is its
// password (else ErrBadCredentials), and ends every session of the member
// but keep (the refresh rotation the change was made in; "" ends them all).
// It returns how many sessions it ended. next must pass CheckPassword.
// Removed members are ErrNotFound. Audited as member.password by the
// member.
func (s *Store) ChangePassword(ctx context.Context, cid int64, current, next, keep string) (int64, error) {
	m, err := s.member(ctx, s.db, cid, "")
	if err != nil {
		return 0, err
	}
	if m.DeletedAt != nil {
		return 0, notFound("member", cid)
	}
	hash, err := s.hashPassword(next, memberContext(m)...)
	if err != nil {
		return 0, err
	}
	var ended int64
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		m, err := s.member(ctx, tx, cid, s.d.ForUpdate())
		if err != nil {
			return err
		}
		if m.DeletedAt != nil {
			return notFound("member", cid)
		}
		if m.hash == "" || bcrypt.CompareHashAndPassword([]byte(m.hash), []byte(current)) != nil {
			return ErrBadCredentials
		}
		if ended, err = s.setPassword(ctx, tx, cid, hash, keep); err != nil {
			return err
		}
		return s.audit(ctx, tx, m.FamilyID, Actor{ID: m.ID, Role: m.Role}, ActionPassword, memberTarget(cid), nil,
			PasswordAudit{Change: "self", SessionsEnded: ended})
	})
	return ended, err
}

// ActionPasswordRefused is the audit action of a password reset the
// caller's rule refused (ResetPassword's may): who tried whose, and why.
const ActionPasswordRefused = "member.password.refused"

// ResetPassword sets the password of member cid of family fid (an owner's
// or an admin's reset) and ends every session of the member. It returns
// how many sessions it ended. pw must pass CheckPassword. A member of
// another family, or removed, is ErrNotFound. Audited as member.password
// by by.
//
// Who may reset whose password is the caller's to decide, in may, which
// is called inside the transaction that writes the password with the
// member as it is then (role, EverOwner), under the family's row lock that
// role changes take too (SetRole): no role change can come between the
// decision and the write. An error of may is returned as it is, after an
// audit row (ActionPasswordRefused) saying who tried; nil may allows all.
func (s *Store) ResetPassword(ctx context.Context, fid, cid int64, pw string, by Actor, may func(Member) error) (int64, error) {
	m, err := s.currentMember(ctx, s.db, fid, cid, "")
	if err != nil {
		return 0, err
	}
	hash, err := s.hashPassword(pw, memberContext(m)...)
	if err != nil {
		return 0, err
	}
	var ended int64
	var refused error
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := s.lockFamily(ctx, tx, fid); err != nil {
			return err
		}
		if m, err = s.currentMember(ctx, tx, fid, cid, s.d.ForUpdate()); err != nil {
			return err
		}
		if may != nil {
			if refused = may(m); refused != nil {
				return refused
			}
		}
		if ended, err = s.setPassword(ctx, tx, cid, hash, ""); err != nil {
			return err
		}
		return s.audit(ctx, tx, fid, by, ActionPassword, memberTarget(cid), nil, PasswordAudit{Change: "reset", SessionsEnded: ended})
	})
	if refused != nil && errors.Is(err, refused) {
		type attempt struct {
			Change string `json:"change"`
			Role   string `json:"role"`
			Reason string `json:"reason"`
		}
		if aerr := s.inTx(ctx, func(tx *sql.Tx) error {
			return s.audit(ctx, tx, fid, by, ActionPasswordRefused, memberTarget(cid), nil,
				attempt{Change: "reset", Role: string(m.Role), Reason: refused.Error()})
		}); aerr != nil {
			s.log.WarnContext(ctx, "store: auditing a refused password reset", "family", fid, "member", cid, "err", aerr)
		}
	}
	return ended, err
}

// setPassword writes cid's password hash and revokes its live refresh
// tokens but those of rotation keep, returning how many sessions (rotation
// families) that ended.
func (s *Store) setPassword(ctx context.Context, tx *sql.Tx, cid int64, hash, keep string) (int64, error) {
	now := s.t(s.now())
	if _, err := tx.ExecContext(ctx, `UPDATE members SET password_hash = ?, updated_at = ? WHERE id = ?`, hash, now, cid); err != nil {
		return 0, dbErr("set password", err)
	}
	var ended int64
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(DISTINCT rotation_id) FROM refresh_token WHERE customer_id = ? AND revoked_at IS NULL AND rotation_id <> ?`,
		cid, keep).Scan(&ended); err != nil {
		return 0, dbErr("set password", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE refresh_token SET revoked_at = ? WHERE customer_id = ? AND revoked_at IS NULL AND rotation_id <> ?`,
		now, cid, keep); err != nil {
		return 0, dbErr("set password", err)
	}
	return ended, nil
}

// PasswordSetSince reports whether member cid of family fid had its
// password changed or reset at or after since (its audit rows): why a
// session issued before then ended, for the words a refused refresh
// answers with.
func (s *Store) PasswordSetSince(ctx context.Context, fid, cid int64, since time.Time) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM audit_log WHERE family_id = ? AND action = ? AND target = ? AND created_at >= ?`,
		fid, ActionPassword, memberTarget(cid), s.t(since.UTC().Truncate(time.Millisecond))).Scan(&n)
	if err != nil {
		return false, dbErr("password set since", err)
	}
	return n > 0, nil
}
