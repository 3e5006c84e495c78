package store_test

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv/storetest"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/store"
)

var (
	seoul = storetest.Seoul
	// start is a fixed instant: 2026-02-10 12:00 in Seoul.
	start = storetest.Start
)

// env is a store on a fresh database (internal/testenv/storetest).
type env struct{ *storetest.Env }

// opener opens a fresh, empty database for one test.
type opener func(t *testing.T) *sql.DB

func newEnv(t *testing.T, open opener) *env {
	t.Helper()
	return &env{storetest.New(t, open(t))}
}

// testPW is the password of the members family creates.
const testPW = storetest.Password

var (
	owner = store.Actor{ID: 1, Role: policy.RoleOwner}
	admin = store.Actor{ID: 99, Role: policy.RoleAdmin}
)

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: err = %v, want %v", what, err, want)
	}
}

// runSuite runs every store test against databases from open.
func runSuite(t *testing.T, open opener) {
	for name, fn := range map[string]func(*testing.T, *env){
		"Families":      testFamilies,
		"Members":       testMembers,
		"UpdatePolicy":  testUpdatePolicy,
		"PolicyNoOp":    testPolicyNoOp,
		"Templates":     testTemplates,
		"PoolAndAudit":  testPoolAndAudit,
		"Usage":         testUsage,
		"RefreshTokens": testRefreshTokens,
		"PoolLimit":     testPoolLimit,
		"LoginGrammar":  testLoginGrammar,
		"Conflicts":     testConflicts,
		"OwnTopUpLimit": testOwnTopUpLimit,
		"Purchases":     testPurchases,
		"LockoutAudit":  testLockoutAudit,
		"PasswordRules": testPasswordRules,
		"Passwords":     testPasswordChanges,
		"ResetRace":     testResetRace,
		"PushSubs":      testPushSubscriptions,
		"PushSubsCap":   testPushSubscriptionCap,
		"VAPIDKeys":     testVAPIDKeys,
		"DataRequests":  testDataRequests,
		"FamilyChanges": testFamilyChanges,
		"Text":          testText,
		"FamilySize":    testFamilySize,
		"ChosenIDs":     testChosenIDs,
		"RedisMarks":    testRedisMarks,
		"Rearms":        testThresholdRearms,
		"Gifts":         testGifts,
		"FamilyNotes":   testFamilyNotes,
		"AppCatalog":    testAppCatalog,
		"GrantSteps":    testGrantSteps,
		"BudgetUsage":   testBudgetUsage,
		"GrantBudgets":  testGrantBudgets,
		"RebuildSpan":   testRebuildSpan,
		"RecentApps":    testRecentApps,
		"Charging":      testChargingSessions,
		"ChargingBatch": testChargingStepsBatch,
		"MemberIMSI":    testMemberIMSI,
		"MemberMSISDN":  testMemberMSISDN,
	} {
		t.Run(name, func(t *testing.T) { fn(t, newEnv(t, open)) })
	}
}

func testFamilies(t *testing.T, e *env) {
	e.Family(t, 100)
	e.Family(t, 200)
	f, err := e.S.CreateFamily(e.Ctx, store.NewFamily{Name: "Kim_family", PlanBytes: 5, Thresholds: policy.Thresholds{30, 50}}, admin)
	if err != nil {
		t.Fatal(err)
	}
	if f.ID <= 200 || f.Name != "Kim_family" || !cmp.Equal(f.Thresholds, policy.Thresholds{50, 30}) || !f.CreatedAt.Equal(start) {
		t.Errorf("CreateFamily = %+v", f)
	}
	_, err = e.S.CreateFamily(e.Ctx, store.NewFamily{ID: 100, Name: "dup"}, admin)
	wantErr(t, "duplicate id", err, store.ErrConflict)
	_, err = e.S.CreateFamily(e.Ctx, store.NewFamily{Name: " "}, admin)
	wantErr(t, "empty name", err, store.ErrInvalid)
	_, err = e.S.CreateFamily(e.Ctx, store.NewFamily{Name: "x", Thresholds: policy.Thresholds{101}}, admin)
	wantErr(t, "bad thresholds", err, store.ErrInvalid)
	_, err = e.S.GetFamily(e.Ctx, 555)
	wantErr(t, "GetFamily(555)", err, store.ErrNotFound)

	ids := func(fs []store.Family, err error) []int64 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, f := range fs {
			out = append(out, f.ID)
		}
		return out
	}
	for q, want := range map[string][]int64{
		"100":      {100},      // family id
		"2002":     {200},      // member id
		"010-1001": {100},      // phone
		"Family":   {100, 200}, // name prefix
		"Kim_":     {f.ID},     // '_' is literal
		"Kim%":     nil,        // '%' is literal
		"":         {100, 200, f.ID},
		"nobody":   nil,
	} {
		if got := ids(e.S.SearchFamilies(e.Ctx, q, 10)); !cmp.Equal(want, got) {
			t.Errorf("SearchFamilies(%q) = %v, want %v", q, got, want)
		}
	}
	_, err = e.S.SearchFamilies(e.Ctx, "x", 0)
	wantErr(t, "limit 0", err, store.ErrInvalid)
	all, err := e.S.FamilyIDs(e.Ctx, 100, 10)
	if err != nil || !cmp.Equal(all, []int64{200, f.ID}) {
		t.Errorf("FamilyIDs = %v, %v", all, err)
	}
	_, err = e.S.FamilyIDs(e.Ctx, 0, 0)
	wantErr(t, "FamilyIDs limit", err, store.ErrInvalid)
}

func testMembers(t *testing.T, e *env) {
	e.Family(t, 1)
	e.Family(t, 2)
	m, err := e.S.GetMember(e.Ctx, 1, 12)
	if err != nil || m.Role != policy.RoleMember || m.Phone != "010-12" || m.FamilyID != 1 {
		t.Fatalf("GetMember = %+v, %v", m, err)
	}
	_, err = e.S.GetMember(e.Ctx, 2, 12) // another family's member
	wantErr(t, "other family", err, store.ErrNotFound)
	_, err = e.S.AddMember(e.Ctx, store.NewMember{FamilyID: 1, Name: "dup", Phone: "010-12", Role: policy.RoleMember}, owner)
	wantErr(t, "duplicate phone", err, store.ErrConflict)
	_, err = e.S.AddMember(e.Ctx, store.NewMember{FamilyID: 9, Name: "x", Role: policy.RoleMember}, owner)
	wantErr(t, "unknown family", err, store.ErrNotFound)
	for name, nm := range map[string]store.NewMember{
		"role":        {FamilyID: 1, Name: "x", Role: "KING"},
		"admin fam":   {FamilyID: 1, Name: "x", Role: policy.RoleAdmin},
		"no family":   {Name: "x", Role: policy.RoleMember},
		"no name":     {FamilyID: 1, Role: policy.RoleMember},
		"long phone":  {FamilyID: 1, Name: "x", Role: policy.RoleMember, Phone: "0123456789012345678901234567890123"},
		"long passwd": {FamilyID: 1, Name: "x", Role: policy.RoleMember, Password: string(make([]byte, 80))},
	} {
		_, err := e.S.AddMember(e.Ctx, nm, owner)
		wantErr(t, name, err, store.ErrInvalid)
	}
	adm, err := e.S.AddMember(e.Ctx, store.NewMember{Name: "ops", Phone: "+82-2-0000", Role: policy.RoleAdmin, Password: "admin secret"}, store.System)
	if err != nil || adm.FamilyID != 0 {
		t.Fatalf("add admin: %+v %v", adm, err)
	}

	// Login by id or phone; every failure looks the same.
	for _, login := range []string{"11", "010-11"} {
		if m, err := e.S.Authenticate(e.Ctx, login, testPW); err != nil || m.ID != 11 || m.Role != policy.RoleOwner {
			t.Errorf("Authenticate(%s) = %+v, %v", login, m, err)
		}
	}
	if m, err := e.S.Authenticate(e.Ctx, "+82-2-0000", "admin secret"); err != nil || m.ID != adm.ID {
		t.Errorf("admin login = %+v, %v", m, err)
	}
	for _, c := range [][2]string{{"11", "wrong"}, {"404", testPW}, {"nobody", testPW}} {
		_, err := e.S.Authenticate(e.Ctx, c[0], c[1])
		wantErr(t, "Authenticate "+c[0], err, store.ErrBadCredentials)
	}
	if _, err := e.S.ResetPassword(e.Ctx, 1, 11, "new password", admin, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.S.Authenticate(e.Ctx, "11", "new password"); err != nil {
		t.Errorf("login with new password: %v", err)
	}

	// Roles: several owners; the last owner stays.
	if m, err := e.S.SetRole(e.Ctx, 1, 12, policy.RoleOwner, owner); err != nil || m.Role != policy.RoleOwner {
		t.Fatalf("promote: %+v %v", m, err)
	}
	if _, err := e.S.SetRole(e.Ctx, 1, 11, policy.RoleMember, owner); err != nil {
		t.Fatal(err)
	}
	_, err = e.S.SetRole(e.Ctx, 1, 12, policy.RoleMember, owner)
	wantErr(t, "demote last owner", err, store.ErrConflict)
	wantErr(t, "remove last owner", e.S.RemoveMember(e.Ctx, 1, 12, owner), store.ErrConflict)
	_, err = e.S.SetRole(e.Ctx, 1, 12, policy.RoleAdmin, owner)
	wantErr(t, "role ADMIN", err, store.ErrInvalid)
	_, err = e.S.SetRole(e.Ctx, 2, 12, policy.RoleOwner, owner)
	wantErr(t, "SetRole other family", err, store.ErrNotFound)

	// Soft delete: gone from lists and logins, phone reusable, history kept.
	tok, trt, err := e.S.IssueRefreshToken(e.Ctx, 11, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.S.RemoveMember(e.Ctx, 1, 11, owner); err != nil {
		t.Fatal(err)
	}
	if m, live, err := e.S.MemberSession(e.Ctx, 11, trt.RotationID); err != nil || live || m.DeletedAt == nil {
		t.Errorf("MemberSession(removed) = %+v, live %v, %v", m, live, err)
	}
	wantErr(t, "remove twice", e.S.RemoveMember(e.Ctx, 1, 11, owner), store.ErrNotFound)
	_, err = e.S.GetMember(e.Ctx, 1, 11)
	wantErr(t, "removed member", err, store.ErrNotFound)
	_, err = e.S.Authenticate(e.Ctx, "11", "new password")
	wantErr(t, "removed login", err, store.ErrBadCredentials)
	_, _, err = e.S.RotateRefreshToken(e.Ctx, tok, time.Hour)
	wantErr(t, "removed member's token", err, store.ErrTokenReused)
	if old, err := e.S.MemberByID(e.Ctx, 11); err != nil || old.DeletedAt == nil || !old.DeletedAt.Equal(start) {
		t.Errorf("MemberByID(removed) = %+v, %v", old, err)
	}
	if _, err := e.S.AddMember(e.Ctx, store.NewMember{FamilyID: 1, Name: "new", Phone: "010-11", Role: policy.RoleMember}, owner); err != nil {
		t.Errorf("reuse phone: %v", err)
	}
	ms, err := e.S.ListMembers(e.Ctx, 1, false)
	if err != nil || len(ms) != 2 {
		t.Errorf("ListMembers = %v, %v", ms, err)
	}
	all, _ := e.S.ListMembers(e.Ctx, 1, true)
	if len(all) != 3 {
		t.Errorf("ListMembers(removed) = %d rows", len(all))
	}
	// Names for notifications: removed members too, unknown ids left out.
	want, ids := map[int64]string{}, []int64{99999}
	for _, m := range all {
		want[m.ID], ids = m.Name, append(ids, m.ID)
	}
	if got, err := e.S.MemberNames(e.Ctx, ids); err != nil || !maps.Equal(got, want) {
		t.Errorf("MemberNames(%v) = %v, %v; want %v", ids, got, err, want)
	}
	if got, err := e.S.MemberNames(e.Ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("MemberNames(nil) = %v, %v", got, err)
	}
	_, err = e.S.MemberNames(e.Ctx, make([]int64, 1001))
	wantErr(t, "MemberNames of 1001", err, store.ErrInvalid)
	_, err = e.S.MemberByPhone(e.Ctx, "010-404")
	wantErr(t, "MemberByPhone", err, store.ErrNotFound)
	hash, err := e.S.HashPassword("bulk seeding")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.S.AddMember(e.Ctx, store.NewMember{FamilyID: 2, Name: "seeded", Phone: "010-7001", Role: policy.RoleMember, PasswordHash: hash}, store.System); err != nil {
		t.Fatal(err)
	}
	if _, err := e.S.Authenticate(e.Ctx, "010-7001", "bulk seeding"); err != nil {
		t.Errorf("login with precomputed hash: %v", err)
	}
	if _, err := e.S.AddMember(e.Ctx, store.NewMember{FamilyID: 2, Name: "nopw", Phone: "010-7002", Role: policy.RoleMember}, store.System); err != nil {
		t.Fatal(err)
	}
	_, err = e.S.Authenticate(e.Ctx, "010-7002", "")
	wantErr(t, "password-less login", err, store.ErrBadCredentials)
}

func decodePolicy(t *testing.T, payload string) envelope.Envelope[envelope.PolicyUpdatedPayload] {
	t.Helper()
	ev, err := envelope.DecodeAs[envelope.PolicyUpdatedPayload]([]byte(payload))
	if err != nil {
		t.Fatalf("outbox payload: %v\n%s", err, payload)
	}
	return ev
}

func testUpdatePolicy(t *testing.T, e *env) {
	e.Family(t, 1)
	e.Family(t, 2)
	p, err := e.S.GetPolicy(e.Ctx, 1, 12)
	if err != nil || p.Version != 0 || len(p.Rules) != 0 {
		t.Fatalf("GetPolicy (none) = %+v, %v", p, err)
	}
	up, err := e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 1, CustomerID: 12,
		Set: map[string]string{"LIMIT:DATA:MONTHLY": "2147483648"}, By: owner})
	if err != nil {
		t.Fatal(err)
	}
	if up.Policy.Version != 1 || up.Policy.Rules["LIMIT:DATA:MONTHLY"] != "2147483648" || len(up.Previous) != 0 || up.OutboxID <= 0 {
		t.Errorf("first update = %+v", up)
	}
	up2, err := e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 1, CustomerID: 12, ExpectedVersion: 1,
		Set: map[string]string{"LIMIT:DATA:MONTHLY": "524288000", "BLOCK:TIME:START": "2200", "BLOCK:TIME:END": "0700"}, By: owner})
	if err != nil {
		t.Fatal(err)
	}
	if up2.Policy.Version != 2 || up2.OutboxID <= up.OutboxID {
		t.Errorf("second update = %+v", up2)
	}
	// Stale version: rejected, nothing written.
	audits, outbox := e.Count(t, "audit_log"), e.Count(t, "outbox")
	_, err = e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 1, CustomerID: 12, ExpectedVersion: 1, Remove: []string{"BLOCK:TIME:START"}, By: owner})
	wantErr(t, "stale", err, store.ErrStaleVersion)
	_, err = e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 1, CustomerID: 12, Set: map[string]string{"LIMIT:DATA:DAILY": "-5"}, By: owner})
	wantErr(t, "invalid", err, store.ErrInvalid)
	wantErr(t, "invalid names the policy field", err, policy.ErrInvalid)
	_, err = e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 2, CustomerID: 12, Set: map[string]string{"BLOCK:ACCESS": "1"}, By: owner})
	wantErr(t, "other family", err, store.ErrNotFound)
	if a, o := e.Count(t, "audit_log"), e.Count(t, "outbox"); a != audits || o != outbox {
		t.Errorf("failed updates wrote rows: audit %d→%d outbox %d→%d", audits, a, outbox, o)
	}
	// Replace: last write wins.
	up3, err := e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 1, CustomerID: 12, Replace: map[string]string{"BLOCK:ACCESS": "1"},
		Remove: []string{"BLOCK:TIME:START"}, By: store.Actor{ID: 13, Role: policy.RoleOwner}})
	if err != nil {
		t.Fatal(err)
	}
	want := store.Policy{FamilyID: 1, CustomerID: 12, Rules: map[string]string{"BLOCK:ACCESS": "1"}, Version: 3, UpdatedBy: 13, UpdatedAt: start}
	got, err := e.S.GetPolicy(e.Ctx, 1, 12)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GetPolicy (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, up3.Policy); diff != "" {
		t.Errorf("UpdatePolicy result (-want +got):\n%s", diff)
	}

	// The outbox holds one POLICY_UPDATED per change, in order.
	rows, err := e.DB.QueryContext(e.Ctx, `SELECT aggregate_key, topic, event_id, event_type, payload FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var versions []int64
	var evs []envelope.Envelope[envelope.PolicyUpdatedPayload]
	for rows.Next() {
		var key, topic, id, typ, payload string
		if err := rows.Scan(&key, &topic, &id, &typ, &payload); err != nil {
			t.Fatal(err)
		}
		ev := decodePolicy(t, payload)
		if key != "1" || topic != envelope.TopicPolicyUpdated || typ != string(envelope.TypePolicyUpdated) || ev.EventID != id {
			t.Errorf("outbox row %s %s %s %s", key, topic, id, typ)
		}
		versions = append(versions, ev.Payload.Version)
		evs = append(evs, ev)
	}
	if !cmp.Equal(versions, []int64{1, 2, 3}) {
		t.Errorf("outbox versions = %v", versions)
	}
	p1 := evs[0].Payload
	if p1.PolicyKey != "LIMIT:DATA:MONTHLY" || p1.OldValue != nil || p1.NewValue == nil || *p1.NewValue != "2147483648" || p1.ChangedBy != 1 || p1.TargetCustomerID != 12 {
		t.Errorf("first event payload = %+v", p1)
	}
	if evs[1].Payload.PolicyKey != "" || len(evs[1].Payload.Constraints) != 3 {
		t.Errorf("multi-key event payload = %+v", evs[1].Payload)
	}
	if evs[2].EventID != up3.EventID {
		t.Errorf("event id %s, update says %s", evs[2].EventID, up3.EventID)
	}
	// The audit row carries before and after.
	as, err := e.S.AuditLog(e.Ctx, store.AuditFilter{FamilyID: 1, Action: "policy.update", Limit: 1})
	if err != nil || len(as) != 1 {
		t.Fatalf("AuditLog = %v, %v", as, err)
	}
	var before, after struct {
		Version int64
		Rules   map[string]string
	}
	if err := json.Unmarshal(as[0].Before, &before); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(as[0].After, &after); err != nil {
		t.Fatal(err)
	}
	if before.Version != 2 || after.Version != 3 || after.Rules["BLOCK:ACCESS"] != "1" || as[0].Actor.ID != 13 || as[0].Target != "member:12" {
		t.Errorf("audit = %+v before %+v after %+v", as[0], before, after)
	}
	ps, err := e.S.Policies(e.Ctx, 1)
	if err != nil || len(ps) != 2 || ps[1].Version != 3 || ps[0].Version != 0 {
		t.Errorf("Policies = %+v, %v", ps, err)
	}
}

// A change that changes nothing (the same values set, absent keys removed,
// the same map replaced, the same template applied again) keeps the version
// and writes no assignment, audit or outbox row.
func testPolicyNoOp(t *testing.T, e *env) {
	e.Family(t, 1)
	tpl, err := e.S.CreateTemplate(e.Ctx, policy.Template{Name: "Night", Type: "TIME", RequireRole: policy.RoleMember,
		DefaultRules: map[string]string{"BLOCK:TIME:START": "2200", "BLOCK:TIME:END": "0700"}, Active: true}, admin)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing to change on a member without a policy.
	rows := func() [3]int {
		return [3]int{e.Count(t, "policy_assignment"), e.Count(t, "audit_log"), e.Count(t, "outbox")}
	}
	before := rows()
	up, err := e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 1, CustomerID: 12, Remove: []string{"BLOCK:ACCESS"}, By: owner})
	if err != nil {
		t.Fatal(err)
	}
	want := store.PolicyUpdate{Policy: store.Policy{FamilyID: 1, CustomerID: 12, Rules: map[string]string{}},
		Previous: map[string]string{}, Unchanged: true}
	if diff := cmp.Diff(want, up); diff != "" {
		t.Errorf("no-op on a member without a policy (-want +got):\n%s", diff)
	}
	if got := rows(); got != before {
		t.Errorf("no-op wrote rows: policy, audit, outbox %v → %v", before, got)
	}

	rules := map[string]string{"LIMIT:DATA:MONTHLY": "524288000", "BLOCK:APP:com.roblox.client": "1"}
	first, err := e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 1, CustomerID: 12, Set: rules, By: owner})
	if err != nil || first.Unchanged || first.Policy.Version != 1 {
		t.Fatalf("first change = %+v, %v", first, err)
	}
	e.Clock.Add(time.Minute)
	before = rows()
	for _, c := range []struct {
		name   string
		change store.PolicyChange
	}{
		{"same values set", store.PolicyChange{Set: map[string]string{"LIMIT:DATA:MONTHLY": "524288000"}}},
		{"absent key removed", store.PolicyChange{Remove: []string{"BLOCK:ACCESS"}}},
		{"empty change", store.PolicyChange{}},
		{"same map replaced", store.PolicyChange{Replace: rules}},
		{"set then removed", store.PolicyChange{Set: map[string]string{"BLOCK:ACCESS": "1"}, Remove: []string{"BLOCK:ACCESS"}}},
		{"expected version current", store.PolicyChange{ExpectedVersion: 1, Set: rules}},
	} {
		ch := c.change
		ch.FamilyID, ch.CustomerID, ch.By = 1, 12, store.Actor{ID: 13, Role: policy.RoleOwner}
		up, err := e.S.UpdatePolicy(e.Ctx, ch)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		want := store.PolicyUpdate{Policy: first.Policy, Constraints: first.Constraints, Previous: first.Policy.Rules, Unchanged: true}
		if diff := cmp.Diff(want, up); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
	_, err = e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 1, CustomerID: 12, ExpectedVersion: 7, Set: rules, By: owner})
	wantErr(t, "no-op at a stale version", err, store.ErrStaleVersion)
	if got := rows(); got != before {
		t.Errorf("no-ops wrote rows: policy, audit, outbox %v → %v", before, got)
	}
	if p, err := e.S.GetPolicy(e.Ctx, 1, 12); err != nil || !cmp.Equal(p, first.Policy) {
		t.Errorf("GetPolicy after no-ops = %+v, %v; want %+v", p, err, first.Policy)
	}

	// The same template applied again changes nothing; first it does.
	applied, err := e.S.ApplyTemplate(e.Ctx, 1, 12, tpl.ID, 0, owner)
	if err != nil || applied.Unchanged || applied.Policy.Version != 2 {
		t.Fatalf("ApplyTemplate = %+v, %v", applied, err)
	}
	before = rows()
	again, err := e.S.ApplyTemplate(e.Ctx, 1, 12, tpl.ID, 0, owner)
	if err != nil || !again.Unchanged || again.Policy.Version != 2 || again.EventID != "" {
		t.Errorf("ApplyTemplate again = %+v, %v", again, err)
	}
	if got := rows(); got != before {
		t.Errorf("template re-applied wrote rows: policy, audit, outbox %v → %v", before, got)
	}
}

func testTemplates(t *testing.T, e *env) {
	e.Family(t, 1)
	night := policy.Template{Name: "Night", Type: "TIME", Description: "22-07", RequireRole: policy.RoleMember,
		DefaultRules: map[string]string{"BLOCK:TIME:START": "2200", "BLOCK:TIME:END": "0700"}, Active: true}
	tpl, err := e.S.CreateTemplate(e.Ctx, night, admin)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.S.CreateTemplate(e.Ctx, night, admin)
	wantErr(t, "duplicate name", err, store.ErrConflict)
	_, err = e.S.CreateTemplate(e.Ctx, policy.Template{Name: "bad", Type: "X", RequireRole: "KING"}, admin)
	wantErr(t, "invalid template", err, store.ErrInvalid)
	ownerOnly, err := e.S.CreateTemplate(e.Ctx, policy.Template{Name: "Owners", Type: "LIMIT", RequireRole: policy.RoleOwner,
		DefaultRules: map[string]string{"THROTTLE:SPEED": "1000"}, Active: true}, admin)
	if err != nil {
		t.Fatal(err)
	}

	up, err := e.S.ApplyTemplate(e.Ctx, 1, 12, tpl.ID, 0, owner)
	if err != nil {
		t.Fatal(err)
	}
	if up.Policy.TemplateID != tpl.ID || up.Policy.Version != 1 || !cmp.Equal(up.Policy.Rules, night.DefaultRules) {
		t.Errorf("ApplyTemplate = %+v", up.Policy)
	}
	_, err = e.S.ApplyTemplate(e.Ctx, 1, 12, ownerOnly.ID, 0, owner)
	wantErr(t, "owner-only on member", err, policy.ErrRoleNotAllowed)
	wantErr(t, "owner-only on member", err, store.ErrConflict)
	if _, err := e.S.ApplyTemplate(e.Ctx, 1, 11, ownerOnly.ID, 0, owner); err != nil {
		t.Errorf("owner-only on owner: %v", err)
	}
	_, err = e.S.ApplyTemplate(e.Ctx, 1, 12, 404, 0, owner)
	wantErr(t, "unknown template", err, store.ErrNotFound)
	_, err = e.S.ApplyTemplate(e.Ctx, 1, 12, 0, 0, owner)
	wantErr(t, "template 0", err, store.ErrInvalid)

	// Editing the template does not touch the assignment; inactive ones cannot be applied.
	edit := tpl.Template
	edit.DefaultRules = map[string]string{"BLOCK:ACCESS": "1"}
	edit.Active = false
	upd, err := e.S.UpdateTemplate(e.Ctx, edit, admin)
	if err != nil || upd.Active || upd.DefaultRules["BLOCK:ACCESS"] != "1" {
		t.Fatalf("UpdateTemplate = %+v, %v", upd, err)
	}
	if p, _ := e.S.GetPolicy(e.Ctx, 1, 12); !cmp.Equal(p.Rules, night.DefaultRules) {
		t.Errorf("assignment changed with the template: %v", p.Rules)
	}
	_, err = e.S.ApplyTemplate(e.Ctx, 1, 12, tpl.ID, 0, owner)
	wantErr(t, "inactive", err, policy.ErrTemplateInactive)
	if all, err := e.S.ListTemplates(e.Ctx, false); err != nil || len(all) != 2 {
		t.Errorf("ListTemplates = %v, %v", all, err)
	}
	if act, err := e.S.ListTemplates(e.Ctx, true); err != nil || len(act) != 1 || act[0].ID != ownerOnly.ID {
		t.Errorf("ListTemplates(active) = %v, %v", act, err)
	}
	edit.ID = 404
	_, err = e.S.UpdateTemplate(e.Ctx, edit, admin)
	wantErr(t, "update unknown", err, store.ErrNotFound)
	if err := e.S.DeleteTemplate(e.Ctx, tpl.ID, admin); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "delete twice", e.S.DeleteTemplate(e.Ctx, tpl.ID, admin), store.ErrNotFound)
	_, err = e.S.GetTemplate(e.Ctx, tpl.ID)
	wantErr(t, "deleted", err, store.ErrNotFound)
	if p, _ := e.S.GetPolicy(e.Ctx, 1, 12); p.TemplateID != 0 || !cmp.Equal(p.Rules, night.DefaultRules) {
		t.Errorf("after delete: %+v", p)
	}
	if as, _ := e.S.AuditLog(e.Ctx, store.AuditFilter{Target: fmt.Sprint("template:", tpl.ID)}); len(as) != 3 {
		t.Errorf("template audit rows = %d, want 3", len(as))
	}
}

func testPoolAndAudit(t *testing.T, e *env) {
	e.Family(t, 1)
	f, err := e.S.SetPlan(e.Ctx, 1, 20<<20, owner)
	if err != nil || f.PlanBytes != 20<<20 {
		t.Fatalf("SetPlan = %+v, %v", f, err)
	}
	_, err = e.S.SetPlan(e.Ctx, 1, -1, owner)
	wantErr(t, "negative plan", err, store.ErrInvalid)
	_, err = e.S.SetPlan(e.Ctx, 404, 1, owner)
	wantErr(t, "unknown family", err, store.ErrNotFound)
	if f, err := e.S.SetThresholds(e.Ctx, 1, policy.Thresholds{20, 80}, owner); err != nil || !cmp.Equal(f.Thresholds, policy.Thresholds{80, 20}) {
		t.Errorf("SetThresholds = %+v, %v", f, err)
	}
	if f, err := e.S.SetThresholds(e.Ctx, 1, policy.Thresholds{}, owner); err != nil || f.Thresholds == nil || len(f.Thresholds) != 0 {
		t.Errorf("SetThresholds(off) = %#v, %v", f.Thresholds, err)
	}
	if f, err := e.S.SetThresholds(e.Ctx, 1, nil, owner); err != nil || f.Thresholds != nil {
		t.Errorf("SetThresholds(default) = %#v, %v", f.Thresholds, err)
	}
	tu, err := e.S.AddTopUp(e.Ctx, 1, 1<<20, owner)
	if err != nil || tu.Month != "202602" || tu.ID <= 0 || tu.MonthTotal != 1<<20 {
		t.Fatalf("AddTopUp = %+v, %v", tu, err)
	}
	_, err = e.S.AddTopUp(e.Ctx, 1, 0, owner)
	wantErr(t, "zero top-up", err, store.ErrInvalid)
	_, err = e.S.AddTopUp(e.Ctx, 404, 1, owner)
	wantErr(t, "top-up unknown family", err, store.ErrNotFound)
	e.Clock.Add(30 * 24 * time.Hour)
	// MonthTotal is the month's sum with the new one (quota.Engine.SetTopUps).
	if mar, err := e.S.AddTopUp(e.Ctx, 1, 5, admin); err != nil || mar.Month != "202603" || mar.MonthTotal != 5 {
		t.Fatalf("AddTopUp in March = %+v, %v; want a month total of 5", mar, err)
	}
	tu.MonthTotal = 0 // only the recording transaction tells it
	tus, err := e.S.TopUps(e.Ctx, 1, "202602")
	if diff := cmp.Diff([]store.TopUp{tu}, tus); err != nil || diff != "" {
		t.Errorf("TopUps (-want +got) %v:\n%s", err, diff)
	}

	all, err := e.S.AuditLog(e.Ctx, store.AuditFilter{FamilyID: 1})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, a := range all {
		actions = append(actions, a.Action)
	}
	wantActions := []string{"family.topup", "family.topup", "family.thresholds", "family.thresholds", "family.thresholds", "family.plan", "member.add", "member.add", "family.create"}
	if diff := cmp.Diff(wantActions, actions); diff != "" {
		t.Errorf("audit actions (-want +got):\n%s", diff)
	}
	for name, tc := range map[string]struct {
		f    store.AuditFilter
		want int
	}{
		"actor":    {store.AuditFilter{ActorID: admin.ID}, 1},
		"since":    {store.AuditFilter{Since: start.Add(time.Hour)}, 1},
		"until":    {store.AuditFilter{Until: start.Add(time.Hour)}, 8},
		"page":     {store.AuditFilter{FamilyID: 1, BeforeID: all[1].ID, Limit: 2}, 2},
		"other":    {store.AuditFilter{FamilyID: 2}, 0},
		"combined": {store.AuditFilter{FamilyID: 1, Action: "family.plan", ActorID: owner.ID}, 1},
	} {
		got, err := e.S.AuditLog(e.Ctx, tc.f)
		if err != nil || len(got) != tc.want {
			t.Errorf("%s: %d rows, %v; want %d", name, len(got), err, tc.want)
		}
	}
	_, err = e.S.AuditLog(e.Ctx, store.AuditFilter{Limit: 5000})
	wantErr(t, "limit", err, store.ErrInvalid)
	if all[0].Actor != admin || all[0].Target != "family:1" || all[0].Before != nil || all[0].After == nil {
		t.Errorf("top-up audit = %+v", all[0])
	}
}

func testUsage(t *testing.T, e *env) {
	w, err := store.NewUsageWriter(e.DB)
	if err != nil {
		t.Fatal(err)
	}
	rec := func(id string, cid int64, app string, n int64, result string, at time.Time) store.UsageRecord {
		return store.UsageRecord{EventID: id, FamilyID: cid / 10, CustomerID: cid, AppID: app, BytesUsed: n, ProcessResult: result, EventTime: at}
	}
	batch := []store.UsageRecord{
		rec("a", 11, "yt", 100, "ALLOWED", start),
		rec("b", 11, "yt", 50, "ALLOWED", start.Add(30*time.Minute)),
		rec("c", 12, "game", 70, "ALLOWED", start.Add(90*time.Minute)),
		rec("d", 12, "game", 500, "BLOCKED_TIME", start.Add(91*time.Minute)),
		rec("e", 21, "yt", 999, "ALLOWED", start),                 // another family
		rec("f", 11, "yt", 7, "ALLOWED", start.AddDate(0, -1, 0)), // last month
	}
	if err := w.Write(e.Ctx, batch); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(e.Ctx, batch[:3]); err != nil { // replays are ignored
		t.Fatal(err)
	}
	from, to := e.S.MonthRange(start)
	if !from.Equal(time.Date(2026, 2, 1, 0, 0, 0, 0, seoul)) || !to.Equal(time.Date(2026, 3, 1, 0, 0, 0, 0, seoul)) {
		t.Errorf("MonthRange = %v %v", from, to)
	}
	r, err := e.S.Usage(e.Ctx, store.UsageQuery{FamilyID: 1, From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	h := func(hh int) time.Time { return time.Date(2026, 2, 10, hh, 0, 0, 0, seoul) }
	want := store.UsageReport{
		Query: store.UsageQuery{FamilyID: 1, From: from, To: to}, AllowedBytes: 220, Events: 4, Blocked: 1,
		ByMember: []store.MemberUsage{{CustomerID: 11, AllowedBytes: 150, Events: 2}, {CustomerID: 12, AllowedBytes: 70, Events: 2, Blocked: 1}},
		ByApp:    []store.AppUsage{{AppID: "yt", AllowedBytes: 150, Events: 2}, {AppID: "game", AllowedBytes: 70, Events: 2}},
		ByHour:   []store.HourUsage{{Hour: h(12), AllowedBytes: 150, Events: 2}, {Hour: h(13), AllowedBytes: 70, Events: 2}},
	}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("family usage (-want +got):\n%s", diff)
	}
	m, err := e.S.Usage(e.Ctx, store.UsageQuery{FamilyID: 1, CustomerID: 12, From: from, To: to})
	if err != nil || m.AllowedBytes != 70 || len(m.ByMember) != 1 {
		t.Errorf("member usage = %+v, %v", m, err)
	}
	if x, err := e.S.Usage(e.Ctx, store.UsageQuery{FamilyID: 2, CustomerID: 11, From: from, To: to}); err != nil || x.Events != 0 {
		t.Errorf("member of another family = %+v, %v", x, err)
	}
	for name, q := range map[string]store.UsageQuery{
		"family": {From: from, To: to},
		"period": {FamilyID: 1, From: to, To: from},
		"long":   {FamilyID: 1, From: from, To: from.AddDate(2, 0, 0)},
	} {
		_, err := e.S.Usage(e.Ctx, q)
		wantErr(t, name, err, store.ErrInvalid)
	}
}

func testRefreshTokens(t *testing.T, e *env) {
	e.Family(t, 1)
	t1, rt, err := e.S.IssueRefreshToken(e.Ctx, 11, time.Hour)
	if err != nil || rt.CustomerID != 11 || len(rt.RotationID) != 32 || !rt.ExpiresAt.Equal(start.Add(time.Hour)) {
		t.Fatalf("Issue = %+v, %v", rt, err)
	}
	_, _, err = e.S.IssueRefreshToken(e.Ctx, 404, time.Hour)
	wantErr(t, "unknown member", err, store.ErrNotFound)
	_, _, err = e.S.IssueRefreshToken(e.Ctx, 11, 0)
	wantErr(t, "ttl", err, store.ErrInvalid)
	var stored string
	if err := e.DB.QueryRowContext(e.Ctx, `SELECT token_hash FROM refresh_token WHERE id = ?`, rt.ID).Scan(&stored); err != nil || stored == t1 {
		t.Errorf("token stored in clear: %v", err)
	}

	t2, rt2, err := e.S.RotateRefreshToken(e.Ctx, t1, time.Hour)
	if err != nil || t2 == t1 || rt2.RotationID != rt.RotationID || rt2.CustomerID != 11 {
		t.Fatalf("Rotate = %+v, %v", rt2, err)
	}
	t3, _, err := e.S.RotateRefreshToken(e.Ctx, t2, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Another login is a separate rotation family.
	other, _, err := e.S.IssueRefreshToken(e.Ctx, 11, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	live := func(what string, cid int64, rotation string, want bool) {
		t.Helper()
		m, got, err := e.S.MemberSession(e.Ctx, cid, rotation)
		if err != nil || m.ID != cid || got != want {
			t.Errorf("%s: MemberSession(%d, %s) = %d, %v, %v; want live %v", what, cid, rotation, m.ID, got, err, want)
		}
	}
	live("rotated session", 11, rt.RotationID, true)
	live("another member's session", 12, rt.RotationID, false)
	live("unknown session", 11, "nope", false)
	_, _, err = e.S.MemberSession(e.Ctx, 404, rt.RotationID)
	wantErr(t, "session of an unknown member", err, store.ErrNotFound)
	// Reusing t1 (stolen) revokes the whole family, including the current t3,
	// and names the session it revoked.
	_, _, err = e.S.RotateRefreshToken(e.Ctx, t1, time.Hour)
	wantErr(t, "reuse", err, store.ErrTokenReused)
	var reused *store.TokenReusedError
	if !errors.As(err, &reused) || reused.CustomerID != 11 || reused.RotationID != rt.RotationID {
		t.Errorf("reuse error %#v, want customer 11 rotation %s", err, rt.RotationID)
	}
	live("session after reuse", 11, rt.RotationID, false)
	_, _, err = e.S.RotateRefreshToken(e.Ctx, t3, time.Hour)
	wantErr(t, "current token after reuse", err, store.ErrTokenReused)
	_, _, err = e.S.RotateRefreshToken(e.Ctx, "nope", time.Hour)
	wantErr(t, "unknown", err, store.ErrNotFound)
	_, _, err = e.S.RotateRefreshToken(e.Ctx, "nope", 0)
	wantErr(t, "rotate ttl", err, store.ErrInvalid)

	// The other session is untouched, until it expires.
	e.Clock.Add(30 * time.Minute)
	other2, _, err := e.S.RotateRefreshToken(e.Ctx, other, time.Minute)
	if err != nil {
		t.Fatalf("other session: %v", err)
	}
	e.Clock.Add(time.Minute)
	_, _, err = e.S.RotateRefreshToken(e.Ctx, other2, time.Hour)
	wantErr(t, "expired", err, store.ErrTokenExpired)

	// Logout revokes a family; RevokeMemberTokens all of them.
	t4, rt4, _ := e.S.IssueRefreshToken(e.Ctx, 12, time.Hour)
	live("new session", 12, rt4.RotationID, true)
	if got, err := e.S.RevokeRefreshToken(e.Ctx, t4); err != nil || got.CustomerID != 12 || got.RotationID != rt4.RotationID || got.ID != rt4.ID {
		t.Fatalf("RevokeRefreshToken = %+v, %v; want %+v", got, err, rt4)
	}
	live("session after logout", 12, rt4.RotationID, false)
	_, _, err = e.S.RotateRefreshToken(e.Ctx, t4, time.Hour)
	wantErr(t, "revoked", err, store.ErrTokenReused)
	_, err = e.S.RevokeRefreshToken(e.Ctx, "nope")
	wantErr(t, "revoke unknown", err, store.ErrNotFound)
	t5, rt5, _ := e.S.IssueRefreshToken(e.Ctx, 12, time.Hour)
	if err := e.S.RevokeMemberTokens(e.Ctx, 12); err != nil {
		t.Fatal(err)
	}
	live("session after RevokeMemberTokens", 12, rt5.RotationID, false)
	_, _, err = e.S.RotateRefreshToken(e.Ctx, t5, time.Hour)
	wantErr(t, "member tokens revoked", err, store.ErrTokenReused)
	n, err := e.S.PruneRefreshTokens(e.Ctx, e.Clock.Now().Add(45*time.Minute))
	if err != nil || n != 5 { // the first login's 3 tokens and the other session's 2
		t.Errorf("Prune = %d, %v", n, err)
	}
}

// Marks keep the highest count recorded per generation, node and stream; a
// rebuild drops the other generations'.
func testRedisMarks(t *testing.T, e *env) {
	rec := func(gen, node, stream string, n int64) {
		t.Helper()
		if err := e.S.RecordMark(e.Ctx, gen, store.RedisMark{Node: node, Stream: stream, N: n}); err != nil {
			t.Fatal(err)
		}
	}
	rec("g1", "dpcs:state:{s0}", "family-writes/a/0", 2)
	rec("g1", "dpcs:state:{s0}", "family-writes/a/0", 1) // late: lowers nothing
	rec("g1", "dpcs:state:{s0}", "family-writes/a/1", 4)
	rec("g1", "dpcs:state:{s1}", "family-writes/a/0", 3)
	rec("g0", "dpcs:state:{s0}", "family-writes/a/0", 9)
	got, err := e.S.RedisMarks(e.Ctx, "g1")
	want := []store.RedisMark{{"dpcs:state:{s0}", "family-writes/a/0", 2}, {"dpcs:state:{s0}", "family-writes/a/1", 4},
		{"dpcs:state:{s1}", "family-writes/a/0", 3}}
	if err != nil || !cmp.Equal(got, want) {
		t.Errorf("RedisMarks(g1) = %v, %v, want %v", got, err, want)
	}
	if err := e.S.DropRedisMarks(e.Ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	if got, err := e.S.RedisMarks(e.Ctx, "g0"); err != nil || len(got) != 0 {
		t.Errorf("RedisMarks(g0) after the drop = %v, %v", got, err)
	}
	if got, _ := e.S.RedisMarks(e.Ctx, "g1"); len(got) != 3 {
		t.Errorf("the drop took g1's marks: %v", got)
	}
	for _, bad := range []struct {
		gen string
		m   store.RedisMark
	}{{"", store.RedisMark{"n", "s", 1}}, {"g", store.RedisMark{strings.Repeat("n", 192), "s", 1}}, {"g", store.RedisMark{"n", "", 1}}, {"g", store.RedisMark{"n", "s", -1}}} {
		wantErr(t, fmt.Sprintf("RecordMark(%q, %+v)", bad.gen, bad.m), e.S.RecordMark(e.Ctx, bad.gen, bad.m), store.ErrInvalid)
	}
}

// monthWindow is a store.Window accepting one month's events.
type monthWindow struct{ month time.Time }

func (w monthWindow) AcceptedMonths() ([]string, time.Time, time.Time) {
	return []string{w.month.Format("200601")}, w.month, w.month.AddDate(0, 1, 0)
}
func (monthWindow) DedupeWindow() time.Duration { return 24 * time.Hour }
func (monthWindow) Location() *time.Location    { return time.UTC }

// The thresholds a pool change re-armed are recorded with the highest arm
// per threshold and read back for a rebuild, for the accepted months only.
func testThresholdRearms(t *testing.T, e *env) {
	f, err := e.S.CreateFamily(e.Ctx, store.NewFamily{Name: "rearm", PlanBytes: 100}, admin)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	cur, prev := month.Format("200601"), month.AddDate(0, -1, 0).Format("200601")
	for _, r := range []struct {
		month string
		arms  map[int]int
	}{
		{cur, map[int]int{50: 1, 30: 2}},
		{cur, map[int]int{50: 2}},
		{cur, map[int]int{30: 1}}, // a late record lowers nothing
		{prev, map[int]int{10: 1}},
		{cur, nil}, // nothing re-armed: nothing recorded
	} {
		if err := e.S.RecordRearms(e.Ctx, f.ID, r.month, r.arms); err != nil {
			t.Fatalf("RecordRearms(%s, %v): %v", r.month, r.arms, err)
		}
	}
	for _, bad := range []struct {
		month string
		arms  map[int]int
	}{{"2026-1", map[int]int{50: 1}}, {cur, map[int]int{0: 1}}, {cur, map[int]int{50: 0}}} {
		if err := e.S.RecordRearms(e.Ctx, f.ID, bad.month, bad.arms); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("RecordRearms(%q, %v) = %v, want ErrInvalid", bad.month, bad.arms, err)
		}
	}
	states, bad, err := e.S.ReadFamilies(e.Ctx, monthWindow{month}, []int64{f.ID}, false)
	if err != nil || len(bad) != 0 {
		t.Fatalf("ReadFamilies: %v %v", bad, err)
	}
	want := map[string]map[int]int{cur: {50: 2, 30: 2}}
	if got := states[f.ID].Rearmed; !cmp.Equal(got, want) {
		t.Errorf("Rearmed = %v, want %v (the accepted month's, highest arms)", got, want)
	}
}

// Grant steps as the write-behind writes them (usage_record and
// grant_step): a rebuild reads each open grant's latest reservation of the
// accepted months — the open row no other row names as its previous step,
// whatever order the rows were written in — and not a released grant's,
// nor one of a month no longer accepted; a step's charge is used whatever
// its answer; the steps written within the dedupe window come back with
// their whole answers.
func testGrantSteps(t *testing.T, e *env) {
	f, err := e.S.CreateFamily(e.Ctx, store.NewFamily{Name: "grants", PlanBytes: 1000}, admin)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	w, err := store.NewUsageWriter(e.DB)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rec := func(id string, cid int64, charged int64, decision policy.Decision, at time.Time, g store.GrantStepRow) store.UsageRecord {
		g.StepID, g.FamilyID, g.CustomerID, g.StepTime = id, f.ID, cid, at
		return store.UsageRecord{EventID: id, FamilyID: f.ID, CustomerID: cid, AppID: "web", BytesUsed: charged,
			ProcessResult: string(decision), RemainingAfter: 900, Rule: "", EventTime: at, TotalBytes: 1000, Grant: &g}
	}
	until := now.Add(time.Hour)
	prevMonth := month.Add(-time.Hour)
	batches := [][]store.UsageRecord{
		{rec("s1", 11, 0, policy.Allowed, now, store.GrantStepRow{GrantID: "g1", Granted: 5, Open: true, ValidUntil: until})},
		{rec("t2", 12, 3, policy.Allowed, now, store.GrantStepRow{GrantID: "g2", PreviousStep: "t1", Granted: 6, Open: true,
			Overage: 1, Reserved: 11, ValidUntil: until, Reclaim: []string{"g1"}})},
		{rec("s2", 11, 2, policy.BlockedFamilyQuota, now, store.GrantStepRow{GrantID: "g1", PreviousStep: "s1", Granted: 0, Open: true}),
			rec("t1", 12, 0, policy.Allowed, now, store.GrantStepRow{GrantID: "g2", Granted: 4, Open: true, ValidUntil: until}),
			rec("s3", 11, 1, policy.Allowed, now, store.GrantStepRow{GrantID: "g1", PreviousStep: "s2", Open: false}),
			rec("u1", 11, 0, policy.Allowed, prevMonth, store.GrantStepRow{GrantID: "g3", Granted: 2, Open: true, ValidUntil: until}),
			rec("w1", 12, 0, policy.BlockedLimitDaily, now, store.GrantStepRow{GrantID: "g4", Granted: 0, Open: true})},
	}
	for _, b := range batches {
		if err := w.Write(e.Ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Write(e.Ctx, batches[1]); err != nil { // a replay changes nothing
		t.Fatal(err)
	}
	states, bad, err := e.S.ReadFamilies(e.Ctx, monthWindow{month}, []int64{f.ID}, false)
	if err != nil || len(bad) != 0 {
		t.Fatalf("ReadFamilies: %v %v", bad, err)
	}
	st := states[f.ID]
	slices.SortFunc(st.Grants, func(a, b quota.GrantState) int { return strings.Compare(a.GrantID, b.GrantID) })
	want := []quota.GrantState{
		{GrantID: "g2", CustomerID: 12, Reserved: 6, At: now, Step: "t2"},
		{GrantID: "g4", CustomerID: 12, Reserved: 0, At: now, Step: "w1"},
	}
	if d := cmp.Diff(want, st.Grants); d != "" {
		t.Errorf("open grants (-want +got):\n%s", d)
	}
	var used int64
	for _, u := range st.Usage {
		used += u.Bytes
	}
	if used != 6 { // t2's 3, s2's 2 (blocked next units, used all the same), s3's 1
		t.Errorf("used %d, want 6: %+v", used, st.Usage)
	}
	for _, u := range st.Usage {
		if u.AppID != "web" { // what the member's daily budgets count it for
			t.Errorf("usage %+v: want app web", u)
		}
	}
	var t2 *quota.GrantResult
	for _, j := range st.Steps {
		if j.ID == "t2" {
			t2 = &j.Result
		}
	}
	wantT2 := quota.GrantResult{Decision: policy.Allowed, Granted: 6, Charged: 3, ChargedAt: now, Overage: 1, Remaining: 900,
		Total: 1000, Reserved: 11, ValidUntil: until, Previous: "t1", Reclaim: []string{"g1"}}
	if len(st.Steps) != 7 || t2 == nil || !cmp.Equal(wantT2, *t2) {
		t.Errorf("%d judged steps, t2 %+v; want 7, %+v", len(st.Steps), t2, wantT2)
	}
}

// A rebuild's usage names its app, and for a family with a category's
// daily budget its category from the app catalog, so the engine restores
// the budget counters (quota.Usage); a family without one gets no
// category (the catalog is not read for it).
func testBudgetUsage(t *testing.T, e *env) {
	e.Family(t, 5)
	e.Family(t, 6)
	if _, err := e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 5, CustomerID: 52,
		Set: map[string]string{"LIMIT:DATA:CATEGORY:VIDEO": "1000"}, By: owner}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	w, err := store.NewUsageWriter(e.DB)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rec := func(id string, fid, cid int64, app string) store.UsageRecord {
		return store.UsageRecord{EventID: id, FamilyID: fid, CustomerID: cid, AppID: app, BytesUsed: 10,
			ProcessResult: string(policy.Allowed), RemainingAfter: 900, EventTime: now, TotalBytes: 1000}
	}
	if err := w.Write(e.Ctx, []store.UsageRecord{rec("a", 5, 52, "com.youtube.app"), rec("b", 5, 52, "unknown.app"),
		rec("c", 6, 62, "com.youtube.app")}); err != nil {
		t.Fatal(err)
	}
	states, bad, err := e.S.ReadFamilies(e.Ctx, monthWindow{month}, []int64{5, 6}, false)
	if err != nil || len(bad) != 0 {
		t.Fatalf("ReadFamilies: %v %v", bad, err)
	}
	got := map[string]quota.Usage{}
	for _, fid := range []int64{5, 6} {
		for _, u := range states[fid].Usage {
			got[fmt.Sprint(fid, u.AppID)] = quota.Usage{AppID: u.AppID, Category: u.Category}
		}
	}
	want := map[string]quota.Usage{
		"5com.youtube.app": {AppID: "com.youtube.app", Category: policy.CategoryVideo},
		"5unknown.app":     {AppID: "unknown.app"},
		"6com.youtube.app": {AppID: "com.youtube.app"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("usage apps and categories (-want +got):\n%s", d)
	}
}

// A rebuild reads the usage rows of the accepted months and those a judge
// may have taken within the dedupe window — stamped no earlier than twice
// the window ago (quota's contract) — not earlier ones, whenever written.
func testRebuildSpan(t *testing.T, e *env) {
	e.Family(t, 8)
	now := e.Clock.Now().UTC()
	since := now.Add(-24 * time.Hour) // monthWindow's dedupe window
	w, err := store.NewUsageWriter(e.DB)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rec := func(id string, at time.Time) store.UsageRecord {
		return store.UsageRecord{EventID: id, FamilyID: 8, CustomerID: 81, AppID: "web", BytesUsed: 10,
			ProcessResult: string(policy.Allowed), RemainingAfter: 900, EventTime: at, TotalBytes: 1000}
	}
	// All written now, so within the window.
	if err := w.Write(e.Ctx, []store.UsageRecord{
		rec("early", since.Add(-24*time.Hour-time.Minute)), // before any event judged within the window
		rec("judged", since.Add(-24*time.Hour+time.Minute)),
		rec("month", now.Add(-time.Hour)),
	}); err != nil {
		t.Fatal(err)
	}
	from := now.Add(-12 * time.Hour) // the accepted "month"
	states, bad, err := e.S.ReadFamilies(e.Ctx, monthWindow{from}, []int64{8}, true)
	if err != nil || len(bad) != 0 {
		t.Fatalf("ReadFamilies: %v %v", bad, err)
	}
	st := states[8]
	var judged []string
	for _, j := range st.Judged {
		judged = append(judged, j.ID)
	}
	slices.Sort(judged)
	if want := []string{"judged", "month"}; !slices.Equal(judged, want) {
		t.Errorf("judged events %v, want %v", judged, want)
	}
	if len(st.Usage) != 1 || !st.Usage[0].At.Equal(now.Add(-time.Hour)) {
		t.Errorf("usage %+v, want the accepted month's one event", st.Usage)
	}
}

// A grant step's charge is read at the day it was charged to (the
// reservation it returned: usage_record's event_time) and counts for the
// daily budgets of the step's own day and category (grant_step's
// step_time and category, quota.Usage.BudgetAt and Category), as grant.lua
// counted it; a step row written before its category was kept names none
// (the app catalog's, as for an event).
func testGrantBudgets(t *testing.T, e *env) {
	f, err := e.S.CreateFamily(e.Ctx, store.NewFamily{Name: "grant budgets", PlanBytes: 1000}, admin)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	charged := now.Add(-20 * time.Minute) // the reservation the step returned
	if charged.Before(month) {
		charged = month
	}
	w, err := store.NewUsageWriter(e.DB)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rec := func(id, app, category string) store.UsageRecord {
		return store.UsageRecord{EventID: id, FamilyID: f.ID, CustomerID: 11, AppID: app, BytesUsed: 7,
			ProcessResult: string(policy.Allowed), RemainingAfter: 900, EventTime: charged, TotalBytes: 1000,
			Grant: &store.GrantStepRow{StepID: id, FamilyID: f.ID, CustomerID: 11, GrantID: "g-" + id, Open: true,
				StepTime: now, Category: category}}
	}
	if err := w.Write(e.Ctx, []store.UsageRecord{rec("v", "", "VIDEO"), rec("o", "web", "")}); err != nil {
		t.Fatal(err)
	}
	states, bad, err := e.S.ReadFamilies(e.Ctx, monthWindow{month}, []int64{f.ID}, false)
	if err != nil || len(bad) != 0 {
		t.Fatalf("ReadFamilies: %v %v", bad, err)
	}
	got := states[f.ID].Usage
	slices.SortFunc(got, func(a, b quota.Usage) int { return strings.Compare(a.AppID, b.AppID) })
	want := []quota.Usage{
		{CustomerID: 11, At: charged, BudgetAt: now, Bytes: 7, Category: policy.CategoryVideo},
		{CustomerID: 11, At: charged, BudgetAt: now, Bytes: 7, AppID: "web"},
	}
	if d := cmp.Diff(want, got, cmpopts.EquateApproxTime(time.Millisecond)); d != "" {
		t.Errorf("grant usage (-want +got):\n%s", d)
	}
}
