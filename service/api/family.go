package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/internal/usertext"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/access"
	"github.com/dabom/dpcs/service/api/view"
	"github.com/dabom/dpcs/service/family"
	"github.com/dabom/dpcs/service/store"
)

// need is what a route requires of the caller within a family.
type need int

const (
	anyMember need = iota // any member of the family
	ownerOnly             // OWNER of the family (or ADMIN)
)

// family authorizes a request about family fid: ADMIN always, AGENT for
// reading; others only for their own family (else 404, as for a family that
// does not exist) and, for ownerOnly, as OWNER (else 403).
func (a *Server) family(ctx context.Context, fid int64, want need) (Principal, error) {
	p, ok := principalFrom(ctx)
	if !ok {
		return p, huma.Error401Unauthorized("not authenticated")
	}
	switch {
	case p.Role == policy.RoleAdmin:
		return p, nil
	case p.Role == policy.RoleAgent && p.write:
		return p, errAgentReadOnly
	case p.Role == policy.RoleAgent:
		return p, nil
	}
	if p.FamilyID != fid || fid <= 0 {
		return p, errNotFamily(fid)
	}
	if want == ownerOnly && p.Role != policy.RoleOwner {
		return p, huma.Error403Forbidden("only an owner of the family may do this")
	}
	return p, nil
}

// member authorizes a request about member cid of family fid: as family,
// and a MEMBER only about itself and only for reading.
func (a *Server) member(ctx context.Context, fid, cid int64, want need) (Principal, error) {
	p, err := a.family(ctx, fid, anyMember)
	if err != nil {
		return p, err
	}
	if p.Role == policy.RoleMember && (cid != p.ID || want == ownerOnly) {
		return p, huma.Error403Forbidden("members may only read their own usage and policies")
	}
	return p, nil
}

// FamilyPath is the path of a family route.
type FamilyPath struct {
	FamilyID int64 `path:"familyId" minimum:"1" doc:"Family id"`
}

// MemberPath is the path of a member route.
type MemberPath struct {
	FamilyID   int64 `path:"familyId" minimum:"1" doc:"Family id"`
	CustomerID int64 `path:"customerId" minimum:"1" doc:"Member (customer) id"`
}

// MemberView is a member row.
type MemberView struct {
	CustomerID int64     `json:"customerId"`
	FamilyID   int64     `json:"familyId"`
	Name       string    `json:"name"`
	Phone      string    `json:"phone,omitempty"`
	Role       string    `json:"role"`
	Minor      bool      `json:"minor" doc:"Under 19, as an owner or the back office said: under the operator's gift rules a minor only receives gifts"`
	CreatedAt  time.Time `json:"createdAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
}

func memberView(m store.Member) MemberView {
	return MemberView{CustomerID: m.ID, FamilyID: m.FamilyID, Name: m.Name, Phone: m.Phone, Role: string(m.Role), Minor: m.Minor,
		CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// MaxReportRange is the longest from..to a usage report may span (366 days,
// the store's bound): one request cannot make the database aggregate years
// of events, and the 422 names query.to.
const MaxReportRange = store.MaxUsageRange

// PolicyView is a member's policy and standing (view.PolicyView).
type PolicyView = view.PolicyView

func policyView(p store.Policy) PolicyView {
	v := PolicyView{FamilyID: p.FamilyID, CustomerID: p.CustomerID, Version: p.Version, Rules: p.Rules,
		TemplateID: p.TemplateID, UpdatedBy: p.UpdatedBy}
	if v.Rules == nil {
		v.Rules = map[string]string{}
	}
	if !p.UpdatedAt.IsZero() {
		t := p.UpdatedAt
		v.UpdatedAt = &t
	}
	return v
}

// PolicyPatch is a change of a member's constraints.
type PolicyPatch struct {
	Set             map[string]string `json:"set,omitempty" doc:"Keys to set, e.g. {\"LIMIT:DATA:MONTHLY\": \"524288000\"}"`
	Remove          []string          `json:"remove,omitempty" doc:"Keys to delete"`
	Replace         map[string]string `json:"replace,omitempty" doc:"The whole new constraint map (set and remove then apply to it); the member's extra allowances (LIMIT:DATA:EXTRA:…) are kept unless it names them or remove does"`
	ExpectedVersion int64             `json:"expectedVersion,omitempty" minimum:"0" doc:"When > 0, the change fails with 409 unless this is the current version; 0: last write wins"`
}

type policyPatchInput struct {
	MemberPath
	Body PolicyPatch
}

// PolicyAliasPatch is the body of PATCH /families/policies: a PolicyPatch
// naming the member (and, for admins, the family).
type PolicyAliasPatch struct {
	FamilyID   int64 `json:"familyId,omitempty" minimum:"0" doc:"Defaults to the caller's family; required for admins"`
	CustomerID int64 `json:"customerId" minimum:"1"`
	PolicyPatch
}

type policyAliasInput struct {
	Body PolicyAliasPatch
}

type policyOutput struct{ Body PolicyView }

// changePolicy applies a change (family.Service.ChangePolicy).
func (a *Server) changePolicy(ctx context.Context, fid, cid int64, patch PolicyPatch, by Principal) (PolicyView, error) {
	var err error
	for loc, m := range map[string]*map[string]string{"body.set": &patch.Set, "body.replace": &patch.Replace} {
		if *m, err = windowNames(*m, loc); err != nil {
			return PolicyView{}, err
		}
	}
	for i, k := range patch.Remove {
		if patch.Remove[i], err = windowName(k, "body.remove"); err != nil {
			return PolicyView{}, err
		}
	}
	res, err := a.cfg.Family.ChangePolicy(ctx, store.PolicyChange{FamilyID: fid, CustomerID: cid, Replace: patch.Replace,
		Set: patch.Set, Remove: patch.Remove, ExpectedVersion: patch.ExpectedVersion, By: by.actor()})
	if err != nil {
		loc := "body.set"
		if patch.Replace != nil {
			loc = "body.replace"
		}
		return PolicyView{}, a.problem(ctx, err, loc)
	}
	return a.policyResult(res), nil
}

// windowName is key with a time window's name (BLOCK:TIME:<name>, which
// people type in their language: "밤") in NFC, so one name has one spelling;
// a name usertext refuses is a 422 at loc.
func windowName(key, loc string) (string, error) {
	name, ok := strings.CutPrefix(key, policy.KeyBlockTimePrefix)
	if !ok || name == "" {
		return key, nil
	}
	clean, err := usertext.Clean(name, usertext.Line)
	if err != nil {
		return key, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: loc, Message: err.Error(), Value: key})
	}
	return policy.KeyBlockTimePrefix + clean, nil
}

// windowNames is m with windowName applied to its keys (nil stays nil).
func windowNames(m map[string]string, loc string) (map[string]string, error) {
	if m == nil {
		return nil, nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		nk, err := windowName(k, loc)
		if err != nil {
			return nil, err
		}
		out[nk] = v
	}
	return out, nil
}

// policyResult is the view of a policy change's result: the policy, its
// extras and exceptions in effect now, and the member's standing when the
// quota state reported it.
func (a *Server) policyResult(r family.PolicyResult) PolicyView {
	v := policyView(r.Policy)
	v.EventID, v.Extras, v.Exceptions = r.EventID, a.activeExtras(r.Constraints), a.activeExceptions(r.Constraints)
	if r.Standing != nil {
		s := standing(*r.Standing)
		v.Standing = &s
	}
	return v
}

// Alerts are a family's alert thresholds.
type Alerts struct {
	Thresholds []int `json:"thresholds" maxItems:"10" doc:"Percent of the pool remaining, each 1-99, e.g. [50,30,10]; empty turns alerts off"`
}

type alertsInput struct {
	FamilyPath
	Body Alerts
}

type alertsOutput struct{ Body Alerts }

// NewMember is the body of an add-member request.
type NewMember struct {
	CustomerID int64  `json:"customerId,omitempty" minimum:"0" maximum:"999999999999999" doc:"Admins only; 0 or absent: assigned by the server. Chosen ids end at 10^15 − 1 (store.MaxMemberID), leaving the ids above to the server"`
	Name       Text   `json:"name" minLength:"1" maxLength:"100"`
	Phone      string `json:"phone,omitempty" maxLength:"32" doc:"Admins only: the member's phone, a login; 0 or + first, then digits with single spaces or hyphens (010-1234-5678, +82 10 1234 5678)"`
	Role       string `json:"role,omitempty" enum:"MEMBER,OWNER" default:"MEMBER"`
	Password   string `json:"password,omitempty" maxLength:"128" doc:"At least 8 characters and at most 72 bytes, not a common or breached password, not the member's id, phone or name (422 at body.password says which). Empty: the member cannot log in"`
	Minor      bool   `json:"minor,omitempty" doc:"The member is under 19 (PUT …/minor changes it): under the operator's gift rules it only receives gifts"`
}

type addMemberInput struct {
	FamilyPath
	Body NewMember
}

type memberOutput struct{ Body MemberView }

// MemberList is a family's members.
type MemberList struct {
	Members []MemberView `json:"members"`
}

type membersOutput struct {
	Body MemberList
}

// MinorChange is the body of PUT …/minor.
type MinorChange struct {
	Minor bool `json:"minor" doc:"true: the member is under 19"`
}

type minorInput struct {
	MemberPath
	Body MinorChange
}

// RoleChange is the body of a role change.
type RoleChange struct {
	Role string `json:"role" enum:"MEMBER,OWNER"`
}

type roleInput struct {
	MemberPath
	Body RoleChange
}

// familyDocs describes the family operations whose registration sets no
// description of its own.
var familyDocs = map[string]string{
	"get-family": "The family's pool (plan, top-ups, remaining, used %) and each member's share of the usage and " +
		"standing (allowed, or blocked and why). Any member of the family, and admins.",
	"list-members": "The family's current members (removed ones left out) with their roles. Any member of the family, and admins.",
	"get-member-usage": "A member's usage over a month or a day (period, or from and to), by app and by hour. " +
		"Members see their own; owners and admins anyone's in the family (others get 403).",
	"get-member-policies": "The member's constraint map, its version (send it back as expectedVersion to change it safely) " +
		"and its standing as the quota engine sees it now. Members see their own; owners and admins anyone's.",
	"put-alerts": "Replaces the family's alert thresholds: the remaining-pool percentages (1–99) at which the family is " +
		"notified once per month each. Owners and admins; audited.",
	"remove-member": "Removes a member: its usage history stays, its logins and sessions end at once and its " +
		"notification streams close. Owners and admins; the last owner cannot be removed (409).",
	"put-member-minor": "Marks a member as under 19, or not: under the operator's gift rules (DPCS_GIFT_MINORS_GIVE) a minor " +
		"only receives gifts. Owners and admins; audited (member.minor).",
	"put-member-role": "Promotes a member to OWNER or demotes an owner to MEMBER; the family keeps at least one owner (409). " +
		"The member's open streams reconnect with the new role's view. Owners and admins; audited.",
}

func (a *Server) registerFamily() {
	tags := []string{familiesTag}
	op := func(id, method, path, summary string, errs ...int) huma.Operation {
		return huma.Operation{OperationID: id, Method: method, Path: path, Summary: summary, Description: familyDocs[id], Tags: tags,
			Security: secured(), Errors: append([]int{http.StatusUnauthorized, http.StatusNotFound}, errs...)}
	}

	huma.Register(a.api, op("get-family", http.MethodGet, "/families/{familyId}", "Family dashboard"),
		func(ctx context.Context, in *FamilyPath) (*dashboardOutput, error) {
			if _, err := a.family(ctx, in.FamilyID, anyMember); err != nil {
				return nil, err
			}
			d, err := a.dashboard(ctx, in.FamilyID)
			if err != nil {
				return nil, a.problem(ctx, err, "path.familyId")
			}
			return &dashboardOutput{Body: d}, nil
		})

	huma.Register(a.api, op("list-members", http.MethodGet, "/families/{familyId}/members", "List the family's members"),
		func(ctx context.Context, in *FamilyPath) (*membersOutput, error) {
			if _, err := a.family(ctx, in.FamilyID, anyMember); err != nil {
				return nil, err
			}
			if _, err := a.cfg.Store.GetFamily(ctx, in.FamilyID); err != nil {
				return nil, a.problem(ctx, err, "path.familyId")
			}
			ms, err := a.cfg.Store.ListMembers(ctx, in.FamilyID, false)
			if err != nil {
				return nil, a.problem(ctx, err, "path.familyId")
			}
			out := &membersOutput{}
			out.Body.Members = make([]MemberView, 0, len(ms))
			for _, m := range ms {
				out.Body.Members = append(out.Body.Members, memberView(m))
			}
			return out, nil
		})

	usageOp := op("get-member-usage", http.MethodGet, "/families/{familyId}/members/{customerId}/usage",
		"A member's usage by period, app and hour", http.StatusForbidden, http.StatusUnprocessableEntity)
	huma.Register(a.api, usageOp, func(ctx context.Context, in *usageInput) (*struct{ Body UsageView }, error) {
		if _, err := a.member(ctx, in.FamilyID, in.CustomerID, anyMember); err != nil {
			return nil, err
		}
		if _, err := a.cfg.Store.GetMember(ctx, in.FamilyID, in.CustomerID); err != nil {
			return nil, a.problem(ctx, err, "path.customerId")
		}
		from, to, err := a.period(in.Period, in.From, in.To)
		if err != nil {
			return nil, err
		}
		r, err := a.cfg.Store.Usage(ctx, store.UsageQuery{FamilyID: in.FamilyID, CustomerID: in.CustomerID, From: from, To: to})
		if err != nil {
			return nil, a.problem(ctx, err, "query")
		}
		ms, err := a.cfg.State.Status(ctx, in.FamilyID, in.CustomerID)
		if err != nil {
			return nil, a.problem(ctx, err, "path")
		}
		apps, hours := view.UsageShares(r)
		return &struct{ Body UsageView }{Body: UsageView{FamilyID: in.FamilyID, CustomerID: in.CustomerID, From: from, To: to,
			AllowedBytes: r.AllowedBytes, Events: r.Events, Blocked: r.Blocked, ByApp: apps, ByHour: hours,
			DailyUsedBytes: ms.DailyUsed, MonthlyUsedBytes: ms.MonthlyUsed, Standing: standing(ms)}}, nil
	})

	huma.Register(a.api, op("get-member-policies", http.MethodGet, "/families/{familyId}/members/{customerId}/policies",
		"A member's policy and standing", http.StatusForbidden),
		func(ctx context.Context, in *MemberPath) (*policyOutput, error) {
			if _, err := a.member(ctx, in.FamilyID, in.CustomerID, anyMember); err != nil {
				return nil, err
			}
			p, err := a.cfg.Store.GetPolicy(ctx, in.FamilyID, in.CustomerID)
			if err != nil {
				return nil, a.problem(ctx, err, "path.customerId")
			}
			v := policyView(p)
			if c, err := policy.ParseConstraints(p.Rules); err == nil {
				v.Extras, v.Exceptions = a.activeExtras(c), a.activeExceptions(c)
			}
			if ms, err := a.cfg.State.Status(ctx, in.FamilyID, in.CustomerID); err == nil {
				s := standing(ms)
				v.Standing = &s
			}
			return &policyOutput{Body: v}, nil
		})

	patchDoc := "Sets and removes constraint keys (or replaces the map). The change is committed with an audit row " +
		"and a policy-updated event, and applied to the quota engine at once: the member's next event is judged by it, " +
		"and the answer's standing says whether the member is blocked now (e.g. BLOCKED_LIMIT_MONTHLY when usage " +
		"already exceeds a new limit). Validation errors name the constraint key. " +
		"A change that changes nothing is answered with the current version and writes nothing (no event, no audit row)."
	patchOp := op("patch-member-policies", http.MethodPatch, "/families/{familyId}/members/{customerId}/policies",
		"Change a member's policy", http.StatusForbidden, http.StatusConflict, http.StatusUnprocessableEntity)
	patchOp.Description = patchDoc
	huma.Register(a.api, patchOp, func(ctx context.Context, in *policyPatchInput) (*policyOutput, error) {
		p, err := a.member(ctx, in.FamilyID, in.CustomerID, ownerOnly)
		if err != nil {
			return nil, err
		}
		v, err := a.changePolicy(ctx, in.FamilyID, in.CustomerID, in.Body, p)
		if err != nil {
			return nil, err
		}
		return &policyOutput{Body: v}, nil
	})

	aliasOp := op("patch-policies", http.MethodPatch, "/families/policies",
		"Change a member's policy (seed alias; family from the token)", http.StatusForbidden, http.StatusConflict, http.StatusUnprocessableEntity)
	aliasOp.Description = patchDoc + " The family is the caller's own (admins name it in familyId)."
	huma.Register(a.api, aliasOp, func(ctx context.Context, in *policyAliasInput) (*policyOutput, error) {
		p, _ := principalFrom(ctx)
		fid := in.Body.FamilyID
		if fid == 0 {
			if p.Role == policy.RoleAdmin {
				return nil, huma.Error422UnprocessableEntity("validation failed",
					&huma.ErrorDetail{Location: "body.familyId", Message: "admins must name the family"})
			}
			fid = p.FamilyID
		}
		p, err := a.member(ctx, fid, in.Body.CustomerID, ownerOnly)
		if err != nil {
			return nil, err
		}
		v, err := a.changePolicy(ctx, fid, in.Body.CustomerID, in.Body.PolicyPatch, p)
		if err != nil {
			return nil, err
		}
		return &policyOutput{Body: v}, nil
	})

	huma.Register(a.api, op("put-alerts", http.MethodPut, "/families/{familyId}/alerts", "Set the family's alert thresholds",
		http.StatusForbidden, http.StatusUnprocessableEntity),
		func(ctx context.Context, in *alertsInput) (*alertsOutput, error) {
			p, err := a.family(ctx, in.FamilyID, ownerOnly)
			if err != nil {
				return nil, err
			}
			t, err := policy.Thresholds(nonNil(in.Body.Thresholds)).Canonical()
			if err != nil {
				return nil, a.problem(ctx, err, "body.thresholds")
			}
			f, err := a.cfg.Family.SetThresholds(ctx, in.FamilyID, t, p.actor())
			if err != nil {
				return nil, a.problem(ctx, err, "body.thresholds")
			}
			return &alertsOutput{Body: Alerts{Thresholds: nonNil([]int(f.Thresholds))}}, nil
		})

	addOp := op("add-member", http.MethodPost, "/families/{familyId}/members", "Add a member",
		http.StatusForbidden, http.StatusConflict, http.StatusUnprocessableEntity)
	addOp.DefaultStatus = http.StatusCreated
	addOp.Description = "Adds a member (or, as owner, another OWNER) to the family; it logs in with its member id " +
		"(in the answer) or its phone, and the password given. Owners cannot choose the member id or the phone: " +
		"both are unique across every family, so a refusal would tell an owner about other families' members; the " +
		"server assigns the id and the back office (admins) sets phones. An owner sending either gets 422 whatever " +
		"the value. Admins may give both; a taken id or phone is 409 naming the field. A family holds at most " +
		"DPCS_FAMILY_MAX_MEMBERS current members (default 10): one more is 409 at path.familyId."
	huma.Register(a.api, addOp, func(ctx context.Context, in *addMemberInput) (*memberOutput, error) {
		p, err := a.family(ctx, in.FamilyID, ownerOnly)
		if err != nil {
			return nil, err
		}
		if p.Role != policy.RoleAdmin {
			var refused []error
			if in.Body.CustomerID != 0 {
				refused = append(refused, &huma.ErrorDetail{Location: "body.customerId",
					Message: "assigned by the server: leave it out", Value: in.Body.CustomerID})
			}
			if in.Body.Phone != "" {
				refused = append(refused, &huma.ErrorDetail{Location: "body.phone",
					Message: "set by the back office: leave it out, the member logs in with its member id"})
			}
			if len(refused) > 0 {
				return nil, huma.Error422UnprocessableEntity("validation failed", refused...)
			}
		}
		if _, err := a.cfg.Store.GetFamily(ctx, in.FamilyID); err != nil {
			return nil, a.problem(ctx, err, "path.familyId")
		}
		role := policy.Role(in.Body.Role)
		if role == "" {
			role = policy.RoleMember
		}
		m, err := a.cfg.Family.AddMember(ctx, store.NewMember{ID: in.Body.CustomerID, FamilyID: in.FamilyID, Name: string(in.Body.Name),
			Phone: in.Body.Phone, Role: role, Password: in.Body.Password, Minor: in.Body.Minor}, p.actor())
		if errors.Is(err, store.ErrFamilyFull) {
			return nil, a.problem(ctx, err, "path.familyId")
		}
		if err != nil {
			return nil, a.problem(ctx, err, "body")
		}
		return &memberOutput{Body: memberView(m)}, nil
	})

	delOp := op("remove-member", http.MethodDelete, "/families/{familyId}/members/{customerId}", "Remove a member",
		http.StatusForbidden, http.StatusConflict)
	delOp.DefaultStatus = http.StatusNoContent
	huma.Register(a.api, delOp, func(ctx context.Context, in *MemberPath) (*struct{}, error) {
		p, err := a.family(ctx, in.FamilyID, ownerOnly)
		if err != nil {
			return nil, err
		}
		err = a.cfg.Family.RemoveMember(ctx, in.FamilyID, in.CustomerID, p.actor())
		if err == nil || errors.Is(err, family.ErrNotApplied) {
			a.accessChanged(ctx, access.Event{Member: in.CustomerID}) // its streams end
		}
		return nil, a.problem(ctx, err, "path.customerId")
	})

	huma.Register(a.api, op("put-member-role", http.MethodPut, "/families/{familyId}/members/{customerId}/role",
		"Change a member's role (promote to OWNER or demote)", http.StatusForbidden, http.StatusConflict, http.StatusUnprocessableEntity),
		func(ctx context.Context, in *roleInput) (*memberOutput, error) {
			p, err := a.family(ctx, in.FamilyID, ownerOnly)
			if err != nil {
				return nil, err
			}
			m, err := a.cfg.Family.SetRole(ctx, in.FamilyID, in.CustomerID, policy.Role(in.Body.Role), p.actor())
			if errors.Is(err, family.ErrNotYours) {
				return nil, huma.Error403Forbidden("only an owner of the family or the back office changes roles")
			}
			if err != nil {
				return nil, a.problem(ctx, err, "body.role")
			}
			a.accessChanged(ctx, access.Event{Member: in.CustomerID}) // its streams reconnect with the new role's filter
			return &memberOutput{Body: memberView(m)}, nil
		})

	huma.Register(a.api, op("put-member-minor", http.MethodPut, "/families/{familyId}/members/{customerId}/minor",
		"Mark a member as a minor (under 19) or not", http.StatusForbidden, http.StatusUnprocessableEntity),
		func(ctx context.Context, in *minorInput) (*memberOutput, error) {
			p, err := a.family(ctx, in.FamilyID, ownerOnly)
			if err != nil {
				return nil, err
			}
			m, err := a.cfg.Family.SetMinor(ctx, in.FamilyID, in.CustomerID, in.Body.Minor, p.actor())
			if errors.Is(err, family.ErrNotYours) {
				return nil, huma.Error403Forbidden("only an owner of the family or the back office marks minors")
			}
			if err != nil {
				return nil, a.problem(ctx, err, "path.customerId")
			}
			return &memberOutput{Body: memberView(m)}, nil
		})
}
