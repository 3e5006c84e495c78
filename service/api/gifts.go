package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// GiftCreate is data one member gives another ("데이터 선물하기").
type GiftCreate struct {
	FromCustomerID int64 `json:"fromCustomerId,omitempty" minimum:"0" doc:"The giver; absent or 0: the caller. A member gives only its own data; owners and admins give any member's"`
	ToCustomerID   int64 `json:"toCustomerId" minimum:"1" doc:"The receiver, another member of the family"`
	AmountBytes    int64 `json:"amountBytes" minimum:"1" maximum:"70368744177664" doc:"Bytes given, at most what the giver has left this month"`
}

type giftInput struct {
	FamilyPath
	Body GiftCreate
}

// GiftView is a gift made and both members' policies after it.
type GiftView struct {
	Month          string     `json:"month" doc:"The month the gift is for (YYYYMM, the service zone)" example:"202611"`
	FromCustomerID int64      `json:"fromCustomerId"`
	ToCustomerID   int64      `json:"toCustomerId"`
	AmountBytes    int64      `json:"amountBytes"`
	GiverLeftBytes int64      `json:"giverLeftBytes" doc:"What the giver has left to use this month after the gift"`
	From           PolicyView `json:"from" doc:"The giver's policy (LIMIT:DATA:GIFT:<YYYYMM> lowered) and standing"`
	To             PolicyView `json:"to" doc:"The receiver's policy (LIMIT:DATA:GIFT:<YYYYMM> raised) and standing"`
}

type giftOutput struct {
	Status int
	Body   GiftView
}

const giftDoc = "Moves data from one member's monthly allowance to another's for this month (\"데이터 선물하기\"): the giver's " +
	"monthly limit is lowered and the receiver's raised by the same amount (each member's LIMIT:DATA:GIFT:<YYYYMM>, " +
	"received less given; daily limits do not move), in one transaction with a data.gift audit row and both members' " +
	"policy-updated events; the quota engine applies the giver's cut before the receiver's raise, so the family is " +
	"never allowed more than before, and the family pool does not change. A member gives its own data; owners and " +
	"admins give any member's. Both must have a monthly limit (409: the giver has no allowance of its own to give; a " +
	"receiver without one may already use the pool), and the amount be at most what the giver has left this month " +
	"(422 says how much)."

func (a *Server) registerGifts() {
	op := huma.Operation{OperationID: "give-data", Method: http.MethodPost, Path: "/families/{familyId}/gifts",
		Summary: "Give data to another member of the family", Description: giftDoc, Tags: []string{familiesTag},
		Security: secured(), DefaultStatus: http.StatusCreated,
		Errors: []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity}}
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
		res, err := a.cfg.Family.Gift(ctx, store.Gift{FamilyID: in.FamilyID, From: from, To: in.Body.ToCustomerID,
			Bytes: in.Body.AmountBytes, By: p.actor()})
		if err != nil {
			return nil, a.problem(ctx, err, "body")
		}
		v := GiftView{Month: res.Month, FromCustomerID: from, ToCustomerID: in.Body.ToCustomerID, AmountBytes: in.Body.AmountBytes,
			GiverLeftBytes: res.Left, From: a.policyResult(res.From), To: a.policyResult(res.To)}
		return &giftOutput{Status: http.StatusCreated, Body: v}, nil
	})
}
