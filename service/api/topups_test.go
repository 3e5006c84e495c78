package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dabom/dpcs/service/store"
)

// TestTopUpsOnlyFromOffers: prices are not advisory. An owner's top-up of
// any amount (10 GiB, 1 byte) was taken at no price; now an owner buys one
// of the operator's offers by its id, and anything else is 422 at
// body.offerId with a Korean message naming the offers, writing nothing.
// The row and its audit row record the offer, its bytes, price and VAT (at
// the operator's rate); the back office may still add bytes outside the
// offers, recorded without an offer or a price.
func TestTopUpsOnlyFromOffers(t *testing.T) {
	f := newAPIFixture(t)
	owner, admin := f.token(ownerA), f.token(adminID)
	ctx := context.Background()
	rows := func() int {
		t.Helper()
		tops, err := f.store.TopUps(ctx, famA, "202602")
		if err != nil {
			t.Fatal(err)
		}
		return len(tops)
	}
	for _, body := range []map[string]any{{"bytes": 10 * gib}, {"bytes": 1}, {}, {"offerId": "2GB"}, {"offerId": "1GB", "bytes": gib}} {
		p := f.problem(http.MethodPost, "/families/100/topups", owner, body, http.StatusUnprocessableEntity, "")
		loc, msg := p.Errors[0].Location, p.Errors[0].Message
		if (loc != "body.offerId" && loc != "body.bytes") || !strings.ContainsAny(msg, "충전상품") {
			t.Errorf("owner's top-up %v: %s %q, want a Korean refusal at body.offerId", body, loc, msg)
		}
	}
	p := f.problem(http.MethodPost, "/families/100/topups", owner, map[string]any{"offerId": "2GB"}, http.StatusUnprocessableEntity, "body.offerId")
	if !strings.Contains(p.Errors[0].Message, "100MB, 500MB, 1GB, 3GB") {
		t.Errorf("an unknown offer's refusal does not name the offers: %q", p.Errors[0].Message)
	}
	if n := rows(); n != 0 {
		t.Fatalf("refused top-ups wrote %d rows", n)
	}

	var tu TopUpView
	f.call(http.MethodPost, "/families/100/topups", owner, map[string]any{"offerId": "500MB"}, http.StatusCreated, &tu)
	if tu.Bytes != 500*mib || tu.OfferID != "500MB" || tu.PriceKRW != 5500 || tu.VATKRW != 500 || tu.VATRate != 10 || tu.TotalBytes != 10*gib+500*mib {
		t.Fatalf("bought 500MB: %+v", tu)
	}
	got, err := f.store.GetTopUp(ctx, famA, tu.ID)
	if err != nil || got.Purchase != (store.Purchase{OfferID: "500MB", PriceKRW: 5500, VATKRW: 500, VATRate: 10}) || got.Bytes != 500*mib {
		t.Errorf("the row: %+v, %v", got, err)
	}
	audit, err := f.store.AuditLog(ctx, store.AuditFilter{FamilyID: famA, Action: "family.topup"})
	if err != nil || len(audit) != 1 {
		t.Fatalf("audit %+v %v", audit, err)
	}
	var a map[string]any
	if err := json.Unmarshal(audit[0].After, &a); err != nil || a["OfferID"] != "500MB" || a["PriceKRW"] != 5500.0 || a["VATKRW"] != 500.0 || a["Bytes"] != float64(500*mib) {
		t.Errorf("the audit row: %s", audit[0].After)
	}
	// The back office: an offer, or an amount outside them, free.
	var free TopUpView
	f.call(http.MethodPost, "/families/100/topups", admin, map[string]any{"bytes": 7}, http.StatusCreated, &free)
	if free.OfferID != "" || free.PriceKRW != 0 || free.Bytes != 7 {
		t.Errorf("the back office's top-up: %+v", free)
	}
	// The VAT follows the operator's rate.
	f.withAPI(func(c *Config) { c.VATRate = -1 })
	f.call(http.MethodPost, "/families/100/topups", f.token(ownerA), map[string]any{"offerId": "100MB"}, http.StatusCreated, &tu)
	if tu.PriceKRW != 2200 || tu.VATKRW != 0 || tu.VATRate != 0 {
		t.Errorf("no VAT: %+v", tu)
	}
}

// TestTopUpReceiptAndHistory: a top-up's receipt says what was bought,
// by whom, the price with its supply price and VAT, and the billing;
// members read none. The 충전/선물 history lists the month's top-ups and
// gifts newest first: owners with prices and per member; a member its own
// gifts and the family's top-ups, without prices.
func TestTopUpReceiptAndHistory(t *testing.T) {
	f := newAPIFixture(t)
	owner, admin, child := f.token(ownerA), f.token(adminID), f.token(childA)
	var gb, free TopUpView
	f.call(http.MethodPost, "/families/100/topups", owner, map[string]any{"offerId": "1GB"}, http.StatusCreated, &gb)
	f.advance(time.Minute)
	f.call(http.MethodPost, "/families/100/topups", admin, map[string]any{"bytes": mib}, http.StatusCreated, &free)
	f.advance(time.Minute)
	var r TopUpReceipt
	f.call(http.MethodGet, fmt.Sprintf("/families/100/topups/%d", gb.ID), owner, nil, http.StatusOK, &r)
	if r.OfferID != "1GB" || r.Bytes != gib || r.PriceKRW != 9900 || r.SupplyKRW != 9000 || r.VATKRW != 900 || r.VATRate != 10 ||
		r.Billing != "PHONE_BILL" || r.BoughtBy.CustomerID != ownerA || r.BoughtBy.Name != "m1001" || r.FamilyName != "family 100" || r.Month != "202602" {
		t.Errorf("receipt %+v", r)
	}
	f.call(http.MethodGet, fmt.Sprintf("/families/100/topups/%d", free.ID), f.token(agentID), nil, http.StatusOK, &r)
	if r.Billing != "FREE" || r.PriceKRW != 0 || r.BoughtBy.CustomerID != adminID {
		t.Errorf("a free top-up's receipt %+v", r)
	}
	f.problem(http.MethodGet, fmt.Sprintf("/families/100/topups/%d", gb.ID), child, nil, http.StatusForbidden, "")
	f.problem(http.MethodGet, fmt.Sprintf("/families/200/topups/%d", gb.ID), admin, nil, http.StatusNotFound, "")
	f.problem(http.MethodGet, fmt.Sprintf("/families/100/topups/%d", gb.ID), f.token(ownerB), nil, http.StatusNotFound, "")

	// Gifts: the owner gives the child, the owner gives the victim.
	f.giftLimits(owner, map[int64]int64{ownerA: 4 * gib, childA: gib, victimA: gib})
	f.call(http.MethodPost, "/families/100/gifts", owner, map[string]any{"toCustomerId": childA, "amountBytes": 200 * mib}, http.StatusCreated, nil)
	f.advance(time.Minute)
	f.call(http.MethodPost, "/families/100/gifts", owner, map[string]any{"toCustomerId": victimA, "amountBytes": 300 * mib}, http.StatusCreated, nil)

	var h History
	f.call(http.MethodGet, "/families/100/history", owner, nil, http.StatusOK, &h)
	kinds := func(h History) (out []string) {
		for _, e := range h.Entries {
			out = append(out, fmt.Sprintf("%s %d", e.Kind, e.Bytes))
		}
		return out
	}
	if got := strings.Join(kinds(h), ", "); got != fmt.Sprintf("GIFT %d, GIFT %d, TOPUP %d, TOPUP %d", 300*mib, 200*mib, mib, gib) || h.Month != "202602" {
		t.Errorf("owner's history: %s", got)
	}
	if len(h.Entries) != 4 || h.TopUpBytes != gib+mib || h.GiftBytes != 500*mib || h.PriceKRW == nil || *h.PriceKRW != 9900 {
		t.Errorf("owner's history totals: %+v", h)
	}
	for _, e := range h.Entries {
		switch {
		case e.Kind == "TOPUP" && (e.PriceKRW == nil || e.By.Name == ""):
			t.Errorf("owner's history top-up without price or buyer: %+v", e)
		case e.Kind == "GIFT" && (e.From == nil || e.To == nil || e.From.Name != "m1001"):
			t.Errorf("owner's history gift: %+v", e)
		}
	}
	f.call(http.MethodGet, fmt.Sprintf("/families/100/history?member=%d", victimA), owner, nil, http.StatusOK, &h)
	if got := kinds(h); len(got) != 1 || got[0] != fmt.Sprintf("GIFT %d", 300*mib) || h.Member != victimA {
		t.Errorf("the victim's history: %v", got)
	}
	// The child: its gift and the family's top-ups, no prices.
	raw := f.call(http.MethodGet, fmt.Sprintf("/families/100/history?member=%d", victimA), child, nil, http.StatusOK, &h)
	if got := strings.Join(kinds(h), ", "); got != fmt.Sprintf("GIFT %d, TOPUP %d, TOPUP %d", 200*mib, mib, gib) || strings.Contains(string(raw), "priceKrw") {
		t.Errorf("the child's history: %v %s", got, raw)
	}
	f.call(http.MethodGet, "/families/100/history?month=202601", owner, nil, http.StatusOK, &h)
	if len(h.Entries) != 0 || h.Month != "202601" {
		t.Errorf("January's history: %+v", h)
	}
	f.problem(http.MethodGet, "/families/100/history?month=2026-02", owner, nil, http.StatusUnprocessableEntity, "query.month")
	f.problem(http.MethodGet, "/families/200/history", owner, nil, http.StatusNotFound, "")
}
