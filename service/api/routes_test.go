package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/api/backoffice"
)

func TestFamilyRoutes(t *testing.T) {
	f := newAPIFixture(t)
	owner, child := f.token(ownerA), f.token(childA)

	// policies: validation names the constraint key
	p := f.problem(http.MethodPatch, "/families/100/members/1002/policies", owner,
		map[string]any{"set": map[string]string{"LIMIT:DATA:MONTHLY": "lots"}}, http.StatusUnprocessableEntity, "body.set.LIMIT:DATA:MONTHLY")
	if p.Status != 422 {
		t.Fatalf("problem %+v", p)
	}
	f.problem(http.MethodPatch, "/families/100/members/1002/policies", owner,
		map[string]any{"replace": map[string]string{"BLOCK:TIME:START": "2500"}}, http.StatusUnprocessableEntity, "body.replace.BLOCK:TIME:START")
	f.problem(http.MethodPatch, "/families/100/members/1002/policies", owner, map[string]any{"sett": 1}, http.StatusUnprocessableEntity, "body")
	f.problem(http.MethodPatch, "/families/policies", f.token(adminID), map[string]any{"customerId": childA}, http.StatusUnprocessableEntity, "body.familyId")
	var pv PolicyView
	f.call(http.MethodPatch, "/families/100/members/1002/policies", owner,
		map[string]any{"replace": map[string]string{"BLOCK:TIME:START": "2200", "BLOCK:TIME:END": "0700"}}, http.StatusOK, &pv)
	f.call(http.MethodGet, "/families/100/members/1002/policies", child, nil, http.StatusOK, &pv)
	if pv.Version != 1 || pv.Rules["BLOCK:TIME:START"] != "2200" || pv.Standing == nil || pv.UpdatedAt == nil {
		t.Fatalf("policy %+v", pv)
	}
	var empty PolicyView
	f.call(http.MethodGet, "/families/100/members/1001/policies", owner, nil, http.StatusOK, &empty)
	if empty.Version != 0 || len(empty.Rules) != 0 {
		t.Fatalf("empty policy %+v", empty)
	}

	// alerts
	var al Alerts
	f.call(http.MethodPut, "/families/100/alerts", owner, map[string]any{"thresholds": []int{10, 50}}, http.StatusOK, &al)
	if fmt.Sprint(al.Thresholds) != "[50 10]" {
		t.Fatalf("alerts %v", al)
	}
	f.problem(http.MethodPut, "/families/100/alerts", owner, map[string]any{"thresholds": []int{150}}, http.StatusUnprocessableEntity, "body.thresholds")
	f.problem(http.MethodPut, "/families/100/alerts", owner, map[string]any{}, http.StatusUnprocessableEntity, "body")
	f.call(http.MethodPut, "/families/100/alerts", owner, map[string]any{"thresholds": []int{}}, http.StatusOK, &al)
	var d Dashboard
	f.call(http.MethodGet, "/families/100", owner, nil, http.StatusOK, &d)
	if len(d.Pool.Thresholds) != 0 {
		t.Fatalf("alerts off: %+v", d.Pool)
	}

	// top-ups
	var tu TopUpView
	f.call(http.MethodPost, "/families/100/topups", owner, map[string]any{"offerId": "1GB"}, http.StatusCreated, &tu)
	if tu.TotalBytes != 11*gib || tu.Month != "202602" || tu.CreatedBy != ownerA || tu.OfferID != "1GB" || tu.PriceKRW != 9900 || tu.VATKRW != 900 {
		t.Fatalf("topup %+v", tu)
	}
	f.problem(http.MethodPost, "/families/100/topups", owner, map[string]any{}, http.StatusUnprocessableEntity, "body.offerId")
	f.problem(http.MethodPost, "/families/100/topups", owner, "{", http.StatusBadRequest, "")

	// members and roles
	var m MemberView
	f.call(http.MethodPost, "/families/100/members", owner, map[string]any{"name": "grandma", "role": "OWNER", "password": "grandma knits"}, http.StatusCreated, &m)
	if m.Role != "OWNER" || m.FamilyID != famA || m.CustomerID == 0 || m.Phone != "" {
		t.Fatalf("member %+v", m)
	}
	f.call(http.MethodPost, "/auth/token", "", map[string]string{"login": fmt.Sprint(m.CustomerID), "password": "grandma knits"}, http.StatusOK, nil)
	// owners choose neither ids nor phones (unique across families); admins do
	f.problem(http.MethodPost, "/families/100/members", owner, map[string]any{"name": "x", "phone": "010-5555"}, http.StatusUnprocessableEntity, "body.phone")
	f.problem(http.MethodPost, "/families/100/members", owner, map[string]any{"name": "x", "customerId": 4242}, http.StatusUnprocessableEntity, "body.customerId")
	var aunt MemberView
	f.call(http.MethodPost, "/families/100/members", f.token(adminID), map[string]any{"name": "aunt", "phone": "010-5555", "customerId": 4242, "password": "grandma knits"}, http.StatusCreated, &aunt)
	if aunt.CustomerID != 4242 || aunt.Phone != "010-5555" || aunt.Role != "MEMBER" {
		t.Fatalf("admin's member %+v", aunt)
	}
	f.call(http.MethodPost, "/auth/token", "", map[string]string{"login": "010-5555", "password": "grandma knits"}, http.StatusOK, nil)
	f.problem(http.MethodPost, "/families/100/members", f.token(adminID), map[string]any{"name": "dup", "phone": "010-5555"}, http.StatusConflict, "body.phone")
	f.problem(http.MethodPost, "/families/100/members", f.token(adminID), map[string]any{"name": "dup", "customerId": 4242}, http.StatusConflict, "body.customerId")
	f.problem(http.MethodPost, "/families/100/members", f.token(adminID), map[string]any{"name": "x", "phone": "5555"}, http.StatusUnprocessableEntity, "body.phone")
	f.problem(http.MethodPost, "/families/100/members", owner, map[string]any{"name": "x", "role": "ADMIN"}, http.StatusUnprocessableEntity, "body.role")
	f.problem(http.MethodPost, "/families/100/members", owner, map[string]any{"name": ""}, http.StatusUnprocessableEntity, "body.name")
	var ms struct {
		Members []MemberView `json:"members"`
	}
	f.call(http.MethodGet, "/families/100/members", child, nil, http.StatusOK, &ms)
	if len(ms.Members) != 5 {
		t.Fatalf("members %+v", ms)
	}
	f.call(http.MethodPut, fmt.Sprintf("/families/100/members/%d/role", m.CustomerID), owner, map[string]string{"role": "MEMBER"}, http.StatusOK, &m)
	if m.Role != "MEMBER" {
		t.Fatalf("role %+v", m)
	}
	f.problem(http.MethodPut, "/families/100/members/1001/role", owner, map[string]string{"role": "MEMBER"}, http.StatusConflict, "body.role")
	f.problem(http.MethodPut, "/families/100/members/1002/role", owner, map[string]string{"role": "KING"}, http.StatusUnprocessableEntity, "body.role")
	f.call(http.MethodPut, "/families/100/members/1002/role", owner, map[string]string{"role": "OWNER"}, http.StatusOK, nil)
	// the promotion takes effect at once for the child's existing token
	f.call(http.MethodPut, "/families/100/alerts", child, map[string]any{"thresholds": []int{30}}, http.StatusOK, nil)
	f.call(http.MethodDelete, "/families/100/members/1003", owner, nil, http.StatusNoContent, nil)
	f.problem(http.MethodDelete, "/families/100/members/1003", owner, nil, http.StatusNotFound, "")
	if r := f.use(famA, victimA, 1); r.Decision != policy.BlockedNotMember {
		t.Fatalf("removed member: %s", r.Decision)
	}

	// usage: live counters and the (empty) persisted report; periods
	f.use(famA, childA, 3*mib)
	var u UsageView
	f.call(http.MethodGet, "/families/100/members/1002/usage?period=day", child, nil, http.StatusOK, &u)
	if u.DailyUsedBytes != 3*mib || u.MonthlyUsedBytes != 3*mib || u.To.Sub(u.From).Hours() != 24 {
		t.Fatalf("usage %+v", u)
	}
	f.call(http.MethodGet, "/families/100/members/1002/usage?from=2026-02-01T00:00:00Z&to=2026-02-02T00:00:00Z", child, nil, http.StatusOK, &u)
	f.problem(http.MethodGet, "/families/100/members/1002/usage?from=2026-02-01T00:00:00Z", child, nil, http.StatusUnprocessableEntity, "query.to")
	f.problem(http.MethodGet, "/families/100/members/1002/usage?period=year", child, nil, http.StatusUnprocessableEntity, "query.period")
	f.problem(http.MethodGet, "/families/100/members/1003/usage", owner, nil, http.StatusNotFound, "")
	f.problem(http.MethodGet, "/families/0", owner, nil, http.StatusUnprocessableEntity, "path.familyId")
}

func TestAdminRoutes(t *testing.T) {
	f := newAPIFixture(t)
	admin := f.token(adminID)

	var tv backoffice.TemplateView
	f.call(http.MethodPost, "/admin/policy-templates", admin, map[string]any{"name": "teen", "type": "LIMIT", "requireRole": "MEMBER",
		"defaultRules": map[string]string{"LIMIT:DATA:MONTHLY": fmt.Sprint(gib)}, "active": true}, http.StatusCreated, &tv)
	f.problem(http.MethodPost, "/admin/policy-templates", admin, map[string]any{"name": "teen", "type": "LIMIT", "defaultRules": map[string]string{}, "active": true},
		http.StatusConflict, "")
	f.problem(http.MethodPost, "/admin/policy-templates", admin, map[string]any{"name": "bad", "type": "LIMIT",
		"defaultRules": map[string]string{"LIMIT:DATA:DAILY": "-1"}, "active": true}, http.StatusUnprocessableEntity, "body.defaultRules")
	f.problem(http.MethodGet, "/admin/policy-templates/999", admin, nil, http.StatusNotFound, "")

	var pv PolicyView
	f.call(http.MethodPost, fmt.Sprintf("/admin/policy-templates/%d/apply", tv.ID), admin, map[string]any{"familyId": famA, "customerId": childA}, http.StatusOK, &pv)
	if pv.Rules["LIMIT:DATA:MONTHLY"] != fmt.Sprint(gib) || pv.TemplateID != tv.ID || pv.Standing == nil {
		t.Fatalf("applied %+v", pv)
	}
	tv.Active = false
	tv.DefaultRules = map[string]string{}
	f.call(http.MethodPut, fmt.Sprintf("/admin/policy-templates/%d", tv.ID), admin, tv.TemplateBody, http.StatusOK, &tv)
	f.problem(http.MethodPost, fmt.Sprintf("/admin/policy-templates/%d/apply", tv.ID), admin, map[string]any{"familyId": famA, "customerId": childA}, http.StatusConflict, "")
	var list struct {
		Templates []backoffice.TemplateView `json:"templates"`
	}
	f.call(http.MethodGet, "/admin/policy-templates?active=true", admin, nil, http.StatusOK, &list)
	if len(list.Templates) != 0 {
		t.Fatalf("active templates %+v", list)
	}
	f.call(http.MethodDelete, fmt.Sprintf("/admin/policy-templates/%d", tv.ID), admin, nil, http.StatusNoContent, nil)
	f.problem(http.MethodDelete, fmt.Sprintf("/admin/policy-templates/%d", tv.ID), admin, nil, http.StatusNotFound, "")

	var fv backoffice.FamilyView
	f.call(http.MethodPost, "/admin/families", admin, map[string]any{"id": 300, "name": "new family", "planBytes": gib, "thresholds": []int{20, 40}}, http.StatusCreated, &fv)
	if fv.ID != 300 || fmt.Sprint(fv.Thresholds) != "[40 20]" {
		t.Fatalf("family %+v", fv)
	}
	var d Dashboard
	f.call(http.MethodGet, "/families/300", admin, nil, http.StatusOK, &d)
	if d.Pool.TotalBytes != gib || fmt.Sprint(d.Pool.Thresholds) != "[40 20]" {
		t.Fatalf("dashboard %+v", d)
	}
	f.problem(http.MethodPost, "/admin/families", admin, map[string]any{"name": "x", "planBytes": 1, "thresholds": []int{0}}, http.StatusUnprocessableEntity, "body.thresholds")
	f.call(http.MethodPut, "/admin/families/300/plan", admin, map[string]any{"planBytes": 2 * gib}, http.StatusOK, &fv)
	f.call(http.MethodGet, "/families/300", admin, nil, http.StatusOK, &d)
	if d.Pool.TotalBytes != 2*gib {
		t.Fatalf("plan %+v", d.Pool)
	}
	f.problem(http.MethodPut, "/admin/families/999/plan", admin, map[string]any{"planBytes": 1}, http.StatusNotFound, "")

	var fs struct {
		Families []backoffice.FamilyView `json:"families"`
	}
	f.call(http.MethodGet, "/admin/families?q=new", admin, nil, http.StatusOK, &fs)
	if len(fs.Families) != 1 || fs.Families[0].ID != 300 {
		t.Fatalf("search %+v", fs)
	}
	f.call(http.MethodGet, "/admin/families?q=1002", admin, nil, http.StatusOK, &fs)
	if len(fs.Families) != 1 || fs.Families[0].ID != famA {
		t.Fatalf("search by member %+v", fs)
	}
	// The search says which member matched, and by what (#38).
	if m := fs.Families[0].Matched; len(m) != 1 || m[0].CustomerID != childA || m[0].By != "id" || m[0].Name == "" {
		t.Errorf("search by member 1002: matched %+v", m)
	}
	f.call(http.MethodPost, "/families/100/members", admin, map[string]any{"name": "막내", "phone": "010-5555-0102"}, http.StatusCreated, nil)
	f.call(http.MethodGet, "/admin/families?q=01055550102", admin, nil, http.StatusOK, &fs)
	if len(fs.Families) != 1 || len(fs.Families[0].Matched) != 1 || fs.Families[0].Matched[0].Name != "막내" || fs.Families[0].Matched[0].By != "phone" {
		t.Errorf("search by a child's phone: %+v", fs.Families)
	}
	fs.Families = nil
	f.call(http.MethodGet, "/admin/families?q=new", admin, nil, http.StatusOK, &fs)
	if len(fs.Families) != 1 || fs.Families[0].Matched != nil {
		t.Errorf("search by name: %+v, want no member matched", fs.Families)
	}
	var rep backoffice.FamilyUsageView
	f.call(http.MethodGet, "/admin/families/100/usage?period=day", admin, nil, http.StatusOK, &rep)
	f.problem(http.MethodGet, "/admin/families/999/usage", admin, nil, http.StatusNotFound, "")

	var audit struct {
		Entries    []backoffice.AuditView `json:"entries"`
		NextBefore int64                  `json:"nextBefore"`
	}
	f.call(http.MethodGet, "/admin/audit-log?limit=2", admin, nil, http.StatusOK, &audit)
	if len(audit.Entries) != 2 || audit.NextBefore == 0 {
		t.Fatalf("audit %+v", audit)
	}
	body := f.call(http.MethodGet, "/admin/audit-log?action=template.create", admin, nil, http.StatusOK, &audit)
	if len(audit.Entries) != 1 || audit.Entries[0].ActorID != adminID || !strings.Contains(string(body), "teen") {
		t.Fatalf("template audit %s", body)
	}
}
