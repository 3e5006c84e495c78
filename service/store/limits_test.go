package store_test

import (
	"errors"
	"testing"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// wantField checks err is a *store.FieldError of kind want naming field.
func wantField(t *testing.T, what string, err, want error, field string) {
	t.Helper()
	var fe *store.FieldError
	if !errors.Is(err, want) || !errors.As(err, &fe) || fe.Field != field {
		t.Errorf("%s: err = %v, want %v naming %s", what, err, want, field)
	}
}

// testText: every text column people write is stored in NFC, and control
// and invisible characters are refused naming the field, whoever writes
// (the API checks the same rule first: service/api's Text).
func testText(t *testing.T, e *env) {
	e.family(t, 1)
	const rlo, zwsp = "\u202E", "\u200B"
	_, err := e.s.CreateFamily(e.ctx, store.NewFamily{Name: "gpj." + rlo + "exe"}, admin)
	wantField(t, "family name with U+202E", err, store.ErrInvalid, "name")
	_, err = e.s.AddMember(e.ctx, store.NewMember{FamilyID: 1, Name: "a\x00b", Role: policy.RoleMember}, owner)
	wantField(t, "member name with NUL", err, store.ErrInvalid, "name")
	_, err = e.s.AddMember(e.ctx, store.NewMember{FamilyID: 1, Name: "a\nb", Role: policy.RoleMember}, owner)
	wantField(t, "member name with a line feed", err, store.ErrInvalid, "name")
	_, _, err = e.s.CreateDataRequest(e.ctx, store.NewDataRequest{FamilyID: 1, CustomerID: 12, AmountBytes: 1,
		Message: "more" + zwsp, MaxAmount: 10, MaxPending: 1})
	wantField(t, "message with U+200B", err, store.ErrInvalid, "message")
	_, err = e.s.CreateTemplate(e.ctx, policy.Template{Name: "t", Type: "LIMIT", Description: "a\u3164", RequireRole: policy.RoleMember}, admin)
	wantField(t, "template description with U+3164", err, store.ErrInvalid, "description")

	f, err := e.s.CreateFamily(e.ctx, store.NewFamily{Name: "\u1100\u1161\u11A8 family"}, admin)
	if err != nil || f.Name != "\uac01 family" {
		t.Errorf("family name: %q, %v; want NFC", f.Name, err)
	}
	m, err := e.s.AddMember(e.ctx, store.NewMember{FamilyID: 1, Name: "Jose\u0301", Role: policy.RoleMember}, owner)
	if err != nil || m.Name != "Jos\u00e9" {
		t.Errorf("member name: %q, %v; want NFC", m.Name, err)
	}
	r, _, err := e.s.CreateDataRequest(e.ctx, store.NewDataRequest{FamilyID: 1, CustomerID: 12, AmountBytes: 1,
		Message: "cafe\u0301\nplease", MaxAmount: 10, MaxPending: 1})
	if err != nil || r.Message != "caf\u00e9\nplease" {
		t.Errorf("message: %q, %v; want NFC with its line feed", r.Message, err)
	}
	a, err := e.s.AnswerDataRequest(e.ctx, store.DataRequestAnswer{FamilyID: 1, RequestID: r.ID, Reason: "no" + rlo,
		By: store.Actor{ID: 11, Role: policy.RoleOwner}})
	wantField(t, "reason with U+202E", err, store.ErrInvalid, "reason")
	if err == nil {
		t.Errorf("answered %+v", a)
	}
	tpl, err := e.s.CreateTemplate(e.ctx, policy.Template{Name: "Cafe\u0301", Type: "LIMIT", Description: "e\u0301\ne\u0301",
		RequireRole: policy.RoleMember, DefaultRules: map[string]string{}}, admin)
	if err != nil || tpl.Name != "Caf\u00e9" || tpl.Description != "\u00e9\n\u00e9" {
		t.Errorf("template: %+v, %v; want NFC", tpl, err)
	}
}
