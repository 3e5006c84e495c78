package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTemplateApply(t *testing.T) {
	tpl := Template{ID: 7, Name: "Night block", Type: "TIME_BLOCK", RequireRole: RoleMember, Active: true,
		DefaultRules: map[string]string{"BLOCK:TIME:START": "2200", "BLOCK:TIME:END": "0700"}}
	if err := tpl.Validate(); err != nil {
		t.Fatal(err)
	}
	a, err := tpl.Apply(12345, RoleMember)
	if err != nil {
		t.Fatal(err)
	}
	want := Assignment{TemplateID: 7, CustomerID: 12345, Rules: map[string]string{"BLOCK:TIME:START": "2200", "BLOCK:TIME:END": "0700"}}
	if d := cmp.Diff(want, a); d != "" {
		t.Fatal(d)
	}
	// Editing the template later never touches the assignment, and vice versa.
	tpl.DefaultRules["BLOCK:TIME:START"] = "2100"
	a.Rules["BLOCK:TIME:END"] = "0600"
	if a.Rules["BLOCK:TIME:START"] != "2200" || tpl.DefaultRules["BLOCK:TIME:END"] != "0700" {
		t.Error("template and assignment share their rules")
	}

	tpl.Active = false
	if _, err := tpl.Apply(1, RoleOwner); !errors.Is(err, ErrTemplateInactive) {
		t.Errorf("inactive: %v", err)
	}
	owners := Template{Name: "Owner cap", Type: "MONTHLY_LIMIT", RequireRole: RoleOwner, Active: true, DefaultRules: map[string]string{"LIMIT:DATA:MONTHLY": "1"}}
	if _, err := owners.Apply(1, RoleMember); !errors.Is(err, ErrRoleNotAllowed) {
		t.Errorf("member on OWNER template: %v", err)
	}
	if _, err := owners.Apply(1, RoleOwner); err != nil {
		t.Errorf("owner: %v", err)
	}
	if _, err := owners.Apply(0, RoleOwner); err == nil {
		t.Error("customer 0 accepted")
	}
	broken := Template{Name: "x", Type: "y", RequireRole: RoleMember, Active: true, DefaultRules: map[string]string{"NOPE": "1"}}
	if _, err := broken.Apply(1, RoleMember); err == nil || !strings.Contains(err.Error(), "defaultRules.NOPE") {
		t.Errorf("broken rules: %v", err)
	}
}

func TestTemplateValidate(t *testing.T) {
	cases := []struct {
		tpl   Template
		field string
	}{
		{Template{Type: "t", RequireRole: RoleMember}, "name"},
		{Template{Name: strings.Repeat("n", 101), Type: "t", RequireRole: RoleMember}, "name"},
		{Template{Name: "n", RequireRole: RoleMember}, "type"},
		{Template{Name: "n", Type: "t", RequireRole: RoleAdmin}, "requireRole"},
		{Template{Name: "n", Type: "t", RequireRole: RoleOwner, DefaultRules: map[string]string{"LIMIT:DATA:DAILY": "-1"}}, "defaultRules.LIMIT:DATA:DAILY"},
	}
	for _, c := range cases {
		err := c.tpl.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: %v, want field %s", c.tpl, err, c.field)
		}
	}
}

func TestRolesMergeCatalog(t *testing.T) {
	for _, r := range []Role{RoleMember, RoleOwner, RoleAdmin} {
		if !r.Valid() {
			t.Error(r)
		}
	}
	if Role("KING").Valid() {
		t.Error("KING")
	}
	got := Merge(map[string]string{"A": "1", "B": "1"}, map[string]string{"B": "2"})
	if d := cmp.Diff(map[string]string{"A": "1", "B": "2"}, got); d != "" {
		t.Error(d)
	}
	cat := NewCatalog(DefaultApps())
	if cat.Category("com.youtube.app") != CategoryVideo || cat.Category("nope") != "" {
		t.Error("catalog")
	}
	seen := map[Category]int{}
	for _, a := range DefaultApps() {
		if !a.Category.Valid() {
			t.Errorf("%s: %s", a.ID, a.Category)
		}
		seen[a.Category]++
	}
	if len(seen) != 6 {
		t.Errorf("categories covered: %v", seen)
	}
}
