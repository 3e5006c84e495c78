package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// Top-ups are the operator's offers (DPCS_TOPUP_OFFERS), billed to the
// phone bill with VAT (DPCS_VAT_RATE), as the carriers sell them: an owner
// buys one by its id, the row and its audit row record the offer, its
// bytes, price and VAT, and the family reads a receipt and a 충전/선물
// history. The back office may still add an amount outside the offers (a
// goodwill top-up, no price), recorded as such.

// DefaultVATRate is Config.VATRate's default: Korea's VAT, 10 %.
const DefaultVATRate = 10

// vatRate is the configured VAT rate in percent.
func (a *Server) vatRate() int { return max(a.cfg.VATRate, 0) }

// offers are the top-ups offered, each with its VAT at the configured rate.
func (a *Server) offers() []TopUpOffer {
	out := slices.Clone(a.cfg.TopUpOffers)
	for i := range out {
		out[i].VATKRW = store.VAT(out[i].PriceKRW, a.vatRate())
	}
	return out
}

// purchase is the offer named id as a top-up records it, or a 422 at
// body.offerId (loc) in Korean, naming the offers.
func (a *Server) purchase(id, loc string) (int64, store.Purchase, error) {
	offers := a.offers()
	for _, o := range offers {
		if o.ID == id {
			return o.Bytes, store.Purchase{OfferID: o.ID, PriceKRW: o.PriceKRW, VATKRW: o.VATKRW, VATRate: a.vatRate()}, nil
		}
	}
	ids := make([]string, len(offers))
	for i, o := range offers {
		ids[i] = o.ID
	}
	msg := "충전은 통신사의 충전 상품으로만 할 수 있어요: " + strings.Join(ids, ", ") + " 중에서 골라 주세요 " +
		"(top-ups are the operator's offers: name one of them)"
	if len(offers) == 0 {
		msg = "지금은 충전 상품이 없어요: 고객센터에 문의해 주세요 (the operator offers no top-up)"
	}
	return 0, store.Purchase{}, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: loc, Message: msg})
}

// TopUpView is a recorded top-up and the pool after it.
type TopUpView struct {
	ID             int64     `json:"id"`
	FamilyID       int64     `json:"familyId"`
	Bytes          int64     `json:"bytes"`
	Month          string    `json:"month"`
	OfferID        string    `json:"offerId,omitempty" doc:"The offer bought; absent for the back office's top-up outside the offers"`
	PriceKRW       int64     `json:"priceKrw" doc:"What it cost in won, VAT included, billed to the phone bill (0: free)"`
	VATKRW         int64     `json:"vatKrw" doc:"The VAT in the price"`
	VATRate        int       `json:"vatRate" doc:"The VAT rate it was bought at, in percent"`
	CreatedBy      int64     `json:"createdBy"`
	CreatedAt      time.Time `json:"createdAt"`
	RemainingBytes int64     `json:"remainingBytes"`
	TotalBytes     int64     `json:"totalBytes"`
}

// TopUp is the body of a top-up request: an offer (owners), or an amount
// outside the offers (the back office).
type TopUp struct {
	OfferID string `json:"offerId,omitempty" maxLength:"32" doc:"The offer to buy: an id of GET /catalog topUpOffers, e.g. 1GB. Required of owners; a 422 at body.offerId names the offers"`
	Bytes   int64  `json:"bytes,omitempty" minimum:"0" maximum:"70368744177664" doc:"Admins only, instead of offerId: bytes added outside the offers (the back office's goodwill top-up, no price). Owners sending it get 422"`
}

type topUpInput struct {
	FamilyPath
	Body TopUp
}

type topUpOutput struct{ Body TopUpView }

// TopUpPath is the path of one top-up.
type TopUpPath struct {
	FamilyID int64 `path:"familyId" minimum:"1" doc:"Family id"`
	TopUpID  int64 `path:"topupId" minimum:"1" doc:"Top-up id"`
}

// PersonView names a member (its name as it is now).
type PersonView struct {
	CustomerID int64  `json:"customerId"`
	Name       string `json:"name,omitempty" doc:"The member's name now; absent for the system"`
}

// TopUpReceipt is a top-up's receipt (영수증): what was bought, when, by
// whom, what it cost and how it is billed.
type TopUpReceipt struct {
	ID         int64      `json:"id"`
	FamilyID   int64      `json:"familyId"`
	FamilyName string     `json:"familyName"`
	Month      string     `json:"month" doc:"The month whose pool it raised (YYYYMM)"`
	Bytes      int64      `json:"bytes"`
	OfferID    string     `json:"offerId,omitempty"`
	PriceKRW   int64      `json:"priceKrw" doc:"VAT included"`
	SupplyKRW  int64      `json:"supplyKrw" doc:"The price without VAT (공급가액)"`
	VATKRW     int64      `json:"vatKrw" doc:"The VAT (부가세)"`
	VATRate    int        `json:"vatRate" doc:"In percent"`
	Billing    string     `json:"billing" enum:"PHONE_BILL,FREE" doc:"PHONE_BILL: added to the family's phone bill; FREE: the back office's top-up, no charge"`
	BoughtBy   PersonView `json:"boughtBy"`
	CreatedAt  time.Time  `json:"createdAt"`
}

// HistoryQuery selects a family's 충전/선물 history.
type HistoryQuery struct {
	FamilyPath
	Month  string `query:"month" pattern:"^[0-9]{6}$" doc:"YYYYMM in the service zone; absent: this month"`
	Member int64  `query:"member" minimum:"0" doc:"Only this member's: the gifts it gave or received and the top-ups it bought. A MEMBER always sees its own"`
}

// HistoryEntry is one top-up or gift.
type HistoryEntry struct {
	Kind     string      `json:"kind" enum:"TOPUP,GIFT"`
	ID       int64       `json:"id" doc:"The top-up's (its receipt: GET …/topups/{id}) or the gift's id"`
	At       time.Time   `json:"at"`
	Bytes    int64       `json:"bytes"`
	By       PersonView  `json:"by" doc:"Who made it: the buyer of a top-up, the one who sent a gift (the giver, or an owner for it)"`
	OfferID  string      `json:"offerId,omitempty" doc:"TOPUP: the offer bought (absent: the back office's)"`
	PriceKRW *int64      `json:"priceKrw,omitempty" doc:"TOPUP: what it cost, VAT included (owners and the back office only)"`
	VATKRW   *int64      `json:"vatKrw,omitempty" doc:"TOPUP: the VAT in it (owners and the back office only)"`
	From     *PersonView `json:"from,omitempty" doc:"GIFT: the giver"`
	To       *PersonView `json:"to,omitempty" doc:"GIFT: the receiver"`
}

// History is a family's top-ups and gifts of a month, newest first.
type History struct {
	FamilyID int64          `json:"familyId"`
	Month    string         `json:"month"`
	Member   int64          `json:"member,omitempty"`
	Entries  []HistoryEntry `json:"entries"`
	// Totals, for the month: what was topped up and what it cost (owners
	// and the back office), what was given.
	TopUpBytes int64  `json:"topUpBytes"`
	PriceKRW   *int64 `json:"priceKrw,omitempty" doc:"The month's top-ups' price, VAT included (owners and the back office only)"`
	GiftBytes  int64  `json:"giftBytes"`
}

func (a *Server) registerTopUps() {
	tags := []string{familiesTag}
	topOp := huma.Operation{OperationID: "post-topup", Method: http.MethodPost, Path: "/families/{familyId}/topups",
		Summary: "Buy a top-up for this month's pool", Tags: tags, Security: secured(), DefaultStatus: http.StatusCreated,
		Errors: []int{http.StatusUnauthorized, http.StatusNotFound, http.StatusForbidden, http.StatusUnprocessableEntity}}
	owners := "Owners buy one of the operator's offers (offerId, GET /catalog topUpOffers; DPCS_TOPUP_OFFERS), billed " +
		"to the phone bill with VAT (DPCS_VAT_RATE): an amount instead, or an id that is no offer, is 422 naming " +
		"body.offerId with the offers, in Korean. Within the operator's limits: at most " + gibText(a.cfg.OwnerTopUpMax) +
		" per top-up and " + gibText(a.cfg.OwnerTopUpMonthly) + " a month for the family's members together; over them " +
		"the answer is 422 naming what can still be added."
	if a.cfg.OwnerTopUpMax < 0 || a.cfg.OwnerTopUpMonthly < 0 {
		owners = "The operator turned owners' top-ups off: owners get 403."
	}
	topOp.Description = "Adds one of the operator's offers to the family's pool for the rest of the month (the \"top-up " +
		"where allowed\" of ask-for-more). " + owners + " Admins buy an offer the same way, or add bytes outside the offers " +
		"(a goodwill top-up, no price), bounded only by the pool's maximum: the plan plus the month's top-ups may total at " +
		"most 2^46 bytes. The row and its family.topup audit row record the offer, its bytes, price and VAT; the receipt " +
		"is GET …/topups/{id}. Members (not owners) get 403."
	huma.Register(a.api, topOp, func(ctx context.Context, in *topUpInput) (*topUpOutput, error) {
		p, err := a.family(ctx, in.FamilyID, ownerOnly)
		if err != nil {
			return nil, err
		}
		if p.Role != policy.RoleAdmin && (a.cfg.OwnerTopUpMax < 0 || a.cfg.OwnerTopUpMonthly < 0) {
			return nil, a.ownerTopUp(0)
		}
		bytes, buy, err := a.topUpOrder(p, in.Body)
		if err != nil {
			return nil, err
		}
		// The store refuses, inside the transaction holding the family row,
		// a top-up the engine would refuse (plan + month's top-ups over
		// policy.MaxBytes) or over an owner's monthly limit: a 422 then has
		// written nothing, and no row the engine refuses can reach SQL and
		// fail every later rebuild.
		var ownLimit int64
		if p.Role != policy.RoleAdmin {
			if err := a.ownerTopUp(bytes); err != nil {
				return nil, err
			}
			ownLimit = a.cfg.OwnerTopUpMonthly
		}
		res, err := a.cfg.Family.TopUp(ctx, in.FamilyID, bytes, buy, p.actor(), ownLimit)
		if err != nil {
			return nil, a.problem(ctx, err, "body.bytes")
		}
		t, pool := res.TopUp, res.Pool
		return &topUpOutput{Body: TopUpView{ID: t.ID, FamilyID: t.FamilyID, Bytes: t.Bytes, Month: t.Month, OfferID: t.OfferID,
			PriceKRW: t.PriceKRW, VATKRW: t.VATKRW, VATRate: t.VATRate, CreatedBy: t.CreatedBy, CreatedAt: t.CreatedAt,
			RemainingBytes: pool.Remaining, TotalBytes: pool.Total}}, nil
	})

	huma.Register(a.api, huma.Operation{OperationID: "get-topup-receipt", Method: http.MethodGet,
		Path: "/families/{familyId}/topups/{topupId}", Summary: "A top-up's receipt", Tags: tags, Security: secured(),
		Description: "What was bought, when and by whom, what it cost (VAT included, with the supply price and the VAT) " +
			"and how it is billed (the phone bill, or free for the back office's top-ups). Owners and the back office; " +
			"members get 403.",
		Errors: []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound}},
		func(ctx context.Context, in *TopUpPath) (*struct{ Body TopUpReceipt }, error) {
			p, err := a.family(ctx, in.FamilyID, anyMember)
			if err != nil {
				return nil, err
			}
			if p.Role == policy.RoleMember {
				return nil, huma.Error403Forbidden("receipts are the owners'")
			}
			f, err := a.cfg.Store.GetFamily(ctx, in.FamilyID)
			if err != nil {
				return nil, a.problem(ctx, err, "path.familyId")
			}
			t, err := a.cfg.Store.GetTopUp(ctx, in.FamilyID, in.TopUpID)
			if err != nil {
				return nil, a.problem(ctx, err, "path.topupId")
			}
			names, err := a.cfg.Store.MemberNames(ctx, []int64{t.CreatedBy})
			if err != nil {
				return nil, a.problem(ctx, err, "path")
			}
			billing := "PHONE_BILL"
			if t.PriceKRW == 0 {
				billing = "FREE"
			}
			return &struct{ Body TopUpReceipt }{Body: TopUpReceipt{ID: t.ID, FamilyID: t.FamilyID, FamilyName: f.Name, Month: t.Month,
				Bytes: t.Bytes, OfferID: t.OfferID, PriceKRW: t.PriceKRW, SupplyKRW: t.PriceKRW - t.VATKRW, VATKRW: t.VATKRW,
				VATRate: t.VATRate, Billing: billing, BoughtBy: PersonView{CustomerID: t.CreatedBy, Name: names[t.CreatedBy]},
				CreatedAt: t.CreatedAt}}, nil
		})

	huma.Register(a.api, huma.Operation{OperationID: "get-family-history", Method: http.MethodGet,
		Path: "/families/{familyId}/history", Summary: "The family's top-ups and gifts (충전/선물 내역)", Tags: tags,
		Security: secured(),
		Description: "The top-ups and gifts of a month, newest first, with who made them and, for owners and the back " +
			"office, what the top-ups cost; member narrows it to one member's (the gifts it gave or received, the " +
			"top-ups it bought). A MEMBER sees its own gifts and the family's top-ups, without prices.",
		Errors: []int{http.StatusUnauthorized, http.StatusNotFound, http.StatusUnprocessableEntity}},
		func(ctx context.Context, in *HistoryQuery) (*struct{ Body History }, error) {
			p, err := a.family(ctx, in.FamilyID, anyMember)
			if err != nil {
				return nil, err
			}
			if _, err := a.cfg.Store.GetFamily(ctx, in.FamilyID); err != nil {
				return nil, a.problem(ctx, err, "path.familyId")
			}
			h, err := a.history(ctx, p, in)
			if err != nil {
				return nil, err
			}
			return &struct{ Body History }{Body: h}, nil
		})
}

// topUpOrder is what a top-up body asks for: an offer (bytes and its
// purchase), or — the back office only — bytes outside the offers.
func (a *Server) topUpOrder(p Principal, b TopUp) (int64, store.Purchase, error) {
	switch {
	case b.OfferID != "" && b.Bytes != 0:
		return 0, store.Purchase{}, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "body.bytes",
			Message: "충전 상품(offerId)과 양(bytes) 중 하나만 보내 주세요 (send offerId or bytes, not both)"})
	case b.OfferID != "":
		return a.purchase(b.OfferID, "body.offerId")
	case p.Role != policy.RoleAdmin && b.Bytes != 0:
		return 0, store.Purchase{}, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "body.offerId",
			Message: "보호자의 충전은 통신사의 충전 상품으로만 할 수 있어요: bytes 대신 offerId를 보내 주세요 (owners buy an offer: send offerId)"})
	case p.Role != policy.RoleAdmin || b.Bytes == 0:
		return a.purchase("", "body.offerId")
	}
	return b.Bytes, store.Purchase{}, nil
}

// ownerTopUp checks an owner's top-up against the per-top-up limit (the
// monthly one is the store's, in the transaction that writes it).
func (a *Server) ownerTopUp(bytes int64) error {
	switch {
	case a.cfg.OwnerTopUpMax < 0 || a.cfg.OwnerTopUpMonthly < 0:
		return huma.Error403Forbidden("top-ups are made by the back office: ask an admin")
	case bytes > a.cfg.OwnerTopUpMax:
		return huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "body.bytes",
			Message: fmt.Sprintf("an owner may add at most %d bytes per top-up", a.cfg.OwnerTopUpMax)})
	}
	return nil
}

// gibText renders a byte limit for route docs: "10 GiB" or "1500 bytes".
func gibText(n int64) string {
	if n > 0 && n%(1<<30) == 0 {
		return fmt.Sprintf("%d GiB", n>>30)
	}
	return fmt.Sprintf("%d bytes", n)
}

// history reads a family's top-ups and gifts of a month for p: a MEMBER's
// own gifts and the family's top-ups without prices; owners and the back
// office everything, or one member's.
func (a *Server) history(ctx context.Context, p Principal, in *HistoryQuery) (History, error) {
	month := in.Month
	if month == "" {
		month = policy.MomentOf(a.cfg.Clock(), a.cfg.State.Location()).Month
	}
	member, prices := in.Member, p.Role != policy.RoleMember
	if !prices {
		member = p.ID
	}
	h := History{FamilyID: in.FamilyID, Month: month, Member: in.Member, Entries: []HistoryEntry{}}
	if !prices {
		h.Member = 0
	}
	tops, err := a.cfg.Store.TopUps(ctx, in.FamilyID, month)
	if err != nil {
		return h, a.problem(ctx, err, "query.month")
	}
	gifts, err := a.cfg.Store.Gifts(ctx, in.FamilyID, month, member)
	if err != nil {
		return h, a.problem(ctx, err, "query.month")
	}
	ids := map[int64]bool{}
	for _, t := range tops {
		ids[t.CreatedBy] = true
	}
	for _, g := range gifts {
		ids[g.From], ids[g.To], ids[g.CreatedBy] = true, true, true
	}
	names, err := a.cfg.Store.MemberNames(ctx, slices.Collect(func(yield func(int64) bool) {
		for id := range ids {
			if !yield(id) {
				return
			}
		}
	}))
	if err != nil {
		return h, a.problem(ctx, err, "path")
	}
	person := func(id int64) PersonView { return PersonView{CustomerID: id, Name: names[id]} }
	var price int64
	for _, t := range tops {
		if prices && member > 0 && t.CreatedBy != member {
			continue
		}
		e := HistoryEntry{Kind: "TOPUP", ID: t.ID, At: t.CreatedAt, Bytes: t.Bytes, By: person(t.CreatedBy), OfferID: t.OfferID}
		if prices {
			pk, vk := t.PriceKRW, t.VATKRW
			e.PriceKRW, e.VATKRW = &pk, &vk
		}
		h.Entries, h.TopUpBytes, price = append(h.Entries, e), h.TopUpBytes+t.Bytes, price+t.PriceKRW
	}
	for _, g := range gifts {
		from, to := person(g.From), person(g.To)
		h.Entries = append(h.Entries, HistoryEntry{Kind: "GIFT", ID: g.ID, At: g.CreatedAt, Bytes: g.Bytes, By: person(g.CreatedBy),
			From: &from, To: &to})
		h.GiftBytes += g.Bytes
	}
	if prices {
		h.PriceKRW = &price
	}
	slices.SortStableFunc(h.Entries, func(x, y HistoryEntry) int { return y.At.Compare(x.At) })
	return h, nil
}
