package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/dabom/dpcs/internal/sqldialect"
)

// RefreshToken is a stored refresh token (only its hash is stored).
type RefreshToken struct {
	ID         int64
	CustomerID int64
	// RotationID groups the tokens of one login: each rotation's successor
	// carries it, and reusing any rotated token revokes them all.
	RotationID string
	CreatedAt  time.Time
	ExpiresAt  time.Time
}

func hashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

func (s *Store) random(n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(s.rand, b); err != nil {
		return nil, fmt.Errorf("store: random: %w", err)
	}
	return b, nil
}

// IssueRefreshToken starts a new rotation family for member cid and returns
// its first token (32 random bytes, base64url) valid for ttl.
func (s *Store) IssueRefreshToken(ctx context.Context, cid int64, ttl time.Duration) (string, RefreshToken, error) {
	if ttl <= 0 {
		return "", RefreshToken{}, invalid("ttl", "must be > 0")
	}
	rot, err := s.random(16)
	if err != nil {
		return "", RefreshToken{}, err
	}
	var token string
	var rt RefreshToken
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		m, err := s.member(ctx, tx, cid, "")
		if err != nil {
			return err
		}
		if m.DeletedAt != nil {
			return notFound("member", cid)
		}
		token, rt, err = s.insertToken(ctx, tx, cid, hex.EncodeToString(rot), ttl)
		return err
	})
	return token, rt, err
}

func (s *Store) insertToken(ctx context.Context, q querier, cid int64, rotation string, ttl time.Duration) (string, RefreshToken, error) {
	raw, err := s.random(32)
	if err != nil {
		return "", RefreshToken{}, err
	}
	token := base64.RawURLEncoding.EncodeToString(raw)
	now := s.now().UTC().Truncate(time.Millisecond)
	rt := RefreshToken{CustomerID: cid, RotationID: rotation, CreatedAt: now, ExpiresAt: now.Add(ttl)}
	res, err := q.ExecContext(ctx, `INSERT INTO refresh_token (token_hash, customer_id, rotation_id, created_at, expires_at) VALUES (?, ?, ?, ?, ?)`,
		hashToken(token), cid, rotation, s.t(rt.CreatedAt), s.t(rt.ExpiresAt))
	if err != nil {
		return "", RefreshToken{}, dbErr("issue refresh token", err)
	}
	if rt.ID, err = res.LastInsertId(); err != nil {
		return "", RefreshToken{}, dbErr("issue refresh token", err)
	}
	return token, rt, nil
}

// TokenReusedError is RotateRefreshToken's ErrTokenReused: it names the
// session (rotation family) the reuse revoked, so the caller can end what
// that session still has open.
type TokenReusedError struct {
	CustomerID int64
	RotationID string
	// IssuedAt is when the presented token was issued: what ended its
	// session came after it (SessionEnded).
	IssuedAt time.Time
}

func (e *TokenReusedError) Error() string {
	return fmt.Sprintf("%v: rotation family %s revoked", ErrTokenReused, e.RotationID)
}

// Unwrap makes errors.Is(err, ErrTokenReused) hold.
func (e *TokenReusedError) Unwrap() error { return ErrTokenReused }

// RotateRefreshToken exchanges token for a new one of the same rotation
// family, valid for ttl, and marks token used. Errors: ErrNotFound (unknown
// token, or its member was removed), ErrTokenExpired, and ErrTokenReused (a
// *TokenReusedError) when token was already rotated or revoked — then every
// token of its rotation family is revoked (doc/security.md, "Authentication flows": a stolen token's reuse
// ends the session).
func (s *Store) RotateRefreshToken(ctx context.Context, token string, ttl time.Duration) (string, RefreshToken, error) {
	if ttl <= 0 {
		return "", RefreshToken{}, invalid("ttl", "must be > 0")
	}
	var next string
	var rt RefreshToken
	var reused error
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var id, cid int64
		var rot string
		var created, exp, used, revoked sqldialect.NullTime
		err := tx.QueryRowContext(ctx, `SELECT id, customer_id, rotation_id, created_at, expires_at, used_at, revoked_at FROM refresh_token WHERE token_hash = ?`+s.d.ForUpdate(),
			hashToken(token)).Scan(&id, &cid, &rot, &created, &exp, &used, &revoked)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("refresh token", "")
		}
		if err != nil {
			return dbErr("rotate refresh token", err)
		}
		now := s.now()
		if used.Valid || revoked.Valid {
			if err := s.revokeRotation(ctx, tx, rot, now); err != nil {
				return err
			}
			reused = &TokenReusedError{CustomerID: cid, RotationID: rot, IssuedAt: created.Time}
			return nil // commit the revocation
		}
		if !now.Before(exp.Time) {
			return fmt.Errorf("%w: expired at %s", ErrTokenExpired, exp.Time.Format(time.RFC3339))
		}
		m, err := s.member(ctx, tx, cid, "")
		if err != nil {
			return err
		}
		if m.DeletedAt != nil {
			return notFound("member", cid)
		}
		res, err := tx.ExecContext(ctx, `UPDATE refresh_token SET used_at = ? WHERE id = ? AND used_at IS NULL AND revoked_at IS NULL`, s.t(now), id)
		if err != nil {
			return dbErr("rotate refresh token", err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			// Another rotation of the same token won the race: a reuse.
			if err := s.revokeRotation(ctx, tx, rot, now); err != nil {
				return err
			}
			reused = &TokenReusedError{CustomerID: cid, RotationID: rot, IssuedAt: created.Time}
			return nil
		}
		next, rt, err = s.insertToken(ctx, tx, cid, rot, ttl)
		return err
	})
	if err != nil {
		return "", RefreshToken{}, err
	}
	if reused != nil {
		return "", RefreshToken{}, reused
	}
	return next, rt, nil
}

func (s *Store) revokeRotation(ctx context.Context, q querier, rotation string, now time.Time) error {
	if _, err := q.ExecContext(ctx, `UPDATE refresh_token SET revoked_at = ? WHERE rotation_id = ? AND revoked_at IS NULL`, s.t(now), rotation); err != nil {
		return dbErr("revoke refresh tokens", err)
	}
	return nil
}

// RevokeRefreshToken revokes token's whole rotation family (logout) and
// returns the revoked token (CustomerID and RotationID name the session).
// Unknown tokens are ErrNotFound.
func (s *Store) RevokeRefreshToken(ctx context.Context, token string) (RefreshToken, error) {
	var rt RefreshToken
	var created, exp sqldialect.NullTime
	err := s.db.QueryRowContext(ctx, `SELECT id, customer_id, rotation_id, created_at, expires_at FROM refresh_token WHERE token_hash = ?`,
		hashToken(token)).Scan(&rt.ID, &rt.CustomerID, &rt.RotationID, &created, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return RefreshToken{}, notFound("refresh token", "")
	}
	if err != nil {
		return RefreshToken{}, dbErr("revoke refresh token", err)
	}
	rt.CreatedAt, rt.ExpiresAt = created.Time, exp.Time
	return rt, s.revokeRotation(ctx, s.db, rt.RotationID, s.now())
}

// MemberSession returns member cid as MemberByID does (removed members
// included, DeletedAt set) and whether its session rotation is live: some
// refresh token of that rotation family belongs to cid and is not revoked.
// Logout, a reuse, RevokeMemberTokens and RemoveMember end a session; so
// does pruning all of its tokens. One query, served by the rotation_id index.
func (s *Store) MemberSession(ctx context.Context, cid int64, rotation string) (Member, bool, error) {
	var live bool
	m, err := scanMember(scanFunc(func(dest ...any) error {
		return s.db.QueryRowContext(ctx, `SELECT `+memberCols+`, EXISTS (SELECT 1 FROM refresh_token r WHERE r.rotation_id = ? AND r.customer_id = members.id AND r.revoked_at IS NULL)
FROM members WHERE id = ?`, rotation, cid).Scan(append(dest, &live)...)
	}))
	if errors.Is(err, sql.ErrNoRows) {
		return Member{}, false, notFound("member", cid)
	}
	if err != nil {
		return Member{}, false, dbErr("member session", err)
	}
	return m, live, nil
}

// RevokeMemberTokens revokes every refresh token of member cid (logout
// everywhere, password change).
func (s *Store) RevokeMemberTokens(ctx context.Context, cid int64) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE refresh_token SET revoked_at = ? WHERE customer_id = ? AND revoked_at IS NULL`, s.t(s.now()), cid); err != nil {
		return dbErr("revoke refresh tokens", err)
	}
	return nil
}

// PruneRefreshTokens deletes tokens that expired before the given time and
// returns how many.
func (s *Store) PruneRefreshTokens(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM refresh_token WHERE expires_at < ?`, s.t(before))
	if err != nil {
		return 0, dbErr("prune refresh tokens", err)
	}
	return res.RowsAffected()
}
