package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/policy"
)

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
	// Purchase is the offer bought and its price (zero: the back office's
	// top-up outside the offers, free).
	Purchase
}

// Purchase is what a top-up bought: one of the operator's offers and what
// it cost, billed to the phone bill (T world, KT and LG U+ sell top-ups so).
type Purchase struct {
	// OfferID names the offer (e.g. "1GB"); "" for none.
	OfferID string
	// PriceKRW is the price in won, VAT included; VATKRW the VAT in it, at
	// VATRate percent.
	PriceKRW, VATKRW int64
	VATRate          int
}

// MaxOfferID is the longest offer id a top-up records.
const MaxOfferID = 32

// VAT is the VAT in a price that includes it at rate percent, in whole won
// (rounded down, as Korean receipts show it: 9,900원 at 10 % holds 900원).
func VAT(priceKRW int64, rate int) int64 {
	if rate <= 0 || priceKRW <= 0 {
		return 0
	}
	return priceKRW * int64(rate) / int64(100+rate)
}

// check refuses a purchase the columns cannot hold or that does not add up.
func (p Purchase) check() error {
	switch {
	case len(p.OfferID) > MaxOfferID:
		return invalid("offerId", "at most %d bytes", MaxOfferID)
	case p.PriceKRW < 0 || p.PriceKRW > 100_000_000 || p.VATKRW < 0 || p.VATKRW > p.PriceKRW || p.VATRate < 0 || p.VATRate > 100:
		return invalid("offerId", "the offer's price and VAT do not add up")
	case p.OfferID == "" && p.PriceKRW != 0:
		return invalid("offerId", "a priced top-up names its offer")
	}
	return nil
}

// AddTopUp records bytes added to this month's pool (audited as
// family.topup). The caller also calls quota.Engine.SetTopUps with the
// month's total. A top-up that
// would take the plan plus this month's top-ups over policy.MaxBytes is a
// *PoolLimitError and writes nothing.
func (s *Store) AddTopUp(ctx context.Context, fid, bytes int64, by Actor) (TopUp, error) {
	return s.addTopUp(ctx, fid, bytes, Purchase{}, by, 0)
}

// BuyTopUp is AddTopUp of an offer bought: the row and its family.topup
// audit row record the offer, its price and its VAT. monthlyLimit > 0
// bounds the family's own members' top-ups as AddOwnTopUp does.
func (s *Store) BuyTopUp(ctx context.Context, fid, bytes int64, p Purchase, by Actor, monthlyLimit int64) (TopUp, error) {
	if monthlyLimit < 0 {
		return TopUp{}, invalid("monthlyLimit", "must be ≥ 0")
	}
	return s.addTopUp(ctx, fid, bytes, p, by, monthlyLimit)
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
	return s.addTopUp(ctx, fid, bytes, Purchase{}, by, monthlyLimit)
}

// addTopUp records a top-up of purchase p; with ownLimit > 0, within that
// monthly limit of the family's members' top-ups.
func (s *Store) addTopUp(ctx context.Context, fid, bytes int64, p Purchase, by Actor, ownLimit int64) (TopUp, error) {
	if err := checkBytes("bytes", bytes, 1); err != nil {
		return TopUp{}, err
	}
	if err := p.check(); err != nil {
		return TopUp{}, err
	}
	var t TopUp
	err := s.inTx(ctx, func(tx *sql.Tx) (err error) {
		t, err = s.insertTopUp(ctx, tx, fid, bytes, p, by, ownLimit)
		return err
	})
	return t, err
}

// insertTopUp records a top-up of purchase p inside tx (see addTopUp),
// audited as family.topup.
func (s *Store) insertTopUp(ctx context.Context, tx *sql.Tx, fid, bytes int64, p Purchase, by Actor, ownLimit int64) (TopUp, error) {
	now := s.now()
	t := TopUp{FamilyID: fid, Bytes: bytes, Month: policy.MomentOf(now, s.loc).Month, CreatedBy: by.ID, CreatedAt: now.UTC().Truncate(time.Millisecond),
		Purchase: p}
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
		res, err := tx.ExecContext(ctx, `INSERT INTO topups (family_id, bytes, month, created_by, created_at, offer_id, price_krw, vat_krw, vat_rate)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, fid, bytes, t.Month, by.ID, s.t(now), p.OfferID, p.PriceKRW, p.VATKRW, p.VATRate)
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

const topUpCols = `id, family_id, bytes, month, created_by, created_at, offer_id, price_krw, vat_krw, vat_rate`

func scanTopUp(sc scanner) (TopUp, error) {
	var t TopUp
	var at sqldialect.NullTime
	err := sc.Scan(&t.ID, &t.FamilyID, &t.Bytes, &t.Month, &t.CreatedBy, &at, &t.OfferID, &t.PriceKRW, &t.VATKRW, &t.VATRate)
	t.CreatedAt = at.Time
	return t, err
}

// TopUps returns the family's top-ups of month (YYYYMM), oldest first.
func (s *Store) TopUps(ctx context.Context, fid int64, month string) ([]TopUp, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+topUpCols+` FROM topups WHERE family_id = ? AND month = ? ORDER BY id`, fid, month)
	if err != nil {
		return nil, dbErr("top-ups", err)
	}
	return collect(rows, "top-ups", scanTopUp)
}

// GetTopUp returns top-up id of family fid (ErrNotFound when the family
// has none with that id): a receipt.
func (s *Store) GetTopUp(ctx context.Context, fid, id int64) (TopUp, error) {
	t, err := scanTopUp(s.db.QueryRowContext(ctx, `SELECT `+topUpCols+` FROM topups WHERE id = ? AND family_id = ?`, id, fid))
	if errors.Is(err, sql.ErrNoRows) {
		return TopUp{}, notFound("top-up", id)
	}
	if err != nil {
		return TopUp{}, dbErr("top-up", err)
	}
	return t, nil
}
