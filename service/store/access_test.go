package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// testLoginGrammar: a numeric login that starts with 0 or + is a phone, one
// that starts with 1-9 a member id — never both, so a member whose id is
// another person's phone digits cannot capture that person's login.
func testLoginGrammar(t *testing.T, e *env) {
	e.Family(t, 1)
	e.Family(t, 2)
	victim, err := e.S.AddMember(e.Ctx, store.NewMember{FamilyID: 1, Name: "victim", Phone: "01012345678", Role: policy.RoleMember, Password: "victim password"}, store.System)
	if err != nil {
		t.Fatal(err)
	}
	// An id equal to the phone's digits (1012345678), chosen by whoever adds
	// members with explicit ids (seeding, the back office).
	squatter, err := e.S.AddMember(e.Ctx, store.NewMember{ID: 1012345678, FamilyID: 2, Name: "squatter", Role: policy.RoleMember, Password: "squatter password"}, store.System)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		login, password string
		want            int64 // 0: bad credentials
	}{
		{"01012345678", "victim password", victim.ID},
		{"01012345678", "squatter password", 0},
		{"1012345678", "squatter password", squatter.ID},
		{"1012345678", "victim password", 0},
		{"+82-2-0001", "x", 0},
		{"0", "x", 0},
		{"-5", "x", 0},
		{"abc", "x", 0},
	} {
		m, err := e.S.Authenticate(e.Ctx, c.login, c.password)
		switch {
		case c.want == 0:
			wantErr(t, "Authenticate "+c.login+"/"+c.password, err, store.ErrBadCredentials)
		case err != nil || m.ID != c.want:
			t.Errorf("Authenticate(%s, %s) = %d, %v; want %d", c.login, c.password, m.ID, err, c.want)
		}
	}
	// Phones follow the grammar: 0 or + first, then digits, spaces, hyphens.
	for _, phone := range []string{"1012345678", "5551234", "ops", "010-12a4", "+", "0", "+-1", "010--"} {
		_, err := e.S.AddMember(e.Ctx, store.NewMember{FamilyID: 1, Name: "x", Phone: phone, Role: policy.RoleMember}, store.System)
		wantErr(t, "phone "+phone, err, store.ErrInvalid)
		var fe *store.FieldError
		if !errors.As(err, &fe) || fe.Field != "phone" {
			t.Errorf("phone %q: %v is not a FieldError on phone", phone, err)
		}
	}
	for _, phone := range []string{"+82 10 1234 5678", "010-9876-5432", "0212345678"} {
		if _, err := e.S.AddMember(e.Ctx, store.NewMember{FamilyID: 1, Name: "x", Phone: phone, Role: policy.RoleMember}, store.System); err != nil {
			t.Errorf("phone %q: %v", phone, err)
		}
	}
}

// publicOnly checks a refusal is a FieldError of kind whose message carries
// no database text.
func publicOnly(t *testing.T, what string, err, kind error, field string) {
	t.Helper()
	wantErr(t, what, err, kind)
	var fe *store.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("%s: %v is not a *store.FieldError", what, err)
	}
	if fe.Field != field {
		t.Errorf("%s: field %q, want %q", what, fe.Field, field)
	}
	low := strings.ToLower(fe.Msg)
	for _, w := range []string{"store:", "sql", "unique", "constraint", "duplicate", "error 1", "policy:"} {
		if strings.Contains(low, w) {
			t.Errorf("%s: message %q carries %q", what, fe.Msg, w)
		}
	}
}

// testConflicts: every conflict a caller can cause is a FieldError naming
// the field and saying what to do, in words without database text; the
// cause stays reachable for logs and errors.Is.
func testConflicts(t *testing.T, e *env) {
	e.Family(t, 1)
	e.Family(t, 2)
	_, err := e.S.AddMember(e.Ctx, store.NewMember{FamilyID: 1, Name: "dup", Phone: "010-22", Role: policy.RoleMember}, admin)
	publicOnly(t, "phone taken", err, store.ErrConflict, "phone")
	_, err = e.S.AddMember(e.Ctx, store.NewMember{ID: 22, FamilyID: 1, Name: "dup", Role: policy.RoleMember}, admin)
	publicOnly(t, "id taken", err, store.ErrConflict, "customerId")
	_, err = e.S.CreateFamily(e.Ctx, store.NewFamily{ID: 2, Name: "dup"}, admin)
	publicOnly(t, "family id taken", err, store.ErrConflict, "id")
	_, err = e.S.SetRole(e.Ctx, 2, 21, policy.RoleMember, owner)
	publicOnly(t, "last owner", err, store.ErrConflict, "role")
	publicOnly(t, "remove last owner", e.S.RemoveMember(e.Ctx, 2, 21, owner), store.ErrConflict, "customerId")

	tpl := policy.Template{Name: "t", Type: "LIMIT", RequireRole: policy.RoleOwner, DefaultRules: map[string]string{}, Active: true}
	first, err := e.S.CreateTemplate(e.Ctx, tpl, admin)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.S.CreateTemplate(e.Ctx, tpl, admin)
	publicOnly(t, "template name taken", err, store.ErrConflict, "name")
	tpl.Name = "u"
	tpl.Active = false
	second, err := e.S.CreateTemplate(e.Ctx, tpl, admin)
	if err != nil {
		t.Fatal(err)
	}
	tpl.ID, tpl.Name = second.ID, "t"
	_, err = e.S.UpdateTemplate(e.Ctx, tpl, admin)
	publicOnly(t, "rename to a taken name", err, store.ErrConflict, "name")
	_, err = e.S.ApplyTemplate(e.Ctx, 1, 12, first.ID, 0, admin)
	publicOnly(t, "owner-only template", err, store.ErrConflict, "templateId")
	if !errors.Is(err, policy.ErrRoleNotAllowed) {
		t.Errorf("owner-only template: %v lost its cause", err)
	}
	_, err = e.S.ApplyTemplate(e.Ctx, 1, 12, second.ID, 0, admin)
	publicOnly(t, "inactive template", err, store.ErrConflict, "templateId")
	if !errors.Is(err, policy.ErrTemplateInactive) {
		t.Errorf("inactive template: %v lost its cause", err)
	}
	_, err = e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 1, CustomerID: 12, Set: map[string]string{"BLOCK:ACCESS": "1"}, ExpectedVersion: 5, By: owner})
	publicOnly(t, "stale version", err, store.ErrStaleVersion, "expectedVersion")

	// Validation errors too.
	_, err = e.S.AddMember(e.Ctx, store.NewMember{FamilyID: 1, Role: policy.RoleMember}, owner)
	publicOnly(t, "no name", err, store.ErrInvalid, "name")
	_, err = e.S.AddMember(e.Ctx, store.NewMember{FamilyID: 1, Name: "x", Role: policy.RoleMember, Password: strings.Repeat("p", 80)}, owner)
	publicOnly(t, "long password", err, store.ErrInvalid, "password")
}

// testOwnTopUpLimit: the family's own members' top-ups of a month are capped
// (AddOwnTopUp); the back office's and the system's are not counted.
func testOwnTopUpLimit(t *testing.T, e *env) {
	e.Family(t, 1)
	e.Family(t, 2)
	fam1 := store.Actor{ID: 11, Role: policy.RoleOwner}
	const limit = 100
	if _, err := e.S.AddOwnTopUp(e.Ctx, 1, 60, fam1, limit); err != nil {
		t.Fatal(err)
	}
	if _, err := e.S.AddTopUp(e.Ctx, 1, 1000, admin); err != nil { // not counted
		t.Fatal(err)
	}
	if _, err := e.S.AddOwnTopUp(e.Ctx, 2, 90, store.Actor{ID: 21, Role: policy.RoleOwner}, limit); err != nil { // another family
		t.Fatal(err)
	}
	_, err := e.S.AddOwnTopUp(e.Ctx, 1, 41, store.Actor{ID: 12, Role: policy.RoleOwner}, limit)
	publicOnly(t, "over the month's limit", err, store.ErrInvalid, "bytes")
	var le *store.TopUpLimitError
	if !errors.As(err, &le) || le.Left != 40 || le.Limit != limit || le.Month != "202602" {
		t.Fatalf("limit error %#v", err)
	}
	if _, err := e.S.AddOwnTopUp(e.Ctx, 1, 40, store.Actor{ID: 12, Role: policy.RoleOwner}, limit); err != nil {
		t.Fatal(err)
	}
	_, err = e.S.AddOwnTopUp(e.Ctx, 1, 1, fam1, limit)
	publicOnly(t, "limit reached", err, store.ErrInvalid, "bytes")
	// A new month starts afresh.
	e.Clock.Add(20 * 24 * 3600e9)
	if _, err := e.S.AddOwnTopUp(e.Ctx, 1, limit, fam1, limit); err != nil {
		t.Fatalf("next month: %v", err)
	}
	tops, err := e.S.TopUps(e.Ctx, 1, "202602")
	if err != nil || len(tops) != 3 {
		t.Fatalf("TopUps = %v, %v", tops, err)
	}
}
