package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// runOpsSuite runs the back-office store tests (template drift, dead-letter
// replays, family search by phone) against databases from open.
func runOpsSuite(t *testing.T, open opener) {
	for name, fn := range map[string]func(*testing.T, *env){
		"Drift":            testDrift,
		"DeadLetterReplay": testDeadLetterReplay,
		"SearchByPhone":    testSearchByPhone,
	} {
		t.Run(name, func(t *testing.T) { fn(t, newEnv(t, open)) })
	}
}

func TestSQLiteOps(t *testing.T) { runOpsSuite(t, openSQLite) }

func ptr(s string) *string { return &s }

func TestDiffRules(t *testing.T) {
	got := store.DiffRules(map[string]string{"A": "1", "B": "2", "C": "3"}, map[string]string{"B": "2", "C": "4", "D": "5"})
	want := []store.RuleDiff{
		{Key: "A", Kind: store.DiffRemoved, Current: ptr("1")},
		{Key: "C", Kind: store.DiffChanged, Current: ptr("3"), Template: ptr("4")},
		{Key: "D", Kind: store.DiffAdded, Template: ptr("5")},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("DiffRules (-want +got):\n%s", d)
	}
	if got := store.DiffRules(map[string]string{"A": "1"}, map[string]string{"A": "1"}); got != nil {
		t.Errorf("DiffRules(equal) = %v", got)
	}
	// What was granted for a while (an approved extra, an exception, data
	// given away) stays when the template is applied again: no drift.
	granted := map[string]string{"A": "1", "LIMIT:DATA:EXTRA:202611": "5", "EXCEPT:TIME": "202611262230",
		"EXCEPT:APP:yt": "202611262230", "LIMIT:DATA:GIFT:202611": "-7"}
	if got := store.DiffRules(granted, map[string]string{"A": "1"}); got != nil {
		t.Errorf("DiffRules(granted keys only) = %v, want no drift", got)
	}
}

func testDrift(t *testing.T, e *env) {
	e.Family(t, 1)
	e.Family(t, 2)
	night := policy.Template{Name: "Night", Type: "TIME", RequireRole: policy.RoleMember,
		DefaultRules: map[string]string{"BLOCK:TIME:START": "2200", "BLOCK:TIME:END": "0700"}, Active: true}
	tpl, err := e.S.CreateTemplate(e.Ctx, night, admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range [][2]int64{{1, 11}, {1, 12}, {2, 21}, {2, 22}} {
		if _, err := e.S.ApplyTemplate(e.Ctx, m[0], m[1], tpl.ID, 0, admin); err != nil {
			t.Fatal(err)
		}
	}
	drifts := func(f store.DriftFilter) ([]int64, int) {
		t.Helper()
		ds, n, err := e.S.TemplateDrift(e.Ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, d := range ds {
			ids = append(ids, d.Policy.CustomerID)
		}
		return ids, n
	}
	if ids, n := drifts(store.DriftFilter{TemplateID: tpl.ID}); ids != nil || n != 4 {
		t.Fatalf("drift right after apply = %v of %d, want none of 4", ids, n)
	}

	// An owner edits member 12's copy; a removed member (22) is nobody's drift.
	if _, err := e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 1, CustomerID: 12,
		Set: map[string]string{"BLOCK:TIME:END": "0600", "LIMIT:DATA:DAILY": "1000"}, By: owner}); err != nil {
		t.Fatal(err)
	}
	if ids, _ := drifts(store.DriftFilter{TemplateID: tpl.ID}); !cmp.Equal(ids, []int64{12}) {
		t.Errorf("drift after a policy edit = %v, want [12]", ids)
	}
	if err := e.S.RemoveMember(e.Ctx, 2, 22, owner); err != nil {
		t.Fatal(err)
	}

	// The template changes: every remaining member drifts.
	night.ID = tpl.ID
	night.DefaultRules = map[string]string{"BLOCK:TIME:START": "2100", "BLOCK:TIME:END": "0700"}
	if _, err := e.S.UpdateTemplate(e.Ctx, night, admin); err != nil {
		t.Fatal(err)
	}
	if ids, n := drifts(store.DriftFilter{TemplateID: tpl.ID}); !cmp.Equal(ids, []int64{11, 12, 21}) || n != 3 {
		t.Errorf("drift after the template edit = %v of %d, want [11 12 21] of 3", ids, n)
	}
	if ids, n := drifts(store.DriftFilter{TemplateID: tpl.ID, FamilyID: 2}); !cmp.Equal(ids, []int64{21}) || n != 1 {
		t.Errorf("drift of family 2 = %v of %d", ids, n)
	}
	ds, _, err := e.S.TemplateDrift(e.Ctx, store.DriftFilter{TemplateID: tpl.ID, FamilyID: 1})
	if err != nil {
		t.Fatal(err)
	}
	want12 := []store.RuleDiff{
		{Key: "BLOCK:TIME:END", Kind: store.DiffChanged, Current: ptr("0600"), Template: ptr("0700")},
		{Key: "BLOCK:TIME:START", Kind: store.DiffChanged, Current: ptr("2200"), Template: ptr("2100")},
		{Key: "LIMIT:DATA:DAILY", Kind: store.DiffRemoved, Current: ptr("1000")},
	}
	if len(ds) != 2 || ds[1].Policy.Version != 2 {
		t.Fatalf("drift of family 1 = %+v", ds)
	}
	if d := cmp.Diff(want12, ds[1].Diffs); d != "" {
		t.Errorf("diffs of member 12 (-want +got):\n%s", d)
	}

	// Re-apply: 11 without a version check, 12 with a stale one, 21 with
	// the right one; an unknown member fails alone.
	outbox, audits := e.Count(t, "outbox"), e.Count(t, "audit_log")
	res, err := e.S.ReapplyTemplate(e.Ctx, tpl.ID, []store.Reapply{
		{FamilyID: 1, CustomerID: 11}, {FamilyID: 1, CustomerID: 12, ExpectedVersion: 1},
		{FamilyID: 2, CustomerID: 21, ExpectedVersion: 1}, {FamilyID: 2, CustomerID: 29},
	}, admin)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 || res[0].Err != nil || res[2].Err != nil {
		t.Fatalf("ReapplyTemplate = %+v", res)
	}
	wantErr(t, "stale version", res[1].Err, store.ErrStaleVersion)
	wantErr(t, "unknown member", res[3].Err, store.ErrNotFound)
	if p := res[0].Update.Policy; p.Version != 2 || !cmp.Equal(p.Rules, night.DefaultRules) || p.TemplateID != tpl.ID || res[0].Update.EventID == "" {
		t.Errorf("re-applied 11 = %+v", res[0].Update)
	}
	if got := e.Count(t, "outbox") - outbox; got != 2 {
		t.Errorf("outbox rows written = %d, want 2", got)
	}
	if got := e.Count(t, "audit_log") - audits; got != 2 {
		t.Errorf("audit rows written = %d, want 2", got)
	}
	es, err := e.S.AuditLog(e.Ctx, store.AuditFilter{Action: "policy.apply_template", Target: "member:21", Limit: 1})
	if err != nil || len(es) != 1 || !cmp.Equal(string(es[0].Before), `{"version":1,"rules":{"BLOCK:TIME:END":"0700","BLOCK:TIME:START":"2200"}}`) ||
		!cmp.Equal(string(es[0].After), `{"version":2,"rules":{"BLOCK:TIME:END":"0700","BLOCK:TIME:START":"2100"}}`) {
		t.Errorf("audit of the re-apply to 21 = %+v, %v", es, err)
	}
	if ids, _ := drifts(store.DriftFilter{TemplateID: tpl.ID}); !cmp.Equal(ids, []int64{12}) {
		t.Errorf("drift after re-apply = %v, want [12]", ids)
	}
	// A member whose policy is not a copy of the template is refused.
	e.Family(t, 3)
	res, err = e.S.ReapplyTemplate(e.Ctx, tpl.ID, []store.Reapply{{FamilyID: 3, CustomerID: 31}}, admin)
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, "member without the template", res[0].Err, store.ErrConflict)
	// Re-applying an up-to-date member writes nothing.
	res, err = e.S.ReapplyTemplate(e.Ctx, tpl.ID, []store.Reapply{{FamilyID: 1, CustomerID: 11}}, admin)
	if err != nil || res[0].Err != nil || !res[0].Update.Unchanged {
		t.Errorf("re-apply to an up-to-date member = %+v, %v", res, err)
	}

	_, _, err = e.S.TemplateDrift(e.Ctx, store.DriftFilter{TemplateID: 999})
	wantErr(t, "unknown template", err, store.ErrNotFound)
	_, err = e.S.ReapplyTemplate(e.Ctx, 999, nil, admin)
	wantErr(t, "unknown template", err, store.ErrNotFound)
}

func testDeadLetterReplay(t *testing.T, e *env) {
	ref := store.DeadLetterRef{Topic: "usage-events.DLT", Partition: 3, Offset: 17}
	var produced int
	produce := func(context.Context) error { produced++; return nil }

	boom := errors.New("broker down")
	_, _, err := e.S.ReplayDeadLetter(e.Ctx, ref, "usage-events", admin, func(context.Context) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("failing produce: err = %v", err)
	}
	if n := e.Count(t, "deadletter_replay"); n != 0 {
		t.Fatalf("a failed replay was recorded (%d rows)", n)
	}
	rp, first, err := e.S.ReplayDeadLetter(e.Ctx, ref, "usage-events", admin, produce)
	if err != nil || !first || produced != 1 {
		t.Fatalf("replay = %+v, %v, %v (produced %d)", rp, first, err, produced)
	}
	want := store.Replay{DeadLetterRef: ref, Origin: "usage-events", By: admin.ID, At: start.UTC()}
	if d := cmp.Diff(want, rp); d != "" {
		t.Errorf("replay (-want +got):\n%s", d)
	}
	e.Clock.Add(60_000_000_000)
	again, first, err := e.S.ReplayDeadLetter(e.Ctx, ref, "usage-events", admin, produce)
	if err != nil || first || produced != 1 {
		t.Errorf("second replay = %+v, %v, %v (produced %d), want the first one, not produced", again, first, err, produced)
	}
	if d := cmp.Diff(want, again); d != "" {
		t.Errorf("second replay (-want +got):\n%s", d)
	}
	es, err := e.S.AuditLog(e.Ctx, store.AuditFilter{Action: "deadletter.replay", Limit: 10})
	if err != nil || len(es) != 1 || es[0].Target != "dlt:usage-events.DLT/3/17" {
		t.Errorf("audit = %+v, %v", es, err)
	}

	other := store.DeadLetterRef{Topic: "usage-events.DLT", Partition: 3, Offset: 18}
	got, err := e.S.Replays(e.Ctx, []store.DeadLetterRef{ref, other, {Topic: "usage-events.DLT", Partition: 4, Offset: 17}})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[store.DeadLetterRef]store.Replay{ref: want}, got); d != "" {
		t.Errorf("Replays (-want +got):\n%s", d)
	}
	// Concurrent replays of one record: one produces.
	var mu sync.Mutex
	var produces, firsts int
	var wg sync.WaitGroup
	conc := store.DeadLetterRef{Topic: "usage-events.DLT", Partition: 0, Offset: 1}
	for range 4 {
		wg.Go(func() {
			_, first, err := e.S.ReplayDeadLetter(e.Ctx, conc, "usage-events", admin, func(context.Context) error {
				mu.Lock()
				produces++
				mu.Unlock()
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("concurrent replay: %v", err)
			}
			if first {
				firsts++
			}
		})
	}
	wg.Wait()
	if produces != 1 || firsts != 1 {
		t.Errorf("4 concurrent replays: %d produced, %d first; want 1 and 1", produces, firsts)
	}
	_, _, err = e.S.ReplayDeadLetter(e.Ctx, store.DeadLetterRef{Topic: "x", Offset: -1}, "y", admin, produce)
	wantErr(t, "negative offset", err, store.ErrInvalid)
}

// testSearchByPhone: a phone is found however its separators are typed.
func testSearchByPhone(t *testing.T, e *env) {
	e.Family(t, 100) // members 1001 (010-1001) and 1002 (010-1002)
	e.Family(t, 200)
	if _, err := e.S.AddMember(e.Ctx, store.NewMember{FamilyID: 200, Name: "intl", Phone: "+82 10 1234 5678", Role: policy.RoleMember}, store.System); err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string][]int64{
		"010-1001":         {100},
		"0101001":          {100},
		"010 1002":         {100},
		"+82 10 1234 5678": {200},
		"+821012345678":    {200},
		"+82-10-1234-5678": {200},
		"0102001":          {200},
		"010":              nil, // no partial phones
		// The country code or the trunk 0, whichever way it was stored (#24).
		"010-1234-5678": {200},
		"+82 10-1001":   {100},
		"+82 (10) 1001": {100},
		"010.1234.5678": {200},
	} {
		fs, err := e.S.SearchFamilies(e.Ctx, q, 10)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, f := range fs {
			got = append(got, f.ID)
		}
		if !cmp.Equal(want, got) {
			t.Errorf("SearchFamilies(%q) = %v, want %v", q, got, want)
		}
	}
	// A removed member's phone no longer finds the family.
	if err := e.S.RemoveMember(e.Ctx, 100, 1002, owner); err != nil {
		t.Fatal(err)
	}
	if fs, err := e.S.SearchFamilies(e.Ctx, "010-1002", 10); err != nil || len(fs) != 0 {
		t.Errorf("search by a removed member's phone = %v, %v", fs, err)
	}
}
