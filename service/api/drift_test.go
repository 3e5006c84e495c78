package api

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/service/api/backoffice"
	"github.com/dabom/dpcs/service/store"
)

// TestTemplateDriftRoutes: an admin sees which members' copies of a template
// differ from it, with a diff per key, pages through them, and re-applies
// the template to a list of members, to families, or to all: each member's
// change is versioned, audited, published (outbox) and enforced in Redis
// at once.
func TestTemplateDriftRoutes(t *testing.T) {
	f := newAPIFixture(t)
	ctx := context.Background()
	admin, owner := f.token(adminID), f.token(ownerA)

	var tv backoffice.TemplateView
	f.call(http.MethodPost, "/admin/policy-templates", admin, map[string]any{"name": "calm", "type": "LIMIT",
		"defaultRules": map[string]string{"THROTTLE:SPEED": "500"}, "active": true}, http.StatusCreated, &tv)
	drift := func(query string) backoffice.TemplateDrift {
		t.Helper()
		var d backoffice.TemplateDrift
		f.call(http.MethodGet, fmt.Sprintf("/admin/policy-templates/%d/drift%s", tv.ID, query), admin, nil, http.StatusOK, &d)
		return d
	}
	for _, m := range [][2]int64{{famA, childA}, {famA, victimA}, {famB, childB}} {
		f.call(http.MethodPost, fmt.Sprintf("/admin/policy-templates/%d/apply", tv.ID), admin,
			map[string]any{"familyId": m[0], "customerId": m[1]}, http.StatusOK, nil)
	}
	if d := drift(""); d.Members != 3 || d.Drifted != 0 || len(d.Items) != 0 || d.NextAfter != 0 {
		t.Fatalf("drift right after applying = %+v", d)
	}

	// An owner edits one copy, then the template changes for everyone.
	f.call(http.MethodPatch, fmt.Sprintf("/families/%d/members/%d/policies", famA, childA), owner,
		map[string]any{"set": map[string]string{"BLOCK:APP:com.game": "1"}}, http.StatusOK, nil)
	tv.DefaultRules = map[string]string{"BLOCK:ACCESS": "1", "THROTTLE:SPEED": "500"}
	f.call(http.MethodPut, fmt.Sprintf("/admin/policy-templates/%d", tv.ID), admin, tv.TemplateBody, http.StatusOK, nil)

	d := drift("")
	if d.Members != 3 || d.Drifted != 3 || d.Families != 2 || len(d.Items) != 3 || !d.TemplateActive || d.TemplateName != "calm" {
		t.Fatalf("drift = %+v", d)
	}
	one, block := "1", "1"
	wantChild := []backoffice.RuleDiffView{
		{Key: "BLOCK:ACCESS", Change: "added", Template: &block},
		{Key: "BLOCK:APP:com.game", Change: "removed", Current: &one},
	}
	kid, err := f.store.GetMember(context.Background(), famA, childA)
	if err != nil {
		t.Fatal(err)
	}
	if it := d.Items[0]; it.CustomerID != childA || it.FamilyID != famA || it.Version != 2 || it.UpdatedAt == nil || it.MemberName != kid.Name || kid.Name == "" {
		t.Errorf("first item = %+v (member %q)", it, kid.Name)
	} else if diff := cmp.Diff(wantChild, it.Diffs); diff != "" {
		t.Errorf("diffs of %d (-want +got):\n%s", childA, diff)
	}
	// Pages of one, and one family.
	var seen []int64
	for after := int64(0); ; {
		p := drift(fmt.Sprintf("?limit=1&after=%d", after))
		if len(p.Items) != 1 {
			t.Fatalf("page after %d = %+v", after, p)
		}
		seen = append(seen, p.Items[0].CustomerID)
		if p.NextAfter == 0 {
			break
		}
		after = p.NextAfter
	}
	if !cmp.Equal(seen, []int64{childA, victimA, childB}) {
		t.Errorf("paged through %v", seen)
	}
	if p := drift(fmt.Sprintf("?familyId=%d", famB)); p.Drifted != 1 || p.Items[0].CustomerID != childB {
		t.Errorf("family %d's drift = %+v", famB, p)
	}

	// Re-apply to one member with a stale version and one with the right one.
	var rep backoffice.ReapplyReport
	f.call(http.MethodPost, fmt.Sprintf("/admin/policy-templates/%d/reapply", tv.ID), admin, map[string]any{"members": []map[string]any{
		{"familyId": famA, "customerId": childA, "expectedVersion": 1},
		{"familyId": famA, "customerId": victimA, "expectedVersion": 1},
		{"familyId": famB, "customerId": ownerB},
	}}, http.StatusOK, &rep)
	if len(rep.Results) != 3 || rep.Reapplied != 1 || rep.Failed != 2 || rep.Remaining != 2 {
		t.Fatalf("reapply = %+v", rep)
	}
	if r := rep.Results[0]; r.Status != http.StatusConflict || r.Error == "" || r.Changed {
		t.Errorf("stale member: %+v", r)
	}
	if r := rep.Results[1]; r.Status != http.StatusOK || !r.Changed || r.Policy == nil || r.Policy.Version != 2 ||
		!cmp.Equal(r.Policy.Rules, tv.DefaultRules) || r.Policy.EventID == "" {
		t.Errorf("re-applied member: %+v", r)
	}
	if r := rep.Results[2]; r.Status != http.StatusConflict || r.Error == "" {
		t.Errorf("member without the template: %+v", r)
	}
	st, err := f.engine.Status(ctx, famA, victimA)
	if err != nil || !st.Blocked() || st.Version != 2 {
		t.Errorf("Redis after the re-apply: %+v, %v; want blocked at version 2", st, err)
	}

	// A family, then all.
	f.call(http.MethodPost, fmt.Sprintf("/admin/policy-templates/%d/reapply", tv.ID), admin, map[string]any{"familyIds": []int64{famB}}, http.StatusOK, &rep)
	if rep.Reapplied != 1 || rep.Results[0].CustomerID != childB || rep.Remaining != 1 {
		t.Errorf("reapply to family %d = %+v", famB, rep)
	}
	f.call(http.MethodPost, fmt.Sprintf("/admin/policy-templates/%d/reapply", tv.ID), admin, map[string]any{"all": true}, http.StatusOK, &rep)
	if rep.Reapplied != 1 || rep.Results[0].CustomerID != childA || rep.Remaining != 0 || rep.Failed != 0 {
		t.Errorf("reapply to all = %+v", rep)
	}
	if st, err := f.engine.Status(ctx, famA, childA); err != nil || !st.Blocked() || st.Constraints["BLOCK:APP:com.game"] != "" {
		t.Errorf("Redis of %d after re-applying to all: %+v, %v", childA, st, err)
	}
	es, err := f.store.AuditLog(ctx, store.AuditFilter{Action: "policy.apply_template", Target: fmt.Sprint("member:", childA), Limit: 1})
	if err != nil || len(es) != 1 || string(es[0].Before) != `{"version":2,"rules":{"BLOCK:APP:com.game":"1","THROTTLE:SPEED":"500"}}` {
		t.Errorf("audit of the re-apply: %+v, %v", es, err)
	}
	if d := drift(""); d.Drifted != 0 || d.Members != 3 {
		t.Errorf("drift after re-applying = %+v", d)
	}

	// Refusals.
	f.problem(http.MethodGet, "/admin/policy-templates/999/drift", admin, nil, http.StatusNotFound, "")
	f.problem(http.MethodPost, "/admin/policy-templates/999/reapply", admin, map[string]any{"all": true}, http.StatusNotFound, "")
	f.problem(http.MethodPost, fmt.Sprintf("/admin/policy-templates/%d/reapply", tv.ID), admin, map[string]any{}, http.StatusUnprocessableEntity, "body")
	f.problem(http.MethodPost, fmt.Sprintf("/admin/policy-templates/%d/reapply", tv.ID), admin,
		map[string]any{"all": true, "familyIds": []int64{famA}}, http.StatusUnprocessableEntity, "body")
	// An inactive template shows its drift, and re-applying it fails per member.
	tv.Active, tv.DefaultRules = false, map[string]string{}
	f.call(http.MethodPut, fmt.Sprintf("/admin/policy-templates/%d", tv.ID), admin, tv.TemplateBody, http.StatusOK, nil)
	if d := drift(""); d.Drifted != 3 || d.TemplateActive {
		t.Errorf("drift of the inactive template = %+v", d)
	}
	f.call(http.MethodPost, fmt.Sprintf("/admin/policy-templates/%d/reapply", tv.ID), admin, map[string]any{"all": true}, http.StatusOK, &rep)
	if rep.Failed != 3 || rep.Results[0].Status != http.StatusConflict {
		t.Errorf("reapply of the inactive template = %+v", rep)
	}
}
