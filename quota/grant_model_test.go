package quota

import (
	"fmt"
	"slices"
	"time"

	"pgregory.net/rapid"

	"github.com/dabom/dpcs/policy"
)

// grantDriver draws grant steps for the model tests — creates, updates
// with use (within the reservation, to the byte, beyond it), releases,
// the sweep's expiries, updates of closed grants and retries — and checks
// on the model, after each step or batch, the invariants the engine
// promises (doc/architecture.md, "Grants"):
//
//   - used + reserved ≤ plan + top-ups for the family, and ≤ the limit
//     for each member period, at every step: a step or an event never
//     takes them past (or further past, after a plan or limit cut) it,
//     but by what a network reports beyond its grant (the overage, charged
//     all the same);
//   - a grant never exceeds its fair share (policy.FairShare);
//   - one member's session cannot starve the family: after the grants a
//     crowded-out step names (Reclaim) report again, its next step gets
//     its fair share (or what the request and its limits leave) — unless
//     it was final (a headroom below the minimum: the pool or a limit at
//     its end, the session ends).
type grantDriver struct {
	m       *model
	loc     *time.Location
	next    int
	sent    []GrantOp       // every step sent, for retries
	last    map[fcg]GrantOp // each grant's last step, for its next
	overage int64           // reported beyond grants, all steps
}

func newGrantDriver(m *model, loc *time.Location) *grantDriver {
	return &grantDriver{m: m, loc: loc, last: map[fcg]GrantOp{}}
}

var grantApps = append(append([]policy.App(nil), testApps...), policy.App{}) // the last: any traffic

// draw returns a new step: a create (customers are the ids to draw from),
// or a step of an open or closed grant.
func (d *grantDriver) draw(rt *rapid.T, families []int64, customers func(f int64) []int64, now time.Time) GrantOp {
	d.next++
	at := now.Add(time.Duration(rapid.IntRange(-20, 3).Draw(rt, "stepOffsetMin")) * time.Minute)
	request := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(1, 8*mb), rapid.Int64Range(0, 40*mb)).Draw(rt, "requested")
	var open, closed []fcg
	for k := range d.last {
		if _, ok := d.m.grants[k]; ok {
			open = append(open, k)
		} else {
			closed = append(closed, k)
		}
	}
	sortKeys := func(ks []fcg) {
		slices.SortFunc(ks, func(a, b fcg) int {
			if a.id != b.id {
				if a.id < b.id {
					return -1
				}
				return 1
			}
			return int(a.c - b.c)
		})
	}
	sortKeys(open)
	sortKeys(closed)
	kind := rapid.IntRange(0, 9).Draw(rt, "stepKind")
	switch {
	case kind <= 5 && len(open) > 0: // update, release or expire an open grant
		k := rapid.SampledFrom(open).Draw(rt, "open")
		prev := d.last[k]
		held := d.m.grants[k].bytes
		used := rapid.OneOf(rapid.Int64Range(0, held), rapid.Just(held), rapid.Int64Range(0, held+3*mb)).Draw(rt, "used")
		op := GrantOp{ID: fmt.Sprintf("stp_%d", d.next), GrantID: k.id, FamilyID: k.f, CustomerID: k.c,
			AppID: prev.AppID, Category: prev.Category, Used: used, Requested: request, At: at}
		switch rapid.IntRange(0, 5).Draw(rt, "end") {
		case 0:
			op.Release, op.Requested = true, 0
		case 1: // the sweep: a session that stopped reporting
			op.Release, op.Requested, op.Used = true, 0, 0
		}
		return op
	case kind == 6 && len(closed) > 0: // a step of a grant already closed
		k := rapid.SampledFrom(closed).Draw(rt, "closed")
		prev := d.last[k]
		return GrantOp{ID: fmt.Sprintf("stp_%d", d.next), GrantID: k.id, FamilyID: k.f, CustomerID: k.c,
			AppID: prev.AppID, Category: prev.Category, Used: rapid.Int64Range(0, 2*mb).Draw(rt, "usedClosed"),
			Requested: request, Release: rapid.Bool().Draw(rt, "releaseClosed"), At: at}
	default: // a new session
		f := rapid.SampledFrom(families).Draw(rt, "family")
		app := rapid.SampledFrom(grantApps).Draw(rt, "grantApp")
		var used int64
		if rapid.IntRange(0, 9).Draw(rt, "usedOnCreate") == 0 {
			used = rapid.Int64Range(1, mb).Draw(rt, "createUsed")
		}
		return GrantOp{ID: fmt.Sprintf("stp_%d", d.next), GrantID: fmt.Sprintf("ref%d/%d", d.next, rapid.IntRange(1, 3).Draw(rt, "rg")),
			FamilyID: f, CustomerID: rapid.SampledFrom(customers(f)).Draw(rt, "grantCustomer"),
			AppID: app.ID, Category: app.Category, Used: used, Requested: request, At: at}
	}
}

// event draws an event of a member holding a grant, sized at the edges
// reservations make: what the pool has free (total − used − reserved) and
// what the member's day and month leave beside its reservations, and one
// byte more.
func (d *grantDriver) event(rt *rapid.T, id string, now time.Time) (Event, bool) {
	var holders []fcg
	for k := range d.m.grants {
		holders = append(holders, k)
	}
	if len(holders) == 0 {
		return Event{}, false
	}
	slices.SortFunc(holders, func(a, b fcg) int {
		if a.id < b.id {
			return -1
		} else if a.id > b.id {
			return 1
		}
		return int(a.c - b.c)
	})
	k := rapid.SampledFrom(holders).Draw(rt, "holder")
	at := now.Add(time.Duration(rapid.IntRange(-20, 3).Draw(rt, "holderOffsetMin")) * time.Minute)
	mo := policy.MomentOf(at, d.loc)
	pool := d.m.pool(k.f, mo.Month)
	edges := []int64{max(pool.Total-pool.Used-d.m.reserved(k.f, mo.Month, fcg{}), 0)}
	daily, monthly := d.m.constraints(k.f, k.c).EffectiveLimits(mo)
	dr, mr := d.m.memberReserved(k.f, k.c, mo, fcg{})
	if daily != nil {
		edges = append(edges, max(*daily-d.m.daily[fcp{k.f, k.c, mo.Day}]-dr, 0))
	}
	if monthly != nil {
		edges = append(edges, max(*monthly-d.m.monthly[fcp{k.f, k.c, mo.Month}]-mr, 0))
	}
	b := rapid.SampledFrom(edges).Draw(rt, "edge") + rapid.Int64Range(0, 1).Draw(rt, "past")
	app := rapid.SampledFrom(testApps).Draw(rt, "holderApp")
	return Event{ID: id, FamilyID: k.f, CustomerID: k.c, Bytes: min(b, policy.MaxBytes), AppID: app.ID, Category: app.Category, At: at}, true
}

// retry draws a step already sent (a retry: the stored answer, nothing
// charged again), at another time at times.
func (d *grantDriver) retry(rt *rapid.T, now time.Time) (GrantOp, bool) {
	var recent []GrantOp
	for _, op := range d.sent {
		if j, ok := d.m.steps[fid{op.FamilyID, op.ID}]; ok && now.Sub(j.at) < 24*time.Hour {
			recent = append(recent, op)
		}
	}
	if len(recent) == 0 {
		return GrantOp{}, false
	}
	op := rapid.SampledFrom(recent).Draw(rt, "retried")
	if rapid.Bool().Draw(rt, "retryLater") {
		op.At = now
	}
	return op, true
}

// bounds is what the invariants compare: used + reserved per family month
// and per member day and month.
type bounds struct {
	pool   map[fp]int64
	member map[fcp]int64
}

// periods are the family months and member days a batch of steps and
// events touches.
type periods struct {
	months map[fp]bool
	days   map[fcp]bool // member days (YYYYMMDD); their months too
}

func newPeriods() periods { return periods{months: map[fp]bool{}, days: map[fcp]bool{}} }

func (p periods) add(f, c int64, t time.Time, loc *time.Location) {
	mo := policy.MomentOf(t, loc)
	p.months[fp{f, mo.Month}] = true
	p.days[fcp{f, c, mo.Day}] = true
}

func (d *grantDriver) bounds(p periods) bounds {
	b := bounds{pool: map[fp]int64{}, member: map[fcp]int64{}}
	for k := range p.months {
		b.pool[k] = d.m.used[k] + d.m.reserved(k.f, k.p, fcg{})
	}
	for k := range p.days {
		mo := policy.Moment{Day: k.p, Month: k.p[:6]}
		dr, mr := d.m.memberReserved(k.f, k.c, mo, fcg{})
		b.member[k] = d.m.daily[k] + dr
		b.member[fcp{k.f, k.c, mo.Month}] = d.m.monthly[fcp{k.f, k.c, mo.Month}] + mr
	}
	return b
}

// check compares bounds after a batch with before: nothing rose past its
// bound (or further past it) but by the batch's overage. A member's day is
// bound by that day's daily limit; its month by the largest monthly limit
// of the touched days (a day's extra raises both; each step or event is
// judged under its own day's).
func (d *grantDriver) check(rt *rapid.T, what string, p periods, before, after bounds, overage int64) {
	for k, n := range after.pool {
		total := d.m.pool(k.f, k.p).Total
		if n > max(total, before.pool[k])+overage {
			rt.Fatalf("%s: family %d used + reserved %d of %d in %s (before %d, overage %d)", what, k.f, n, total, k.p, before.pool[k], overage)
		}
	}
	monthLimit := map[fcp]*int64{}
	for k := range p.days {
		mo := policy.Moment{Day: k.p, Month: k.p[:6]}
		daily, monthly := d.m.constraints(k.f, k.c).EffectiveLimits(mo)
		if n := after.member[k]; daily != nil && n > max(*daily, before.member[k])+overage {
			rt.Fatalf("%s: customer %d used + reserved %d of a daily limit of %d on %s (before %d, overage %d)", what, k.c, n, *daily, k.p, before.member[k], overage)
		}
		mk := fcp{k.f, k.c, mo.Month}
		if cur, seen := monthLimit[mk]; !seen || (cur != nil && (monthly == nil || *monthly > *cur)) {
			monthLimit[mk] = monthly
		}
	}
	for k, lim := range monthLimit {
		if n := after.member[k]; lim != nil && n > max(*lim, before.member[k])+overage {
			rt.Fatalf("%s: customer %d used + reserved %d of a monthly limit of %d in %s (before %d, overage %d)", what, k.c, n, *lim, k.p, before.member[k], overage)
		}
	}
}

// stepped records a judged step and checks the fair share: what it granted
// is at most what the pool has left (used bytes only) divided among the
// family's open grants (open, after the step: this one included).
func (d *grantDriver) stepped(rt *rapid.T, op GrantOp, r GrantResult, open int64) {
	if r.Duplicate {
		return
	}
	d.sent = append(d.sent, op)
	d.last[fcg{op.FamilyID, op.CustomerID, op.GrantID}] = op
	d.overage += r.Overage
	if r.Granted > 0 {
		if r.Granted > r.Remaining/open {
			rt.Fatalf("step %s granted %d, more than the fair share %d / %d open grants", op.ID, r.Granted, r.Remaining, open)
		}
	}
}

// starvationRound is the protocol the Reclaim list asks for, checked: the
// step of a crowded-out grant names the grants holding more than their
// share; each reports again (nothing used); the crowded grant's next step
// then gets at least the smallest of its request, its fair share and what
// its member's limits leave. step judges a step on the engine and the
// model, compares them and returns the result.
func (d *grantDriver) starvationRound(rt *rapid.T, now time.Time, step func(GrantOp) GrantResult) {
	var open []fcg
	for k := range d.m.grants {
		if _, ok := d.last[k]; ok {
			open = append(open, k)
		}
	}
	if len(open) == 0 {
		rt.Skip("no open grant")
	}
	slices.SortFunc(open, func(a, b fcg) int {
		if a.id < b.id {
			return -1
		} else if a.id > b.id {
			return 1
		}
		return int(a.c - b.c)
	})
	k := rapid.SampledFrom(open).Draw(rt, "starved")
	again := func(k fcg) GrantResult {
		d.next++
		prev := d.last[k]
		op := GrantOp{ID: fmt.Sprintf("stp_%d", d.next), GrantID: k.id, FamilyID: k.f, CustomerID: k.c,
			AppID: prev.AppID, Category: prev.Category, Requested: prev.Requested, At: now}
		return step(op)
	}
	first := again(k)
	if len(first.Reclaim) == 0 || first.Final {
		return // not crowded out; or the member's last units, the session ends
	}
	for h := range d.m.grants {
		if h.f == k.f && h != k && slices.Contains(first.Reclaim, h.id) {
			if _, ok := d.last[h]; ok {
				again(h)
			}
		}
	}
	// What the crowded grant must get now: its request, its fair share,
	// what its member's limits leave beside its other grants.
	mo := policy.MomentOf(now, d.loc)
	m := d.m
	pool := m.pool(k.f, mo.Month)
	_, held := m.grants[k]
	open2 := m.openGrants(k.f)
	if !held {
		open2++
	}
	want := d.last[k].Requested
	if want <= 0 {
		want = m.sizes.Default
	}
	floor := min(want, m.sizes.Max, policy.FairShare(pool, open2))
	daily, monthly := m.constraints(k.f, k.c).EffectiveLimits(mo)
	dr, mr := m.memberReserved(k.f, k.c, mo, k)
	if daily != nil {
		floor = min(floor, *daily-m.daily[fcp{k.f, k.c, mo.Day}]-dr)
	}
	if monthly != nil {
		floor = min(floor, *monthly-m.monthly[fcp{k.f, k.c, mo.Month}]-mr)
	}
	// And what the app's and its category's daily budgets leave (#39).
	spent := m.spent[fcp{k.f, k.c, mo.Day}]
	prev := d.last[k]
	if left, _, ok := m.constraints(k.f, k.c).BudgetLeft(policy.Member{AppUsed: spent["a:"+prev.AppID],
		CategoryUsed: spent["c:"+string(prev.Category)]}, prev.AppID, prev.Category, mo); ok {
		floor = min(floor, left)
	}
	r := again(k)
	switch r.Decision {
	case policy.BlockedNotMember, policy.BlockedAccess, policy.BlockedApp, policy.BlockedTime:
		return // blocked by policy, not by others
	}
	if r.Granted < floor {
		rt.Fatalf("grant %s starved: after %v reported again it got %d, below min(request, fair share, limits) = %d",
			k.id, first.Reclaim, r.Granted, floor)
	}
}
