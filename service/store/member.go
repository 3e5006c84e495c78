package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/policy"
)

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
	// EverOwner: the member is or was once an OWNER (set when it is added
	// as one or promoted, never cleared). Who may reset whose password is
	// decided with it (service/family).
	EverOwner bool
	// Minor: the member is under 19, as an owner or the back office said
	// (SetMinor): under the carriers' gift rules it only receives gifts
	// (GiftRules.MinorsOnlyReceive).
	Minor bool
	hash  string
}

// NewMember describes a member to add. ID 0 lets the database choose.
type NewMember struct {
	ID       int64
	FamilyID int64 // 0 only for role ADMIN
	Name     string
	Phone    string // optional; unique among current members
	Role     policy.Role
	// Password is hashed with bcrypt after the password rules
	// (CheckPassword, with the member's name, phone and id); PasswordHash
	// (from HashPassword) is used instead when set, so bulk seeding hashes
	// once. Both empty: the member cannot log in.
	Password     string
	PasswordHash string
	// Minor marks the member as under 19 (Member.Minor).
	Minor bool
}

const memberCols = `id, family_id, name, phone, password_hash, role, created_at, updated_at, deleted_at, ever_owner, minor`

func scanMember(sc scanner) (Member, error) {
	var m Member
	var fid sql.NullInt64
	var phone, hash sql.NullString
	var role string
	var c, u, d sqldialect.NullTime
	if err := sc.Scan(&m.ID, &fid, &m.Name, &phone, &hash, &role, &c, &u, &d, &m.EverOwner, &m.Minor); err != nil {
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
		return Member{}, invalid("role", "must be MEMBER, OWNER, ADMIN or AGENT")
	case m.Role.BackOffice() && m.FamilyID != 0:
		return Member{}, invalid("familyId", "must be empty for ADMIN and AGENT")
	case !m.Role.BackOffice() && m.FamilyID <= 0:
		return Member{}, invalid("familyId", "required")
	case m.ID < 0 || m.ID > MaxMemberID:
		return Member{}, invalid("customerId", "must be 1..%d, or 0 to have one assigned", int64(MaxMemberID))
	}
	if err := checkPhone(m.Phone); err != nil {
		return Member{}, err
	}
	if err := cleanName("name", &m.Name); err != nil {
		return Member{}, err
	}
	hash := m.PasswordHash
	if hash == "" && m.Password != "" {
		ctx := []string{m.Name, m.Phone}
		if m.ID > 0 {
			ctx = append(ctx, strconv.FormatInt(m.ID, 10))
		}
		var err error
		if hash, err = s.hashPassword(m.Password, ctx...); err != nil {
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
			if err := s.roomInFamily(ctx, tx, m.FamilyID); err != nil {
				return err
			}
			fid = m.FamilyID
		}
		if m.ID > 0 {
			id = m.ID
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO members (id, family_id, name, phone, password_hash, role, created_at, updated_at, ever_owner, minor)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, id, fid, m.Name, nullStr(m.Phone), nullStr(hash), string(m.Role), s.t(now), s.t(now),
			m.Role == policy.RoleOwner, m.Minor && !m.Role.BackOffice())
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

// roomInFamily refuses a member more in family fid once it has
// maxMembers current members. The family's row is locked (lockFamily), so
// adds to one family count one after the other.
func (s *Store) roomInFamily(ctx context.Context, tx *sql.Tx, fid int64) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM members WHERE family_id = ? AND deleted_at IS NULL`, fid).Scan(&n); err != nil {
		return dbErr("add member", err)
	}
	if n >= s.maxMembers {
		return &FieldError{Field: "familyId", Kind: ErrConflict, Cause: ErrFamilyFull,
			Msg: fmt.Sprintf("the family has %d members, the most it may have: remove one before adding another", n)}
	}
	return nil
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

// MemberNames returns the names of the members among ids, removed ones
// included (a notification about a member removed since still names them);
// ids that name no member are left out. At most 1,000 ids.
func (s *Store) MemberNames(ctx context.Context, ids []int64) (map[int64]string, error) {
	out := make(map[int64]string, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	if len(ids) > 1000 {
		return nil, invalid("ids", "at most 1000")
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id, name FROM members WHERE id IN (`+
		strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",")+`)`, args...)
	if err != nil {
		return nil, dbErr("member names", err)
	}
	err = scanRows(rows, "member names", func(sc scanner) error {
		var id int64
		var name string
		if err := sc.Scan(&id, &name); err != nil {
			return err
		}
		out[id] = name
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
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
	return collect(rows, "list members", scanMember)
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

// SetRole changes a member's role to MEMBER or OWNER (audited as
// member.role); a promotion marks the member EverOwner for good. Demoting
// the family's last owner is ErrConflict. Between owners the last write
// wins. It holds the family's row lock, as ResetPassword does, so a reset
// judged on the member's role cannot interleave with a role change.
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
		if _, err := tx.ExecContext(ctx, `UPDATE members SET role = ?, ever_owner = ?, updated_at = ? WHERE id = ?`,
			string(role), before.EverOwner || role == policy.RoleOwner, s.t(s.now()), cid); err != nil {
			return dbErr("set role", err)
		}
		if out, err = s.member(ctx, tx, cid, ""); err != nil {
			return err
		}
		return s.audit(ctx, tx, fid, by, "member.role", memberTarget(cid), map[string]string{"role": string(before.Role)}, map[string]string{"role": string(role)})
	})
	return out, err
}

// SetMinor marks member cid of family fid as under 19 or not (audited as
// member.minor). Marking it as it is already writes nothing.
func (s *Store) SetMinor(ctx context.Context, fid, cid int64, minor bool, by Actor) (Member, error) {
	var out Member
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		before, err := s.currentMember(ctx, tx, fid, cid, s.d.ForUpdate())
		if err != nil {
			return err
		}
		if out = before; before.Minor == minor {
			return nil
		}
		if _, err := tx.ExecContext(ctx, `UPDATE members SET minor = ?, updated_at = ? WHERE id = ?`, minor, s.t(s.now()), cid); err != nil {
			return dbErr("set minor", err)
		}
		if out, err = s.member(ctx, tx, cid, ""); err != nil {
			return err
		}
		return s.audit(ctx, tx, fid, by, "member.minor", memberTarget(cid), map[string]bool{"minor": before.Minor}, map[string]bool{"minor": minor})
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
		if _, err := tx.ExecContext(ctx, `DELETE FROM member_imsi WHERE member_id = ?`, cid); err != nil {
			return dbErr("remove member", err)
		}
		return s.audit(ctx, tx, fid, by, "member.remove", memberTarget(cid), before, nil)
	})
}
