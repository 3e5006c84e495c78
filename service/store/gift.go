package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/policy"
)

// GiftRules are the carriers' rules a gift keeps (T world, KT and LG U+
// publish theirs; doc/configuration.md, DPCS_GIFT_*). A zero field sets no
// rule; DefaultGiftRules are the carriers' figures. Gifts are never
// cancelled.
type GiftRules struct {
	// GivenPerMonth is how many gifts one member may give a month, and
	// ReceivedPerMonth how many it may receive.
	GivenPerMonth, ReceivedPerMonth int
	// Step: an amount is a whole number of steps (100 MB steps), or Max
	// itself; Max is the most one gift moves (1 GB, which is not a whole
	// number of 100 MB steps in binary units: 100, 200, … 1000 MB and 1 GB
	// are the amounts).
	Step, Max int64
	// GiverFloor is what the giver keeps of this month's allowance after a
	// gift, at least (500 MB).
	GiverFloor int64
	// MaxSharePercent is the most a member gives in a month, as a percent
	// of its monthly limit (LIMIT:DATA:MONTHLY, "its plan"; 50).
	MaxSharePercent int
	// ReceivedMax is the most one member receives in a month (2 GB).
	ReceivedMax int64
	// MinorsOnlyReceive: a member marked as a minor (Member.Minor) gives
	// no gift; it may receive.
	MinorsOnlyReceive bool
}

// DefaultGiftRules are the carriers' published figures: 2 gifts given and
// 2 received a month, 100 MB steps, at most 1 GB a gift, the giver keeps
// 500 MB and gives at most half its plan a month, a member receives at
// most 2 GB a month, minors only receive.
func DefaultGiftRules() GiftRules {
	return GiftRules{GivenPerMonth: 2, ReceivedPerMonth: 2, Step: 100 << 20, Max: 1 << 30, GiverFloor: 500 << 20,
		MaxSharePercent: 50, ReceivedMax: 2 << 30, MinorsOnlyReceive: true}
}

// Check refuses rules no gift could keep or that overflow.
func (r GiftRules) Check() error {
	switch {
	case r.GivenPerMonth < 0 || r.ReceivedPerMonth < 0 || r.GivenPerMonth > 1000 || r.ReceivedPerMonth > 1000:
		return invalid("giftRules", "gifts a month must be 0 (no rule) to 1000")
	case r.Step < 0 || r.Max < 0 || r.GiverFloor < 0 || r.ReceivedMax < 0 ||
		r.Step > policy.MaxBytes || r.Max > policy.MaxBytes || r.GiverFloor > policy.MaxBytes || r.ReceivedMax > policy.MaxBytes:
		return invalid("giftRules", "amounts must be 0 (no rule) to %d bytes", policy.MaxBytes)
	case r.Step > 0 && r.Max > 0 && r.Max < r.Step:
		return invalid("giftRules", "the most a gift moves must be at least one step")
	case r.MaxSharePercent < 0 || r.MaxSharePercent > 100:
		return invalid("giftRules", "the share of the plan must be 0 (no rule) to 100 percent")
	}
	return nil
}

// The rules a GiftRefusal names.
const (
	GiftRuleLeft             = "LEFT"               // more than the giver has left this month
	GiftRuleFloor            = "FLOOR"              // the giver would keep less than GiverFloor
	GiftRuleShare            = "SHARE"              // more than MaxSharePercent of the giver's plan this month
	GiftRuleStep             = "STEP"               // not a whole number of steps
	GiftRuleMax              = "MAX"                // more than one gift moves
	GiftRuleGivenPerMonth    = "GIVEN_PER_MONTH"    // the giver gave its gifts this month
	GiftRuleReceivedPerMonth = "RECEIVED_PER_MONTH" // the receiver received its gifts this month
	GiftRuleReceivedMax      = "RECEIVED_MAX"       // more than the receiver may still receive this month
	GiftRuleMinor            = "MINOR"              // a minor only receives
	GiftRuleGiverNoLimit     = "GIVER_NO_LIMIT"     // the giver has no monthly limit: nothing of its own to give
	GiftRuleReceiverNoLimit  = "RECEIVER_NO_LIMIT"  // the receiver has no monthly limit: a gift would raise nothing
)

// GiftRefusal is a gift the rules refuse. Rule names the rule (GiftRule*),
// Field the argument as the API names it (amountBytes, fromCustomerId,
// toCustomerId) and Limit the bound the rule leaves now: the bytes that can
// still be given (LEFT, FLOOR, SHARE, RECEIVED_MAX), the step (STEP), the
// most a gift moves (MAX), the gifts a month (GIVEN_PER_MONTH,
// RECEIVED_PER_MONTH); 0 otherwise. It unwraps to a *FieldError of Kind
// ErrInvalid (an amount) or ErrConflict (the members' state).
type GiftRefusal struct {
	Rule  string
	Field string
	Limit int64
	Msg   string
	Kind  error
}

func (e *GiftRefusal) Error() string { return e.field().Error() }

func (e *GiftRefusal) field() *FieldError {
	return &FieldError{Field: e.Field, Msg: e.Msg, Kind: e.Kind}
}

// Unwrap makes a GiftRefusal a *FieldError and its Kind.
func (e *GiftRefusal) Unwrap() error { return e.field() }

func refuseGift(rule, field string, limit int64, kind error, format string, args ...any) *GiftRefusal {
	return &GiftRefusal{Rule: rule, Field: field, Limit: limit, Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// Gift is data one member gives another of its family this month
// ("데이터 선물하기"): the giver's monthly limit is lowered by Bytes and the
// receiver's raised by as much (each member's LIMIT:DATA:GIFT:<YYYYMM>,
// received less given); daily limits do not move (a gift of a month's
// data, received on one day, is not that much more every day), nor does
// the family pool.
type Gift struct {
	FamilyID int64
	From, To int64 // the giver and the receiver, two members of the family
	Bytes    int64 // 1 … what the giver has left this month
	// GiverUsed is the giver's usage this month (the quota engine's): a
	// gift is at most the giver's monthly allowance minus it.
	GiverUsed int64
	// Rules are the carriers' rules the gift keeps (zero: none).
	Rules GiftRules
	By    Actor
}

// GiftResult is a gift made: the month it is for and the two policy
// updates, to push to the quota engine — the giver's first, so the
// family's members together are never allowed more than before.
type GiftResult struct {
	// Gift is the gifts row.
	Gift GiftRecord
	// Month is the month it is for (YYYYMM).
	Month    string
	From, To PolicyUpdate
	// Left is what the giver has left to use this month after the gift.
	Left int64
	// GiftsLeft is how many more gifts the giver may give this month (-1:
	// no rule counts them).
	GiftsLeft int
}

// GiftRecord is a row of gifts.
type GiftRecord struct {
	ID        int64
	FamilyID  int64
	From, To  int64
	Bytes     int64
	Month     string
	CreatedBy int64
	CreatedAt time.Time
}

// GiftData records a gift in one transaction: both members' policies
// (version + 1, policy.update audit rows, policy-updated events), a gifts
// row, the two members' DATA_GIFTED notifications (the receiver's and the
// giver's, in the outbox) and a data.gift audit row naming giver,
// receiver, bytes and month.
// The gift keeps g.Rules (every refusal a *GiftRefusal naming its rule),
// judged on the members as they are in the transaction (their rows locked,
// so two gifts of one member are counted one after the other):
//
//   - both have a monthly limit (the giver's is the allowance to give; a
//     receiver without one may already use the rest of the pool: 409);
//   - a minor gives nothing (MinorsOnlyReceive; 409);
//   - the gifts given and received this month stay within their counts
//     (409), what the receiver gets within ReceivedMax (422);
//   - the amount is a whole number of steps or Max itself, at most Max
//     (422);
//   - it is at most what the giver has left this month — its monthly limit
//     with this month's extra and gifts, less its usage; never a day's
//     extra, which ends with the day and would leave the giver below zero
//     tomorrow, the receiver keeping it (422) —, leaving the giver at least
//     GiverFloor, and with what it gave this month at most MaxSharePercent
//     of its monthly limit (422).
func (s *Store) GiftData(ctx context.Context, g Gift) (GiftResult, error) {
	var out GiftResult
	switch {
	case g.From == g.To:
		return out, invalid("toCustomerId", "give to another member of the family")
	case g.GiverUsed < 0:
		return out, invalid("giverUsed", "must be ≥ 0")
	}
	if err := g.Rules.Check(); err != nil {
		return out, err
	}
	if err := checkBytes("amountBytes", g.Bytes, 1); err != nil {
		return out, err
	}
	r := g.Rules
	switch {
	case r.Step > 0 && g.Bytes%r.Step != 0 && g.Bytes != r.Max:
		return out, refuseGift(GiftRuleStep, "amountBytes", r.Step, ErrInvalid, "a gift is a whole number of %d-byte steps, or the most one gift moves", r.Step)
	case r.Max > 0 && g.Bytes > r.Max:
		return out, refuseGift(GiftRuleMax, "amountBytes", r.Max, ErrInvalid, "a gift is at most %d bytes", r.Max)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		// Members are locked in id order: two gifts between the same two
		// members in opposite directions do not deadlock.
		first, second := min(g.From, g.To), max(g.From, g.To)
		ms := map[int64]Member{}
		for _, id := range []int64{first, second} {
			m, err := s.currentMember(ctx, tx, g.FamilyID, id, s.d.ForUpdate())
			if err != nil {
				return err
			}
			ms[id] = m
		}
		read := func(id int64) (policy.Constraints, error) {
			p, err := s.policy(ctx, tx, g.FamilyID, id, s.d.ForUpdate())
			if err != nil {
				return policy.Constraints{}, err
			}
			c, err := policy.ParseConstraints(p.Rules)
			if err != nil {
				return c, fmt.Errorf("store: policy of member %d: %w", id, err)
			}
			return c, nil
		}
		from, err := read(g.From)
		if err != nil {
			return err
		}
		to, err := read(g.To)
		if err != nil {
			return err
		}
		mo := policy.MomentOf(s.now(), s.loc)
		switch {
		case r.MinorsOnlyReceive && ms[g.From].Minor:
			return refuseGift(GiftRuleMinor, "fromCustomerId", 0, ErrConflict, "the giver is a minor: minors only receive gifts")
		case from.MonthlyLimit == nil:
			return refuseGift(GiftRuleGiverNoLimit, "fromCustomerId", 0, ErrConflict,
				"the giver has no monthly limit: it shares the family pool, so there is no allowance of its own to give")
		case to.MonthlyLimit == nil:
			return refuseGift(GiftRuleReceiverNoLimit, "toCustomerId", 0, ErrConflict,
				"the receiver has no monthly limit: a gift raises a monthly limit, and without one it may already use the family pool")
		}
		given, err := s.giftSums(ctx, tx, "from_id", g.From, mo.Month)
		if err != nil {
			return err
		}
		received, err := s.giftSums(ctx, tx, "to_id", g.To, mo.Month)
		if err != nil {
			return err
		}
		// What the giver has left: its monthly allowance without a day's
		// extra (policy.Constraints.EffectiveLimits adds it), less its use.
		left := max(*from.MonthlyAllowance(mo)-g.GiverUsed, 0)
		switch {
		case r.GivenPerMonth > 0 && given.n >= r.GivenPerMonth:
			return refuseGift(GiftRuleGivenPerMonth, "fromCustomerId", int64(r.GivenPerMonth), ErrConflict,
				"the giver gave %d gifts this month, the most a member may give", given.n)
		case r.ReceivedPerMonth > 0 && received.n >= r.ReceivedPerMonth:
			return refuseGift(GiftRuleReceivedPerMonth, "toCustomerId", int64(r.ReceivedPerMonth), ErrConflict,
				"the receiver received %d gifts this month, the most a member may receive", received.n)
		case r.ReceivedMax > 0 && received.bytes+g.Bytes > r.ReceivedMax:
			room := max(r.ReceivedMax-received.bytes, 0)
			return refuseGift(GiftRuleReceivedMax, "amountBytes", room, ErrInvalid,
				"a member receives at most %d bytes a month: the receiver may still receive %d", r.ReceivedMax, room)
		case g.Bytes > left:
			return refuseGift(GiftRuleLeft, "amountBytes", left, ErrInvalid,
				"the giver has %d bytes left this month: at most that can be given", left)
		case left-g.Bytes < r.GiverFloor:
			room := max(left-r.GiverFloor, 0)
			return refuseGift(GiftRuleFloor, "amountBytes", room, ErrInvalid,
				"the giver keeps at least %d bytes this month: at most %d can be given", r.GiverFloor, room)
		}
		if r.MaxSharePercent > 0 {
			limit := *from.MonthlyLimit * int64(r.MaxSharePercent) / 100
			if given.bytes+g.Bytes > limit {
				room := max(limit-given.bytes, 0)
				return refuseGift(GiftRuleShare, "amountBytes", room, ErrInvalid,
					"a member gives at most %d%% of its monthly limit a month: %d bytes more can be given", r.MaxSharePercent, room)
			}
		}
		net := [2]int64{from.Gifts[mo.Month] - g.Bytes, to.Gifts[mo.Month] + g.Bytes}
		if net[0] < -policy.MaxBytes || net[1] > policy.MaxBytes {
			return invalid("amountBytes", "a month's gifts are at most %d bytes", policy.MaxBytes)
		}
		key := policy.KeyLimitGiftPrefix + mo.Month
		if err := s.writePolicy(ctx, tx, PolicyChange{FamilyID: g.FamilyID, CustomerID: g.From,
			Set: map[string]string{key: strconv.FormatInt(net[0], 10)}, By: g.By}, "policy.update", 0, &out.From); err != nil {
			return err
		}
		if err := s.writePolicy(ctx, tx, PolicyChange{FamilyID: g.FamilyID, CustomerID: g.To,
			Set: map[string]string{key: strconv.FormatInt(net[1], 10)}, By: g.By}, "policy.update", 0, &out.To); err != nil {
			return err
		}
		now := s.now()
		rec := GiftRecord{FamilyID: g.FamilyID, From: g.From, To: g.To, Bytes: g.Bytes, Month: mo.Month, CreatedBy: g.By.ID,
			CreatedAt: now.UTC().Truncate(time.Millisecond)}
		res, err := tx.ExecContext(ctx, `INSERT INTO gifts (family_id, from_id, to_id, bytes, month, created_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			rec.FamilyID, rec.From, rec.To, rec.Bytes, rec.Month, rec.CreatedBy, s.t(now))
		if err != nil {
			return dbErr("gift", err)
		}
		if rec.ID, err = res.LastInsertId(); err != nil {
			return dbErr("gift", err)
		}
		out.Gift, out.Month, out.Left, out.GiftsLeft = rec, mo.Month, left-g.Bytes, -1
		if r.GivenPerMonth > 0 {
			out.GiftsLeft = r.GivenPerMonth - given.n - 1
		}
		if err := s.giftNotifications(ctx, tx, rec, ms, g.By, now); err != nil {
			return err
		}
		type gift struct {
			ID     int64  `json:"giftId"`
			From   int64  `json:"fromCustomerId"`
			To     int64  `json:"toCustomerId"`
			Bytes  int64  `json:"amountBytes"`
			Month  string `json:"month"`
			Before int64  `json:"giverLeftBefore"`
		}
		return s.audit(ctx, tx, g.FamilyID, g.By, "data.gift", memberTarget(g.To), nil,
			gift{ID: rec.ID, From: g.From, To: g.To, Bytes: g.Bytes, Month: mo.Month, Before: left})
	})
	if err != nil {
		return GiftResult{}, err
	}
	return out, nil
}

// giftNotifications writes a gift's two DATA_GIFTED events to the outbox
// (topic notification-events) in the gift's transaction tx: the receiver's
// first, then the giver's confirmation (doc/wire-format.md,
// "NOTIFICATION / DATA_GIFTED"). ms holds both members as the transaction
// read them; by is who made the gift: a member of the family (the giver,
// or an owner giving for it, named by its name) or the back office
// (givenBy 0).
func (s *Store) giftNotifications(ctx context.Context, tx *sql.Tx, rec GiftRecord, ms map[int64]Member, by Actor, now time.Time) error {
	p := envelope.DataGifted{FamilyID: rec.FamilyID, GiftID: rec.ID, FromCustomerID: rec.From, ToCustomerID: rec.To,
		AmountBytes: rec.Bytes, Month: rec.Month, FromName: ms[rec.From].Name, ToName: ms[rec.To].Name, GivenAt: now}
	if (by.Role == policy.RoleOwner || by.Role == policy.RoleMember) && by.ID > 0 {
		switch m, ok := ms[by.ID]; {
		case ok:
			p.GivenBy = m.ID
		default:
			m, err := s.currentMember(ctx, tx, rec.FamilyID, by.ID, "")
			switch {
			case err == nil:
				p.GivenBy, p.ByName = m.ID, m.Name
			case !errors.Is(err, ErrNotFound):
				return err
			}
		}
	}
	for _, cid := range []int64{rec.To, rec.From} {
		p.CustomerID = cid
		if _, err := enqueue(ctx, s, tx, envelope.TopicNotificationEvents, envelope.New(envelope.NewID(envelope.PrefixNotification), now, p)); err != nil {
			return err
		}
	}
	return nil
}

// giftCount is how many gifts and how many bytes.
type giftCount struct {
	n     int
	bytes int64
}

// giftSums counts member id's gifts of month on side (from_id: given,
// to_id: received).
func (s *Store) giftSums(ctx context.Context, tx *sql.Tx, side string, id int64, month string) (giftCount, error) {
	var c giftCount
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM gifts WHERE `+side+` = ? AND month = ?`,
		id, month).Scan(&c.n, &c.bytes); err != nil {
		return c, dbErr("gifts", err)
	}
	return c, nil
}

// Gifts returns family fid's gifts of month (YYYYMM), newest first; with
// member > 0, only those it gave or received.
func (s *Store) Gifts(ctx context.Context, fid int64, month string, member int64) ([]GiftRecord, error) {
	q := `SELECT id, family_id, from_id, to_id, bytes, month, created_by, created_at FROM gifts WHERE family_id = ? AND month = ?`
	args := []any{fid, month}
	if member > 0 {
		q += ` AND (from_id = ? OR to_id = ?)`
		args = append(args, member, member)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY id DESC`, args...)
	if err != nil {
		return nil, dbErr("gifts", err)
	}
	return collect(rows, "gifts", func(sc scanner) (GiftRecord, error) {
		var g GiftRecord
		var at sqldialect.NullTime
		err := sc.Scan(&g.ID, &g.FamilyID, &g.From, &g.To, &g.Bytes, &g.Month, &g.CreatedBy, &at)
		g.CreatedAt = at.Time
		return g, err
	})
}
