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

// Data request states.
const (
	RequestPending  = "PENDING"
	RequestApproved = envelope.AnswerApproved
	RequestDeclined = envelope.AnswerDeclined
)

// Data request limits.
const (
	// MaxRequestMessage is the longest message or reason, in characters.
	MaxRequestMessage = 200
	// MaxRequestKey is the longest idempotency key, in bytes.
	MaxRequestKey = 128
)

// Request kinds and the time they may ask for.
const (
	KindData = envelope.KindData
	KindTime = envelope.KindTime
	KindApp  = envelope.KindApp
	// MaxRequestMinutes is the most time a TIME or APP request may ask
	// for, or an owner grant, at once (4 hours).
	MaxRequestMinutes = 240
)

// DataRequest is a member's request for more data or time ("ask for more")
// and its answer.
type DataRequest struct {
	ID          int64
	FamilyID    int64
	CustomerID  int64 // the member who asks
	AmountBytes int64 // what it asked for (DATA)
	Message     string
	// Kind is DATA, TIME (more time in a downtime: an EXCEPT:TIME) or APP
	// (more time on the blocked app AppID: an EXCEPT:APP:<app>); Minutes
	// how long a TIME or APP request asks for, GrantedMinutes what an
	// approval granted and Until the local time YYYYMMDDHHMM it ends at.
	Kind           string
	AppID          string
	Minutes        int64
	GrantedMinutes int64
	Until          string
	// Status is PENDING, APPROVED or DECLINED.
	Status string
	// Grant is DAY, MONTH or TOPUP for an approved request ("" otherwise),
	// GrantedBytes what was granted and Period the day (YYYYMMDD, DAY), the
	// month (YYYYMM, MONTH, TOPUP) it was granted for.
	Grant        string
	GrantedBytes int64
	Period       string
	Reason       string
	AnsweredBy   int64
	AnsweredAt   *time.Time
	CreatedAt    time.Time
}

// NewDataRequest is a member's request for more data.
type NewDataRequest struct {
	FamilyID    int64
	CustomerID  int64 // the member who asks (the caller)
	AmountBytes int64 // 1 … MaxAmount (DATA); 0 (TIME, APP)
	Message     string
	// Kind is DATA ("" too), TIME or APP; AppID the app (APP) and Minutes
	// 1 … MaxRequestMinutes (TIME, APP).
	Kind    string
	AppID   string
	Minutes int64
	// Key is the requester's idempotency key ("": none). A request with a
	// key the member used before returns the first request when it asks for
	// the same, and is a conflict otherwise.
	Key string
	// MaxAmount bounds AmountBytes (≤ policy.MaxBytes). MaxPending is how
	// many unanswered requests a member may have (≥ 1).
	MaxAmount  int64
	MaxPending int
}

const requestCols = `id, family_id, customer_id, amount_bytes, message, status, grant_kind, granted_bytes, period, reason,
	answered_by, answered_at, created_at, kind, app_id, minutes, granted_minutes, until_stamp`

func scanRequest(sc scanner) (DataRequest, error) {
	var r DataRequest
	var by sql.NullInt64
	var answered, created sqldialect.NullTime
	if err := sc.Scan(&r.ID, &r.FamilyID, &r.CustomerID, &r.AmountBytes, &r.Message, &r.Status, &r.Grant, &r.GrantedBytes,
		&r.Period, &r.Reason, &by, &answered, &created, &r.Kind, &r.AppID, &r.Minutes, &r.GrantedMinutes, &r.Until); err != nil {
		return DataRequest{}, err
	}
	r.AnsweredBy, r.CreatedAt = by.Int64, created.Time
	if answered.Valid {
		t := answered.Time
		r.AnsweredAt = &t
	}
	return r, nil
}

func requestTarget(id int64) string { return "data-request:" + strconv.FormatInt(id, 10) }

// cleanWords puts a data request's message or an answer's reason in the
// form it is stored in (trimmed, NFC), or refuses it naming field.
func cleanWords(field string, s *string) error {
	*s = strings.TrimSpace(*s)
	switch {
	case !utf8.ValidString(*s):
		return invalid(field, "must be UTF-8 text")
	case utf8.RuneCountInString(*s) > MaxRequestMessage:
		return invalid(field, "at most %d characters", MaxRequestMessage)
	}
	return cleanText(field, s, usertext.Lines)
}

// CreateDataRequest records a member's request for more data, with an audit
// row (data-request.create) and a DATA_REQUESTED notification for the
// family's owners in the outbox (topic notification-events), in one
// transaction. created is false when r.Key named an earlier identical
// request, which is returned as it is now (answered or not).
func (s *Store) CreateDataRequest(ctx context.Context, r NewDataRequest) (out DataRequest, created bool, err error) {
	if r.MaxAmount < 1 || r.MaxAmount > policy.MaxBytes || r.MaxPending < 1 {
		return DataRequest{}, false, invalid("limits", "MaxAmount must be 1..%d and MaxPending ≥ 1", policy.MaxBytes)
	}
	switch r.Kind {
	case "", KindData:
		r.Kind = KindData
		if r.AppID != "" || r.Minutes != 0 {
			return DataRequest{}, false, invalid("minutes", "a request for data asks for bytes: leave minutes and appId out")
		}
		if err := checkBytes("amountBytes", r.AmountBytes, 1); err != nil {
			return DataRequest{}, false, err
		}
		if r.AmountBytes > r.MaxAmount {
			return DataRequest{}, false, invalid("amountBytes", "at most %d bytes can be asked for at once", r.MaxAmount)
		}
	case KindTime, KindApp:
		if r.AmountBytes != 0 {
			return DataRequest{}, false, invalid("amountBytes", "a request for time asks for minutes: leave amountBytes out")
		}
		if r.Minutes < 1 || r.Minutes > MaxRequestMinutes {
			return DataRequest{}, false, invalid("minutes", "must be 1 to %d minutes", MaxRequestMinutes)
		}
		if r.Kind == KindTime && r.AppID != "" {
			return DataRequest{}, false, invalid("appId", "a TIME request is for every app: leave appId out (APP asks for one app)")
		}
		if r.Kind == KindApp {
			if _, err := policy.ParseConstraints(map[string]string{policy.KeyExceptAppPrefix + r.AppID: "200001010000"}); err != nil {
				return DataRequest{}, false, invalid("appId", "must be an app id (printable ASCII without spaces or '|')")
			}
		}
	default:
		return DataRequest{}, false, invalid("kind", "must be DATA, TIME or APP")
	}
	if err := cleanWords("message", &r.Message); err != nil {
		return DataRequest{}, false, err
	}
	if len(r.Key) > MaxRequestKey {
		return DataRequest{}, false, invalid("Idempotency-Key", "at most %d bytes", MaxRequestKey)
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		// The member's row lock serialises its requests (pending count, key).
		m, err := s.currentMember(ctx, tx, r.FamilyID, r.CustomerID, s.d.ForUpdate())
		if err != nil {
			return err
		}
		if r.Key != "" {
			prev, err := scanRequest(tx.QueryRowContext(ctx, `SELECT `+requestCols+` FROM data_request WHERE customer_id = ? AND client_key = ?`,
				m.ID, r.Key))
			switch {
			case err == nil:
				if prev.FamilyID != r.FamilyID || prev.AmountBytes != r.AmountBytes || prev.Message != r.Message ||
					prev.Kind != r.Kind || prev.AppID != r.AppID || prev.Minutes != r.Minutes {
					return conflict("Idempotency-Key", "this key was used for another request: use a new key for a new request", nil)
				}
				out = prev
				return nil
			case !errors.Is(err, sql.ErrNoRows):
				return dbErr("data request", err)
			}
		}
		var pending int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM data_request WHERE customer_id = ? AND family_id = ? AND status = ?`,
			m.ID, r.FamilyID, RequestPending).Scan(&pending); err != nil {
			return dbErr("data request", err)
		}
		if pending >= r.MaxPending {
			return conflict("amountBytes", fmt.Sprintf("%d of your requests are waiting for an answer: wait for the owners to answer them", pending), nil)
		}
		now := s.now()
		var key any
		if r.Key != "" {
			key = r.Key
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO data_request (family_id, customer_id, amount_bytes, message, client_key, status, created_at,
			kind, app_id, minutes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, r.FamilyID, m.ID, r.AmountBytes, r.Message, key, RequestPending, s.t(now),
			r.Kind, r.AppID, r.Minutes)
		if err != nil {
			return dbErr("data request", err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return dbErr("data request", err)
		}
		if out, err = s.request(ctx, tx, r.FamilyID, id, ""); err != nil {
			return err
		}
		created = true
		if err := s.audit(ctx, tx, r.FamilyID, Actor{ID: m.ID, Role: m.Role}, "data-request.create", requestTarget(id), nil, out); err != nil {
			return err
		}
		_, err = enqueue(ctx, s, tx, envelope.TopicNotificationEvents, envelope.New(envelope.NewID(envelope.PrefixNotification), now,
			envelope.DataRequested{FamilyID: r.FamilyID, RequestID: id, CustomerID: m.ID, AmountBytes: r.AmountBytes,
				Message: r.Message, RequestedAt: now, Kind: dataKind(r.Kind), AppID: r.AppID, Minutes: r.Minutes}))
		return err
	})
	if err != nil {
		return DataRequest{}, false, err
	}
	return out, created, nil
}

func (s *Store) request(ctx context.Context, q querier, fid, id int64, lock string) (DataRequest, error) {
	r, err := scanRequest(q.QueryRowContext(ctx, `SELECT `+requestCols+` FROM data_request WHERE id = ? AND family_id = ?`+lock, id, fid))
	if errors.Is(err, sql.ErrNoRows) {
		return DataRequest{}, notFound("data request", id)
	}
	if err != nil {
		return DataRequest{}, dbErr("data request", err)
	}
	return r, nil
}

// GetDataRequest returns request id of family fid.
func (s *Store) GetDataRequest(ctx context.Context, fid, id int64) (DataRequest, error) {
	return s.request(ctx, s.db, fid, id, "")
}

// DataRequestQuery selects a family's data requests, newest first.
type DataRequestQuery struct {
	FamilyID int64
	// CustomerID, when > 0, keeps the requests of that member only.
	CustomerID int64
	// Status, when set, keeps the requests in that state.
	Status string
	// Limit is 1..500 (0: 100).
	Limit int
}

// DataRequests lists a family's data requests, newest first.
func (s *Store) DataRequests(ctx context.Context, q DataRequestQuery) ([]DataRequest, error) {
	switch q.Status {
	case "", RequestPending, RequestApproved, RequestDeclined:
	default:
		return nil, invalid("status", "must be PENDING, APPROVED or DECLINED")
	}
	if q.Limit < 0 || q.Limit > 500 {
		return nil, invalid("limit", "must be 1..500")
	}
	if q.Limit == 0 {
		q.Limit = 100
	}
	var b strings.Builder
	b.WriteString(`SELECT ` + requestCols + ` FROM data_request WHERE family_id = ?`)
	args := []any{q.FamilyID}
	if q.CustomerID > 0 {
		b.WriteString(` AND customer_id = ?`)
		args = append(args, q.CustomerID)
	}
	if q.Status != "" {
		b.WriteString(` AND status = ?`)
		args = append(args, q.Status)
	}
	b.WriteString(` ORDER BY id DESC LIMIT ?`)
	args = append(args, q.Limit)
	rows, err := s.db.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, dbErr("data requests", err)
	}
	out, err := collect(rows, "data requests", scanRequest)
	if out == nil && err == nil {
		out = []DataRequest{}
	}
	return out, err
}

// DataRequestAnswer is an owner's (or admin's) answer to a data request.
type DataRequestAnswer struct {
	FamilyID  int64
	RequestID int64
	// Approve or decline.
	Approve bool
	// Grant (approvals): DAY or MONTH raise the member's limits for the rest
	// of the day / month with the extra allowance LIMIT:DATA:EXTRA:<period>
	// (added to an extra already granted for that period) through the policy
	// write path; TOPUP tops up the family's pool.
	Grant string
	// AmountBytes (approvals of DATA requests) is what is granted; 0: what
	// was asked for.
	AmountBytes int64
	// Minutes (approvals of TIME and APP requests, whose Grant is their
	// kind or "") is how long; 0: what was asked for.
	Minutes int64
	Reason  string
	By      Actor
	// OwnTopUpLimit bounds a TOPUP by a family's own owner as AddOwnTopUp
	// does (the month's top-ups by the family's members); 0: unbounded but
	// by the pool's maximum (admins).
	OwnTopUpLimit int64
	// Purchase is the offer a TOPUP buys (its bytes are AmountBytes), as
	// BuyTopUp records it; zero: the back office's top-up outside the
	// offers.
	Purchase Purchase
}

// AnsweredDataRequest is the outcome of AnswerDataRequest.
type AnsweredDataRequest struct {
	Request DataRequest
	// Replayed is true when the request was already answered exactly so:
	// nothing was written.
	Replayed bool
	// Policy is the member's policy update of a DAY or MONTH grant (nil
	// otherwise, and when Replayed): push it to the quota engine
	// (Engine.Enforce) at once.
	Policy *PolicyUpdate
	// TopUp is the top-up of a TOPUP grant (nil otherwise, and when
	// Replayed): add it to the quota engine's pool (Engine.TopUp) at once.
	TopUp *TopUp
}

// AnswerDataRequest approves or declines a pending data request in one
// transaction: the grant (the member's policy with the extra allowance —
// version + 1, policy.update audit row, policy-updated event — or a
// top-up), the request's new state, a data-request.approve|decline audit
// row and a DATA_REQUEST_ANSWERED notification for the member in the outbox.
// A request is answered once: an answer to an answered request is a
// conflict naming its state, unless it is the same answer (status, grant,
// bytes and reason), which returns the request with Replayed set.
func (s *Store) AnswerDataRequest(ctx context.Context, a DataRequestAnswer) (AnsweredDataRequest, error) {
	var out AnsweredDataRequest
	if err := cleanWords("reason", &a.Reason); err != nil {
		return out, err
	}
	status := RequestDeclined
	if a.Approve {
		status = RequestApproved
		switch a.Grant {
		case "", envelope.GrantDay, envelope.GrantMonth, envelope.GrantTopUp, envelope.GrantTime, envelope.GrantApp:
		default:
			return out, invalid("grant", "must be DAY, MONTH or TOPUP (a DATA request), TIME or APP (the request's kind)")
		}
		if a.AmountBytes < 0 {
			return out, invalid("amountBytes", "must be ≥ 1 (0 or absent: the amount asked for)")
		}
		if a.Minutes < 0 || a.Minutes > MaxRequestMinutes {
			return out, invalid("minutes", "must be 1 to %d (0 or absent: the time asked for)", MaxRequestMinutes)
		}
	} else if a.Grant != "" || a.AmountBytes != 0 || a.Minutes != 0 {
		return out, invalid("grant", "a decline grants nothing: leave grant, amountBytes and minutes out")
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		r, err := s.request(ctx, tx, a.FamilyID, a.RequestID, s.d.ForUpdate())
		if err != nil {
			return err
		}
		timed := r.Kind == KindTime || r.Kind == KindApp
		if a.Approve {
			switch {
			case timed && a.AmountBytes != 0:
				return invalid("amountBytes", "a request for time is granted in minutes: leave amountBytes out")
			case !timed && a.Minutes != 0:
				return invalid("minutes", "a request for data is granted in bytes: leave minutes out")
			case timed && a.Grant == "":
				a.Grant = r.Kind
			case timed && a.Grant != r.Kind:
				return invalid("grant", "a %s request is approved with grant %s (or none)", r.Kind, r.Kind)
			case !timed && (a.Grant == "" || a.Grant == envelope.GrantTime || a.Grant == envelope.GrantApp):
				return invalid("grant", "a request for data is approved with grant DAY, MONTH or TOPUP")
			}
		}
		amount, minutes := a.AmountBytes, a.Minutes
		if amount == 0 {
			amount = r.AmountBytes
		}
		if minutes == 0 {
			minutes = r.Minutes
		}
		if !a.Approve {
			amount, minutes = 0, 0
		}
		if r.Status != RequestPending {
			if r.Status == status && r.Grant == a.Grant && r.GrantedBytes == amount && r.GrantedMinutes == minutes && r.Reason == a.Reason {
				out = AnsweredDataRequest{Request: r, Replayed: true}
				return nil
			}
			what := strings.ToLower(r.Status)
			switch {
			case r.Grant != "" && r.GrantedMinutes > 0:
				what += " (" + r.Grant + ", " + strconv.FormatInt(r.GrantedMinutes, 10) + " minutes)"
			case r.Grant != "":
				what += " (" + r.Grant + ", " + strconv.FormatInt(r.GrantedBytes, 10) + " bytes)"
			}
			return conflict("requestId", "the request was already "+what+": a request is answered once", nil)
		}
		before := r
		now := s.now()
		mo := policy.MomentOf(now, s.loc)
		if a.Approve && !timed {
			if err := checkBytes("amountBytes", amount, 1); err != nil {
				return err
			}
		}
		if a.Approve {
			switch a.Grant {
			case envelope.GrantTime, envelope.GrantApp:
				up, until, err := s.grantException(ctx, tx, r.FamilyID, r.CustomerID, r.Kind, r.AppID, minutes, a.By, false)
				if err != nil {
					return err
				}
				out.Policy, r.Until = &up, until
			case envelope.GrantDay, envelope.GrantMonth:
				period := mo.Day
				if a.Grant == envelope.GrantMonth {
					period = mo.Month
				}
				up, err := s.grantExtra(ctx, tx, r, period, amount, a.By)
				if err != nil {
					return err
				}
				out.Policy, r.Period = &up, period
			case envelope.GrantTopUp:
				if _, err := s.currentMember(ctx, tx, r.FamilyID, r.CustomerID, ""); err != nil {
					return conflict("requestId", "the member who asked is no longer in the family: decline the request", err)
				}
				if err := a.Purchase.check(); err != nil {
					return err
				}
				t, err := s.insertTopUp(ctx, tx, r.FamilyID, amount, a.Purchase, a.By, a.OwnTopUpLimit)
				var tl *TopUpLimitError
				var pl *PoolLimitError
				switch {
				case errors.As(err, &tl):
					return invalid("amountBytes", "%s", tl.field().Msg)
				case errors.As(err, &pl):
					pl.Field = "amountBytes"
					return pl
				case err != nil:
					return err
				}
				out.TopUp, r.Period = &t, t.Month
			}
		}
		r.Status, r.Grant, r.GrantedBytes, r.GrantedMinutes, r.Reason, r.AnsweredBy = status, a.Grant, amount, minutes, a.Reason, a.By.ID
		at := now.UTC().Truncate(time.Millisecond)
		r.AnsweredAt = &at
		var by any
		if a.By.ID > 0 {
			by = a.By.ID
		}
		if _, err := tx.ExecContext(ctx, `UPDATE data_request SET status = ?, grant_kind = ?, granted_bytes = ?, period = ?, reason = ?,
			answered_by = ?, answered_at = ?, granted_minutes = ?, until_stamp = ? WHERE id = ? AND status = ?`, r.Status, r.Grant,
			r.GrantedBytes, r.Period, r.Reason, by, s.t(now), r.GrantedMinutes, r.Until, r.ID, RequestPending); err != nil {
			return dbErr("answer data request", err)
		}
		action := "data-request.decline"
		if a.Approve {
			action = "data-request.approve"
		}
		if err := s.audit(ctx, tx, r.FamilyID, a.By, action, requestTarget(r.ID), before, r); err != nil {
			return err
		}
		p := envelope.DataRequestAnswered{FamilyID: r.FamilyID, RequestID: r.ID, CustomerID: r.CustomerID, Status: r.Status,
			Grant: r.Grant, AmountBytes: r.GrantedBytes, Reason: r.Reason, AnsweredBy: max(a.By.ID, 0), AnsweredAt: now,
			Kind: dataKind(r.Kind), AppID: r.AppID, Minutes: r.GrantedMinutes, Until: r.Until}
		if !a.Approve {
			p.AmountBytes, p.Minutes = r.AmountBytes, r.Minutes
		}
		if _, err := enqueue(ctx, s, tx, envelope.TopicNotificationEvents, envelope.New(envelope.NewID(envelope.PrefixNotification), now, p)); err != nil {
			return err
		}
		out.Request = r
		return nil
	})
	if err != nil {
		return AnsweredDataRequest{}, err
	}
	return out, nil
}

// grantExtra raises the requester's extra allowance for period by amount
// through the policy write path (writePolicy: version + 1, audit, event).
func (s *Store) grantExtra(ctx context.Context, tx *sql.Tx, r DataRequest, period string, amount int64, by Actor) (PolicyUpdate, error) {
	if _, err := s.currentMember(ctx, tx, r.FamilyID, r.CustomerID, s.d.ForUpdate()); err != nil {
		return PolicyUpdate{}, conflict("requestId", "the member who asked is no longer in the family: decline the request", err)
	}
	cur, err := s.policy(ctx, tx, r.FamilyID, r.CustomerID, s.d.ForUpdate())
	if err != nil {
		return PolicyUpdate{}, err
	}
	c, err := policy.ParseConstraints(cur.Rules)
	if err != nil {
		return PolicyUpdate{}, fmt.Errorf("store: policy of member %d: %w", r.CustomerID, err)
	}
	if c.DailyLimit == nil && c.MonthlyLimit == nil {
		return PolicyUpdate{}, conflict("grant", "the member has no daily or monthly limit, so a raise would change nothing: "+
			"approve with grant TOPUP (the family pool) instead", nil)
	}
	total := c.Extras[period] + amount
	if total > policy.MaxBytes {
		return PolicyUpdate{}, invalid("amountBytes", "the extra allowance for %s would exceed %d bytes", period, policy.MaxBytes)
	}
	var up PolicyUpdate
	err = s.writePolicy(ctx, tx, PolicyChange{FamilyID: r.FamilyID, CustomerID: r.CustomerID,
		Set: map[string]string{policy.ExtraKey(period): strconv.FormatInt(total, 10)}, By: by}, "policy.update", 0, &up)
	return up, err
}

// dataKind is a request's kind as its notifications carry it: absent for
// DATA (what a consumer of an earlier release reads).
func dataKind(k string) string {
	if k == KindData {
		return ""
	}
	return k
}
