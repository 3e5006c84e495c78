package store_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// testPoolLimit: a top-up or plan the quota engine would refuse (a month's
// plan + top-ups over policy.MaxBytes) is refused by the store before
// anything is written, for the current month and for the previous one, whose
// late events the engine still judges against plan + that month's top-ups.
func testPoolLimit(t *testing.T, e *env) {
	e.Family(t, 1) // plan 10 MiB
	const plan = int64(10 << 20)
	rows := func() [2]int { return [2]int{e.Count(t, "topups"), e.Count(t, "audit_log")} }
	refused := func(what string, err error, want store.PoolLimitError) {
		t.Helper()
		wantErr(t, what, err, store.ErrInvalid)
		var pl *store.PoolLimitError
		if !errors.As(err, &pl) {
			t.Fatalf("%s: err = %v, want a *store.PoolLimitError", what, err)
		}
		if diff := cmp.Diff(want, *pl); diff != "" {
			t.Errorf("%s: PoolLimitError (-want +got):\n%s", what, diff)
		}
	}

	// February: top up to exactly the maximum, then 1 byte more is refused.
	if _, err := e.S.AddTopUp(e.Ctx, 1, policy.MaxBytes-plan-5, owner); err != nil {
		t.Fatal(err)
	}
	before := rows()
	_, err := e.S.AddTopUp(e.Ctx, 1, 6, owner)
	refused("top-up over the maximum", err, store.PoolLimitError{Field: "bytes", Month: "202602", Max: 5})
	_, err = e.S.SetPlan(e.Ctx, 1, plan+6, admin)
	refused("plan over the maximum", err, store.PoolLimitError{Field: "planBytes", Month: "202602", Max: plan + 5})
	if got := rows(); got != before {
		t.Errorf("refused changes wrote rows: topups, audit_log = %v, want %v", got, before)
	}
	if f, _ := e.S.GetFamily(e.Ctx, 1); f.PlanBytes != plan {
		t.Errorf("plan after a refused change = %d, want %d", f.PlanBytes, plan)
	}
	if _, err := e.S.AddTopUp(e.Ctx, 1, 5, owner); err != nil {
		t.Fatalf("top-up to exactly the maximum: %v", err)
	}
	if _, err := e.S.SetPlan(e.Ctx, 1, plan-1, admin); err != nil {
		t.Fatalf("lowering the plan: %v", err)
	}

	// March: February's top-ups still count against a plan raise (its late
	// events are judged against plan + February's top-ups), not against a
	// top-up, which only adds to March.
	e.Clock.Add(30 * 24 * time.Hour)
	_, err = e.S.SetPlan(e.Ctx, 1, plan+1, admin)
	refused("plan raise over last month's pool", err, store.PoolLimitError{Field: "planBytes", Month: "202602", Max: plan})
	if _, err := e.S.SetPlan(e.Ctx, 1, plan, admin); err != nil {
		t.Fatalf("plan at last month's maximum: %v", err)
	}
	if _, err := e.S.AddTopUp(e.Ctx, 1, policy.MaxBytes-plan, owner); err != nil {
		t.Fatalf("March top-up up to the maximum: %v", err)
	}
	_, err = e.S.AddTopUp(e.Ctx, 1, 1, owner)
	refused("March top-up over the maximum", err, store.PoolLimitError{Field: "bytes", Month: "202603", Max: 0})

	// May: no month the engine still judges has top-ups.
	e.Clock.Add(61 * 24 * time.Hour)
	if _, err := e.S.SetPlan(e.Ctx, 1, policy.MaxBytes, admin); err != nil {
		t.Fatalf("plan of the maximum without recent top-ups: %v", err)
	}
	_, err = e.S.AddTopUp(e.Ctx, 1, 1, owner)
	refused("top-up on a maximal plan", err, store.PoolLimitError{Field: "bytes", Month: "202605", Max: 0})

	// Rows written before the store checked: top-ups alone over the maximum.
	// No plan fits, and the error says so.
	e.Family(t, 3)
	for range 2 {
		if _, err := e.DB.ExecContext(e.Ctx, `INSERT INTO topups (family_id, bytes, month, created_by, created_at)
			VALUES (3, ?, '202605', 1, '2026-05-12 03:00:00')`, policy.MaxBytes); err != nil {
			t.Fatal(err)
		}
	}
	_, err = e.S.SetPlan(e.Ctx, 3, 0, admin)
	refused("plan beside top-ups over the maximum", err, store.PoolLimitError{Field: "planBytes", Month: "202605", Max: -policy.MaxBytes})
	_, err = e.S.AddTopUp(e.Ctx, 3, 1, owner)
	refused("top-up beside top-ups over the maximum", err, store.PoolLimitError{Field: "bytes", Month: "202605", Max: -policy.MaxBytes - plan})

	// Concurrent top-ups never overshoot: the check holds the family row.
	e.Family(t, 2)
	if _, err := e.S.SetPlan(e.Ctx, 2, 0, admin); err != nil {
		t.Fatal(err)
	}
	const n, each = 8, policy.MaxBytes / 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { _, errs[i] = e.S.AddTopUp(e.Ctx, 2, each, owner) })
	}
	wg.Wait()
	ok := 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, store.ErrInvalid):
			t.Errorf("concurrent top-up %d: %v", i, err)
		}
	}
	tus, err := e.S.TopUps(e.Ctx, 2, "202605")
	if err != nil {
		t.Fatal(err)
	}
	if ok != 4 || len(tus) != 4 {
		t.Errorf("concurrent top-ups of MaxBytes/4: %d accepted, %d recorded; want 4 and 4", ok, len(tus))
	}
}

func TestPoolLimitErrorText(t *testing.T) {
	for _, tc := range []struct {
		err  store.PoolLimitError
		want string
	}{
		{store.PoolLimitError{Field: "bytes", Month: "202602", Max: 5},
			"bytes: the plan plus 202602's top-ups may total at most 70368744177664 bytes: at most 5 bytes can still be topped up that month"},
		{store.PoolLimitError{Field: "bytes", Month: "202602", Max: 0},
			"bytes: the plan plus 202602's top-ups may total at most 70368744177664 bytes: the pool of that month is full, nothing can be topped up"},
		{store.PoolLimitError{Field: "planBytes", Month: "202601", Max: -1},
			"planBytes: the plan plus 202601's top-ups may total at most 70368744177664 bytes: that month's top-ups alone are over it, so no plan fits until an operator corrects them"},
		{store.PoolLimitError{Field: "planBytes", Month: "202601", Max: 7},
			"planBytes: the plan plus 202601's top-ups may total at most 70368744177664 bytes: with that month's top-ups the plan can be at most 7 bytes"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%+v.Error():\n got %s\nwant %s", tc.err, got, tc.want)
		}
	}
}

// testPurchases: a top-up of an offer records the offer, its price and
// its VAT with the row and in its family.topup audit row, and reads back
// as a receipt (GetTopUp: only through its own family); the back office's
// top-ups outside the offers record none; a purchase that does not add up
// is refused before anything is written; a data request's TOPUP grant
// records its offer too.
func testPurchases(t *testing.T, e *env) {
	e.Family(t, 1)
	e.Family(t, 2)
	own := store.Actor{ID: 11, Role: policy.RoleOwner}
	gb := store.Purchase{OfferID: "1GB", PriceKRW: 9900, VATKRW: store.VAT(9900, 10), VATRate: 10}
	if gb.VATKRW != 900 || store.VAT(7700, 10) != 700 || store.VAT(2200, 10) != 200 || store.VAT(1000, 0) != 0 || store.VAT(0, 10) != 0 {
		t.Errorf("VAT: 9900 → %d, 7700 → %d, 2200 → %d", gb.VATKRW, store.VAT(7700, 10), store.VAT(2200, 10))
	}
	bought, err := e.S.BuyTopUp(e.Ctx, 1, 1<<30, gb, own, 50<<30)
	if err != nil {
		t.Fatal(err)
	}
	if bought.Purchase != gb || bought.Bytes != 1<<30 || bought.ID == 0 {
		t.Fatalf("BuyTopUp = %+v", bought)
	}
	free, err := e.S.AddTopUp(e.Ctx, 1, 5<<20, admin)
	if err != nil || free.Purchase != (store.Purchase{}) {
		t.Fatalf("AddTopUp = %+v, %v", free, err)
	}
	got, err := e.S.GetTopUp(e.Ctx, 1, bought.ID)
	if err != nil || got.Purchase != gb || got.Bytes != 1<<30 || got.CreatedBy != 11 || !got.CreatedAt.Equal(bought.CreatedAt) {
		t.Errorf("GetTopUp = %+v, %v; want %+v", got, err, bought)
	}
	_, err = e.S.GetTopUp(e.Ctx, 2, bought.ID)
	wantErr(t, "another family's top-up", err, store.ErrNotFound)
	all, err := e.S.TopUps(e.Ctx, 1, bought.Month)
	if err != nil || len(all) != 2 || all[0].Purchase != gb || all[1].OfferID != "" {
		t.Errorf("TopUps = %+v, %v", all, err)
	}
	rows, err := e.S.AuditLog(e.Ctx, store.AuditFilter{FamilyID: 1, Action: "family.topup"})
	if err != nil || len(rows) != 2 {
		t.Fatalf("audit %+v, %v", rows, err)
	}
	var audited store.TopUp
	if err := json.Unmarshal(rows[1].After, &audited); err != nil || audited.Purchase != gb {
		t.Errorf("the purchase's audit row %s: %+v, %v", rows[1].After, audited, err)
	}
	before := e.Count(t, "topups")
	for name, p := range map[string]store.Purchase{
		"VAT over the price": {OfferID: "x", PriceKRW: 100, VATKRW: 101},
		"a price, no offer":  {PriceKRW: 100},
		"a long offer id":    {OfferID: strings.Repeat("x", store.MaxOfferID+1)},
		"a negative price":   {OfferID: "x", PriceKRW: -1},
	} {
		_, err := e.S.BuyTopUp(e.Ctx, 1, 1, p, own, 0)
		wantErr(t, name, err, store.ErrInvalid)
	}
	if n := e.Count(t, "topups"); n != before {
		t.Errorf("refused purchases wrote %d rows", n-before)
	}

	// A data request approved with a top-up of an offer.
	r, _, err := e.S.CreateDataRequest(e.Ctx, store.NewDataRequest{FamilyID: 1, CustomerID: 12, AmountBytes: 500 << 20, Key: "k1",
		MaxAmount: 1 << 30, MaxPending: 3})
	if err != nil {
		t.Fatal(err)
	}
	half := store.Purchase{OfferID: "500MB", PriceKRW: 5500, VATKRW: 500, VATRate: 10}
	ans, err := e.S.AnswerDataRequest(e.Ctx, store.DataRequestAnswer{FamilyID: 1, RequestID: r.ID, Approve: true, Grant: "TOPUP",
		AmountBytes: 500 << 20, Purchase: half, By: own, OwnTopUpLimit: 50 << 30})
	if err != nil || ans.TopUp == nil || ans.TopUp.Purchase != half {
		t.Fatalf("TOPUP grant of an offer: %+v, %v", ans, err)
	}
}
