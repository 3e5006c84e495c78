package store_test

import (
	"errors"
	"fmt"
	"math"
	"sync"
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
	e.Family(t, 1)
	const rlo, zwsp = "\u202E", "\u200B"
	_, err := e.S.CreateFamily(e.Ctx, store.NewFamily{Name: "gpj." + rlo + "exe"}, admin)
	wantField(t, "family name with U+202E", err, store.ErrInvalid, "name")
	_, err = e.S.AddMember(e.Ctx, store.NewMember{FamilyID: 1, Name: "a\x00b", Role: policy.RoleMember}, owner)
	wantField(t, "member name with NUL", err, store.ErrInvalid, "name")
	_, err = e.S.AddMember(e.Ctx, store.NewMember{FamilyID: 1, Name: "a\nb", Role: policy.RoleMember}, owner)
	wantField(t, "member name with a line feed", err, store.ErrInvalid, "name")
	_, _, err = e.S.CreateDataRequest(e.Ctx, store.NewDataRequest{FamilyID: 1, CustomerID: 12, AmountBytes: 1,
		Message: "more" + zwsp, MaxAmount: 10, MaxPending: 1})
	wantField(t, "message with U+200B", err, store.ErrInvalid, "message")
	_, err = e.S.CreateTemplate(e.Ctx, policy.Template{Name: "t", Type: "LIMIT", Description: "a\u3164", RequireRole: policy.RoleMember}, admin)
	wantField(t, "template description with U+3164", err, store.ErrInvalid, "description")

	f, err := e.S.CreateFamily(e.Ctx, store.NewFamily{Name: "\u1100\u1161\u11A8 family"}, admin)
	if err != nil || f.Name != "\uac01 family" {
		t.Errorf("family name: %q, %v; want NFC", f.Name, err)
	}
	m, err := e.S.AddMember(e.Ctx, store.NewMember{FamilyID: 1, Name: "Jose\u0301", Role: policy.RoleMember}, owner)
	if err != nil || m.Name != "Jos\u00e9" {
		t.Errorf("member name: %q, %v; want NFC", m.Name, err)
	}
	r, _, err := e.S.CreateDataRequest(e.Ctx, store.NewDataRequest{FamilyID: 1, CustomerID: 12, AmountBytes: 1,
		Message: "cafe\u0301\nplease", MaxAmount: 10, MaxPending: 1})
	if err != nil || r.Message != "caf\u00e9\nplease" {
		t.Errorf("message: %q, %v; want NFC with its line feed", r.Message, err)
	}
	a, err := e.S.AnswerDataRequest(e.Ctx, store.DataRequestAnswer{FamilyID: 1, RequestID: r.ID, Reason: "no" + rlo,
		By: store.Actor{ID: 11, Role: policy.RoleOwner}})
	wantField(t, "reason with U+202E", err, store.ErrInvalid, "reason")
	if err == nil {
		t.Errorf("answered %+v", a)
	}
	tpl, err := e.S.CreateTemplate(e.Ctx, policy.Template{Name: "Cafe\u0301", Type: "LIMIT", Description: "e\u0301\ne\u0301",
		RequireRole: policy.RoleMember, DefaultRules: map[string]string{}}, admin)
	if err != nil || tpl.Name != "Caf\u00e9" || tpl.Description != "\u00e9\n\u00e9" {
		t.Errorf("template: %+v, %v; want NFC", tpl, err)
	}
}

// testFamilySize: a family holds at most WithMaxFamilyMembers current
// members, checked in the transaction that adds one, so concurrent adds
// cannot pass it together; removed members do not count, admins have no
// family.
func testFamilySize(t *testing.T, e *env) {
	const max = 5
	s, err := store.New(e.DB, store.WithMaxFamilyMembers(max), store.WithBcryptCost(4))
	if err != nil {
		t.Fatal(err)
	}
	e.Family(t, 1) // 2 members
	add := func() error {
		_, err := s.AddMember(e.Ctx, store.NewMember{FamilyID: 1, Name: "kid", Role: policy.RoleMember}, owner)
		return err
	}
	const tries = 10
	errs := make(chan error, tries)
	var wg sync.WaitGroup
	for range tries {
		wg.Go(func() { errs <- add() })
	}
	wg.Wait()
	close(errs)
	added := 0
	for err := range errs {
		if err == nil {
			added++
			continue
		}
		wantField(t, "add to a full family", err, store.ErrConflict, "familyId")
		if !errors.Is(err, store.ErrFamilyFull) {
			t.Errorf("add to a full family: %v, want ErrFamilyFull", err)
		}
	}
	members, err := s.ListMembers(e.Ctx, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if added != max-2 || len(members) != max {
		t.Errorf("%d concurrent adds to a family of 2 (at most %d): %d added, %d members", tries, max, added, len(members))
	}
	if err := s.RemoveMember(e.Ctx, 1, members[len(members)-1].ID, owner); err != nil {
		t.Fatal(err)
	}
	if err := add(); err != nil {
		t.Errorf("add after a removal: %v", err)
	}
	if _, err := s.AddMember(e.Ctx, store.NewMember{Name: "ops", Role: policy.RoleAdmin}, store.System); err != nil {
		t.Errorf("add an admin: %v", err)
	}
	for _, n := range []int{0, -1} {
		if _, err := store.New(e.DB, store.WithMaxFamilyMembers(n)); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("WithMaxFamilyMembers(%d): %v", n, err)
		}
	}
}

// testChosenIDs: the ids a caller may choose end at MaxFamilyID and
// MaxMemberID, well below where generated ids run out, so a family or
// member at the bound leaves every later generated id room.
func testChosenIDs(t *testing.T, e *env) {
	for _, id := range []int64{store.MaxFamilyID + 1, math.MaxInt64} {
		_, err := e.S.CreateFamily(e.Ctx, store.NewFamily{ID: id, Name: "far"}, admin)
		wantField(t, fmt.Sprint("family id ", id), err, store.ErrInvalid, "id")
	}
	if _, err := e.S.CreateFamily(e.Ctx, store.NewFamily{ID: store.MaxFamilyID, Name: "last"}, admin); err != nil {
		t.Fatalf("family id %d: %v", int64(store.MaxFamilyID), err)
	}
	next, err := e.S.CreateFamily(e.Ctx, store.NewFamily{Name: "generated"}, admin)
	if err != nil || next.ID <= store.MaxFamilyID {
		t.Fatalf("a family after the last chosen id: %+v, %v", next, err)
	}
	for _, id := range []int64{store.MaxMemberID + 1, math.MaxInt64} {
		_, err := e.S.AddMember(e.Ctx, store.NewMember{ID: id, FamilyID: next.ID, Name: "far", Role: policy.RoleOwner}, admin)
		wantField(t, fmt.Sprint("member id ", id), err, store.ErrInvalid, "customerId")
	}
	if _, err := e.S.AddMember(e.Ctx, store.NewMember{ID: store.MaxMemberID, FamilyID: next.ID, Name: "last", Role: policy.RoleOwner}, admin); err != nil {
		t.Fatalf("member id %d: %v", int64(store.MaxMemberID), err)
	}
	m, err := e.S.AddMember(e.Ctx, store.NewMember{FamilyID: next.ID, Name: "generated", Role: policy.RoleMember}, admin)
	if err != nil || m.ID <= store.MaxMemberID {
		t.Fatalf("a member after the last chosen id: %+v, %v", m, err)
	}
}
