package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dabom/dpcs/internal/sqldialect"
)

// The rows of the charging interface (service/charging, doc/wire-format.md
// "Charging (Nchf)"): the IMSIs operators set on members, and the charging
// sessions an SMF opened (charging_session).

// ChargingState is a charging session's state.
type ChargingState string

// A session is OPEN from its create until its release (or the sweep) closes
// it; CLOSING while the sweep releases its grants (a release the sweep began
// is finished by a later sweep if it fails); CLOSED afterwards.
const (
	ChargingOpen    ChargingState = "OPEN"
	ChargingClosing ChargingState = "CLOSING"
	ChargingClosed  ChargingState = "CLOSED"
)

// The widths of charging_session's texts: the charging interface refuses a
// longer notifyUri and cuts a longer subscriber or consumer name, so
// whatever it accepts the table stores (TestBoundsFitTheColumns).
const (
	MaxNotifyURILen  = 2048
	MaxSubscriberLen = 80
	MaxConsumerLen   = 255
)

// ChargingGrant is what a session holds for one rating group (on one UPF,
// when the SMF names it): the grant's id (the reservation across steps),
// the bytes granted at its last step and until when that answer is valid.
type ChargingGrant struct {
	RatingGroup uint32 `json:"rg"`
	// UPFID is the UPF whose quota it is (Nchf's uPFID), "" when the SMF
	// named none.
	UPFID      string    `json:"upf,omitempty"`
	GrantID    string    `json:"grantId"`
	Granted    int64     `json:"granted"`
	ValidUntil time.Time `json:"validUntil"`
}

// ChargingSession is a row of charging_session: one charging data resource.
type ChargingSession struct {
	Ref string
	// CreateKey names the create that opened it when that create carried a
	// charging id ("" otherwise): its retry finds this session.
	CreateKey  string
	FamilyID   int64
	MemberID   int64
	Subscriber string // as the request named it: msisdn-… or imsi-…
	Consumer   string // the NF consumer (its name, FQDN or address)
	NotifyURI  string // where REAUTHORIZATION goes ("" for none)
	State      ChargingState
	// LastSeq is the invocationSequenceNumber last answered (−1 before the
	// create was), LastOp what it was ("create", "update" or "release")
	// and Answer the answer's body, sent again to a retry of LastSeq.
	LastSeq int64
	LastOp  string
	Answer  []byte
	// Grants are the rating groups the session holds grants for, recorded
	// before they are asked for, so that the sweep can release them even
	// when the answer was never stored.
	Grants    []ChargingGrant
	ExpiresAt time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
}

const chargingCols = `ref, create_key, family_id, member_id, subscriber, consumer, notify_uri, state, last_seq, last_op, answer, grants, expires_at, created_at, updated_at`

func scanChargingSession(sc scanner) (ChargingSession, error) {
	var c ChargingSession
	var key, uri, answer sql.NullString
	var state, grants string
	var exp, created, updated sqldialect.NullTime
	if err := sc.Scan(&c.Ref, &key, &c.FamilyID, &c.MemberID, &c.Subscriber, &c.Consumer, &uri, &state, &c.LastSeq,
		&c.LastOp, &answer, &grants, &exp, &created, &updated); err != nil {
		return ChargingSession{}, err
	}
	c.CreateKey, c.NotifyURI, c.State = key.String, uri.String, ChargingState(state)
	if answer.Valid {
		c.Answer = []byte(answer.String)
	}
	if err := json.Unmarshal([]byte(grants), &c.Grants); err != nil {
		return ChargingSession{}, fmt.Errorf("charging session %s: grants: %w", c.Ref, err)
	}
	c.ExpiresAt, c.CreatedAt, c.UpdatedAt = exp.Time, created.Time, updated.Time
	return c, nil
}

func grantsJSON(g []ChargingGrant) (string, error) {
	if g == nil {
		g = []ChargingGrant{}
	}
	b, err := json.Marshal(g)
	return string(b), err
}

func nullBytes(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// OpenChargingSession inserts c (state OPEN; its CreatedAt and UpdatedAt
// are the store's now) and returns it with created true, in one statement. When c.CreateKey
// names a session already opened by the same create (its retry), that
// session is returned instead, with created false; any other session keeps
// its own ref, so two creates without a key are always two sessions.
func (s *Store) OpenChargingSession(ctx context.Context, c ChargingSession) (ChargingSession, bool, error) {
	if c.Ref == "" {
		return ChargingSession{}, false, invalid("ref", "required")
	}
	grants, err := grantsJSON(c.Grants)
	if err != nil {
		return ChargingSession{}, false, err
	}
	now := s.now()
	c.State, c.CreatedAt, c.UpdatedAt = ChargingOpen, now, now
	_, err = s.db.ExecContext(ctx, `INSERT INTO charging_session (`+chargingCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		c.Ref, nullStr(c.CreateKey), c.FamilyID, c.MemberID, c.Subscriber, c.Consumer, nullStr(c.NotifyURI), string(c.State),
		c.LastSeq, c.LastOp, nullBytes(c.Answer), grants, s.t(c.ExpiresAt), s.t(now), s.t(now))
	if sqldialect.IsDuplicate(err) && c.CreateKey != "" {
		prev, perr := scanChargingSession(s.db.QueryRowContext(ctx, `SELECT `+chargingCols+` FROM charging_session WHERE create_key = ?`, c.CreateKey))
		if perr == nil {
			return prev, false, nil
		}
		if !errors.Is(perr, sql.ErrNoRows) {
			return ChargingSession{}, false, dbErr("open charging session", perr)
		}
	}
	if err != nil {
		return ChargingSession{}, false, dbErr("open charging session", err)
	}
	return c, true, nil // as inserted: nothing to read back
}

// ChargingSession returns the session ref, whatever its state
// (ErrNotFound when there is none).
func (s *Store) ChargingSession(ctx context.Context, ref string) (ChargingSession, error) {
	c, err := scanChargingSession(s.db.QueryRowContext(ctx, `SELECT `+chargingCols+` FROM charging_session WHERE ref = ?`, ref))
	if errors.Is(err, sql.ErrNoRows) {
		return ChargingSession{}, notFound("charging session", ref)
	}
	if err != nil {
		return ChargingSession{}, dbErr("charging session", err)
	}
	return c, nil
}

// ChargingStep is what one answered step writes to its session.
type ChargingStep struct {
	Seq       int64  // the invocationSequenceNumber answered
	Op        string // "create", "update" or "release"
	Answer    []byte
	Grants    []ChargingGrant
	ExpiresAt time.Time
	// State is the session's state afterwards: OPEN, or CLOSED after a
	// release.
	State ChargingState
}

// SetChargingGrants records the rating groups session ref is about to ask
// grants for (before it asks), while it is OPEN with last_seq seq.
func (s *Store) SetChargingGrants(ctx context.Context, ref string, seq int64, grants []ChargingGrant) (bool, error) {
	g, err := grantsJSON(grants)
	if err != nil {
		return false, err
	}
	return s.updateOne(ctx, "charging grants", `UPDATE charging_session SET grants = ?, updated_at = ? WHERE ref = ? AND state = ? AND last_seq = ?`,
		g, s.t(s.now()), ref, string(ChargingOpen), seq)
}

// SetChargingNotifyURI records where session ref's notifications go from
// now on (an update named another notifyUri), while it is OPEN with
// last_seq seq.
func (s *Store) SetChargingNotifyURI(ctx context.Context, ref string, seq int64, uri string) (bool, error) {
	return s.updateOne(ctx, "charging notify uri", `UPDATE charging_session SET notify_uri = ?, updated_at = ? WHERE ref = ? AND state = ? AND last_seq = ?`,
		nullStr(uri), s.t(s.now()), ref, string(ChargingOpen), seq)
}

// updateOne runs an UPDATE of one row and reports whether it changed it.
func (s *Store) updateOne(ctx context.Context, what, q string, args ...any) (bool, error) {
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return false, dbErr(what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, dbErr(what, err)
	}
	return n == 1, nil
}

// ExpiredChargingSessions returns up to limit sessions, oldest expiry
// first, that are OPEN past their expiry or CLOSING (a sweep began closing
// them) at now.
func (s *Store) ExpiredChargingSessions(ctx context.Context, now time.Time, limit int) ([]ChargingSession, error) {
	if limit <= 0 || limit > 10_000 {
		return nil, invalid("limit", "must be 1..10000")
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+chargingCols+` FROM charging_session
		WHERE state IN (?, ?) AND expires_at <= ? ORDER BY expires_at LIMIT ?`,
		string(ChargingOpen), string(ChargingClosing), s.t(now), limit)
	if err != nil {
		return nil, dbErr("expired charging sessions", err)
	}
	return scanChargingSessions(rows, "expired charging sessions")
}

// BeginClosingChargingSession moves session ref from OPEN at last_seq seq to
// CLOSING; false when it is no longer there (a step came meanwhile).
func (s *Store) BeginClosingChargingSession(ctx context.Context, ref string, seq int64) (bool, error) {
	return s.updateOne(ctx, "close charging session", `UPDATE charging_session SET state = ?, updated_at = ? WHERE ref = ? AND state = ? AND last_seq = ?`,
		string(ChargingClosing), s.t(s.now()), ref, string(ChargingOpen), seq)
}

// FinishClosingChargingSession moves session ref from CLOSING to CLOSED.
func (s *Store) FinishClosingChargingSession(ctx context.Context, ref string) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE charging_session SET state = ?, updated_at = ? WHERE ref = ? AND state = ?`,
		string(ChargingClosed), s.t(s.now()), ref, string(ChargingClosing)); err != nil {
		return dbErr("close charging session", err)
	}
	return nil
}

// PurgeChargingSessions deletes up to limit sessions CLOSED before before
// and reports how many it deleted. A closed session is kept a while so a
// retried release is answered as the first was.
func (s *Store) PurgeChargingSessions(ctx context.Context, before time.Time, limit int) (int64, error) {
	if limit <= 0 || limit > 10_000 {
		return 0, invalid("limit", "must be 1..10000")
	}
	res, err := s.db.ExecContext(ctx, `DELETE FROM charging_session WHERE ref IN (SELECT ref FROM (SELECT ref FROM charging_session
		WHERE state = ? AND updated_at < ? ORDER BY updated_at LIMIT ?) old)`, string(ChargingClosed), s.t(before), limit)
	if err != nil {
		return 0, dbErr("purge charging sessions", err)
	}
	return res.RowsAffected()
}

// LiveChargingSessions returns the OPEN sessions of member mid of family
// fid, or of every member of the family when mid is 0.
func (s *Store) LiveChargingSessions(ctx context.Context, fid, mid int64) ([]ChargingSession, error) {
	q, args := `SELECT `+chargingCols+` FROM charging_session WHERE family_id = ? AND state = ?`, []any{fid, string(ChargingOpen)}
	if mid != 0 {
		q, args = `SELECT `+chargingCols+` FROM charging_session WHERE family_id = ? AND member_id = ? AND state = ?`,
			[]any{fid, mid, string(ChargingOpen)}
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY ref`, args...)
	if err != nil {
		return nil, dbErr("live charging sessions", err)
	}
	return scanChargingSessions(rows, "live charging sessions")
}

// OpenChargingSessionsAfter returns up to limit OPEN sessions of any
// family whose refs sort after after, in ref order: a scan of every live
// session a page at a time (after "" starts it; the last ref of a page
// continues it), for a change that is no family's, such as an app moved to
// another category in the catalog.
func (s *Store) OpenChargingSessionsAfter(ctx context.Context, after string, limit int) ([]ChargingSession, error) {
	if limit <= 0 || limit > 10_000 {
		return nil, invalid("limit", "must be 1..10000")
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+chargingCols+` FROM charging_session WHERE ref > ? AND state = ? ORDER BY ref LIMIT ?`,
		after, string(ChargingOpen), limit)
	if err != nil {
		return nil, dbErr("open charging sessions", err)
	}
	return scanChargingSessions(rows, "open charging sessions")
}

func scanChargingSessions(rows *sql.Rows, op string) ([]ChargingSession, error) {
	return collect(rows, op, func(sc scanner) (ChargingSession, error) { return scanChargingSession(sc) })
}

// checkIMSI checks an IMSI's grammar: 5 to 15 decimal digits (its MCC, MNC
// and MSIN).
func checkIMSI(imsi string) error {
	if len(imsi) < 5 || len(imsi) > 15 || strings.Trim(imsi, "0123456789") != "" {
		return invalid("imsi", "must be an IMSI: 5 to 15 digits, e.g. 450051234567890")
	}
	return nil
}

// SetMemberIMSI sets (or, with imsi "", clears) the IMSI of member cid of
// family fid, audited as member.imsi. An IMSI another current member has is
// ErrConflict; one a removed member had is taken over.
func (s *Store) SetMemberIMSI(ctx context.Context, fid, cid int64, imsi string, by Actor) error {
	if imsi != "" {
		if err := checkIMSI(imsi); err != nil {
			return err
		}
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := s.lockFamily(ctx, tx, fid); err != nil {
			return err
		}
		if _, err := s.currentMember(ctx, tx, fid, cid, ""); err != nil {
			return err
		}
		var before sql.NullString
		if err := tx.QueryRowContext(ctx, `SELECT imsi FROM member_imsi WHERE member_id = ?`, cid).Scan(&before); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return dbErr("set imsi", err)
		}
		if before.String == imsi {
			return nil
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM member_imsi WHERE member_id = ?
			OR (imsi = ? AND member_id IN (SELECT id FROM members WHERE deleted_at IS NOT NULL))`, cid, imsi); err != nil {
			return dbErr("set imsi", err)
		}
		if imsi != "" {
			_, err := tx.ExecContext(ctx, `INSERT INTO member_imsi (imsi, member_id, updated_at) VALUES (?, ?, ?)`, imsi, cid, s.t(s.now()))
			if sqldialect.IsDuplicate(err) {
				return conflict("imsi", "this IMSI belongs to another member", err)
			}
			if err != nil {
				return dbErr("set imsi", err)
			}
		}
		type imsiRow struct {
			IMSI string `json:"imsi,omitempty"`
		}
		return s.audit(ctx, tx, fid, by, "member.imsi", memberTarget(cid), imsiRow{before.String}, imsiRow{imsi})
	})
}

// MemberIMSI returns the IMSI set on member cid ("" for none).
func (s *Store) MemberIMSI(ctx context.Context, cid int64) (string, error) {
	var imsi string
	err := s.db.QueryRowContext(ctx, `SELECT imsi FROM member_imsi WHERE member_id = ?`, cid).Scan(&imsi)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", dbErr("member imsi", err)
	}
	return imsi, nil
}

// MemberByIMSI returns the current family member whose IMSI is imsi.
func (s *Store) MemberByIMSI(ctx context.Context, imsi string) (Member, error) {
	m, err := scanMember(s.db.QueryRowContext(ctx, `SELECT `+memberCols+` FROM members WHERE id = (SELECT member_id FROM member_imsi WHERE imsi = ?)
		AND deleted_at IS NULL AND family_id IS NOT NULL`, imsi))
	if errors.Is(err, sql.ErrNoRows) {
		return Member{}, notFound("member with imsi", imsi)
	}
	if err != nil {
		return Member{}, dbErr("member by imsi", err)
	}
	return m, nil
}

// MemberByMSISDN returns the current family member whose phone is the
// MSISDN msisdn: digits in international form without "+" (821012345678),
// or in national form with its leading 0 (01012345678). Phones are stored
// as typed, so the common spellings are looked up by the phone's index
// first and every spelling (spaces and hyphens ignored) after.
func (s *Store) MemberByMSISDN(ctx context.Context, msisdn string) (Member, error) {
	if msisdn == "" || strings.Trim(msisdn, "0123456789") != "" {
		return Member{}, notFound("member with msisdn", msisdn)
	}
	q := msisdn
	if q[0] != '0' {
		q = "+" + q
	}
	national, intl := phoneForms(q)
	spellings := []any{national, intl}
	if len(national) == 11 { // 010-1234-5678
		spellings = append(spellings, national[:3]+"-"+national[3:7]+"-"+national[7:])
	}
	if cc, rest := koreaCode, strings.TrimPrefix(national, "0"); strings.HasPrefix(intl, cc) && len(rest) == 10 {
		spellings = append(spellings, cc+" "+rest[:2]+" "+rest[2:6]+" "+rest[6:], cc+" "+rest[:2]+"-"+rest[2:6]+"-"+rest[6:])
	}
	const cond = ` AND deleted_at IS NULL AND family_id IS NOT NULL`
	m, err := scanMember(s.db.QueryRowContext(ctx, `SELECT `+memberCols+` FROM members WHERE phone IN (`+
		strings.TrimSuffix(strings.Repeat("?, ", len(spellings)), ", ")+`)`+cond+` ORDER BY id LIMIT 1`, spellings...))
	if errors.Is(err, sql.ErrNoRows) {
		const bare = `REPLACE(REPLACE(phone, '-', ''), ' ', '')`
		m, err = scanMember(s.db.QueryRowContext(ctx, `SELECT `+memberCols+` FROM members WHERE `+bare+` IN (?, ?)`+cond+` ORDER BY id LIMIT 1`,
			national, intl))
	}
	if errors.Is(err, sql.ErrNoRows) {
		return Member{}, notFound("member with msisdn", msisdn)
	}
	if err != nil {
		return Member{}, dbErr("member by msisdn", err)
	}
	return m, nil
}
