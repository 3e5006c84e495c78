package backoffice

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/service/api/view"
	"github.com/dabom/dpcs/service/store"
)

// MaxReapply is the most members one POST …/reapply re-applies a template to.
const MaxReapply = 500

// RuleDiffView is one constraint key on which a member's policy differs from
// its template.
type RuleDiffView struct {
	Key      string  `json:"key" example:"BLOCK:TIME:START"`
	Change   string  `json:"change" enum:"added,removed,changed" doc:"What re-applying the template does to the key: added (only the template has it), removed (only the member's policy has it), changed (different values)"`
	Current  *string `json:"current,omitempty" doc:"The member's value; absent when the policy lacks the key"`
	Template *string `json:"template,omitempty" doc:"The template's value; absent when the template lacks the key"`
}

// DriftView is one member whose policy was copied from the template and
// differs from it now.
type DriftView struct {
	FamilyID   int64             `json:"familyId"`
	CustomerID int64             `json:"customerId"`
	MemberName string            `json:"memberName,omitempty" doc:"The member's name"`
	Version    int64             `json:"version" doc:"The policy's version: send it as expectedVersion to re-apply only if nobody changed it since"`
	Rules      map[string]string `json:"rules" doc:"The member's constraints now"`
	UpdatedBy  int64             `json:"updatedBy,omitempty"`
	UpdatedAt  *time.Time        `json:"updatedAt,omitempty"`
	Diffs      []RuleDiffView    `json:"diffs" doc:"The keys that differ, by key"`
}

// TemplateDrift is the answer of GET /admin/policy-templates/{templateId}/drift.
type TemplateDrift struct {
	TemplateID     int64             `json:"templateId"`
	TemplateName   string            `json:"templateName"`
	TemplateActive bool              `json:"templateActive" doc:"Re-applying an inactive template is refused (409): activate it first"`
	TemplateRules  map[string]string `json:"templateRules" doc:"The template's rules now, as re-applying copies them"`
	Members        int               `json:"members" doc:"Current members whose policy was copied from the template (drifted or not)"`
	Drifted        int               `json:"drifted" doc:"Of those, the ones whose policy differs from the template now"`
	Families       int               `json:"families" doc:"Families with at least one drifted member"`
	Items          []DriftView       `json:"items" doc:"A page of the drifted members, by member id"`
	NextAfter      int64             `json:"nextAfter,omitempty" doc:"The after of the next page; absent on the last page"`
}

// ReapplyMember names one member to re-apply a template to.
type ReapplyMember struct {
	FamilyID        int64 `json:"familyId" minimum:"1"`
	CustomerID      int64 `json:"customerId" minimum:"1"`
	ExpectedVersion int64 `json:"expectedVersion,omitempty" minimum:"0" doc:"When > 0, this member fails with 409 unless its policy is at this version; 0: last write wins"`
}

// TemplateReapplication is the body of POST /admin/policy-templates/{templateId}/reapply:
// exactly one of members, familyIds and all.
type TemplateReapplication struct {
	Members   []ReapplyMember `json:"members,omitempty" maxItems:"500" doc:"These members (each must have a policy copied from the template)"`
	FamilyIDs []int64         `json:"familyIds,omitempty" maxItems:"500" doc:"The drifted members of these families, each guarded by the version the drift was computed on"`
	All       bool            `json:"all,omitempty" doc:"Every drifted member (at most 500 per call: see remaining), each guarded by the version the drift was computed on"`
}

// ReapplyResultView is the outcome for one member.
type ReapplyResultView struct {
	FamilyID   int64 `json:"familyId"`
	CustomerID int64 `json:"customerId"`
	// Status is the HTTP status apply-template would have answered for
	// this member alone.
	Status  int              `json:"status" doc:"200 re-applied (or already equal), 404 no such member, 409 stale expectedVersion, inactive template, role not allowed or policy not from this template, 422 invalid"`
	Changed bool             `json:"changed" doc:"A new policy version was written (audited, published and enforced at once)"`
	Error   string           `json:"error,omitempty" doc:"Why this member failed"`
	Policy  *view.PolicyView `json:"policy,omitempty" doc:"The member's policy after the re-apply"`
}

// ReapplyReport is the answer of POST /admin/policy-templates/{templateId}/reapply.
type ReapplyReport struct {
	Results   []ReapplyResultView `json:"results"`
	Reapplied int                 `json:"reapplied" doc:"Members given a new policy version"`
	Failed    int                 `json:"failed" doc:"Members whose status is not 200"`
	Remaining int                 `json:"remaining" doc:"Members still drifted after this call (for all: call again while > 0 and reapplied > 0)"`
}

var driftDocs = map[string]string{
	"template-drift": "The members whose policy was copied from this template (apply-template) and differs from the template " +
		"now — because the template or the policy was edited since — each with its diff per key (added, removed, changed " +
		"when the template is re-applied), by member id; filter by family, page with after.",
	"reapply-template": "Re-applies the template to the chosen drifted members (a list of members, the drifted members of " +
		"some families, or all of them) exactly as apply-template does: per member one policy change, audited " +
		"(policy.apply_template, before and after), published and enforced at once, guarded by the policy version. " +
		"Each member succeeds or fails alone: the answer has a status per member.",
}

func (a *routes) registerDrift() {
	op := func(id, method, path, summary string, errs ...int) huma.Operation {
		return huma.Operation{OperationID: id, Method: method, Path: path, Summary: summary, Description: driftDocs[id],
			Tags: []string{Tag}, Security: view.Secured(),
			Errors: append([]int{http.StatusUnauthorized, http.StatusForbidden}, errs...)}
	}
	huma.Register(a.api, op("template-drift", http.MethodGet, "/admin/policy-templates/{templateId}/drift",
		"Members whose policy drifted from the template", http.StatusNotFound, http.StatusUnprocessableEntity),
		func(ctx context.Context, in *struct {
			TemplatePath
			FamilyID int64 `query:"familyId" minimum:"0" doc:"Only this family's members"`
			After    int64 `query:"after" minimum:"0" doc:"Page above this member id (the previous page's nextAfter)"`
			Limit    int   `query:"limit" minimum:"1" maximum:"500" default:"100"`
		}) (*struct{ Body TemplateDrift }, error) {
			if _, err := a.admin(ctx); err != nil {
				return nil, err
			}
			t, err := a.cfg.Store.GetTemplate(ctx, in.TemplateID)
			if err != nil {
				return nil, a.problem(ctx, err, "path.templateId")
			}
			ds, members, err := a.cfg.Store.TemplateDrift(ctx, store.DriftFilter{TemplateID: in.TemplateID, FamilyID: in.FamilyID})
			if err != nil {
				return nil, a.problem(ctx, err, "path.templateId")
			}
			limit := in.Limit
			if limit == 0 {
				limit = 100
			}
			rules := templateView(t).DefaultRules
			if len(ds) > 0 {
				rules = ds[0].Template
			}
			v := TemplateDrift{TemplateID: t.ID, TemplateName: t.Name, TemplateActive: t.Active, TemplateRules: rules,
				Members: members, Drifted: len(ds), Items: []DriftView{}}
			fams := map[int64]bool{}
			for _, d := range ds {
				fams[d.Policy.FamilyID] = true
				if d.Policy.CustomerID <= in.After {
					continue
				}
				if len(v.Items) == limit {
					v.NextAfter = v.Items[len(v.Items)-1].CustomerID
					continue
				}
				v.Items = append(v.Items, driftView(d))
			}
			v.Families = len(fams)
			// Names beside ids (#24), one lookup for the page.
			ids := make([]int64, len(v.Items))
			for i, it := range v.Items {
				ids[i] = it.CustomerID
			}
			names, err := a.cfg.Store.MemberNames(ctx, ids)
			if err != nil {
				a.log.WarnContext(ctx, "api: template drift: member names", "err", err)
			}
			for i := range v.Items {
				v.Items[i].MemberName = names[v.Items[i].CustomerID]
			}
			return &struct{ Body TemplateDrift }{Body: v}, nil
		})

	huma.Register(a.api, op("reapply-template", http.MethodPost, "/admin/policy-templates/{templateId}/reapply",
		"Re-apply a template to drifted members", http.StatusNotFound, http.StatusUnprocessableEntity),
		func(ctx context.Context, in *struct {
			TemplatePath
			Body TemplateReapplication
		}) (*struct{ Body ReapplyReport }, error) {
			p, err := a.admin(ctx)
			if err != nil {
				return nil, err
			}
			chosen := 0
			for _, set := range []bool{len(in.Body.Members) > 0, len(in.Body.FamilyIDs) > 0, in.Body.All} {
				if set {
					chosen++
				}
			}
			if chosen != 1 {
				return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "body",
					Message: "give exactly one of members, familyIds and all"})
			}
			var targets []store.Reapply
			if len(in.Body.Members) > 0 {
				for _, m := range in.Body.Members {
					targets = append(targets, store.Reapply{FamilyID: m.FamilyID, CustomerID: m.CustomerID, ExpectedVersion: m.ExpectedVersion})
				}
			} else {
				ds, _, err := a.cfg.Store.TemplateDrift(ctx, store.DriftFilter{TemplateID: in.TemplateID})
				if err != nil {
					return nil, a.problem(ctx, err, "path.templateId")
				}
				fams := map[int64]bool{}
				for _, f := range in.Body.FamilyIDs {
					fams[f] = true
				}
				for _, d := range ds {
					if (in.Body.All || fams[d.Policy.FamilyID]) && len(targets) < MaxReapply {
						targets = append(targets, store.Reapply{FamilyID: d.Policy.FamilyID, CustomerID: d.Policy.CustomerID,
							ExpectedVersion: d.Policy.Version})
					}
				}
			}
			res, err := a.cfg.Family.ReapplyTemplate(ctx, in.TemplateID, targets, p)
			if err != nil {
				return nil, a.problem(ctx, err, "path.templateId")
			}
			out := ReapplyReport{Results: make([]ReapplyResultView, 0, len(res))}
			for _, r := range res {
				rv := ReapplyResultView{FamilyID: r.FamilyID, CustomerID: r.CustomerID, Status: http.StatusOK}
				if r.Err != nil {
					rv.Status, rv.Error = a.problemText(ctx, a.problem(ctx, r.Err, "body"))
					out.Failed++
				} else {
					pv := a.policyResult(r.PolicyResult)
					rv.Policy, rv.Changed = &pv, !r.Unchanged
					if rv.Changed {
						out.Reapplied++
					}
				}
				out.Results = append(out.Results, rv)
			}
			ds, _, err := a.cfg.Store.TemplateDrift(ctx, store.DriftFilter{TemplateID: in.TemplateID})
			if err != nil {
				return nil, a.problem(ctx, err, "path.templateId")
			}
			out.Remaining = len(ds)
			return &struct{ Body ReapplyReport }{Body: out}, nil
		})
}

func driftView(d store.Drift) DriftView {
	v := DriftView{FamilyID: d.Policy.FamilyID, CustomerID: d.Policy.CustomerID, Version: d.Policy.Version, Rules: d.Policy.Rules,
		UpdatedBy: d.Policy.UpdatedBy, Diffs: make([]RuleDiffView, 0, len(d.Diffs))}
	if !d.Policy.UpdatedAt.IsZero() {
		at := d.Policy.UpdatedAt
		v.UpdatedAt = &at
	}
	for _, x := range d.Diffs {
		v.Diffs = append(v.Diffs, RuleDiffView{Key: x.Key, Change: x.Kind, Current: x.Current, Template: x.Template})
	}
	return v
}

// problemText is the status and the caller's text of a problem built by
// API.problem, for answers that report several outcomes in one body.
func (a *routes) problemText(_ context.Context, err error) (int, string) {
	var m *huma.ErrorModel
	if !errors.As(err, &m) {
		return http.StatusInternalServerError, "internal error"
	}
	text := m.Detail
	if len(m.Errors) > 0 && m.Errors[0].Message != "" && m.Errors[0].Message != text {
		text += ": " + m.Errors[0].Message
	}
	return m.Status, text
}
