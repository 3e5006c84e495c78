package api

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/limit"
	"github.com/dabom/dpcs/service/store"
)

// DefaultGiftRate is Config.GiftRate's default: gift requests one member
// may send.
var DefaultGiftRate = limit.Rate{N: 10, Per: time.Minute}

// GiftCreate is data one member gives another ("데이터 선물하기").
type GiftCreate struct {
	FromCustomerID int64 `json:"fromCustomerId,omitempty" minimum:"0" doc:"The giver; absent or 0: the caller. A member gives only its own data; owners and admins give any member's"`
	ToCustomerID   int64 `json:"toCustomerId" minimum:"1" doc:"The receiver, another member of the family"`
	AmountBytes    int64 `json:"amountBytes" minimum:"1" maximum:"70368744177664" doc:"Bytes given: a whole number of the operator's steps (GET /catalog giftRules.stepBytes), at most giftRules.maxBytes, leaving the giver at least giftRules.giverFloorBytes this month"`
}

type giftInput struct {
	FamilyPath
	Body GiftCreate
}

// GiftView is a gift made: what was given and what the giver has left. It
// says nothing of either member's rules (the receiver's are not the
// giver's to read; the giver's own are at GET …/policies).
type GiftView struct {
	ID             int64     `json:"id"`
	Month          string    `json:"month" doc:"The month the gift is for (YYYYMM, the service zone)" example:"202611"`
	FromCustomerID int64     `json:"fromCustomerId"`
	ToCustomerID   int64     `json:"toCustomerId"`
	AmountBytes    int64     `json:"amountBytes"`
	GiverLeftBytes int64     `json:"giverLeftBytes" doc:"What the giver has left to use (and give) this month after the gift: its monthly allowance without a day's extra, less its usage"`
	GiftsLeft      int       `json:"giftsLeft" doc:"How many more gifts the giver may give this month (-1: no limit)"`
	CreatedAt      time.Time `json:"createdAt"`
}

type giftOutput struct {
	Status int
	Body   GiftView
}

// GiftProblem is the problem (RFC 9457) of a gift the carriers' rules
// refuse: the common members, the rule and the bound it leaves.
type GiftProblem struct {
	huma.ErrorModel
	Rule  string `json:"rule" enum:"LEFT,FLOOR,SHARE,STEP,MAX,GIVEN_PER_MONTH,RECEIVED_PER_MONTH,RECEIVED_MAX,MINOR,GIVER_NO_LIMIT,RECEIVER_NO_LIMIT" doc:"The rule the gift breaks (doc/configuration.md, DPCS_GIFT_*): LEFT more than the giver has left this month, FLOOR the giver would keep less than the floor, SHARE more than the giver may give of its plan this month, STEP not a whole number of steps, MAX more than one gift moves, GIVEN_PER_MONTH / RECEIVED_PER_MONTH the month's gifts given / received, RECEIVED_MAX more than the receiver may still receive this month, MINOR a minor only receives, GIVER_NO_LIMIT / RECEIVER_NO_LIMIT a member without a monthly limit"`
	Limit int64  `json:"limit" doc:"The bound the rule leaves now: bytes that can still be given (LEFT, FLOOR, SHARE, RECEIVED_MAX), the step or the most one gift moves in bytes (STEP, MAX), the gifts a month (GIVEN_PER_MONTH, RECEIVED_PER_MONTH); 0 otherwise"`
}

// giftProblem answers a refusal of the rules as a GiftProblem: 422 for an
// amount, 409 for the members' state, located at the body's field.
func giftProblem(r *store.GiftRefusal) error {
	status := http.StatusUnprocessableEntity
	if errors.Is(r.Kind, store.ErrConflict) {
		status = http.StatusConflict
	}
	return &GiftProblem{ErrorModel: huma.ErrorModel{Status: status, Title: http.StatusText(status), Detail: r.Msg,
		Errors: []*huma.ErrorDetail{{Location: "body." + r.Field, Message: r.Msg}}}, Rule: r.Rule, Limit: r.Limit}
}

// giftProblemResponse documents the 409 and 422 of POST …/gifts.
func (a *Server) giftProblemResponse(what string) *huma.Response {
	schema := a.api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[GiftProblem](), true, "GiftProblem")
	return &huma.Response{Description: what, Content: map[string]*huma.MediaType{"application/problem+json": {Schema: schema}}}
}

// GiftRulesView are the carriers' rules every gift keeps (the operator's
// DPCS_GIFT_*), for a client to offer only what can be given.
type GiftRulesView struct {
	GivenPerMonth    int   `json:"givenPerMonth" doc:"Gifts one member may give a month (0: no limit)"`
	ReceivedPerMonth int   `json:"receivedPerMonth" doc:"Gifts one member may receive a month (0: no limit)"`
	StepBytes        int64 `json:"stepBytes" doc:"A gift is a whole number of these (0: any amount)"`
	MaxBytes         int64 `json:"maxBytes" doc:"The most one gift moves (0: no limit)"`
	GiverFloorBytes  int64 `json:"giverFloorBytes" doc:"What the giver keeps of its month's allowance after a gift, at least"`
	MaxSharePercent  int   `json:"maxSharePercent" doc:"The most a member gives in a month, in percent of its monthly limit (0: no limit)"`
	ReceivedMaxBytes int64 `json:"receivedMaxBytes" doc:"The most one member receives in a month (0: no limit)"`
	MinorsGive       bool  `json:"minorsGive" doc:"Members marked as minors may give too (false: they only receive)"`
}

func giftRulesView(r store.GiftRules) GiftRulesView {
	return GiftRulesView{GivenPerMonth: r.GivenPerMonth, ReceivedPerMonth: r.ReceivedPerMonth, StepBytes: r.Step, MaxBytes: r.Max,
		GiverFloorBytes: r.GiverFloor, MaxSharePercent: r.MaxSharePercent, ReceivedMaxBytes: r.ReceivedMax, MinorsGive: !r.MinorsOnlyReceive}
}

const giftDoc = "Moves data from one member's monthly allowance to another's for this month (\"데이터 선물하기\"): the giver's " +
	"monthly limit is lowered and the receiver's raised by the same amount (each member's LIMIT:DATA:GIFT:<YYYYMM>, " +
	"received less given; daily limits do not move), in one transaction with a gifts row, a data.gift audit row, both " +
	"members' policy-updated events and both members' DATA_GIFTED notifications (the receiver told who gave how much, " +
	"the giver its confirmation: each in its inbox, live and by push); the quota engine applies the giver's cut before the receiver's raise, so the family " +
	"is never allowed more than before, and the family pool does not change. A member gives its own data; owners and " +
	"admins give any member's. The operator's rules (DPCS_GIFT_*, GET /catalog giftRules; defaults the carriers': 2 gifts " +
	"given and 2 received a month, 100 MB steps, at most 1 GB a gift, the giver keeps 500 MB and gives at most half its " +
	"monthly limit a month, a member receives at most 2 GB a month, minors only receive) are kept in the transaction; a " +
	"refusal is a GiftProblem naming its rule and the bound it leaves (422 for an amount, 409 for the members' state). " +
	"A day's extra allowance is never given: it ends with the day. Both members must have a monthly limit. Gifts are " +
	"never cancelled. The answer says what was given and what the giver has left, nothing of either member's rules. " +
	"One member sends at most DPCS_GIFT_RATE gift requests (default 10 a minute; 429 with Retry-After)."

func (a *Server) registerGifts() {
	op := huma.Operation{OperationID: "give-data", Method: http.MethodPost, Path: "/families/{familyId}/gifts",
		Summary: "Give data to another member of the family", Description: giftDoc, Tags: []string{familiesTag},
		Security: secured(), DefaultStatus: http.StatusCreated,
		Responses: map[string]*huma.Response{
			"409": a.giftProblemResponse("A member's state refuses the gift (a minor giver, the month's gifts, no monthly limit)"),
			"422": a.giftProblemResponse("The amount breaks a rule: the problem names it and what can still be given")},
		Errors: []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusTooManyRequests}}
	huma.Register(a.api, op, func(ctx context.Context, in *giftInput) (*giftOutput, error) {
		p, err := a.family(ctx, in.FamilyID, anyMember)
		if err != nil {
			return nil, err
		}
		from := in.Body.FromCustomerID
		switch {
		case from == 0 && p.Role.BackOffice():
			return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "body.fromCustomerId",
				Message: "the back office names the giver"})
		case from == 0:
			from = p.ID
		case p.Role == policy.RoleMember && from != p.ID:
			return nil, huma.Error403Forbidden("a member gives only its own data")
		}
		if err := a.admitGift(ctx, p); err != nil {
			return nil, err
		}
		res, err := a.cfg.Family.Gift(ctx, store.Gift{FamilyID: in.FamilyID, From: from, To: in.Body.ToCustomerID,
			Bytes: in.Body.AmountBytes, By: p.actor()})
		if r, ok := errors.AsType[*store.GiftRefusal](err); ok {
			return nil, giftProblem(r)
		}
		if err != nil {
			return nil, a.problem(ctx, err, "body")
		}
		g := res.Gift
		return &giftOutput{Status: http.StatusCreated, Body: GiftView{ID: g.ID, Month: res.Month, FromCustomerID: g.From,
			ToCustomerID: g.To, AmountBytes: g.Bytes, GiverLeftBytes: res.Left, GiftsLeft: res.GiftsLeft, CreatedAt: g.CreatedAt}}, nil
	})
}

// admitGift counts a gift request against the caller's rate (per member,
// whoever the giver: an owner giving for the children counts as itself).
func (a *Server) admitGift(ctx context.Context, p Principal) error {
	wait, err := a.guard.limiter.Allow(ctx, a.guard.key("gift", strconv.FormatInt(p.ID, 10)), a.cfg.GiftRate)
	if err != nil {
		a.log.ErrorContext(ctx, "api: gift rate", "err", err)
		return huma.NewError(http.StatusServiceUnavailable, "cannot check the request rate now")
	}
	if wait > 0 {
		return huma.ErrorWithHeaders(huma.NewError(http.StatusTooManyRequests, "too many gift requests; retry later"),
			http.Header{"Retry-After": {retryAfter(wait)}})
	}
	return nil
}
