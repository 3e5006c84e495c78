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

	"golang.org/x/crypto/bcrypt"

	"github.com/dabom/dpcs/internal/sqldialect"
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

func checkName(field, name string) error {
	if strings.TrimSpace(name) == "" {
		return invalid(field, "required")
	}
	if !utf8.ValidString(name) || utf8.RuneCountInString(name) > 100 {
		return invalid(field, "must be valid UTF-8 of at most 100 characters")
	}
	return nil
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
	if err := checkName("name", f.Name); err != nil {
		return Family{}, err
	}
	if err := checkBytes("planBytes", f.PlanBytes, 0); err != nil {
		return Family{}, err
	}
	if f.ID < 0 {
		return Family{}, invalid("id", "must be ≥ 0")
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

func scanFamily(sc interface{ Scan(...any) error }) (Family, error) {
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
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, dbErr("family ids", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
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
	// them without their separators, so any spelling of one finds it.
	const bare = `REPLACE(REPLACE(phone, '-', ''), ' ', '')`
	phone := strings.NewReplacer("-", "", " ", "").Replace(q)
	switch n, nerr := strconv.ParseInt(q, 10, 64); {
	case q == "":
		rows, err = s.db.QueryContext(ctx, `SELECT `+familyCols+` FROM families ORDER BY id LIMIT ?`, limit)
	case nerr == nil:
		rows, err = s.db.QueryContext(ctx, `SELECT `+familyCols+` FROM families WHERE id = ?
			OR id IN (SELECT family_id FROM members WHERE (id = ? OR `+bare+` = ?) AND family_id IS NOT NULL AND deleted_at IS NULL)
			OR name LIKE ? ESCAPE '!' ORDER BY id LIMIT ?`, n, n, phone, likePrefix(q), limit)
	default:
		rows, err = s.db.QueryContext(ctx, `SELECT `+familyCols+` FROM families WHERE name LIKE ? ESCAPE '!'
			OR id IN (SELECT family_id FROM members WHERE `+bare+` = ? AND family_id IS NOT NULL AND deleted_at IS NULL) ORDER BY id LIMIT ?`,
			likePrefix(q), phone, limit)
	}
	if err != nil {
		return nil, dbErr("search families", err)
	}
	defer rows.Close()
	var out []Family
	for rows.Next() {
		f, err := scanFamily(rows)
		if err != nil {
			return nil, dbErr("search families", err)
		}
		out = append(out, f)
	}
	return out, rows.Err()
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

// PoolLimitError is a top-up or plan the store refused because a month's
// pool — the plan plus that month's top-ups — would exceed policy.MaxBytes,
// which the quota engine refuses to hold (a top-up the engine refuses after
// its row was written would also make every later rebuild of the family
// fail). It wraps ErrInvalid and says what the caller can still do.
type PoolLimitError struct {
	// Field is the argument refused: "bytes" (a top-up) or "planBytes".
	Field string
	// Month (YYYYMM, service zone) is the pool that would overflow: for a
	// top-up the current month; for a plan the current or the previous
	// month (the engine still judges late events against last month's pool),
	// whichever holds more top-ups.
	Month string
	// Max is the largest value of Field still accepted: the bytes that can
	// still be topped up in Month (≤ 0: none), or the largest plan Month
	// allows (< 0: none, the month's top-ups alone are over the maximum —
	// rows written before the store checked them).
	Max int64
}

func (e *PoolLimitError) Error() string {
	head := fmt.Sprintf("%s: the plan plus %s's top-ups may total at most %d bytes: ", e.Field, e.Month, policy.MaxBytes)
	switch {
	case e.Field == "planBytes" && e.Max < 0:
		return head + "that month's top-ups alone are over it, so no plan fits until an operator corrects them"
	case e.Field == "planBytes":
		return head + fmt.Sprintf("with that month's top-ups the plan can be at most %d bytes", e.Max)
	case e.Max <= 0:
		return head + "the pool of that month is full, nothing can be topped up"
	}
	return head + fmt.Sprintf("at most %d bytes can still be topped up that month", e.Max)
}

// Unwrap makes a PoolLimitError an ErrInvalid.
func (e *PoolLimitError) Unwrap() error { return ErrInvalid }

// TopUp is a row of topups.
type TopUp struct {
	ID       int64
	FamilyID int64
	Bytes    int64
	// Month is the pool month it counts for, YYYYMM in the service zone.
	Month string
	// MonthTotal is the sum of Month's top-ups with this one, as the
	// transaction that recorded it saw it (quota.Engine.SetTopUps); not
	// audited.
	MonthTotal int64 `json:"-"`
	CreatedBy  int64
	CreatedAt  time.Time
}

// AddTopUp records bytes added to this month's pool (audited as
// family.topup). The caller also calls quota.Engine.SetTopUps with the
// month's total. A top-up that
// would take the plan plus this month's top-ups over policy.MaxBytes is a
// *PoolLimitError and writes nothing.
func (s *Store) AddTopUp(ctx context.Context, fid, bytes int64, by Actor) (TopUp, error) {
	return s.addTopUp(ctx, fid, bytes, by, 0)
}

// TopUpLimitError is a top-up by a family's own member refused because the
// month's top-ups by the family's members would exceed the limit
// (AddOwnTopUp). It wraps ErrInvalid, and a FieldError on "bytes" saying
// how much can still be added.
type TopUpLimitError struct {
	// Month (YYYYMM, service zone) is the month of the top-up.
	Month string
	// Limit is the most the family's members may top up in a month.
	Limit int64
	// Left is what they can still top up in Month (≥ 0).
	Left int64
}

func (e *TopUpLimitError) Error() string { return e.field().Error() }

func (e *TopUpLimitError) field() *FieldError {
	msg := fmt.Sprintf("the family's members may top up at most %d bytes a month: %d bytes can still be added in %s", e.Limit, e.Left, e.Month)
	if e.Left == 0 {
		msg = fmt.Sprintf("the family's members may top up at most %d bytes a month and %s's are used up: ask the back office", e.Limit, e.Month)
	}
	return &FieldError{Field: "bytes", Msg: msg, Kind: ErrInvalid}
}

// Unwrap makes a TopUpLimitError a *FieldError and an ErrInvalid.
func (e *TopUpLimitError) Unwrap() error { return e.field() }

// AddOwnTopUp is AddTopUp by a member of the family itself (an owner): it
// also refuses, inside the same transaction, a top-up that would take the
// month's top-ups made by the family's members (removed ones included) over
// monthlyLimit bytes, with a *TopUpLimitError, writing nothing. Top-ups by
// the back office and the system do not count. monthlyLimit must be ≥ 1.
func (s *Store) AddOwnTopUp(ctx context.Context, fid, bytes int64, by Actor, monthlyLimit int64) (TopUp, error) {
	if monthlyLimit < 1 {
		return TopUp{}, invalid("monthlyLimit", "must be ≥ 1")
	}
	return s.addTopUp(ctx, fid, bytes, by, monthlyLimit)
}

// addTopUp records a top-up; with ownLimit > 0, within that monthly limit
// of the family's members' top-ups.
func (s *Store) addTopUp(ctx context.Context, fid, bytes int64, by Actor, ownLimit int64) (TopUp, error) {
	if err := checkBytes("bytes", bytes, 1); err != nil {
		return TopUp{}, err
	}
	var t TopUp
	err := s.inTx(ctx, func(tx *sql.Tx) (err error) {
		t, err = s.insertTopUp(ctx, tx, fid, bytes, by, ownLimit)
		return err
	})
	return t, err
}

// insertTopUp records a top-up inside tx (see addTopUp), audited as
// family.topup.
func (s *Store) insertTopUp(ctx context.Context, tx *sql.Tx, fid, bytes int64, by Actor, ownLimit int64) (TopUp, error) {
	now := s.now()
	t := TopUp{FamilyID: fid, Bytes: bytes, Month: policy.MomentOf(now, s.loc).Month, CreatedBy: by.ID, CreatedAt: now.UTC().Truncate(time.Millisecond)}
	err := func() error {
		f, err := s.lockFamily(ctx, tx, fid)
		if err != nil {
			return err
		}
		sum, err := s.topUpSum(ctx, tx, fid, t.Month)
		if err != nil {
			return err
		}
		if room := policy.MaxBytes - f.PlanBytes - sum; bytes > room {
			return &PoolLimitError{Field: "bytes", Month: t.Month, Max: room}
		}
		if ownLimit > 0 {
			var own int64
			if err := tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(t.bytes), 0) FROM topups t JOIN members m ON m.id = t.created_by
				WHERE t.family_id = ? AND t.month = ? AND m.family_id = t.family_id`, fid, t.Month).Scan(&own); err != nil {
				return dbErr("top-ups", err)
			}
			if bytes > ownLimit-own {
				return &TopUpLimitError{Month: t.Month, Limit: ownLimit, Left: max(ownLimit-own, 0)}
			}
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO topups (family_id, bytes, month, created_by, created_at) VALUES (?, ?, ?, ?, ?)`,
			fid, bytes, t.Month, by.ID, s.t(now))
		if err != nil {
			return dbErr("top-up", err)
		}
		if t.ID, err = res.LastInsertId(); err != nil {
			return dbErr("top-up", err)
		}
		if err := s.audit(ctx, tx, fid, by, "family.topup", familyTarget(fid), nil, t); err != nil {
			return err
		}
		t.MonthTotal = sum + bytes
		return nil
	}()
	return t, err
}

// judgedMonths returns the pool months (YYYYMM, service zone) whose events the
// quota engine still judges at now: the current month, then the previous one
// (late events).
func (s *Store) judgedMonths(now time.Time) [2]string {
	lt := now.In(s.loc)
	mid := time.Date(lt.Year(), lt.Month(), 1, 12, 0, 0, 0, s.loc) // noon: clear of DST gaps at midnight
	return [2]string{policy.MomentOf(mid, s.loc).Month, policy.MomentOf(mid.AddDate(0, -1, 0), s.loc).Month}
}

// topUpSum returns the sum of the family's top-ups of month.
func (s *Store) topUpSum(ctx context.Context, q querier, fid int64, month string) (int64, error) {
	var sum int64
	if err := q.QueryRowContext(ctx, `SELECT COALESCE(SUM(bytes), 0) FROM topups WHERE family_id = ? AND month = ?`, fid, month).
		Scan(&sum); err != nil {
		return 0, dbErr("top-ups", err)
	}
	return sum, nil
}

// TopUps returns the family's top-ups of month (YYYYMM), oldest first.
func (s *Store) TopUps(ctx context.Context, fid int64, month string) ([]TopUp, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, family_id, bytes, month, created_by, created_at FROM topups
		WHERE family_id = ? AND month = ? ORDER BY id`, fid, month)
	if err != nil {
		return nil, dbErr("top-ups", err)
	}
	defer rows.Close()
	var out []TopUp
	for rows.Next() {
		var t TopUp
		var at sqldialect.NullTime
		if err := rows.Scan(&t.ID, &t.FamilyID, &t.Bytes, &t.Month, &t.CreatedBy, &at); err != nil {
			return nil, dbErr("top-ups", err)
		}
		t.CreatedAt = at.Time
		out = append(out, t)
	}
	return out, rows.Err()
}

// Member is a row of members: a family member (MEMBER / OWNER) or a
// back-office ADMIN (FamilyID 0).
type Member struct {
	ID        int64
	FamilyID  int64
	Name      string
	Phone     string
	Role      policy.Role
	CreatedAt time.Time
	UpdatedAt time.Time
	// DeletedAt is set for removed members (soft delete).
	DeletedAt *time.Time
	hash      string
}

// NewMember describes a member to add. ID 0 lets the database choose.
type NewMember struct {
	ID       int64
	FamilyID int64 // 0 only for role ADMIN
	Name     string
	Phone    string // optional; unique among current members
	Role     policy.Role
	// Password is hashed with bcrypt; PasswordHash (from HashPassword) is
	// used instead when set, so bulk seeding hashes once. Both empty: the
	// member cannot log in.
	Password     string
	PasswordHash string
}

// HashPassword returns the bcrypt hash of password at the store's cost.
func (s *Store) HashPassword(password string) (string, error) {
	if password == "" || len(password) > 72 {
		return "", invalid("password", "must be 1..72 bytes")
	}
	h, err := bcrypt.GenerateFromPassword([]byte(password), s.cost)
	if err != nil {
		return "", &FieldError{Field: "password", Msg: "cannot be used as a password", Kind: ErrInvalid, Cause: err}
	}
	return string(h), nil
}

const memberCols = `id, family_id, name, phone, password_hash, role, created_at, updated_at, deleted_at`

func scanMember(sc interface{ Scan(...any) error }) (Member, error) {
	var m Member
	var fid sql.NullInt64
	var phone, hash sql.NullString
	var role string
	var c, u, d sqldialect.NullTime
	if err := sc.Scan(&m.ID, &fid, &m.Name, &phone, &hash, &role, &c, &u, &d); err != nil {
		return Member{}, err
	}
	m.FamilyID, m.Phone, m.hash, m.Role = fid.Int64, phone.String, hash.String, policy.Role(role)
	m.CreatedAt, m.UpdatedAt = c.Time, u.Time
	if d.Valid {
		t := d.Time
		m.DeletedAt = &t
	}
	return m, nil
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// AddMember adds a member to a family, or an ADMIN (FamilyID 0), audited as
// member.add. A phone in use by a current member is ErrConflict. The caller
// also calls quota.Engine.AddMember.
func (s *Store) AddMember(ctx context.Context, m NewMember, by Actor) (Member, error) {
	switch {
	case !m.Role.Valid():
		return Member{}, invalid("role", "must be MEMBER, OWNER or ADMIN")
	case m.Role == policy.RoleAdmin && m.FamilyID != 0:
		return Member{}, invalid("familyId", "must be empty for ADMIN")
	case m.Role != policy.RoleAdmin && m.FamilyID <= 0:
		return Member{}, invalid("familyId", "required")
	case m.ID < 0:
		return Member{}, invalid("customerId", "must be ≥ 0")
	}
	if err := checkPhone(m.Phone); err != nil {
		return Member{}, err
	}
	if err := checkName("name", m.Name); err != nil {
		return Member{}, err
	}
	hash := m.PasswordHash
	if hash == "" && m.Password != "" {
		var err error
		if hash, err = s.HashPassword(m.Password); err != nil {
			return Member{}, err
		}
	}
	now := s.now()
	var out Member
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var fid, id any
		if m.FamilyID > 0 {
			if _, err := s.lockFamily(ctx, tx, m.FamilyID); err != nil {
				return err
			}
			fid = m.FamilyID
		}
		if m.ID > 0 {
			id = m.ID
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO members (id, family_id, name, phone, password_hash, role, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, id, fid, m.Name, nullStr(m.Phone), nullStr(hash), string(m.Role), s.t(now), s.t(now))
		if sqldialect.IsDuplicate(err) {
			return s.memberConflict(ctx, tx, m.ID, err)
		}
		if err != nil {
			return dbErr("add member", err)
		}
		cid, err := res.LastInsertId()
		if err != nil {
			return dbErr("add member", err)
		}
		if out, err = s.member(ctx, tx, cid, ""); err != nil {
			return err
		}
		return s.audit(ctx, tx, m.FamilyID, by, "member.add", memberTarget(cid), nil, out)
	})
	return out, err
}

// memberConflict says which unique key an insert of a member with id (0:
// assigned) violated: its id or its phone (unique among current members of
// every family — callers that must not learn about other families may not
// choose either; see service's add-member route).
func (s *Store) memberConflict(ctx context.Context, tx *sql.Tx, id int64, dup error) error {
	if id > 0 {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM members WHERE id = ?`, id).Scan(&n); err != nil {
			return dbErr("add member", err)
		}
		if n > 0 {
			return conflict("customerId", "this member id is taken: leave it out and one is assigned", dup)
		}
	}
	return conflict("phone", "this phone number belongs to another member", dup)
}

// checkPhone checks a phone's grammar: '0' or '+' first, then digits with
// single spaces or hyphens between them, at least 3 digits, at most 32
// bytes. A phone never reads as a member id (a decimal without a leading 0),
// so a numeric login is one or the other (see Authenticate).
func checkPhone(p string) error {
	if p == "" {
		return nil
	}
	bad := invalid("phone", "must be a phone number of at most 32 bytes: 0 or + first, then digits with single spaces or hyphens between them (e.g. 010-1234-5678 or +82 10 1234 5678)")
	if len(p) > 32 || (p[0] != '0' && p[0] != '+') {
		return bad
	}
	digits := 0
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c >= '0' && c <= '9':
			digits++
		case i == 0 && c == '+':
		case (c == ' ' || c == '-') && i > 0 && p[i-1] >= '0' && p[i-1] <= '9' && i+1 < len(p):
		default:
			return bad
		}
	}
	if digits < 3 {
		return bad
	}
	return nil
}

// loginKind tells the two login grammars apart: a member id is a positive
// decimal without a leading 0; a phone starts with 0 or + (checkPhone).
func loginKind(login string) (id int64, phone bool) {
	if login == "" {
		return 0, false
	}
	if login[0] == '0' || login[0] == '+' {
		return 0, true
	}
	for i := 0; i < len(login); i++ {
		if login[i] < '0' || login[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(login, 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, false
}

func (s *Store) member(ctx context.Context, q querier, cid int64, lock string) (Member, error) {
	m, err := scanMember(q.QueryRowContext(ctx, `SELECT `+memberCols+` FROM members WHERE id = ?`+lock, cid))
	if errors.Is(err, sql.ErrNoRows) {
		return Member{}, notFound("member", cid)
	}
	if err != nil {
		return Member{}, dbErr("get member", err)
	}
	return m, nil
}

// currentMember returns the member cid of family fid, ErrNotFound if it does
// not exist, was removed or belongs to another family.
func (s *Store) currentMember(ctx context.Context, q querier, fid, cid int64, lock string) (Member, error) {
	m, err := s.member(ctx, q, cid, lock)
	if err != nil {
		return Member{}, err
	}
	if m.DeletedAt != nil || m.FamilyID != fid || fid <= 0 {
		return Member{}, notFound("member", cid)
	}
	return m, nil
}

// GetMember returns the current (not removed) member cid of family fid.
func (s *Store) GetMember(ctx context.Context, fid, cid int64) (Member, error) {
	return s.currentMember(ctx, s.db, fid, cid, "")
}

// MemberByID returns the member or admin cid, removed ones included
// (DeletedAt set), whatever its family.
func (s *Store) MemberByID(ctx context.Context, cid int64) (Member, error) {
	return s.member(ctx, s.db, cid, "")
}

// MemberByPhone returns the current member or admin with that phone.
func (s *Store) MemberByPhone(ctx context.Context, phone string) (Member, error) {
	m, err := scanMember(s.db.QueryRowContext(ctx, `SELECT `+memberCols+` FROM members WHERE phone = ? AND deleted_at IS NULL`, phone))
	if errors.Is(err, sql.ErrNoRows) {
		return Member{}, notFound("member with phone", "")
	}
	if err != nil {
		return Member{}, dbErr("member by phone", err)
	}
	return m, nil
}

// ListMembers returns the family's current members by id; with removed, the
// removed ones too.
func (s *Store) ListMembers(ctx context.Context, fid int64, removed bool) ([]Member, error) {
	return s.listMembers(ctx, s.db, fid, removed)
}

func (s *Store) listMembers(ctx context.Context, q querier, fid int64, removed bool) ([]Member, error) {
	cond := ` AND deleted_at IS NULL`
	if removed {
		cond = ""
	}
	rows, err := q.QueryContext(ctx, `SELECT `+memberCols+` FROM members WHERE family_id = ?`+cond+` ORDER BY id`, fid)
	if err != nil {
		return nil, dbErr("list members", err)
	}
	defer rows.Close()
	var out []Member
	for rows.Next() {
		m, err := scanMember(rows)
		if err != nil {
			return nil, dbErr("list members", err)
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// Authenticate checks a login: a member id (a positive decimal without a
// leading 0) or a phone (0 or + first, as stored). The grammars do not
// overlap, so whoever chooses a member's id cannot make it capture another
// person's phone login. Unknown, removed or password-less members, wrong
// passwords and logins of neither grammar are all ErrBadCredentials.
func (s *Store) Authenticate(ctx context.Context, login, password string) (Member, error) {
	m, err := s.memberByLogin(ctx, login)
	if errors.Is(err, ErrNotFound) || (err == nil && (m.DeletedAt != nil || m.hash == "")) {
		// Spend the time of a comparison anyway, so timing does not tell
		// unknown logins from wrong passwords.
		s.dummyOnce.Do(func() { s.dummy, _ = bcrypt.GenerateFromPassword([]byte("dpcs"), s.cost) })
		_ = bcrypt.CompareHashAndPassword(s.dummy, []byte(password))
		return Member{}, ErrBadCredentials
	}
	if err != nil {
		return Member{}, err
	}
	if bcrypt.CompareHashAndPassword([]byte(m.hash), []byte(password)) != nil {
		return Member{}, ErrBadCredentials
	}
	return m, nil
}

// memberByLogin finds the member a login names: a member id (decimal),
// else a phone.
func (s *Store) memberByLogin(ctx context.Context, login string) (Member, error) {
	switch id, phone := loginKind(login); {
	case phone:
		return s.MemberByPhone(ctx, login)
	case id > 0:
		return s.member(ctx, s.db, id, "")
	}
	return Member{}, notFound("login", "")
}

// SetPassword replaces the member's password (audited as member.password,
// without the hash).
func (s *Store) SetPassword(ctx context.Context, cid int64, password string, by Actor) error {
	hash, err := s.HashPassword(password)
	if err != nil {
		return err
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		m, err := s.member(ctx, tx, cid, s.d.ForUpdate())
		if err != nil {
			return err
		}
		if m.DeletedAt != nil {
			return notFound("member", cid)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE members SET password_hash = ?, updated_at = ? WHERE id = ?`, hash, s.t(s.now()), cid); err != nil {
			return dbErr("set password", err)
		}
		return s.audit(ctx, tx, m.FamilyID, by, "member.password", memberTarget(cid), nil, nil)
	})
}

// SetRole changes a member's role to MEMBER or OWNER (audited as
// member.role). Demoting the family's last owner is ErrConflict. Between
// owners the last write wins.
func (s *Store) SetRole(ctx context.Context, fid, cid int64, role policy.Role, by Actor) (Member, error) {
	if role != policy.RoleMember && role != policy.RoleOwner {
		return Member{}, invalid("role", "must be MEMBER or OWNER")
	}
	var out Member
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := s.lockFamily(ctx, tx, fid); err != nil {
			return err
		}
		before, err := s.currentMember(ctx, tx, fid, cid, "")
		if err != nil {
			return err
		}
		if before.Role == policy.RoleOwner && role != policy.RoleOwner {
			if err := s.keepAnOwner(ctx, tx, fid, cid, "role"); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE members SET role = ?, updated_at = ? WHERE id = ?`, string(role), s.t(s.now()), cid); err != nil {
			return dbErr("set role", err)
		}
		if out, err = s.member(ctx, tx, cid, ""); err != nil {
			return err
		}
		return s.audit(ctx, tx, fid, by, "member.role", memberTarget(cid), map[string]string{"role": string(before.Role)}, map[string]string{"role": string(role)})
	})
	return out, err
}

// keepAnOwner fails with ErrConflict (a FieldError on field) when cid is the
// family's only current owner.
func (s *Store) keepAnOwner(ctx context.Context, tx *sql.Tx, fid, cid int64, field string) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM members WHERE family_id = ? AND role = ? AND deleted_at IS NULL AND id <> ?`,
		fid, string(policy.RoleOwner), cid).Scan(&n); err != nil {
		return dbErr("count owners", err)
	}
	if n == 0 {
		return conflict(field, "the member is the family's last owner: make another member an owner first", nil)
	}
	return nil
}

// RemoveMember soft-deletes a member (deleted_at set, audited as
// member.remove): its phone is released for reuse (the audit row keeps it),
// its refresh tokens are revoked and its push subscriptions deleted, its policy row and usage history stay.
// Removing the last owner is ErrConflict. The caller also calls
// quota.Engine.RemoveMember.
func (s *Store) RemoveMember(ctx context.Context, fid, cid int64, by Actor) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := s.lockFamily(ctx, tx, fid); err != nil {
			return err
		}
		before, err := s.currentMember(ctx, tx, fid, cid, "")
		if err != nil {
			return err
		}
		if before.Role == policy.RoleOwner {
			if err := s.keepAnOwner(ctx, tx, fid, cid, "customerId"); err != nil {
				return err
			}
		}
		now := s.t(s.now())
		if _, err := tx.ExecContext(ctx, `UPDATE members SET deleted_at = ?, phone = NULL, updated_at = ? WHERE id = ?`, now, now, cid); err != nil {
			return dbErr("remove member", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE refresh_token SET revoked_at = ? WHERE customer_id = ? AND revoked_at IS NULL`, now, cid); err != nil {
			return dbErr("remove member", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM push_subscriptions WHERE member_id = ?`, cid); err != nil {
			return dbErr("remove member", err)
		}
		return s.audit(ctx, tx, fid, by, "member.remove", memberTarget(cid), before, nil)
	})
}
