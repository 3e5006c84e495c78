package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"time"

	"github.com/dabom/dpcs/internal/sqldialect"
)

// Unsettled is a family with a change whose door step is not confirmed
// (family_settle): Token is the last writer's, Since when it wrote it.
type Unsettled struct {
	FamilyID int64
	Token    int64
	Since    time.Time
}

// Unsettle records, before a change of family fid that has no event of its
// own to bring it to the quota state (a plan, alert levels, a top-up, a
// member added or removed), that the change's door step is not confirmed
// yet, and returns the token that Settle takes once it is. A row a failed
// door step or a process that died left behind is found by Unsettled.
func (s *Store) Unsettle(ctx context.Context, fid int64) (int64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, err
	}
	token := int64(binary.BigEndian.Uint64(b[:]) >> 1)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM family_settle WHERE family_id = ?`, fid); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO family_settle (family_id, token, since) VALUES (?, ?, ?)`, fid, token, s.t(s.now()))
		return err
	})
	if err != nil {
		return 0, dbErr("unsettle family", err)
	}
	return token, nil
}

// Settle forgets fid's unconfirmed change recorded with token; a row a
// later Unsettle wrote stays.
func (s *Store) Settle(ctx context.Context, fid, token int64) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM family_settle WHERE family_id = ? AND token = ?`, fid, token); err != nil {
		return dbErr("settle family", err)
	}
	return nil
}

// UnsettledFamilies lists up to limit families whose unconfirmed change
// was recorded before before, oldest first.
func (s *Store) UnsettledFamilies(ctx context.Context, before time.Time, limit int) ([]Unsettled, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT family_id, token, since FROM family_settle WHERE since < ?
		ORDER BY since, family_id LIMIT ?`, s.t(before), limit)
	if err != nil {
		return nil, dbErr("unsettled families", err)
	}
	return collect(rows, "unsettled families", func(sc scanner) (Unsettled, error) {
		var u Unsettled
		var at sqldialect.NullTime
		err := sc.Scan(&u.FamilyID, &u.Token, &at)
		u.Since = at.Time
		return u, err
	})
}
