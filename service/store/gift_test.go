package store_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// testGifts: "데이터 선물하기" between three members with monthly limits
// under the carriers' rules (small figures: 10-byte steps, at most 100 a
// gift, the giver keeps 20 and gives at most half its plan a month, 2 gifts
// given and 2 received a month, at most 150 received a month, minors only
// receive) — a property over random sequences of gifts (any giver,
// receiver, amount and usage), day extras granted and months turning: a
// gift is taken iff a model of every rule takes it, and a refusal names
// the model's first broken rule and changes nothing; the members' monthly
// limits — as they stand on any day of the month, a day's extra being the
// day's alone — always sum to the same (data moves, none is made: a day's
// extra given away made the giver's limit clamp at 0 the next day while
// the receiver kept it); no daily limit moves; each taken gift is one gifts
// row and one data.gift audit row, and the rows are the history.
func testGifts(t *testing.T, e *env) {
	e.Family(t, 1) // owner 11, child 12
	own := store.Actor{ID: 11, Role: policy.RoleOwner}
	if _, err := e.S.AddMember(e.Ctx, store.NewMember{ID: 13, FamilyID: 1, Name: "m13", Phone: "010-13", Role: policy.RoleMember,
		Password: testPW}, store.System); err != nil {
		t.Fatal(err)
	}
	if _, err := e.S.SetMinor(e.Ctx, 1, 12, true, own); err != nil {
		t.Fatal(err)
	}
	rules := store.GiftRules{GivenPerMonth: 2, ReceivedPerMonth: 2, Step: 10, Max: 100, GiverFloor: 20, MaxSharePercent: 50,
		ReceivedMax: 150, MinorsOnlyReceive: true}
	members := []int64{11, 12, 13}
	base := map[int64]int64{11: 300, 12: 100, 13: 200}
	minor := map[int64]bool{12: true}
	for _, id := range members {
		if _, err := e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 1, CustomerID: id,
			Set: map[string]string{policy.KeyLimitMonthly: strconv.FormatInt(base[id], 10), policy.KeyLimitDaily: "40"}, By: own}); err != nil {
			t.Fatal(err)
		}
	}
	constraints := func(id int64) policy.Constraints {
		t.Helper()
		p, err := e.S.GetPolicy(e.Ctx, 1, id)
		if err != nil {
			t.Fatal(err)
		}
		c, err := policy.ParseConstraints(p.Rules)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Limits as they stand today, and on another day of this month.
	limits := func(id int64) (daily, monthly, monthlyAnyDay int64) {
		c := constraints(id)
		mo := policy.MomentOf(e.Clock.Now(), seoul)
		d, m := c.EffectiveLimits(mo)
		mo.Day = "another day"
		_, any := c.EffectiveLimits(mo)
		return *d, *m, *any
	}
	sumAnyDay := func() (n int64) {
		for _, id := range members {
			_, _, m := limits(id)
			n += m
		}
		return n
	}
	total := sumAnyDay()
	rows := e.Count(t, "gifts")
	gifts := 0
	// The model: this month's gifts per member.
	type tally struct {
		givenN, recvN         int
		givenBytes, recvBytes int64
	}
	month := policy.MomentOf(e.Clock.Now(), seoul).Month
	model := map[int64]*tally{}
	for _, id := range members {
		model[id] = &tally{}
	}
	rapid.Check(t, func(rt *rapid.T) {
		mo := policy.MomentOf(e.Clock.Now(), seoul)
		switch rapid.IntRange(0, 9).Draw(rt, "action") {
		case 0: // a day's extra granted (an approved request)
			id := rapid.SampledFrom(members).Draw(rt, "extra-to")
			if _, err := e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 1, CustomerID: id,
				Set: map[string]string{policy.ExtraKey(mo.Day): strconv.FormatInt(rapid.Int64Range(1, 300).Draw(rt, "extra"), 10)}, By: own}); err != nil {
				rt.Fatal(err)
			}
		case 1: // a few days later; sometimes the next month
			e.Clock.Add(time.Duration(rapid.IntRange(1, 12).Draw(rt, "days")) * 24 * time.Hour)
			if m := policy.MomentOf(e.Clock.Now(), seoul).Month; m != month {
				month = m
				for _, id := range members {
					model[id] = &tally{}
				}
				total = sumAnyDay()
			}
		default:
			from := rapid.SampledFrom(members).Draw(rt, "from")
			to := rapid.SampledFrom(members).Draw(rt, "to")
			// Often little used, so that gifts are taken as often as refused.
			used := rapid.OneOf(rapid.Int64Range(0, 40), rapid.Int64Range(0, 400)).Draw(rt, "used")
			bytes := rapid.Int64Range(0, 24).Draw(rt, "steps") * 5
			c := constraints(from)
			left := max(*c.MonthlyLimit+c.Extras[mo.Month]+c.Gifts[mo.Month]-used, 0)
			g, r := model[from], model[to]
			want := ""
			switch {
			case from == to || bytes < 1:
				want = "invalid"
			case bytes%rules.Step != 0 && bytes != rules.Max:
				want = store.GiftRuleStep
			case bytes > rules.Max:
				want = store.GiftRuleMax
			case minor[from]:
				want = store.GiftRuleMinor
			case g.givenN >= rules.GivenPerMonth:
				want = store.GiftRuleGivenPerMonth
			case r.recvN >= rules.ReceivedPerMonth:
				want = store.GiftRuleReceivedPerMonth
			case r.recvBytes+bytes > rules.ReceivedMax:
				want = store.GiftRuleReceivedMax
			case bytes > left:
				want = store.GiftRuleLeft
			case left-bytes < rules.GiverFloor:
				want = store.GiftRuleFloor
			case g.givenBytes+bytes > base[from]*int64(rules.MaxSharePercent)/100:
				want = store.GiftRuleShare
			}
			before := map[int64]int64{}
			for _, id := range members {
				_, _, before[id] = limits(id)
			}
			res, err := e.S.GiftData(e.Ctx, store.Gift{FamilyID: 1, From: from, To: to, Bytes: bytes, GiverUsed: used, Rules: rules, By: own})
			refusal, _ := errors.AsType[*store.GiftRefusal](err)
			switch {
			case want == "" && err != nil:
				rt.Fatalf("gift of %d from %d (left %d, model %+v) to %d (model %+v): %v", bytes, from, left, *g, to, *r, err)
			case want == "":
				gifts++
				g.givenN, g.givenBytes, r.recvN, r.recvBytes = g.givenN+1, g.givenBytes+bytes, r.recvN+1, r.recvBytes+bytes
				_, _, mf := limits(from)
				_, _, mt := limits(to)
				if res.Month != mo.Month || res.Left != left-bytes || mf != before[from]-bytes || mt != before[to]+bytes ||
					res.GiftsLeft != rules.GivenPerMonth-g.givenN || res.Gift.Bytes != bytes || res.Gift.ID == 0 {
					rt.Fatalf("gift %d from %d to %d: %+v, limits %d → %d and %d → %d", bytes, from, to, res,
						before[from], mf, before[to], mt)
				}
			case err == nil:
				rt.Fatalf("gift of %d from %d (left %d, model %+v) to %d (model %+v) taken, want refused by %s", bytes, from, left, *g, to, *r, want)
			case want == "invalid":
				wantErr(t, "refused gift", err, store.ErrInvalid)
			case refusal == nil || refusal.Rule != want:
				rt.Fatalf("gift of %d from %d to %d refused with %v, want rule %s", bytes, from, to, err, want)
			default:
				for id, m := range before {
					if _, _, now := limits(id); now != m {
						rt.Fatalf("a refused gift changed member %d's limit: %d → %d", id, m, now)
					}
				}
			}
		}
		if got := sumAnyDay(); got != total {
			rt.Fatalf("the members' monthly limits sum to %d, want %d", got, total)
		}
		for _, id := range members {
			if d, _, _ := limits(id); d != 40+constraints(id).Extras[policy.MomentOf(e.Clock.Now(), seoul).Day] {
				rt.Fatalf("member %d's daily limit moved to %d with gifts", id, d)
			}
		}
	})
	// One gifts row and one data.gift audit row per gift, beside the two
	// policy.update rows; extras granted add policy.update rows of their own.
	if got := e.Count(t, "gifts") - rows; got != gifts {
		t.Errorf("%d gifts rows for %d gifts", got, gifts)
	}
	var giftAudits int
	if err := e.DB.QueryRowContext(e.Ctx, `SELECT COUNT(*) FROM audit_log WHERE action = 'data.gift'`).Scan(&giftAudits); err != nil || giftAudits != gifts {
		t.Errorf("%d data.gift audit rows (%v) for %d gifts", giftAudits, err, gifts)
	}
	// (Under -short rapid draws a fifth of its checks: too few to be sure
	// of a gift taken.)
	if gifts == 0 && !testing.Short() {
		t.Error("no gift was taken: the property tried none")
	}
	// The history: this month's gifts, newest first, a member's own.
	mo := policy.MomentOf(e.Clock.Now(), seoul).Month
	all, err := e.S.Gifts(e.Ctx, 1, mo, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range all {
		if g.Month != mo || g.FamilyID != 1 || (i > 0 && g.ID > all[i-1].ID) {
			t.Errorf("history row %d: %+v", i, g)
		}
	}
	mine, err := e.S.Gifts(e.Ctx, 1, mo, 13)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range mine {
		if g.From != 13 && g.To != 13 {
			t.Errorf("member 13's history holds %+v", g)
		}
	}

	// Without a monthly limit there is nothing to give; a receiver without
	// one (a daily limit only, as 13 now) may already use the pool.
	e.Clock.Add(31 * 24 * time.Hour) // a month with no gifts counted yet
	if _, err := e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: 1, CustomerID: 13, Remove: []string{policy.KeyLimitMonthly}, By: own}); err != nil {
		t.Fatal(err)
	}
	_, err = e.S.GiftData(e.Ctx, store.Gift{FamilyID: 1, From: 13, To: 11, Bytes: 10, Rules: rules, By: own})
	if r, ok := errors.AsType[*store.GiftRefusal](err); !ok || r.Rule != store.GiftRuleGiverNoLimit || !errors.Is(err, store.ErrConflict) {
		t.Errorf("giver without a monthly limit: %v", err)
	}
	_, err = e.S.GiftData(e.Ctx, store.Gift{FamilyID: 1, From: 11, To: 13, Bytes: 10, Rules: rules, By: own})
	if r, ok := errors.AsType[*store.GiftRefusal](err); !ok || r.Rule != store.GiftRuleReceiverNoLimit || !errors.Is(err, store.ErrConflict) {
		t.Errorf("receiver without a monthly limit: %v", err)
	}
	_, err = e.S.GiftData(e.Ctx, store.Gift{FamilyID: 1, From: 11, To: 99, Bytes: 10, Rules: rules, By: own})
	wantErr(t, "receiver not a member", err, store.ErrNotFound)
	for _, bad := range []store.GiftRules{{Step: -1}, {GivenPerMonth: -1}, {MaxSharePercent: 101}, {Step: 10, Max: 5}} {
		if err := bad.Check(); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("rules %+v: %v, want ErrInvalid", bad, err)
		}
	}
	if err := store.DefaultGiftRules().Check(); err != nil {
		t.Errorf("the carriers' rules: %v", err)
	}
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
