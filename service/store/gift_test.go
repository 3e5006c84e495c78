package store_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// testGifts: "데이터 선물하기" between three members with monthly limits —
// a property: whatever gifts are tried (any giver, receiver, amount, usage),
// a gift is taken iff it fits what the giver has left, the members' monthly
// limits in effect always sum to what they summed to before (data moves,
// none is made), no daily limit moves (a month's gift received once is not
// that much more every day: gifts back and forth once raised both daily
// limits), each taken gift is one data.gift audit row, and the refusals
// name their field and change nothing.
func testGifts(t *testing.T, e *env) {
	e.Family(t, 1) // owner 11, child 12
	own := store.Actor{ID: 11, Role: policy.RoleOwner}
	if _, err := e.S.AddMember(e.Ctx, store.NewMember{ID: 13, FamilyID: 1, Name: "m13", Phone: "010-13", Role: policy.RoleMember,
		Password: testPW}, store.System); err != nil {
		t.Fatal(err)
	}
	members := []int64{11, 12, 13}
	limits := map[int64]int64{11: 300, 12: 100, 13: 50}
	for _, id := range members {
		if _, err := e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 1, CustomerID: id,
			Set: map[string]string{policy.KeyLimitMonthly: strconv.FormatInt(limits[id], 10), policy.KeyLimitDaily: "40"}, By: own}); err != nil {
			t.Fatal(err)
		}
	}
	mo := policy.MomentOf(start, nil)
	limitsOf := func(id int64) (int64, int64) {
		t.Helper()
		p, err := e.S.GetPolicy(e.Ctx, 1, id)
		if err != nil {
			t.Fatal(err)
		}
		c, err := policy.ParseConstraints(p.Rules)
		if err != nil {
			t.Fatal(err)
		}
		d, m := c.EffectiveLimits(mo)
		return *d, *m
	}
	monthly := func(id int64) int64 { _, m := limitsOf(id); return m }
	sum := func() (n int64) {
		for _, id := range members {
			n += monthly(id)
		}
		return n
	}
	total := sum()
	audits := e.Count(t, "audit_log")
	gifts := 0
	rapid.Check(t, func(rt *rapid.T) {
		from := rapid.SampledFrom(members).Draw(rt, "from")
		to := rapid.SampledFrom(members).Draw(rt, "to")
		used := rapid.Int64Range(0, 400).Draw(rt, "used")
		bytes := rapid.Int64Range(0, 200).Draw(rt, "bytes")
		left := max(monthly(from)-used, 0)
		before := map[int64]int64{11: monthly(11), 12: monthly(12), 13: monthly(13)}
		res, err := e.S.GiftData(e.Ctx, store.Gift{FamilyID: 1, From: from, To: to, Bytes: bytes, GiverUsed: used, By: own})
		switch {
		case from == to || bytes < 1 || bytes > left:
			if err == nil {
				rt.Fatalf("gift of %d from %d (left %d) to %d taken", bytes, from, left, to)
			}
			wantErr(t, "refused gift", err, store.ErrInvalid)
			for id, m := range before {
				if monthly(id) != m {
					rt.Fatalf("a refused gift changed member %d's limit: %d → %d", id, m, monthly(id))
				}
			}
		case err != nil:
			rt.Fatalf("gift of %d from %d (left %d) to %d: %v", bytes, from, left, to, err)
		default:
			gifts++
			if res.Month != mo.Month || res.Left != left-bytes || monthly(from) != before[from]-bytes || monthly(to) != before[to]+bytes {
				rt.Fatalf("gift %d from %d to %d: %+v, limits %d → %d and %d → %d", bytes, from, to, res,
					before[from], monthly(from), before[to], monthly(to))
			}
		}
		if got := sum(); got != total {
			rt.Fatalf("the members' monthly limits sum to %d, want %d", got, total)
		}
		for _, id := range members {
			if d, _ := limitsOf(id); d != 40 {
				rt.Fatalf("member %d's daily limit moved to %d with gifts", id, d)
			}
		}
	})
	// One data.gift row per gift, beside the two policy.update rows.
	if got := e.Count(t, "audit_log") - audits; got != 3*gifts {
		t.Errorf("%d audit rows for %d gifts, want %d", got, gifts, 3*gifts)
	}
	// Without a monthly limit there is nothing to give; a receiver without
	// one (a daily limit only, as 13 now) may already use the pool.
	if _, err := e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 1, CustomerID: 13, Remove: []string{policy.KeyLimitMonthly}, By: own}); err != nil {
		t.Fatal(err)
	}
	_, err := e.S.GiftData(e.Ctx, store.Gift{FamilyID: 1, From: 13, To: 12, Bytes: 1, By: own})
	wantErr(t, "giver without a monthly limit", err, store.ErrConflict)
	_, err = e.S.GiftData(e.Ctx, store.Gift{FamilyID: 1, From: 12, To: 13, Bytes: 1, By: own})
	wantErr(t, "receiver without limits", err, store.ErrConflict)
	_, err = e.S.GiftData(e.Ctx, store.Gift{FamilyID: 1, From: 12, To: 99, Bytes: 1, By: own})
	wantErr(t, "receiver not a member", err, store.ErrNotFound)
}

// testFamilyNotes: care agents' notes — newest first with the author's
// name, audited, text cleaned and bounded, a family that does not exist 404.
func testFamilyNotes(t *testing.T, e *env) {
	e.Family(t, 1)
	agent, err := e.S.AddMember(e.Ctx, store.NewMember{Name: "상담원", Phone: "010-9999-0002", Role: policy.RoleAgent, Password: testPW}, store.System)
	if err != nil {
		t.Fatal(err)
	}
	by := store.Actor{ID: agent.ID, Role: policy.RoleAgent}
	n1, err := e.S.AddFamilyNote(e.Ctx, 1, "  요금제 문의\n다음 달 변경 원함 ", by)
	if err != nil || n1.Body != "요금제 문의\n다음 달 변경 원함" || n1.AuthorName != "상담원" || n1.FamilyID != 1 {
		t.Fatalf("AddFamilyNote = %+v, %v", n1, err)
	}
	n2, err := e.S.AddFamilyNote(e.Ctx, 1, "자녀 차단 해제 안내", by)
	if err != nil {
		t.Fatal(err)
	}
	notes, err := e.S.FamilyNotes(e.Ctx, 1, 0)
	if err != nil || len(notes) != 2 || notes[0].ID != n2.ID || notes[1].ID != n1.ID || notes[1].AuthorName != "상담원" {
		t.Errorf("FamilyNotes = %+v, %v", notes, err)
	}
	var audits int
	if err := e.DB.QueryRowContext(e.Ctx, `SELECT COUNT(*) FROM audit_log WHERE action = 'family-note.create' AND family_id = 1`).Scan(&audits); err != nil || audits != 2 {
		t.Errorf("%d family-note.create audit rows (%v), want 2", audits, err)
	}
	for _, bad := range []string{"", "   ", "a\u0000b", "x\u200by", strings.Repeat("가", store.MaxNoteLength+1)} {
		_, err := e.S.AddFamilyNote(e.Ctx, 1, bad, by)
		wantErr(t, fmt.Sprintf("note %.20q", bad), err, store.ErrInvalid)
	}
	_, err = e.S.AddFamilyNote(e.Ctx, 77, "x", by)
	wantErr(t, "note on a family that does not exist", err, store.ErrNotFound)
	_, err = e.S.FamilyNotes(e.Ctx, 77, 0)
	wantErr(t, "notes of a family that does not exist", err, store.ErrNotFound)

	// A family holds a bounded number of notes (the operator's): one more
	// is a conflict naming the family, and writes nothing.
	bounded, err := store.New(e.DB, store.WithMaxFamilyNotes(3), store.WithClock(e.Clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bounded.AddFamilyNote(e.Ctx, 1, "세 번째", by); err != nil {
		t.Fatal(err)
	}
	_, err = bounded.AddFamilyNote(e.Ctx, 1, "네 번째", by)
	if fe, ok := errors.AsType[*store.FieldError](err); !ok || fe.Field != "familyId" || !errors.Is(err, store.ErrConflict) {
		t.Errorf("a 4th note with a bound of 3: %v, want a conflict at familyId", err)
	}
	if notes, _ := bounded.FamilyNotes(e.Ctx, 1, 0); len(notes) != 3 {
		t.Errorf("%d notes after the refusal, want 3", len(notes))
	}
	if _, err := store.New(e.DB, store.WithMaxFamilyNotes(0)); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("a bound of 0: %v, want ErrInvalid", err)
	}
}

// testAppCatalog: the catalog is seeded with the defaults, edited,
// extended and shrunk by the back office, audited; a migration never
// undoes an edit or a removal; the judges' map follows.
func testAppCatalog(t *testing.T, e *env) {
	apps, err := e.S.Apps(e.Ctx)
	if err != nil || len(apps) != len(policy.DefaultApps()) || apps[0].ID != "com.youtube.app" || apps[0].Name != "유튜브" {
		t.Fatalf("seeded catalog: %d apps, first %+v, %v", len(apps), apps, err)
	}
	by := store.Actor{ID: 99, Role: policy.RoleAdmin}
	if _, err := e.S.PutApp(e.Ctx, store.CatalogApp{ID: "com.zepeto.global", Category: policy.CategorySocial, Name: " 제페토 ", NameEn: "ZEPETO", Icon: "🧍"}, by); err != nil {
		t.Fatal(err)
	}
	if _, err := e.S.PutApp(e.Ctx, store.CatalogApp{ID: "com.youtube.app", Category: policy.CategoryMusic, Name: "유튜브"}, by); err != nil {
		t.Fatal(err)
	}
	if err := e.S.DeleteApp(e.Ctx, "com.tiktok.app", by); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "delete twice", e.S.DeleteApp(e.Ctx, "com.tiktok.app", by), store.ErrNotFound)
	for _, bad := range []store.CatalogApp{
		{ID: "a b", Category: policy.CategoryGame, Name: "x"},
		{ID: "x.y", Category: "NEWS", Name: "x"},
		{ID: "x.y", Category: policy.CategoryGame, Name: " "},
		{ID: "x.y", Category: policy.CategoryGame, Name: "x\u0007"},
		{ID: "x.y", Category: policy.CategoryGame, Name: strings.Repeat("가", store.MaxAppName+1)},
	} {
		_, err := e.S.PutApp(e.Ctx, bad, by)
		wantErr(t, fmt.Sprintf("app %+v", bad), err, store.ErrInvalid)
	}
	// Migrating again (every start does) keeps the edits.
	if err := e.S.Migrate(e.Ctx); err != nil {
		t.Fatal(err)
	}
	c, err := store.AppCatalog(e.Ctx, e.DB)
	if err != nil {
		t.Fatal(err)
	}
	if c["com.zepeto.global"] != policy.CategorySocial || c["com.youtube.app"] != policy.CategoryMusic || c.Category("com.tiktok.app") != "" ||
		c["com.roblox.client"] != policy.CategoryGame || len(c) != len(policy.DefaultApps()) {
		t.Errorf("judges' catalog after the edits: %v", c)
	}
	apps, _ = e.S.Apps(e.Ctx)
	if last := apps[len(apps)-1]; last.ID != "com.zepeto.global" || last.Name != "제페토" {
		t.Errorf("an added app comes last: %+v", last)
	}
	// A removed app comes back with a put.
	if _, err := e.S.PutApp(e.Ctx, store.CatalogApp{ID: "com.tiktok.app", Category: policy.CategoryVideo, Name: "틱톡"}, by); err != nil {
		t.Fatal(err)
	}
	var audits int
	if err := e.DB.QueryRowContext(e.Ctx, `SELECT COUNT(*) FROM audit_log WHERE action LIKE 'catalog.app.%'`).Scan(&audits); err != nil || audits != 4 {
		t.Errorf("%d catalog audit rows (%v), want 4", audits, err)
	}
	// A table never seeded (no rows) is the defaults.
	if _, err := e.DB.ExecContext(e.Ctx, `DELETE FROM app_catalog`); err != nil {
		t.Fatal(err)
	}
	if c, err := store.AppCatalog(e.Ctx, e.DB); err != nil || len(c) != len(policy.DefaultApps()) || c["com.tiktok.app"] != policy.CategoryVideo {
		t.Errorf("an empty table: %v %v, want the defaults", c, err)
	}
}
