package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/internal/usertext"
	"github.com/dabom/dpcs/policy"
)

// Family is a row of families.
type Family struct {
	ID   int64
	Name string
	// PlanBytes is the monthly plan: the pool every month starts with.
	PlanBytes int64
	// Thresholds are the family's alert levels; nil means the engine default.
	Thresholds policy.Thresholds
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// NewFamily describes a family to create. ID 0 lets the database choose.
type NewFamily struct {
	ID         int64
	Name       string
	PlanBytes  int64
	Thresholds policy.Thresholds // nil: the engine default
}

// cleanName puts a family's or member's name in the form it is stored in
// (NFC), or refuses it naming field: empty, over envelope.MaxNameLen (100)
// characters (the names a DATA_GIFTED carries), or holding a character
// internal/usertext refuses.
func cleanName(field string, name *string) error {
	if strings.TrimSpace(*name) == "" {
		return invalid(field, "required")
	}
	if !utf8.ValidString(*name) || utf8.RuneCountInString(*name) > envelope.MaxNameLen {
		return invalid(field, "must be valid UTF-8 of at most %d characters", envelope.MaxNameLen)
	}
	return cleanText(field, name, usertext.Line)
}

func checkBytes(field string, n int64, min int64) error {
	if n < min || n > policy.MaxBytes {
		return invalid(field, "must be %d..%d bytes", min, policy.MaxBytes)
	}
	return nil
}

func thresholdsArg(t policy.Thresholds) (any, error) {
	if t == nil {
		return nil, nil
	}
	c, err := t.Canonical()
	if err != nil {
		return nil, fmt.Errorf("%w: thresholds: %w", ErrInvalid, err)
	}
	return c.String(), nil
}

// CreateFamily creates a family (audited as family.create).
func (s *Store) CreateFamily(ctx context.Context, f NewFamily, by Actor) (Family, error) {
	if err := cleanName("name", &f.Name); err != nil {
		return Family{}, err
	}
	if err := checkBytes("planBytes", f.PlanBytes, 0); err != nil {
		return Family{}, err
	}
	if f.ID < 0 || f.ID > MaxFamilyID {
		return Family{}, invalid("id", "must be 1..%d, or 0 to have one assigned", int64(MaxFamilyID))
	}
	thr, err := thresholdsArg(f.Thresholds)
	if err != nil {
		return Family{}, err
	}
	now := s.now()
	var out Family
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var id any
		if f.ID > 0 {
			id = f.ID
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO families (id, name, plan_bytes, thresholds, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?)`, id, f.Name, f.PlanBytes, thr, s.t(now), s.t(now))
		if sqldialect.IsDuplicate(err) { // the only unique key of families is its id
			return conflict("id", "a family with this id exists: leave the id out and one is assigned", err)
		}
		if err != nil {
			return dbErr("create family", err)
		}
		fid, err := res.LastInsertId()
		if err != nil {
			return dbErr("create family", err)
		}
		if out, err = s.family(ctx, tx, fid); err != nil {
			return err
		}
		return s.audit(ctx, tx, fid, by, "family.create", familyTarget(fid), nil, out)
	})
	return out, err
}

func familyTarget(fid int64) string { return "family:" + strconv.FormatInt(fid, 10) }
func memberTarget(cid int64) string { return "member:" + strconv.FormatInt(cid, 10) }

const familyCols = `id, name, plan_bytes, thresholds, created_at, updated_at`

func scanFamily(sc scanner) (Family, error) {
	var f Family
	var thr sql.NullString
	var c, u sqldialect.NullTime
	if err := sc.Scan(&f.ID, &f.Name, &f.PlanBytes, &thr, &c, &u); err != nil {
		return Family{}, err
	}
	if thr.Valid {
		t, err := policy.ParseThresholds(thr.String)
		if err != nil {
			return Family{}, fmt.Errorf("family %d: thresholds: %w", f.ID, err)
		}
		f.Thresholds = t
	}
	f.CreatedAt, f.UpdatedAt = c.Time, u.Time
	return f, nil
}

func (s *Store) family(ctx context.Context, q querier, fid int64) (Family, error) {
	f, err := scanFamily(q.QueryRowContext(ctx, `SELECT `+familyCols+` FROM families WHERE id = ?`, fid))
	if errors.Is(err, sql.ErrNoRows) {
		return Family{}, notFound("family", fid)
	}
	if err != nil {
		return Family{}, dbErr("get family", err)
	}
	return f, nil
}

// GetFamily returns the family fid.
func (s *Store) GetFamily(ctx context.Context, fid int64) (Family, error) {
	return s.family(ctx, s.db, fid)
}

// FamilyIDs returns the ids of families with id > after, ascending, at most
// limit (1..10000) — for paging through every family (rebuilds, reports).
func (s *Store) FamilyIDs(ctx context.Context, after int64, limit int) ([]int64, error) {
	if limit <= 0 || limit > 10000 {
		return nil, invalid("limit", "must be 1..10000")
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM families WHERE id > ? ORDER BY id LIMIT ?`, after, limit)
	if err != nil {
		return nil, dbErr("family ids", err)
	}
	return collect(rows, "family ids", func(sc scanner) (id int64, err error) {
		err = sc.Scan(&id)
		return id, err
	})
}

// FamilyIDRange is the smallest and the largest family id (ok false when
// there is no family): with FamilyIDs, a job can walk the families in
// ranges of ids, in an order of its own.
func (s *Store) FamilyIDRange(ctx context.Context) (lo, hi int64, ok bool, err error) {
	var min, max sql.NullInt64
	if err := s.db.QueryRowContext(ctx, `SELECT MIN(id), MAX(id) FROM families`).Scan(&min, &max); err != nil {
		return 0, 0, false, dbErr("family id range", err)
	}
	return min.Int64, max.Int64, min.Valid && max.Valid, nil
}

// SearchFamilies finds families for the back office: q is a family id, a
// member id or phone (exact; a phone's spaces and hyphens are ignored, and
// removed members are not searched), or a prefix of the family's name. At most
// limit (1..100) families, by id.
func (s *Store) SearchFamilies(ctx context.Context, q string, limit int) ([]Family, error) {
	if limit <= 0 || limit > 100 {
		return nil, invalid("limit", "must be 1..100")
	}
	q = strings.TrimSpace(q)
	var rows *sql.Rows
	var err error
	// Phones are stored as typed (010-1234-5678, +82 10 1234 5678): compare
	// them without their separators, so any spelling of one finds it, in
	// both its national and its international form.
	const bare = `REPLACE(REPLACE(phone, '-', ''), ' ', '')`
	national, intl := phoneForms(q)
	switch n, nerr := strconv.ParseInt(q, 10, 64); {
	case q == "":
		rows, err = s.db.QueryContext(ctx, `SELECT `+familyCols+` FROM families ORDER BY id LIMIT ?`, limit)
	case nerr == nil:
		rows, err = s.db.QueryContext(ctx, `SELECT `+familyCols+` FROM families WHERE id = ?
			OR id IN (SELECT family_id FROM members WHERE (id = ? OR `+bare+` IN (?, ?)) AND family_id IS NOT NULL AND deleted_at IS NULL)
			OR name LIKE ? ESCAPE '!' ORDER BY id LIMIT ?`, n, n, national, intl, likePrefix(q), limit)
	default:
		rows, err = s.db.QueryContext(ctx, `SELECT `+familyCols+` FROM families WHERE name LIKE ? ESCAPE '!'
			OR id IN (SELECT family_id FROM members WHERE `+bare+` IN (?, ?) AND family_id IS NOT NULL AND deleted_at IS NULL) ORDER BY id LIMIT ?`,
			likePrefix(q), national, intl, limit)
	}
	if err != nil {
		return nil, dbErr("search families", err)
	}
	return collect(rows, "search families", scanFamily)
}

// MatchedMembers returns the current members SearchFamilies would find a
// family by for q — the member with that id, or with that phone (spaces and
// hyphens ignored, national or international form) — so the back office
// can say which member matched; none for a q that is neither.
func (s *Store) MatchedMembers(ctx context.Context, q string) ([]Member, error) {
	q = strings.TrimSpace(q)
	if q == "" {
		return nil, nil
	}
	const bare = `REPLACE(REPLACE(phone, '-', ''), ' ', '')`
	national, intl := phoneForms(q)
	n, nerr := strconv.ParseInt(q, 10, 64)
	if nerr != nil {
		n = -1
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+memberCols+` FROM members WHERE (id = ? OR `+bare+` IN (?, ?))
		AND family_id IS NOT NULL AND deleted_at IS NULL ORDER BY id LIMIT 100`, n, national, intl)
	if err != nil {
		return nil, dbErr("matched members", err)
	}
	defer rows.Close()
	var out []Member
	for rows.Next() {
		m, err := scanMember(rows)
		if err != nil {
			return nil, dbErr("matched members", err)
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// koreaCode is the country code phones are written with besides their
// national form (010-… ≡ +82 10-…): the service's country.
const koreaCode = "+82"

// phoneForms returns q as a phone without separators (spaces, hyphens,
// dots, parentheses) in its national form ("01012345678") and its
// international one ("+821012345678"); q that is no phone number comes back
// as typed, twice.
func phoneForms(q string) (national, intl string) {
	var b strings.Builder
	for i, r := range q {
		switch {
		case r >= '0' && r <= '9', r == '+' && i == 0:
			b.WriteRune(r)
		case r == ' ', r == '-', r == '.', r == '(', r == ')':
		default:
			return q, q
		}
	}
	d := b.String()
	switch {
	case strings.HasPrefix(d, koreaCode):
		return "0" + strings.TrimPrefix(strings.TrimPrefix(d, koreaCode), "0"), d
	case strings.HasPrefix(d, "0") && len(d) > 1:
		return d, koreaCode + d[1:]
	}
	return d, d
}

// likePrefix escapes q for LIKE … ESCAPE '!' and appends %.
func likePrefix(q string) string {
	r := strings.NewReplacer("!", "!!", "%", "!%", "_", "!_")
	return r.Replace(q) + "%"
}

// SetPlan sets the family's monthly plan (audited as family.plan). The caller
// also calls quota.Engine.SetPlan. A plan that would take the pool of the
// current or the previous month (plan + that month's top-ups) over
// policy.MaxBytes is a *PoolLimitError and changes nothing.
func (s *Store) SetPlan(ctx context.Context, fid, bytes int64, by Actor) (Family, error) {
	if err := checkBytes("planBytes", bytes, 0); err != nil {
		return Family{}, err
	}
	check := func(tx *sql.Tx) error {
		// The plan is the base of every month's pool: it must fit beside
		// the top-ups of each month the engine still judges events for.
		var worst string
		most := int64(-1)
		for _, month := range s.judgedMonths(s.now()) {
			sum, err := s.topUpSum(ctx, tx, fid, month)
			if err != nil {
				return err
			}
			if sum > most {
				worst, most = month, sum
			}
		}
		if room := policy.MaxBytes - most; bytes > room {
			return &PoolLimitError{Field: "planBytes", Month: worst, Max: room}
		}
		return nil
	}
	return s.updateFamily(ctx, fid, by, "family.plan", check, `plan_bytes = ?`, bytes)
}

// SetThresholds sets the family's alert levels (audited as family.thresholds);
// nil restores the engine default, an empty list turns alerts off. The caller
// also calls quota.Engine.SetThresholds.
func (s *Store) SetThresholds(ctx context.Context, fid int64, t policy.Thresholds, by Actor) (Family, error) {
	thr, err := thresholdsArg(t)
	if err != nil {
		return Family{}, err
	}
	return s.updateFamily(ctx, fid, by, "family.thresholds", nil, `thresholds = ?`, thr)
}

// updateFamily sets one column of the locked family row, after check (when
// not nil) accepted the change.
func (s *Store) updateFamily(ctx context.Context, fid int64, by Actor, action string, check func(*sql.Tx) error,
	set string, arg any) (Family, error) {
	var after Family
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		before, err := s.lockFamily(ctx, tx, fid)
		if err != nil {
			return err
		}
		if check != nil {
			if err := check(tx); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE families SET `+set+`, updated_at = ? WHERE id = ?`, arg, s.t(s.now()), fid); err != nil {
			return dbErr(action, err)
		}
		if after, err = s.family(ctx, tx, fid); err != nil {
			return err
		}
		return s.audit(ctx, tx, fid, by, action, familyTarget(fid), before, after)
	})
	return after, err
}

func (s *Store) lockFamily(ctx context.Context, tx *sql.Tx, fid int64) (Family, error) {
	f, err := scanFamily(tx.QueryRowContext(ctx, `SELECT `+familyCols+` FROM families WHERE id = ?`+s.d.ForUpdate(), fid))
	if errors.Is(err, sql.ErrNoRows) {
		return Family{}, notFound("family", fid)
	}
	if err != nil {
		return Family{}, dbErr("get family", err)
	}
	return f, nil
}
