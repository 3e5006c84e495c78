package store

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/internal/usertext"
)

// MaxNoteLength is the longest family note, in characters.
const MaxNoteLength = 1000

// FamilyNote is a care agent's (or an admin's) note on a family.
type FamilyNote struct {
	ID         int64
	FamilyID   int64
	AuthorID   int64
	AuthorName string // the author's name now ("" when unknown)
	Body       string
	CreatedAt  time.Time
}

// AddFamilyNote records a note on family fid by the back-office actor by,
// with a family-note.create audit row, in one transaction. The body is
// trimmed and stored in NFC; it holds 1 … MaxNoteLength characters, line
// feeds kept, no control or invisible characters. A family holds at most
// WithMaxFamilyNotes notes: one more is ErrConflict at familyId (counted
// under the family's row lock).
func (s *Store) AddFamilyNote(ctx context.Context, fid int64, body string, by Actor) (FamilyNote, error) {
	body = strings.TrimSpace(body)
	switch {
	case !utf8.ValidString(body):
		return FamilyNote{}, invalid("body", "must be UTF-8 text")
	case body == "":
		return FamilyNote{}, invalid("body", "is empty: write what the family called about")
	case utf8.RuneCountInString(body) > MaxNoteLength:
		return FamilyNote{}, invalid("body", "at most %d characters", MaxNoteLength)
	}
	if err := cleanText("body", &body, usertext.Lines); err != nil {
		return FamilyNote{}, err
	}
	if _, err := s.GetFamily(ctx, fid); err != nil {
		return FamilyNote{}, err
	}
	var out FamilyNote
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := s.lockFamily(ctx, tx, fid); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM family_note WHERE family_id = ?`, fid).Scan(&n); err != nil {
			return dbErr("family note", err)
		}
		if n >= s.maxNotes {
			return conflict("familyId", fmt.Sprintf("the family has %d notes, the most it may have", n), nil)
		}
		now := s.now()
		res, err := tx.ExecContext(ctx, `INSERT INTO family_note (family_id, author_id, body, created_at) VALUES (?, ?, ?, ?)`,
			fid, by.ID, body, s.t(now))
		if err != nil {
			return dbErr("family note", err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return dbErr("family note", err)
		}
		out = FamilyNote{ID: id, FamilyID: fid, AuthorID: by.ID, Body: body, CreatedAt: now.UTC().Truncate(time.Millisecond)}
		return s.audit(ctx, tx, fid, by, "family-note.create", "family-note:"+strconv.FormatInt(id, 10), nil, out)
	})
	if err != nil {
		return FamilyNote{}, err
	}
	if names, err := s.MemberNames(ctx, []int64{by.ID}); err == nil {
		out.AuthorName = names[by.ID]
	}
	return out, nil
}

// FamilyNotes returns family fid's notes, newest first, at most limit
// (1 … 500; 0: 100), with their authors' names.
func (s *Store) FamilyNotes(ctx context.Context, fid int64, limit int) ([]FamilyNote, error) {
	if limit < 0 || limit > 500 {
		return nil, invalid("limit", "must be 1..500")
	}
	if limit == 0 {
		limit = 100
	}
	if _, err := s.GetFamily(ctx, fid); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id, family_id, author_id, body, created_at FROM family_note
		WHERE family_id = ? ORDER BY id DESC LIMIT ?`, fid, limit)
	if err != nil {
		return nil, dbErr("family notes", err)
	}
	out, err := collect(rows, "family notes", func(sc scanner) (FamilyNote, error) {
		var n FamilyNote
		var at sqldialect.NullTime
		err := sc.Scan(&n.ID, &n.FamilyID, &n.AuthorID, &n.Body, &at)
		n.CreatedAt = at.Time
		return n, err
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []FamilyNote{}
	}
	authors := make([]int64, len(out))
	for i, n := range out {
		authors[i] = n.AuthorID
	}
	names, err := s.MemberNames(ctx, authors)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].AuthorName = names[out[i].AuthorID]
	}
	return out, nil
}
