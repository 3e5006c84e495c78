package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/service/family"
)

// The names the mobile network knows a member by: the IMSI an SMF sends
// in a charging request (service/charging finds the member by it, or by
// the MSISDN, which is the member's phone). The operator's provisioning
// sets it; the back office reads it.

// Subscriber is the network's name of a member.
type Subscriber struct {
	CustomerID int64  `json:"customerId"`
	IMSI       string `json:"imsi" doc:"The IMSI the network names the member by (\"\": none; the member is then found by its phone as MSISDN)"`
}

// SubscriberChange is the body of PUT …/imsi.
type SubscriberChange struct {
	IMSI string `json:"imsi" maxLength:"15" pattern:"^[0-9]*$" doc:"5 to 15 digits (MCC, MNC, MSIN), or \"\" to remove it"`
}

func (a *Server) registerSubscribers() {
	op := func(id, method, summary, doc string, errs ...int) huma.Operation {
		return huma.Operation{OperationID: id, Method: method, Path: "/admin/families/{familyId}/members/{customerId}/imsi",
			Summary: summary, Description: doc, Tags: []string{adminTag}, Security: secured(),
			Errors: append([]int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound}, errs...)}
	}
	huma.Register(a.api, op("get-member-imsi", http.MethodGet, "A member's IMSI",
		"The IMSI the charging interface finds the member by (doc/runbook.md, Charging). Admins."),
		func(ctx context.Context, in *MemberPath) (*struct{ Body Subscriber }, error) {
			if _, err := a.admin(ctx); err != nil {
				return nil, err
			}
			if _, err := a.cfg.Store.GetMember(ctx, in.FamilyID, in.CustomerID); err != nil {
				return nil, a.problem(ctx, err, "path.customerId")
			}
			imsi, err := a.cfg.Store.MemberIMSI(ctx, in.CustomerID)
			if err != nil {
				return nil, a.problem(ctx, err, "path.customerId")
			}
			return &struct{ Body Subscriber }{Body: Subscriber{CustomerID: in.CustomerID, IMSI: imsi}}, nil
		})
	huma.Register(a.api, op("put-member-imsi", http.MethodPut, "Provision a member's IMSI",
		"Sets (or with \"\" removes) the IMSI an SMF names the member by in Nchf charging requests. Admins; audited "+
			"(member.imsi). An IMSI another current member has is 409.", http.StatusConflict, http.StatusUnprocessableEntity),
		func(ctx context.Context, in *struct {
			MemberPath
			Body SubscriberChange
		}) (*struct{ Body Subscriber }, error) {
			p, err := a.admin(ctx)
			if err != nil {
				return nil, err
			}
			err = a.cfg.Family.SetIMSI(ctx, in.FamilyID, in.CustomerID, in.Body.IMSI, p.actor())
			if errors.Is(err, family.ErrNotYours) {
				return nil, huma.Error403Forbidden("only the back office provisions IMSIs")
			}
			if err != nil {
				return nil, a.problem(ctx, err, "body.imsi")
			}
			return &struct{ Body Subscriber }{Body: Subscriber{CustomerID: in.CustomerID, IMSI: in.Body.IMSI}}, nil
		})
}
