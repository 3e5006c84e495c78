package backoffice

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/api/view"
	"github.com/dabom/dpcs/service/store"
)

// TemplateBody is a policy template as written.
type TemplateBody struct {
	Name         view.Text          `json:"name" minLength:"1" maxLength:"100"`
	Type         view.Text          `json:"type" minLength:"1" maxLength:"50" example:"LIMIT"`
	Description  view.MultilineText `json:"description,omitempty" maxLength:"1000"`
	RequireRole  string             `json:"requireRole,omitempty" enum:"MEMBER,OWNER" default:"MEMBER"`
	DefaultRules map[string]string  `json:"defaultRules" doc:"Constraint map copied into a member's policy when applied"`
	Active       bool               `json:"active"`
}

// TemplateView is a stored policy template.
type TemplateView struct {
	ID int64 `json:"id"`
	TemplateBody
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

func (b TemplateBody) template(id int64) policy.Template {
	role := policy.Role(b.RequireRole)
	if role == "" {
		role = policy.RoleMember
	}
	return policy.Template{ID: id, Name: string(b.Name), Type: string(b.Type), Description: string(b.Description), RequireRole: role,
		DefaultRules: b.DefaultRules, Active: b.Active}
}

func templateView(t store.Template) TemplateView {
	rules := t.DefaultRules
	if rules == nil {
		rules = map[string]string{}
	}
	return TemplateView{ID: t.ID, TemplateBody: TemplateBody{Name: view.Text(t.Name), Type: view.Text(t.Type), Description: view.MultilineText(t.Description),
		RequireRole: string(t.RequireRole), DefaultRules: rules, Active: t.Active}, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt}
}

// TemplatePath is the path of a template route.
type TemplatePath struct {
	TemplateID int64 `path:"templateId" minimum:"1"`
}

type templateOutput struct{ Body TemplateView }

// FamilyView is a family row.
type FamilyView struct {
	ID         int64     `json:"id"`
	Name       string    `json:"name"`
	PlanBytes  int64     `json:"planBytes"`
	Thresholds []int     `json:"thresholds,omitempty" doc:"Absent: the default 50,30,10"`
	CreatedAt  time.Time `json:"createdAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
	// Matched are the family's members a search found it by (its id or
	// phone); absent outside a search, and when the family's name matched.
	Matched []SearchMatch `json:"matched,omitempty" doc:"In a search: the members the family was found by (their id or phone)"`
}

// SearchMatch is a member a family search matched, and by what.
type SearchMatch struct {
	CustomerID int64  `json:"customerId"`
	Name       string `json:"name"`
	Role       string `json:"role"`
	By         string `json:"by" enum:"id,phone" doc:"What matched: the member's id or its phone"`
}

func familyView(f store.Family) FamilyView {
	return FamilyView{ID: f.ID, Name: f.Name, PlanBytes: f.PlanBytes, Thresholds: f.Thresholds, CreatedAt: f.CreatedAt, UpdatedAt: f.UpdatedAt}
}

// AuditView is an audit log row.
type AuditView struct {
	ID        int64  `json:"id"`
	FamilyID  int64  `json:"familyId,omitempty"`
	ActorID   int64  `json:"actorId"`
	ActorName string `json:"actorName,omitempty" doc:"The actor's name (absent for the system)"`
	ActorRole string `json:"actorRole"`
	Action    string `json:"action"`
	Target    string `json:"target"`
	// TargetName names a member target (member:<id>) for people.
	TargetName string          `json:"targetName,omitempty" doc:"The member's name when the target is member:<id>"`
	Before     json.RawMessage `json:"before,omitempty"`
	After      json.RawMessage `json:"after,omitempty"`
	At         time.Time       `json:"at"`
}

// adminDocs describes the back-office operations (admins only: others get 403).
var adminDocs = map[string]string{
	"list-templates":  "Every policy template (or only the active ones), with its default rules.",
	"create-template": "Creates a policy template: a named set of default rules that can be applied to members. Audited.",
	"get-template":    "One policy template.",
	"update-template": "Replaces a policy template. Members it was applied to keep their policies. Audited.",
	"delete-template": "Deletes a policy template. Members it was applied to keep their policies. Audited.",
	"apply-template": "Copies the template's default rules into the member's policy, as a policy change: audited, " +
		"published and enforced at once; expectedVersion guards against a concurrent change (409).",
	"search-families": "Families matching q: a family id, a member id or phone (exact), or a prefix of the family's name.",
	"create-family":   "Creates a family with its monthly plan and alert thresholds and provisions its pool in the quota engine. Audited.",
	"put-plan":        "Sets the family's monthly plan (bytes); the pool's total changes at once. Audited.",
	"family-usage-report": "The family's usage over a month or a day (period, or from and to): totals per member, " +
		"by app and by hour.",
	"audit-log": "Who changed what and when (policies, roles, members, plans, templates, top-ups), with the values " +
		"before and after, newest first; filter by family, actor, action, target and time, page with before.",
}

func (a *routes) registerAdmin() {
	tags := []string{Tag}
	op := func(id, method, path, summary string, errs ...int) huma.Operation {
		return huma.Operation{OperationID: id, Method: method, Path: path, Summary: summary, Description: adminDocs[id],
			Tags: tags, Security: view.Secured(),
			Errors: append([]int{http.StatusUnauthorized, http.StatusForbidden}, errs...)}
	}

	huma.Register(a.api, op("list-templates", http.MethodGet, "/admin/policy-templates", "List policy templates"),
		func(ctx context.Context, in *struct {
			Active bool `query:"active" doc:"Only active templates"`
		}) (*templatesOutput, error) {
			if _, err := a.admin(ctx); err != nil {
				return nil, err
			}
			ts, err := a.cfg.Store.ListTemplates(ctx, in.Active)
			if err != nil {
				return nil, a.problem(ctx, err, "query")
			}
			out := &templatesOutput{}
			out.Body.Templates = make([]TemplateView, 0, len(ts))
			for _, t := range ts {
				out.Body.Templates = append(out.Body.Templates, templateView(t))
			}
			return out, nil
		})

	createOp := op("create-template", http.MethodPost, "/admin/policy-templates", "Create a policy template",
		http.StatusConflict, http.StatusUnprocessableEntity)
	createOp.DefaultStatus = http.StatusCreated
	huma.Register(a.api, createOp, func(ctx context.Context, in *struct{ Body TemplateBody }) (*templateOutput, error) {
		p, err := a.admin(ctx)
		if err != nil {
			return nil, err
		}
		t, err := a.cfg.Store.CreateTemplate(ctx, in.Body.template(0), p)
		if err != nil {
			return nil, a.problem(ctx, err, "body")
		}
		return &templateOutput{Body: templateView(t)}, nil
	})

	huma.Register(a.api, op("get-template", http.MethodGet, "/admin/policy-templates/{templateId}", "Get a policy template", http.StatusNotFound),
		func(ctx context.Context, in *TemplatePath) (*templateOutput, error) {
			if _, err := a.admin(ctx); err != nil {
				return nil, err
			}
			t, err := a.cfg.Store.GetTemplate(ctx, in.TemplateID)
			if err != nil {
				return nil, a.problem(ctx, err, "path.templateId")
			}
			return &templateOutput{Body: templateView(t)}, nil
		})

	huma.Register(a.api, op("update-template", http.MethodPut, "/admin/policy-templates/{templateId}",
		"Replace a policy template (assignments made from it keep their rules)", http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity),
		func(ctx context.Context, in *struct {
			TemplatePath
			Body TemplateBody
		}) (*templateOutput, error) {
			p, err := a.admin(ctx)
			if err != nil {
				return nil, err
			}
			t, err := a.cfg.Store.UpdateTemplate(ctx, in.Body.template(in.TemplateID), p)
			if err != nil {
				return nil, a.problem(ctx, err, "body")
			}
			return &templateOutput{Body: templateView(t)}, nil
		})

	delOp := op("delete-template", http.MethodDelete, "/admin/policy-templates/{templateId}", "Delete a policy template", http.StatusNotFound)
	delOp.DefaultStatus = http.StatusNoContent
	huma.Register(a.api, delOp, func(ctx context.Context, in *TemplatePath) (*struct{}, error) {
		p, err := a.admin(ctx)
		if err != nil {
			return nil, err
		}
		if err := a.cfg.Store.DeleteTemplate(ctx, in.TemplateID, p); err != nil {
			return nil, a.problem(ctx, err, "path.templateId")
		}
		return nil, nil
	})

	applyOp := op("apply-template", http.MethodPost, "/admin/policy-templates/{templateId}/apply",
		"Apply a template to a member (copies its defaultRules into the member's policy)",
		http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity)
	huma.Register(a.api, applyOp, func(ctx context.Context, in *struct {
		TemplatePath
		Body TemplateApplication
	}) (*policyOutput, error) {
		p, err := a.admin(ctx)
		if err != nil {
			return nil, err
		}
		res, err := a.cfg.Family.ApplyTemplate(ctx, in.Body.FamilyID, in.Body.CustomerID, in.TemplateID, in.Body.ExpectedVersion, p)
		if err != nil {
			return nil, a.problem(ctx, err, "body")
		}
		return &policyOutput{Body: a.policyResult(res)}, nil
	})

	huma.Register(a.api, op("search-families", http.MethodGet, "/admin/families", "Search families",
		http.StatusUnprocessableEntity),
		func(ctx context.Context, in *struct {
			Q     string `query:"q" maxLength:"100" doc:"A family id, a member id or phone (exact), or a prefix of the family's name"`
			Limit int    `query:"limit" minimum:"1" maximum:"100" default:"20"`
		}) (*familiesOutput, error) {
			if _, err := a.admin(ctx); err != nil {
				return nil, err
			}
			limit := in.Limit
			if limit == 0 {
				limit = 20
			}
			fs, err := a.cfg.Store.SearchFamilies(ctx, in.Q, limit)
			if err != nil {
				return nil, a.problem(ctx, err, "query.q")
			}
			// Which member each family was found by (#38: a search by a
			// child's phone said only the family).
			ms, err := a.cfg.Store.MatchedMembers(ctx, in.Q)
			if err != nil {
				return nil, a.problem(ctx, err, "query.q")
			}
			out := &familiesOutput{}
			out.Body.Families = make([]FamilyView, 0, len(fs))
			for _, f := range fs {
				v := familyView(f)
				for _, m := range ms {
					if m.FamilyID == f.ID {
						by := "phone"
						if strconv.FormatInt(m.ID, 10) == strings.TrimSpace(in.Q) {
							by = "id"
						}
						v.Matched = append(v.Matched, SearchMatch{CustomerID: m.ID, Name: m.Name, Role: string(m.Role), By: by})
					}
				}
				out.Body.Families = append(out.Body.Families, v)
			}
			return out, nil
		})

	famOp := op("create-family", http.MethodPost, "/admin/families", "Create a family and provision its pool",
		http.StatusConflict, http.StatusUnprocessableEntity)
	famOp.DefaultStatus = http.StatusCreated
	huma.Register(a.api, famOp, func(ctx context.Context, in *struct {
		Body NewFamily
	}) (*struct{ Body FamilyView }, error) {
		p, err := a.admin(ctx)
		if err != nil {
			return nil, err
		}
		var t policy.Thresholds
		if in.Body.Thresholds != nil {
			if t, err = policy.Thresholds(in.Body.Thresholds).Canonical(); err != nil {
				return nil, a.problem(ctx, err, "body.thresholds")
			}
		}
		f, err := a.cfg.Family.CreateFamily(ctx, store.NewFamily{ID: in.Body.ID, Name: string(in.Body.Name), PlanBytes: in.Body.PlanBytes, Thresholds: t}, p)
		if err != nil {
			return nil, a.problem(ctx, err, "body")
		}
		return &struct{ Body FamilyView }{Body: familyView(f)}, nil
	})

	huma.Register(a.api, op("put-plan", http.MethodPut, "/admin/families/{familyId}/plan", "Set a family's monthly plan",
		http.StatusNotFound, http.StatusUnprocessableEntity),
		func(ctx context.Context, in *struct {
			FamilyPath
			Body Plan
		}) (*struct{ Body FamilyView }, error) {
			p, err := a.admin(ctx)
			if err != nil {
				return nil, err
			}
			// As for top-ups, the store refuses a plan the engine would refuse
			// (this or last month's pool over policy.MaxBytes) before writing.
			f, err := a.cfg.Family.SetPlan(ctx, in.FamilyID, in.Body.PlanBytes, p)
			if err != nil {
				return nil, a.problem(ctx, err, "body.planBytes")
			}
			return &struct{ Body FamilyView }{Body: familyView(f)}, nil
		})

	huma.Register(a.api, op("family-usage-report", http.MethodGet, "/admin/families/{familyId}/usage", "A family's usage report",
		http.StatusNotFound, http.StatusUnprocessableEntity),
		func(ctx context.Context, in *struct {
			FamilyPath
			Period string    `query:"period" enum:"month,day" default:"month"`
			From   time.Time `query:"from"`
			To     time.Time `query:"to"`
		}) (*struct{ Body FamilyUsageView }, error) {
			if _, err := a.admin(ctx); err != nil {
				return nil, err
			}
			if _, err := a.cfg.Store.GetFamily(ctx, in.FamilyID); err != nil {
				return nil, a.problem(ctx, err, "path.familyId")
			}
			from, to, err := a.period(in.Period, in.From, in.To)
			if err != nil {
				return nil, err
			}
			r, err := a.cfg.Store.Usage(ctx, store.UsageQuery{FamilyID: in.FamilyID, From: from, To: to})
			if err != nil {
				return nil, a.problem(ctx, err, "query")
			}
			apps, hours := view.UsageShares(r)
			v := FamilyUsageView{FamilyID: in.FamilyID, From: from, To: to, AllowedBytes: r.AllowedBytes, Events: r.Events,
				Blocked: r.Blocked, ByMember: make([]MemberUsageView, 0, len(r.ByMember)), ByApp: apps, ByHour: hours}
			for _, m := range r.ByMember {
				v.ByMember = append(v.ByMember, MemberUsageView(m))
			}
			return &struct{ Body FamilyUsageView }{Body: v}, nil
		})

	huma.Register(a.api, op("audit-log", http.MethodGet, "/admin/audit-log", "Read the audit log (newest first)"),
		func(ctx context.Context, in *struct {
			FamilyID int64     `query:"familyId" minimum:"0"`
			ActorID  int64     `query:"actorId" minimum:"0"`
			Action   string    `query:"action" maxLength:"64" example:"policy.update"`
			Target   string    `query:"target" maxLength:"64" example:"member:1001"`
			Since    time.Time `query:"since"`
			Until    time.Time `query:"until"`
			Before   int64     `query:"before" minimum:"0" doc:"Page below this id (the previous page's nextBefore)"`
			Limit    int       `query:"limit" minimum:"1" maximum:"1000" default:"100"`
		}) (*auditOutput, error) {
			if _, err := a.admin(ctx); err != nil {
				return nil, err
			}
			es, err := a.cfg.Store.AuditLog(ctx, store.AuditFilter{FamilyID: in.FamilyID, ActorID: in.ActorID, Action: in.Action,
				Target: in.Target, Since: in.Since, Until: in.Until, BeforeID: in.Before, Limit: in.Limit})
			if err != nil {
				return nil, a.problem(ctx, err, "query")
			}
			// Names beside ids (#24): one lookup for the page's actors and
			// member targets; without it the ids still say who.
			var ids []int64
			for _, e := range es {
				ids = append(ids, e.Actor.ID)
				if id, ok := memberTargetID(e.Target); ok {
					ids = append(ids, id)
				}
			}
			slices.Sort(ids)
			names, err := a.cfg.Store.MemberNames(ctx, slices.Compact(ids))
			if err != nil {
				a.log.WarnContext(ctx, "api: audit log: member names", "err", err)
			}
			out := &auditOutput{}
			out.Body.Entries = make([]AuditView, 0, len(es))
			for _, e := range es {
				v := AuditView{ID: e.ID, FamilyID: e.FamilyID, ActorID: e.Actor.ID, ActorName: names[e.Actor.ID],
					ActorRole: string(e.Actor.Role), Action: e.Action, Target: e.Target, Before: e.Before, After: e.After, At: e.At}
				if id, ok := memberTargetID(e.Target); ok {
					v.TargetName = names[id]
				}
				out.Body.Entries = append(out.Body.Entries, v)
			}
			if in.Limit > 0 && len(es) == in.Limit {
				out.Body.NextBefore = es[len(es)-1].ID
			}
			return out, nil
		})
}

// FamilyUsageView is a family's usage report.
type FamilyUsageView struct {
	FamilyID     int64                `json:"familyId"`
	From         time.Time            `json:"from"`
	To           time.Time            `json:"to"`
	AllowedBytes int64                `json:"allowedBytes"`
	Events       int64                `json:"events"`
	Blocked      int64                `json:"blocked"`
	ByMember     []MemberUsageView    `json:"byMember"`
	ByApp        []view.AppUsageView  `json:"byApp"`
	ByHour       []view.HourUsageView `json:"byHour"`
}

// MemberUsageView is one member's share of a family report.
type MemberUsageView struct {
	CustomerID   int64 `json:"customerId"`
	AllowedBytes int64 `json:"allowedBytes"`
	Events       int64 `json:"events"`
	Blocked      int64 `json:"blocked"`
}

// TemplateList is the answer of GET /admin/policy-templates.
type TemplateList struct {
	Templates []TemplateView `json:"templates"`
}

type templatesOutput struct{ Body TemplateList }

// FamilyList is the answer of a family search.
type FamilyList struct {
	Families []FamilyView `json:"families"`
}

type familiesOutput struct{ Body FamilyList }

// AuditPage is a page of the audit log, newest first.
type AuditPage struct {
	Entries    []AuditView `json:"entries"`
	NextBefore int64       `json:"nextBefore,omitempty" doc:"The before of the next (older) page; absent on the last page"`
}

type auditOutput struct{ Body AuditPage }

// TemplateApplication is the body of POST /admin/policy-templates/{templateId}/apply.
type TemplateApplication struct {
	FamilyID        int64 `json:"familyId" minimum:"1"`
	CustomerID      int64 `json:"customerId" minimum:"1"`
	ExpectedVersion int64 `json:"expectedVersion,omitempty" minimum:"0" doc:"When > 0, the change fails with 409 unless this is the current version; 0: last write wins"`
}

// NewFamily is the body of POST /admin/families.
type NewFamily struct {
	ID         int64     `json:"id,omitempty" minimum:"0" maximum:"99999999999999" doc:"0: assigned by the server. Chosen ids end at 10^14 − 1 (store.MaxFamilyID), leaving the ids above to the server"`
	Name       view.Text `json:"name" minLength:"1" maxLength:"100"`
	PlanBytes  int64     `json:"planBytes" minimum:"0" maximum:"70368744177664"`
	Thresholds []int     `json:"thresholds,omitempty" maxItems:"10" doc:"Absent: the default 50,30,10"`
}

// Plan is the body of PUT /admin/families/{familyId}/plan.
type Plan struct {
	PlanBytes int64 `json:"planBytes" minimum:"0" maximum:"70368744177664" doc:"The plan plus the top-ups of this or last month may total at most 70368744177664 bytes (2^46); a 422 says the largest plan allowed"`
}

// memberTargetID is the member an audit target "member:<id>" names.
func memberTargetID(target string) (int64, bool) {
	rest, ok := strings.CutPrefix(target, "member:")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(rest, 10, 64)
	return id, err == nil && id > 0
}
