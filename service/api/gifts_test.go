package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/limit"
)

// giftLimits sets the monthly limits of members through the API.
func (f *apiFixture) giftLimits(owner string, limits map[int64]int64) {
	f.t.Helper()
	for id, limit := range limits {
		f.call(http.MethodPatch, fmt.Sprintf("/families/100/members/%d/policies", id), owner,
			map[string]any{"set": map[string]string{policy.KeyLimitMonthly: fmt.Sprint(limit)}}, http.StatusOK, nil)
	}
}

// TestGifts: "데이터 선물하기" over the API under the carriers' default
// rules — a child gives part of what it has left this month to a sibling;
// the engine judges both at once (the giver blocked past its lowered limit,
// the receiver allowed past its old one); the answer says what was given,
// what the giver has left and how many gifts it may still give, and
// nothing of the receiver's rules; more than what is left is 422 naming
// the rule, another member's data 403.
func TestGifts(t *testing.T) {
	f := newAPIFixture(t)
	owner, child := f.token(ownerA), f.token(childA)
	const sibling = 1008
	f.addMember(famA, sibling, policy.RoleMember)
	f.giftLimits(owner, map[int64]int64{ownerA: 4 * gib, childA: 2 * gib, sibling: 2 * gib})
	if r := f.use(famA, childA, gib); r.Decision != policy.Allowed {
		t.Fatalf("child's use: %+v", r)
	}
	var g GiftView
	raw := f.call(http.MethodPost, "/families/100/gifts", child, map[string]any{"toCustomerId": sibling, "amountBytes": 300 * mib}, http.StatusCreated, &g)
	if g.FromCustomerID != childA || g.ToCustomerID != sibling || g.AmountBytes != 300*mib || g.GiverLeftBytes != gib-300*mib ||
		g.GiftsLeft != 1 || g.Month != "202602" || g.ID == 0 {
		t.Fatalf("gift: %+v", g)
	}
	if strings.Contains(string(raw), "LIMIT:") || strings.Contains(string(raw), "rules") {
		t.Errorf("the answer shows policies: %s", raw)
	}
	if r := f.use(famA, childA, gib-300*mib+1); r.Decision != policy.BlockedLimitMonthly {
		t.Errorf("the giver past its lowered limit: %+v", r)
	}
	if r := f.use(famA, sibling, 2*gib+100*mib); r.Decision != policy.Allowed {
		t.Errorf("the receiver within its raised limit: %+v", r)
	}
	p := f.giftProblem(child, map[string]any{"toCustomerId": sibling, "amountBytes": 300 * mib}, http.StatusUnprocessableEntity, "body.amountBytes")
	if p.Rule != "FLOOR" || p.Limit != gib-300*mib-500*mib {
		t.Errorf("a gift below the floor: %+v", p)
	}
	f.problem(http.MethodPost, "/families/100/gifts", child, map[string]any{"fromCustomerId": sibling, "toCustomerId": childA, "amountBytes": 100 * mib}, http.StatusForbidden, "")
	f.problem(http.MethodPost, "/families/100/gifts", child, map[string]any{"toCustomerId": childA, "amountBytes": 100 * mib}, http.StatusUnprocessableEntity, "body.toCustomerId")
	// An owner gives its own data to the child.
	f.call(http.MethodPost, "/families/100/gifts", owner, map[string]any{"toCustomerId": childA, "amountBytes": 100 * mib}, http.StatusCreated, &g)
	if r := f.use(famA, childA, 100*mib); r.Decision != policy.Allowed || g.FromCustomerID != ownerA {
		t.Errorf("the child after the owner gave 100 MB (%+v): %+v", g, r)
	}
	f.problem(http.MethodPost, "/families/100/gifts", f.token(adminID), map[string]any{"toCustomerId": childA, "amountBytes": 100 * mib}, http.StatusUnprocessableEntity, "body.fromCustomerId")
}

// giftAnswer is a GiftProblem as a client reads it.
type giftAnswer struct {
	Status int    `json:"status"`
	Rule   string `json:"rule"`
	Limit  int64  `json:"limit"`
	Errors []struct {
		Location string `json:"location"`
	} `json:"errors"`
}

// giftProblem sends one gift request and checks its problem's status,
// content type and location.
func (f *apiFixture) giftProblem(token string, body map[string]any, want int, loc string) giftAnswer {
	f.t.Helper()
	resp, data := f.do(http.MethodPost, "/families/100/gifts", token, body)
	var a giftAnswer
	if err := json.Unmarshal(data, &a); err != nil {
		f.t.Fatal(err)
	}
	if resp.StatusCode != want || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") ||
		len(a.Errors) != 1 || a.Errors[0].Location != loc {
		f.t.Fatalf("gift %v: %d %s, want %d at %s", body, resp.StatusCode, data, want, loc)
	}
	return a
}

// TestGiftCarrierRules: each of the carriers' rules over the API, with
// its rule named and the bound it leaves — amounts in 100 MB steps up to
// 1 GB, a minor only receives (an owner marks it), what the giver keeps,
// half its plan a month, two gifts given and two received a month — and
// the catalog says them.
func TestGiftCarrierRules(t *testing.T) {
	f := newAPIFixture(t, func(c *Config) { c.GiftRate = limit.Rate{N: 100, Per: time.Minute} })
	owner, child := f.token(ownerA), f.token(childA)
	const sibling, cousin = 1008, 1009
	f.addMember(famA, sibling, policy.RoleMember)
	f.addMember(famA, cousin, policy.RoleMember)
	f.giftLimits(owner, map[int64]int64{ownerA: 4 * gib, childA: 4 * gib, victimA: gib, sibling: 3 * gib, cousin: gib})
	gift := func(from, to, bytes int64) map[string]any {
		return map[string]any{"fromCustomerId": from, "toCustomerId": to, "amountBytes": bytes}
	}
	check := func(name string, a giftAnswer, rule string, limit int64) {
		t.Helper()
		if a.Rule != rule || a.Limit != limit {
			t.Errorf("%s: rule %s limit %d, want %s %d", name, a.Rule, a.Limit, rule, limit)
		}
	}
	check("150 MB", f.giftProblem(owner, gift(ownerA, sibling, 150*mib), http.StatusUnprocessableEntity, "body.amountBytes"), "STEP", 100*mib)
	check("2000 MB", f.giftProblem(owner, gift(ownerA, sibling, 2000*mib), http.StatusUnprocessableEntity, "body.amountBytes"), "MAX", gib)

	// A minor only receives, whoever asks.
	var m MemberView
	f.call(http.MethodPut, fmt.Sprintf("/families/100/members/%d/minor", childA), owner, map[string]bool{"minor": true}, http.StatusOK, &m)
	if !m.Minor {
		t.Fatalf("marked a minor: %+v", m)
	}
	f.problem(http.MethodPut, fmt.Sprintf("/families/100/members/%d/minor", sibling), child, map[string]bool{"minor": true}, http.StatusForbidden, "")
	check("a minor gives", f.giftProblem(child, gift(childA, sibling, 100*mib), http.StatusConflict, "body.fromCustomerId"), "MINOR", 0)
	check("an owner gives a minor's", f.giftProblem(owner, gift(childA, sibling, 100*mib), http.StatusConflict, "body.fromCustomerId"), "MINOR", 0)
	f.call(http.MethodPost, "/families/100/gifts", owner, gift(ownerA, childA, 100*mib), http.StatusCreated, nil)

	// The giver keeps 500 MB of its 1 GB.
	check("past the floor", f.giftProblem(owner, gift(victimA, cousin, 600*mib), http.StatusUnprocessableEntity, "body.amountBytes"), "FLOOR", 524*mib)
	// At most half of a 3 GB plan a month, in two gifts.
	f.call(http.MethodPost, "/families/100/gifts", owner, gift(sibling, cousin, gib), http.StatusCreated, nil)
	check("past half the plan", f.giftProblem(owner, gift(sibling, victimA, 600*mib), http.StatusUnprocessableEntity, "body.amountBytes"), "SHARE", 512*mib)
	f.call(http.MethodPost, "/families/100/gifts", owner, gift(sibling, victimA, 500*mib), http.StatusCreated, nil)
	check("a third gift given", f.giftProblem(owner, gift(sibling, ownerA, 100*mib), http.StatusConflict, "body.fromCustomerId"), "GIVEN_PER_MONTH", 2)
	// Two gifts received a month.
	f.call(http.MethodPost, "/families/100/gifts", owner, gift(ownerA, cousin, 100*mib), http.StatusCreated, nil)
	check("a third gift received", f.giftProblem(owner, gift(victimA, cousin, 100*mib), http.StatusConflict, "body.toCustomerId"), "RECEIVED_PER_MONTH", 2)

	var cat Catalog
	f.call(http.MethodGet, "/catalog", owner, nil, http.StatusOK, &cat)
	if cat.GiftRules == nil || cat.GiftRules.StepBytes != 100*mib || cat.GiftRules.MaxBytes != gib || cat.GiftRules.GivenPerMonth != 2 || cat.GiftRules.MinorsGive {
		t.Errorf("the catalog's gift rules: %+v", cat.GiftRules)
	}
}

// TestGiftRate: one member's gift requests are counted, whatever their
// outcome; over the rate, 429 with Retry-After, and a minute later again.
func TestGiftRate(t *testing.T) {
	f := newAPIFixture(t, func(c *Config) { c.GiftRate = limit.Rate{N: 3, Per: time.Minute} })
	owner := f.token(ownerA)
	f.giftLimits(owner, map[int64]int64{ownerA: 4 * gib, childA: gib, victimA: gib})
	body := map[string]any{"toCustomerId": childA, "amountBytes": 100 * mib}
	f.call(http.MethodPost, "/families/100/gifts", owner, body, http.StatusCreated, nil)
	f.giftProblem(owner, map[string]any{"toCustomerId": childA, "amountBytes": 150 * mib}, http.StatusUnprocessableEntity, "body.amountBytes")
	f.call(http.MethodPost, "/families/100/gifts", owner, body, http.StatusCreated, nil)
	resp, data := f.do(http.MethodPost, "/families/100/gifts", owner, body)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a fourth gift request in a minute: %d %s", resp.StatusCode, data)
	}
	// Another member's requests count on their own.
	if resp, data := f.do(http.MethodPost, "/families/100/gifts", f.token(victimA), body); resp.StatusCode == http.StatusTooManyRequests {
		t.Errorf("another member's first gift request: %d %s", resp.StatusCode, data)
	}
	f.advance(time.Minute)
	f.giftProblem(owner, map[string]any{"toCustomerId": victimA, "amountBytes": 100 * mib}, http.StatusConflict, "body.fromCustomerId") // two given
}
