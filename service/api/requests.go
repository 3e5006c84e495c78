package api

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/api/view"
	"github.com/dabom/dpcs/service/family"
	"github.com/dabom/dpcs/service/store"
)

// "Ask for more" (doc/frontends.md): a member asks its family's owners for extra
// data; an owner approves it — a limit raise for today (DAY) or this month
// (MONTH), or a top-up of the family pool (TOPUP) — or declines it.
const (
	// MaxDataRequestBytes is the most a member may ask for at once (100 GiB).
	MaxDataRequestBytes = int64(100) << 30
	// MaxPendingDataRequests is how many unanswered requests a member may have.
	MaxPendingDataRequests = 3
)

// DataRequestView is a data request and its answer.
type DataRequestView struct {
	ID          int64  `json:"id"`
	FamilyID    int64  `json:"familyId"`
	CustomerID  int64  `json:"customerId" doc:"The member who asks"`
	Kind        string `json:"kind" enum:"DATA,TIME,APP" doc:"DATA: more data; TIME: more time in a downtime; APP: more time on a blocked app"`
	AmountBytes int64  `json:"amountBytes" doc:"What the member asked for (DATA; 0 for TIME and APP)"`
	AppID       string `json:"appId,omitempty" doc:"APP: the app"`
	Minutes     int64  `json:"minutes,omitempty" doc:"TIME and APP: the minutes asked for"`
	Message     string `json:"message,omitempty"`
	Status      string `json:"status" enum:"PENDING,APPROVED,DECLINED"`
	Grant       string `json:"grant,omitempty" enum:"DAY,MONTH,TOPUP,TIME,APP" doc:"Approved: how"`
	// GrantedMinutes and Until say what a TIME or APP approval granted.
	GrantedMinutes int64  `json:"grantedMinutes,omitempty" doc:"TIME and APP approved: the minutes granted"`
	Until          string `json:"until,omitempty" doc:"TIME and APP approved: the local time YYYYMMDDHHMM (the service zone) the exception ends at" example:"202611262241"`
	// GrantedBytes and Period say what an approval granted and for when.
	GrantedBytes int64      `json:"grantedBytes,omitempty" doc:"Approved: the bytes granted"`
	Period       string     `json:"period,omitempty" doc:"Approved: the day (YYYYMMDD, DAY) or month (YYYYMM, MONTH and TOPUP) granted for" example:"20261123"`
	Reason       string     `json:"reason,omitempty" doc:"The owner's words"`
	AnsweredBy   int64      `json:"answeredBy,omitempty"`
	AnsweredAt   *time.Time `json:"answeredAt,omitempty"`
	CreatedAt    time.Time  `json:"createdAt"`
	// Standing is the requester's standing after an approval (approve
	// answers only; absent when the quota engine could not be asked).
	Standing *Standing `json:"standing,omitempty" doc:"Approve answers: the member's standing after the grant (ALLOWED once unblocked)"`
	// PolicyVersion is the member's policy version after a DAY or MONTH grant.
	PolicyVersion int64 `json:"policyVersion,omitempty" doc:"DAY and MONTH approvals: the member's policy version after the raise"`
	// Pool is the family pool after a TOPUP grant.
	PoolRemainingBytes *int64 `json:"poolRemainingBytes,omitempty" doc:"TOPUP approvals: the pool's remaining bytes after the top-up"`
}

func dataRequestView(r store.DataRequest) DataRequestView {
	return DataRequestView{ID: r.ID, FamilyID: r.FamilyID, CustomerID: r.CustomerID, Kind: r.Kind, AmountBytes: r.AmountBytes,
		AppID: r.AppID, Minutes: r.Minutes, Message: r.Message, Status: r.Status, Grant: r.Grant, GrantedBytes: r.GrantedBytes,
		GrantedMinutes: r.GrantedMinutes, Until: r.Until, Period: r.Period, Reason: r.Reason,
		AnsweredBy: r.AnsweredBy, AnsweredAt: r.AnsweredAt, CreatedAt: r.CreatedAt}
}

// DataRequestCreate is the body of a request for more data.
type DataRequestCreate struct {
	Kind            string        `json:"kind,omitempty" enum:"DATA,TIME,APP" doc:"What is asked for: DATA (absent too) more data, amountBytes; TIME more time in a downtime (\"30분 더\"), minutes; APP more time on the blocked app appId, minutes"`
	AmountBytes     int64         `json:"amountBytes,omitempty" minimum:"0" maximum:"107374182400" doc:"DATA: bytes asked for, 1 to 100 GiB"`
	AppID           string        `json:"appId,omitempty" maxLength:"189" doc:"APP: the app, as in BLOCK:APP:<appId>"`
	Minutes         int64         `json:"minutes,omitempty" minimum:"0" maximum:"240" doc:"TIME and APP: minutes asked for, 1 to 240"`
	Message         MultilineText `json:"message,omitempty" maxLength:"200" doc:"Optional words for the owners. Stored in Unicode NFC; control and invisible characters are refused (422); line feeds (U+000A) are kept."`
	ClientRequestID string        `json:"clientRequestId,omitempty" maxLength:"128" doc:"Idempotency key, as the Idempotency-Key header (either; both must then be equal)"`
}

type dataRequestCreateInput struct {
	FamilyPath
	IdempotencyKey string `header:"Idempotency-Key" maxLength:"128" doc:"Makes the request safe to retry: the same key and body answer the first request (200) instead of a new one (201)"`
	Body           DataRequestCreate
}

type dataRequestOutput struct {
	Status int
	Body   DataRequestView
}

// DataRequestList is a family's data requests, newest first.
type DataRequestList struct {
	Requests []DataRequestView `json:"requests"`
}

type dataRequestListInput struct {
	FamilyPath
	Status string `query:"status" enum:"PENDING,APPROVED,DECLINED" doc:"Only requests in this state"`
	Limit  int    `query:"limit" minimum:"0" maximum:"500" doc:"At most this many (0: 100)"`
}

// DataRequestPath is the path of a data request.
type DataRequestPath struct {
	FamilyID  int64 `path:"familyId" minimum:"1" doc:"Family id"`
	RequestID int64 `path:"requestId" minimum:"1" doc:"Data request id"`
}

// DataRequestApproval is the body of an approval.
type DataRequestApproval struct {
	Grant       string        `json:"grant,omitempty" enum:"DAY,MONTH,TOPUP,TIME,APP" doc:"A DATA request: DAY raises the member's daily and monthly limits for the rest of today; MONTH for the rest of this month; TOPUP adds to the family pool (owners within the top-up limits). A TIME or APP request: its kind, or absent"`
	AmountBytes int64         `json:"amountBytes,omitempty" minimum:"0" maximum:"70368744177664" doc:"DATA (DAY, MONTH; admins' TOPUP): bytes granted; 0 or absent: what the member asked for"`
	OfferID     string        `json:"offerId,omitempty" maxLength:"32" doc:"TOPUP: the offer bought (GET /catalog topUpOffers), its bytes granted; required of owners (422 at body.offerId names the offers), optional for admins"`
	Minutes     int64         `json:"minutes,omitempty" minimum:"0" maximum:"240" doc:"TIME and APP: minutes granted; 0 or absent: what the member asked for"`
	Reason      MultilineText `json:"reason,omitempty" maxLength:"200" doc:"Optional words for the member. Stored in Unicode NFC; control and invisible characters are refused (422); line feeds (U+000A) are kept."`
}

type dataRequestApproveInput struct {
	DataRequestPath
	Body DataRequestApproval
}

// DataRequestDecline is the body of a decline.
type DataRequestDecline struct {
	Reason MultilineText `json:"reason,omitempty" maxLength:"200" doc:"Optional words for the member. Stored in Unicode NFC; control and invisible characters are refused (422); line feeds (U+000A) are kept."`
}

type dataRequestDeclineInput struct {
	DataRequestPath
	Body *DataRequestDecline
}

// ExtraView is an extra allowance in effect now (view.ExtraView).
type ExtraView = view.ExtraView

// activeExtras lists the extra allowances of c in effect now in the
// engine's zone (today's, then this month's).
func (a *Server) activeExtras(c policy.Constraints) []ExtraView {
	if len(c.Extras) == 0 {
		return nil
	}
	mo := policy.MomentOf(a.now(), a.cfg.State.Location())
	var out []ExtraView
	for _, e := range []struct{ scope, period string }{{envelope.GrantDay, mo.Day}, {envelope.GrantMonth, mo.Month}} {
		if n, ok := c.Extras[e.period]; ok {
			out = append(out, ExtraView{Key: policy.ExtraKey(e.period), Scope: e.scope, Period: e.period, Bytes: n})
		}
	}
	return out
}

// ExceptionView is an exception in effect now (view.ExceptionView).
type ExceptionView = view.ExceptionView

// activeExceptions lists the exceptions of c in effect now in the
// engine's zone: the time exception, then app exceptions by app id.
func (a *Server) activeExceptions(c policy.Constraints) []ExceptionView {
	if c.TimeException == "" && len(c.AppExceptions) == 0 {
		return nil
	}
	loc := a.cfg.State.Location()
	mo := policy.MomentOf(a.now(), loc)
	var out []ExceptionView
	add := func(key, kind, app, until string) {
		ends, err := time.ParseInLocation("200601021504", until, loc)
		if err == nil && mo.Stamp() < until {
			out = append(out, ExceptionView{Key: key, Kind: kind, AppID: app, Until: until, Ends: ends})
		}
	}
	if c.TimeException != "" {
		add(policy.KeyExceptTime, envelope.KindTime, "", c.TimeException)
	}
	for _, app := range slices.Sorted(maps.Keys(c.AppExceptions)) {
		add(policy.KeyExceptAppPrefix+app, envelope.KindApp, app, c.AppExceptions[app])
	}
	return out
}

// ExceptionGrant is an owner's exception for a member ("30분 더").
type ExceptionGrant struct {
	Kind    string `json:"kind" enum:"TIME,APP" doc:"TIME: no downtime for a while; APP: the app's block (its own and its category's) lifted for a while"`
	AppID   string `json:"appId,omitempty" maxLength:"189" doc:"APP: the app, as in BLOCK:APP:<appId>"`
	Minutes int64  `json:"minutes" minimum:"1" maximum:"240" doc:"How long, from now or from the end of the same exception in effect (which it extends)"`
}

type exceptionGrantInput struct {
	MemberPath
	Body ExceptionGrant
}

var requestDocs = map[string]string{
	"grant-exception": "An owner lifts a member's downtime (TIME: EXCEPT:TIME) or an app's block (APP: EXCEPT:APP:<appId>, " +
		"the app's own block and its category's, and their daily data budgets) for 1 to 240 minutes — from now, or from the end of the same exception " +
		"in effect, which it extends; the end is rounded up to a whole minute, in the service zone. It is written " +
		"through the policy path (version + 1, audit, policy-updated event) and judged by the quota engine at once; " +
		"the answer is the member's policy with its exceptions and standing. A member with no downtime, or an app neither " +
		"blocked nor budgeted, is 409: there is nothing to lift. Remove the key (PATCH …/policies) to end it early.",
	"create-data-request": "The caller (a member or an owner of the family) asks the family's owners for more data (kind DATA, " +
		"amountBytes), for more time in a downtime (TIME, minutes: \"30분 더\") or for more time on a blocked app (APP, " +
		"appId and minutes). The owners are " +
		"told at once (DATA_REQUESTED over SSE, push and the inbox). Retries are safe with an Idempotency-Key header " +
		"(or clientRequestId): the same key and body answer the first request with 200; a key reused for another " +
		"request is 409. A member may have at most 3 unanswered requests (409). Audited as data-request.create.",
	"list-data-requests": "The family's data requests, newest first: owners and admins see all of them, members their own.",
	"get-data-request":   "One data request: owners and admins any of the family's, members their own (others are 404).",
	"approve-data-request": "Approves a pending request (owners and admins). DAY and MONTH raise the member's daily and monthly " +
		"limits for the rest of today / this month by writing the extra allowance LIMIT:DATA:EXTRA:<YYYYMMDD|YYYYMM> " +
		"into the member's policy (the same path as PATCH …/policies: version + 1, audit, policy-updated event, the " +
		"quota engine at once), added to an extra already granted for that period; the member must have a daily or " +
		"monthly limit (else 409: use TOPUP). TOPUP buys one of the operator's offers (offerId; admins may instead grant " +
		"amountBytes outside the offers, no price) for the family pool within the owners' top-up limits (422 " +
		"says how much can still be added). The member is told at once (DATA_REQUEST_ANSWERED) and its next event is " +
		"judged with the grant. A TIME or APP request is approved with grant TIME or APP (or none) and optional minutes: " +
		"the exception of POST …/exceptions (409 when there is nothing to lift). A request is answered once: another answer is 409 naming its state, the same answer " +
		"again is 200 with the request as it is. Audited as data-request.approve.",
	"decline-data-request": "Declines a pending request (owners and admins), with an optional reason; the member is told at " +
		"once. Answered once: a different answer after it is 409, the same decline again is 200. Audited as data-request.decline.",
}

func (a *Server) registerRequests() {
	op := func(id, method, path, summary string, errs ...int) huma.Operation {
		return huma.Operation{OperationID: id, Method: method, Path: path, Summary: summary, Description: requestDocs[id],
			Tags: []string{familiesTag}, Security: secured(),
			Errors: append([]int{http.StatusUnauthorized, http.StatusNotFound}, errs...)}
	}

	createOp := op("create-data-request", http.MethodPost, "/families/{familyId}/data-requests", "Ask the owners for more data",
		http.StatusForbidden, http.StatusConflict, http.StatusUnprocessableEntity)
	createOp.DefaultStatus = http.StatusCreated
	huma.Register(a.api, createOp, func(ctx context.Context, in *dataRequestCreateInput) (*dataRequestOutput, error) {
		p, err := a.family(ctx, in.FamilyID, anyMember)
		if err != nil {
			return nil, err
		}
		if p.Role == policy.RoleAdmin {
			return nil, huma.Error403Forbidden("a member asks for itself: admins grant data with a top-up or a policy change")
		}
		key := in.IdempotencyKey
		switch {
		case key == "":
			key = in.Body.ClientRequestID
		case in.Body.ClientRequestID != "" && in.Body.ClientRequestID != key:
			return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "body.clientRequestId",
				Message: "differs from the Idempotency-Key header: send one of them, or the same value"})
		}
		r, created, err := a.cfg.Family.CreateRequest(ctx, store.NewDataRequest{FamilyID: in.FamilyID, CustomerID: p.ID,
			AmountBytes: in.Body.AmountBytes, Message: string(in.Body.Message), Key: key,
			Kind: in.Body.Kind, AppID: in.Body.AppID, Minutes: in.Body.Minutes,
			MaxAmount: MaxDataRequestBytes, MaxPending: MaxPendingDataRequests}, p.actor())
		if err != nil {
			if fe := (*store.FieldError)(nil); errors.As(err, &fe) && fe.Field == "Idempotency-Key" {
				return nil, a.problem(ctx, err, "header")
			}
			return nil, a.problem(ctx, err, "body")
		}
		status := http.StatusOK
		if created {
			status = http.StatusCreated
		}
		return &dataRequestOutput{Status: status, Body: dataRequestView(r)}, nil
	})

	huma.Register(a.api, op("list-data-requests", http.MethodGet, "/families/{familyId}/data-requests", "List data requests",
		http.StatusUnprocessableEntity),
		func(ctx context.Context, in *dataRequestListInput) (*struct{ Body DataRequestList }, error) {
			p, err := a.family(ctx, in.FamilyID, anyMember)
			if err != nil {
				return nil, err
			}
			q := store.DataRequestQuery{FamilyID: in.FamilyID, Status: in.Status, Limit: in.Limit}
			if p.Role == policy.RoleMember {
				q.CustomerID = p.ID
			}
			rs, err := a.cfg.Store.DataRequests(ctx, q)
			if err != nil {
				return nil, a.problem(ctx, err, "query")
			}
			out := DataRequestList{Requests: make([]DataRequestView, 0, len(rs))}
			for _, r := range rs {
				out.Requests = append(out.Requests, dataRequestView(r))
			}
			return &struct{ Body DataRequestList }{Body: out}, nil
		})

	huma.Register(a.api, op("get-data-request", http.MethodGet, "/families/{familyId}/data-requests/{requestId}", "A data request"),
		func(ctx context.Context, in *DataRequestPath) (*dataRequestOutput, error) {
			p, err := a.family(ctx, in.FamilyID, anyMember)
			if err != nil {
				return nil, err
			}
			r, err := a.cfg.Store.GetDataRequest(ctx, in.FamilyID, in.RequestID)
			if err != nil {
				return nil, a.problem(ctx, err, "path.requestId")
			}
			if p.Role == policy.RoleMember && r.CustomerID != p.ID {
				return nil, huma.Error404NotFound("not found")
			}
			return &dataRequestOutput{Status: http.StatusOK, Body: dataRequestView(r)}, nil
		})

	approveOp := op("approve-data-request", http.MethodPost, "/families/{familyId}/data-requests/{requestId}/approve",
		"Approve a data request", http.StatusForbidden, http.StatusConflict, http.StatusUnprocessableEntity)
	huma.Register(a.api, approveOp, func(ctx context.Context, in *dataRequestApproveInput) (*dataRequestOutput, error) {
		p, err := a.family(ctx, in.FamilyID, ownerOnly)
		if err != nil {
			return nil, err
		}
		ans := store.DataRequestAnswer{FamilyID: in.FamilyID, RequestID: in.RequestID, Approve: true, Grant: in.Body.Grant,
			AmountBytes: in.Body.AmountBytes, Minutes: in.Body.Minutes, Reason: string(in.Body.Reason), By: p.actor()}
		if in.Body.Grant == envelope.GrantTopUp && (in.Body.OfferID != "" || p.Role != policy.RoleAdmin) {
			if in.Body.AmountBytes != 0 {
				return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "body.amountBytes",
					Message: "충전으로 승인할 때는 양 대신 충전 상품(offerId)을 보내 주세요 (a TOPUP grant names an offer, not an amount)"})
			}
			bytes, buy, err := a.purchase(in.Body.OfferID, "body.offerId")
			if err != nil {
				return nil, err
			}
			ans.AmountBytes, ans.Purchase = bytes, buy
		}
		if in.Body.Grant == envelope.GrantTopUp && p.Role != policy.RoleAdmin {
			if err := a.ownerTopUp(ans.AmountBytes); err != nil {
				return nil, renameBytes(err)
			}
			ans.OwnTopUpLimit = a.cfg.OwnerTopUpMonthly
		}
		return a.answered(ctx, ans)
	})

	grantOp := op("grant-exception", http.MethodPost, "/families/{familyId}/members/{customerId}/exceptions",
		"Lift a member's downtime or an app's block for a while", http.StatusForbidden, http.StatusConflict, http.StatusUnprocessableEntity)
	huma.Register(a.api, grantOp, func(ctx context.Context, in *exceptionGrantInput) (*policyOutput, error) {
		p, err := a.member(ctx, in.FamilyID, in.CustomerID, ownerOnly)
		if err != nil {
			return nil, err
		}
		if in.Body.Kind == envelope.KindApp && in.Body.AppID == "" {
			return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "body.appId",
				Message: "required for an APP exception"})
		}
		if in.Body.Kind == envelope.KindTime && in.Body.AppID != "" {
			return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "body.appId",
				Message: "a TIME exception is for every app: leave appId out"})
		}
		res, err := a.cfg.Family.GrantException(ctx, in.FamilyID, in.CustomerID, in.Body.Kind, in.Body.AppID, in.Body.Minutes, p.actor())
		if err != nil {
			return nil, a.problem(ctx, err, "body")
		}
		return &policyOutput{Body: a.policyResult(res)}, nil
	})

	declineOp := op("decline-data-request", http.MethodPost, "/families/{familyId}/data-requests/{requestId}/decline",
		"Decline a data request", http.StatusForbidden, http.StatusConflict, http.StatusUnprocessableEntity)
	huma.Register(a.api, declineOp, func(ctx context.Context, in *dataRequestDeclineInput) (*dataRequestOutput, error) {
		p, err := a.family(ctx, in.FamilyID, ownerOnly)
		if err != nil {
			return nil, err
		}
		ans := store.DataRequestAnswer{FamilyID: in.FamilyID, RequestID: in.RequestID, By: p.actor()}
		if in.Body != nil {
			ans.Reason = string(in.Body.Reason)
		}
		return a.answered(ctx, ans)
	})
}

// answered records an answer and brings its grant to the quota state
// (family.Service.AnswerRequest).
func (a *Server) answered(ctx context.Context, ans store.DataRequestAnswer) (*dataRequestOutput, error) {
	res, err := a.cfg.Family.AnswerRequest(ctx, ans)
	if err != nil && !errors.Is(err, family.ErrNotApplied) {
		return nil, a.problem(ctx, err, "body")
	}
	if err != nil {
		// A TOPUP grant is recorded: the family's next top-up (the month's
		// total) or a rebuild brings it to the pool; the answer stands.
		a.log.WarnContext(ctx, "api: top-up of an approved data request", "family", ans.FamilyID, "request", ans.RequestID, "err", err)
	}
	v := dataRequestView(res.Request)
	if res.Standing != nil {
		s := standing(*res.Standing)
		v.Standing = &s
	}
	if res.PolicyVersion > 0 {
		v.PolicyVersion = res.PolicyVersion
	}
	if res.Pool != nil {
		v.PoolRemainingBytes = &res.Pool.Remaining
	}
	return &dataRequestOutput{Status: http.StatusOK, Body: v}, nil
}

// renameBytes relocates an owner top-up refusal of body.bytes to
// body.amountBytes, the approval's field.
func renameBytes(err error) error {
	var se *huma.ErrorModel
	if !errors.As(err, &se) {
		return err
	}
	for _, d := range se.Errors {
		if d != nil && d.Location == "body.bytes" {
			d.Location = "body.amountBytes"
		}
	}
	return se
}
