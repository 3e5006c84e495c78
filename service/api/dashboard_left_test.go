package api

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// A member's card says what it may still use today, the smallest of what its
// limits and the family pool leave (#38: "오늘 50.0 MB 남음" while the pool
// had 7 MB), and keeps an extra approved for today out of the month's
// figure (#38: a day-only extra raised the monthly limit shown).
func TestDashboardTodayLeft(t *testing.T) {
	f := newAPIFixture(t)
	owner := f.token(ownerA)
	today := policy.MomentOf(f.clock(), f.qs.Location()).Day
	card := func() DashboardMember {
		t.Helper()
		var d Dashboard
		f.call(http.MethodGet, "/families/100", owner, nil, http.StatusOK, &d)
		for _, m := range d.Members {
			if m.CustomerID == childA {
				return m
			}
		}
		t.Fatal("no child card")
		return DashboardMember{}
	}
	f.call(http.MethodPatch, "/families/100/members/1002/policies", owner, map[string]any{"set": map[string]string{
		"LIMIT:DATA:DAILY": fmt.Sprint(50 * mib), "LIMIT:DATA:MONTHLY": fmt.Sprint(gib), "LIMIT:DATA:EXTRA:" + today: fmt.Sprint(10 * mib)}}, http.StatusOK, nil)
	f.use(famA, childA, 5*mib)
	c := card()
	if c.DailyLimitBytes == nil || *c.DailyLimitBytes != 60*mib || c.MonthlyLimitBytes == nil || *c.MonthlyLimitBytes != gib ||
		c.TodayExtraBytes == nil || *c.TodayExtraBytes != 10*mib || c.TodayLeftBytes != 55*mib {
		t.Errorf("card: daily %v monthly %v extra %v today left %d; want 60 MiB, 1 GiB, 10 MiB, 55 MiB",
			deref(c.DailyLimitBytes), deref(c.MonthlyLimitBytes), deref(c.TodayExtraBytes), c.TodayLeftBytes)
	}
	// A limit above what the pool has: the pool is what is left.
	f.call(http.MethodPatch, "/families/100/members/1002/policies", owner, map[string]any{"set": map[string]string{
		"LIMIT:DATA:DAILY": fmt.Sprint(64 * gib), "LIMIT:DATA:MONTHLY": fmt.Sprint(64 * gib)}, "remove": []string{"LIMIT:DATA:EXTRA:" + today}},
		http.StatusOK, nil)
	var d Dashboard
	f.call(http.MethodGet, "/families/100", owner, nil, http.StatusOK, &d)
	if c := card(); c.TodayLeftBytes != d.Pool.RemainingBytes || c.TodayExtraBytes != nil {
		t.Errorf("today left %d (extra %v), want the pool's %d", c.TodayLeftBytes, c.TodayExtraBytes, d.Pool.RemainingBytes)
	}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// What the network's live charging sessions hold is shown beside what was
// used, for the pool and the member holding it (#37), and is not usage:
// the used figures do not move until a step reports it used.
func TestDashboardReserved(t *testing.T) {
	f := newAPIFixture(t)
	owner := f.token(ownerA)
	ctx := t.Context()
	rs, err := f.engine.Grant(ctx, []quota.GrantOp{{ID: "grs_dash_1", GrantID: "grt_dash", FamilyID: famA, CustomerID: childA,
		Requested: 10 * mib, At: f.clock()}})
	if err != nil || len(rs) != 1 || rs[0].Granted != 10*mib {
		t.Fatalf("grant: %+v %v", rs, err)
	}
	var d Dashboard
	f.call(http.MethodGet, "/families/100", owner, nil, http.StatusOK, &d)
	if d.Pool.ReservedBytes != 10*mib || d.Pool.UsedBytes != 0 {
		t.Errorf("pool: reserved %d used %d, want 10 MiB and 0", d.Pool.ReservedBytes, d.Pool.UsedBytes)
	}
	for _, m := range d.Members {
		want := int64(0)
		if m.CustomerID == childA {
			want = 10 * mib
		}
		if m.ReservedBytes != want || m.MonthlyUsedBytes != 0 {
			t.Errorf("member %d: reserved %d used %d, want %d and 0", m.CustomerID, m.ReservedBytes, m.MonthlyUsedBytes, want)
		}
	}
	if _, err := f.engine.Grant(ctx, []quota.GrantOp{{ID: "grs_dash_2", GrantID: "grt_dash", FamilyID: famA, CustomerID: childA,
		Used: 4 * mib, Release: true, At: f.clock()}}); err != nil {
		t.Fatal(err)
	}
	f.call(http.MethodGet, "/families/100", owner, nil, http.StatusOK, &d)
	if d.Pool.ReservedBytes != 0 || d.Pool.UsedBytes != 4*mib {
		t.Errorf("after the release: reserved %d used %d, want 0 and 4 MiB", d.Pool.ReservedBytes, d.Pool.UsedBytes)
	}
}
