package quota

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/dabom/dpcs/policy"
)

// model is the in-memory oracle: the engine's state and semantics written with
// plain maps and policy.Evaluate / policy.Status. The property test drives it
// and the Lua engine with the same operations and demands equal answers.
type model struct {
	loc        *time.Location
	defaultThr policy.Thresholds

	plan    map[int64]int64
	thr     map[int64]policy.Thresholds
	topup   map[fp]int64
	used    map[fp]int64
	fired   map[fp]map[int]bool
	arms    map[fp]map[int]int
	members map[fc]bool
	cons    map[fc]map[string]string
	ver     map[fc]int64
	daily   map[fcp]int64
	monthly map[fcp]int64
	// spent is the day's counted use of budgeted apps and categories,
	// keyed by day and "a:<app>" / "c:<category>" (lua/apply.lua's budget
	// hash): allowed events of an app or category that had a budget then.
	spent   map[fcp]map[string]int64
	results map[fid]judged
	// grants are the open grants' reservations; steps the grant steps'
	// results (ids are one event or one step: the tests keep them apart).
	grants map[fcg]reservation
	steps  map[fid]judgedStep
	sizes  GrantSizes
}

// reservation is an open grant's: bytes held and the time (whole seconds)
// of the step that made it, whose day and month it is of.
type reservation struct {
	bytes int64
	at    time.Time
	step  string
}

type judgedStep struct {
	r  GrantResult
	at time.Time
}

// judged is a remembered result and when (engine clock) it was first judged.
type judged struct {
	r  Result
	at time.Time
}

type (
	fp struct {
		f int64
		p string
	}
	fc  struct{ f, c int64 }
	fcp struct {
		f, c int64
		p    string
	}
	fid struct {
		f  int64
		id string
	}
	fcg struct {
		f, c int64
		id   string
	}
)

func newModel(loc *time.Location) *model {
	return &model{
		loc: loc, defaultThr: policy.DefaultThresholds(),
		plan: map[int64]int64{}, thr: map[int64]policy.Thresholds{},
		topup: map[fp]int64{}, used: map[fp]int64{}, fired: map[fp]map[int]bool{}, arms: map[fp]map[int]int{},
		members: map[fc]bool{}, cons: map[fc]map[string]string{}, ver: map[fc]int64{},
		daily: map[fcp]int64{}, monthly: map[fcp]int64{}, spent: map[fcp]map[string]int64{}, results: map[fid]judged{},
		grants: map[fcg]reservation{}, steps: map[fid]judgedStep{}, sizes: testGrantSizes,
	}
}

// testGrantSizes are the grant sizes of the model tests, in the scale of
// their plans (0–60 MB).
var testGrantSizes = GrantSizes{Default: 5 * mb, Max: 20 * mb, Min: 1 * mb}

// reserved is what the family's grants hold of month's pool, without
// skip's.
func (m *model) reserved(f int64, month string, skip fcg) int64 {
	var n int64
	for k, g := range m.grants {
		if k.f == f && k != skip && policy.MomentOf(g.at, m.loc).Month == month {
			n += g.bytes
		}
	}
	return n
}

// memberReserved is what the member's grants hold of its day and month,
// without skip's.
func (m *model) memberReserved(f, c int64, mo policy.Moment, skip fcg) (day, month int64) {
	for k, g := range m.grants {
		if k.f != f || k.c != c || k == skip {
			continue
		}
		gm := policy.MomentOf(g.at, m.loc)
		if gm.Month == mo.Month {
			month += g.bytes
			if gm.Day == mo.Day {
				day += g.bytes
			}
		}
	}
	return day, month
}

// openGrants is how many grants of the family are open.
func (m *model) openGrants(f int64) int64 {
	var n int64
	for k := range m.grants {
		if k.f == f {
			n++
		}
	}
	return n
}

// acceptedMonths are the months an engine whose clock reads now and whose
// dedupe window is window still holds (Engine.AcceptedMonths).
func acceptedMonths(now time.Time, window time.Duration, loc *time.Location) []string {
	var out []string
	for t := now.Add(-window); ; t = t.AddDate(0, 0, 1) {
		if t.After(now.Add(window)) {
			t = now.Add(window)
		}
		if mo := policy.MomentOf(t, loc).Month; !slices.Contains(out, mo) {
			out = append(out, mo)
		}
		if !t.Before(now.Add(window)) {
			return out
		}
	}
}

// crossings judges the thresholds of month's pool, as apply.lua and
// grant.lua do after a change, and records them in r's Crossed and Arms.
func (m *model) crossings(f int64, month string) (crossed, arms []int) {
	pool := m.pool(f, month)
	if pool.Total <= 0 {
		return nil, nil
	}
	k := fp{f, month}
	if m.fired[k] == nil {
		m.fired[k] = map[int]bool{}
	}
	for _, p := range m.thresholds(f) {
		if policy.Reached(p, pool.Total, pool.Remaining()) && !m.fired[k][p] {
			m.fired[k][p] = true
			if m.arms[k] == nil {
				m.arms[k] = map[int]int{}
			}
			m.arms[k][p]++
			crossed, arms = append(crossed, p), append(arms, m.arms[k][p])
		}
	}
	return crossed, arms
}

// grant judges a grant step arriving at now (see GrantResult and
// lua/grant.lua): the reservation returned and the use charged to its
// period, crossings there, a new reservation sized by policy.SizeGrant and
// valid until policy.NextChange.
func (m *model) grant(op GrantOp, now time.Time) GrantResult {
	if j, ok := m.steps[fid{op.FamilyID, op.ID}]; ok && now.Sub(j.at) < 24*time.Hour {
		r := j.r
		r.Duplicate = true
		return r
	}
	f, c := op.FamilyID, op.CustomerID
	at := time.Unix(op.At.Unix(), 0).In(m.loc)
	mo := policy.MomentOf(at, m.loc)
	key := fcg{f, c, op.GrantID}
	held, open := m.grants[key]
	member := m.members[fc{f, c}]
	// The charged period: the reservation's when the engine holds its
	// month (the step's, or the previous while accepted), else the step's.
	chargedAt, back := at, false
	if open {
		hm := policy.MomentOf(held.at, m.loc).Month
		first := time.Date(at.Year(), at.Month(), 1, 12, 0, 0, 0, m.loc)
		prev := policy.MomentOf(first.AddDate(0, -1, 0), m.loc).Month
		next := policy.MomentOf(first.AddDate(0, 1, 0), m.loc).Month
		if hm == mo.Month || ((hm == prev || hm == next) && slices.Contains(acceptedMonths(now, 24*time.Hour, m.loc), hm)) {
			chargedAt, back = held.at, true
		}
	}
	var r GrantResult
	if open || member {
		r.Charged = op.Used
	}
	r.ChargedAt, r.Overage, r.Previous = chargedAt, r.Charged, held.step
	if back {
		r.Overage = max(r.Charged-held.bytes, 0)
	}
	delete(m.grants, key)
	cm := policy.MomentOf(chargedAt, m.loc)
	if r.Charged > 0 {
		m.used[fp{f, cm.Month}] += r.Charged
		m.daily[fcp{f, c, cm.Day}] += r.Charged
		m.monthly[fcp{f, c, cm.Month}] += r.Charged
	}
	if member || r.Charged > 0 {
		r.Crossed, r.Arms = m.crossings(f, cm.Month)
	}
	// A step's use of a budgeted app or category counts on the step's day.
	// A customer the family does not have is judged on no constraints,
	// whatever SetConstraints wrote for it (they apply once it is added).
	var cons policy.Constraints
	if member {
		cons = m.constraints(f, c)
	}
	if byApp, byCat := cons.Budgeted(op.AppID, op.Category); r.Charged > 0 && (byApp || byCat) {
		dk := fcp{f, c, mo.Day}
		if m.spent[dk] == nil {
			m.spent[dk] = map[string]int64{}
		}
		if byApp {
			m.spent[dk]["a:"+op.AppID] += r.Charged
		}
		if byCat {
			m.spent[dk]["c:"+string(op.Category)] += r.Charged
		}
	}
	pool := m.pool(f, mo.Month)
	pool.Reserved = m.reserved(f, mo.Month, key)
	if op.Release {
		r.Decision = policy.Allowed
	} else {
		dr, mr := m.memberReserved(f, c, mo, key)
		spent := m.spent[fcp{f, c, mo.Day}]
		want := op.Requested
		if want <= 0 {
			want = m.sizes.Default
		}
		open := m.openGrants(f) + 1
		g := policy.SizeGrant(cons,
			policy.Member{Member: member, DailyUsed: m.daily[fcp{f, c, mo.Day}], MonthlyUsed: m.monthly[fcp{f, c, mo.Month}],
				DailyReserved: dr, MonthlyReserved: mr, AppUsed: spent["a:"+op.AppID], CategoryUsed: spent["c:"+string(op.Category)]},
			pool, policy.GrantRequest{AppID: op.AppID, Category: op.Category, At: mo, Want: min(want, m.sizes.Max),
				Minimum: m.sizes.Min, Grants: open})
		r.Decision, r.Rule, r.Granted, r.Final, r.ThrottleKbps = g.Decision, g.Rule, g.Granted, g.Final, g.ThrottleKbps
		if g.Crowded {
			share := policy.FairShare(pool, open)
			for k, h := range m.grants {
				if k.f == f && h.bytes > share && policy.MomentOf(h.at, m.loc).Month == mo.Month {
					r.Reclaim = append(r.Reclaim, k.id)
				}
			}
			slices.Sort(r.Reclaim)
			r.Reclaim = slices.Compact(r.Reclaim)
		}
		r.ValidUntil = policy.NextChange(cons, op.AppID, op.Category, op.At, m.loc)
		if g.Granted > 0 || !g.Final {
			m.grants[key] = reservation{bytes: g.Granted, at: at, step: op.ID}
		}
	}
	pool = m.pool(f, mo.Month)
	r.Remaining, r.Total, r.Reserved = pool.Remaining(), pool.Total, m.reserved(f, mo.Month, fcg{})
	r.DailyUsed, r.MonthlyUsed = m.daily[fcp{f, c, mo.Day}], m.monthly[fcp{f, c, mo.Month}]
	m.steps[fid{f, op.ID}] = judgedStep{r, now}
	return r
}

func (m *model) thresholds(f int64) policy.Thresholds {
	if t, ok := m.thr[f]; ok {
		return t
	}
	return m.defaultThr
}

func (m *model) pool(f int64, month string) policy.Pool {
	_, ok := m.plan[f]
	// The engine bounds a month's total (a plan raised after an old month's
	// top-ups can take it over) at policy.MaxBytes.
	total := min(m.plan[f]+m.topup[fp{f, month}], policy.MaxBytes)
	return policy.Pool{Provisioned: ok, Total: total, Used: m.used[fp{f, month}]}
}

func (m *model) constraints(f, c int64) policy.Constraints {
	pc, err := policy.ParseConstraints(m.cons[fc{f, c}])
	if err != nil {
		panic(err) // the model only ever stores canonical maps
	}
	return pc
}

// apply judges ev arriving at now. An id is remembered by id alone, whatever
// the event's timestamp, for the engine's dedupe window (24 h) after it was
// first judged; the tests replay only within it.
func (m *model) apply(ev Event, now time.Time) Result {
	if j, ok := m.results[fid{ev.FamilyID, ev.ID}]; ok && now.Sub(j.at) < 24*time.Hour {
		r := j.r
		r.Duplicate = true
		return r
	}
	f, c := ev.FamilyID, ev.CustomerID
	mo := policy.MomentOf(ev.At, m.loc)
	dk, mk := fcp{f, c, mo.Day}, fcp{f, c, mo.Month}
	pool := m.pool(f, mo.Month)
	pool.Reserved = m.reserved(f, mo.Month, fcg{})
	dr, mr := m.memberReserved(f, c, mo, fcg{})
	cons := m.constraints(f, c)
	spent := m.spent[dk]
	res := policy.Evaluate(cons,
		policy.Member{Member: m.members[fc{f, c}], DailyUsed: m.daily[dk], MonthlyUsed: m.monthly[mk], DailyReserved: dr, MonthlyReserved: mr,
			AppUsed: spent["a:"+ev.AppID], CategoryUsed: spent["c:"+string(ev.Category)]},
		pool, policy.Request{Bytes: ev.Bytes, AppID: ev.AppID, Category: ev.Category, At: mo})
	r := Result{Decision: res.Decision, Rule: res.Rule, ThrottleKbps: res.ThrottleKbps}
	if res.Decision == policy.Allowed {
		m.used[fp{f, mo.Month}] += res.Deduct
		m.daily[dk] += res.Deduct
		m.monthly[mk] += res.Deduct
		pool = m.pool(f, mo.Month)
		byApp, byCat := cons.Budgeted(ev.AppID, ev.Category)
		if (byApp || byCat) && m.spent[dk] == nil {
			m.spent[dk] = map[string]int64{}
		}
		if byApp {
			m.spent[dk]["a:"+ev.AppID] += res.Deduct
		}
		if byCat {
			m.spent[dk]["c:"+string(ev.Category)] += res.Deduct
		}
	}
	// Crossings are judged on every event of a member, allowed or blocked.
	if res.Decision != policy.BlockedNotMember {
		r.Crossed, r.Arms = m.crossings(f, mo.Month)
	}
	r.Remaining, r.Total = pool.Remaining(), pool.Total
	r.DailyUsed, r.MonthlyUsed = m.daily[dk], m.monthly[mk]
	m.results[fid{f, ev.ID}] = judged{r, now}
	return r
}

func (m *model) rearm(f int64, month string) PoolState {
	pool := m.pool(f, month)
	ps := PoolState{Remaining: pool.Remaining(), Total: pool.Total, Month: month}
	for p := range m.fired[fp{f, month}] {
		if !policy.Reached(p, pool.Total, pool.Remaining()) {
			delete(m.fired[fp{f, month}], p)
			if ps.Rearmed == nil {
				ps.Rearmed = map[int]int{}
			}
			ps.Rearmed[p] = max(m.arms[fp{f, month}][p], 1)
		}
	}
	return ps
}

func (m *model) setConstraints(f, c, v int64, cons map[string]string) bool {
	if v <= m.ver[fc{f, c}] {
		return false
	}
	m.ver[fc{f, c}] = v
	m.cons[fc{f, c}] = cons
	return true
}

func (m *model) family(f int64, now time.Time) FamilyStatus {
	mo := policy.MomentOf(now, m.loc)
	pool := m.pool(f, mo.Month)
	fs := FamilyStatus{
		FamilyID: f, Month: mo.Month, Provisioned: pool.Provisioned, Plan: m.plan[f],
		TopUps: m.topup[fp{f, mo.Month}], Used: pool.Used, Remaining: pool.Remaining(), Total: pool.Total,
		Thresholds: m.thresholds(f), Reserved: m.reserved(f, mo.Month, fcg{}),
	}
	for k, g := range m.grants {
		if k.f == f {
			fs.Grants = append(fs.Grants, GrantState{GrantID: k.id, CustomerID: k.c, Reserved: g.bytes, At: g.at, Step: g.step})
		}
	}
	slices.SortFunc(fs.Grants, func(a, b GrantState) int {
		return cmp.Or(cmp.Compare(a.CustomerID, b.CustomerID), cmp.Compare(a.GrantID, b.GrantID))
	})
	for p, on := range m.fired[fp{f, mo.Month}] {
		if on {
			fs.Fired = append(fs.Fired, p)
		}
	}
	slices.SortFunc(fs.Fired, func(a, b int) int { return cmp.Compare(b, a) })
	var ids []int64
	for k, on := range m.members {
		if k.f == f && on {
			ids = append(ids, k.c)
		}
	}
	slices.Sort(ids)
	for _, c := range ids {
		fs.Members = append(fs.Members, m.status(f, c, mo))
	}
	return fs
}

func (m *model) status(f, c int64, mo policy.Moment) MemberStatus {
	s := MemberStatus{
		CustomerID: c, Member: m.members[fc{f, c}], Constraints: m.cons[fc{f, c}], Version: m.ver[fc{f, c}],
		DailyUsed: m.daily[fcp{f, c, mo.Day}], MonthlyUsed: m.monthly[fcp{f, c, mo.Month}],
	}
	s.DailyReserved, s.MonthlyReserved = m.memberReserved(f, c, mo, fcg{})
	if s.Constraints == nil {
		s.Constraints = map[string]string{}
	}
	res := policy.Status(m.constraints(f, c),
		policy.Member{Member: s.Member, DailyUsed: s.DailyUsed, MonthlyUsed: s.MonthlyUsed}, m.pool(f, mo.Month), mo)
	s.Decision, s.Rule, s.ThrottleKbps = res.Decision, res.Rule, res.ThrottleKbps
	return s
}

// Generators of realistic and adversarial inputs.

var testApps = []policy.App{
	{ID: "com.youtube.app", Category: policy.CategoryVideo},
	{ID: "com.kakao.talk", Category: policy.CategoryMessaging},
	{ID: "com.roblox.client", Category: policy.CategoryGame},
	{ID: "com.iloen.melon", Category: policy.CategoryMusic},
	{ID: "unknown.app", Category: ""},
}

const mb = 1 << 20

func genHHMM(t *rapid.T, label string) int {
	// Bias towards the boundaries that matter: 22:00, 07:00, midnight.
	return rapid.OneOf(
		rapid.SampledFrom([]int{0, 7 * 60, 22 * 60, 21*60 + 59, 6*60 + 59, 23*60 + 59}),
		rapid.IntRange(0, 1439),
	).Draw(t, label)
}

func genConstraints(t *rapid.T) map[string]string {
	var c policy.Constraints
	c.BlockAccess = rapid.IntRange(0, 9).Draw(t, "blockAccess") == 0
	for _, a := range testApps[:4] {
		if rapid.IntRange(0, 5).Draw(t, "blockApp") == 0 {
			c.BlockedApps = append(c.BlockedApps, a.ID)
		}
	}
	for _, cat := range policy.Categories() {
		if rapid.IntRange(0, 9).Draw(t, "blockCat") == 0 {
			c.BlockedCategories = append(c.BlockedCategories, cat)
		}
	}
	if rapid.IntRange(0, 3).Draw(t, "night") == 0 {
		c.Night = &policy.Window{Start: genHHMM(t, "nightStart"), End: genHHMM(t, "nightEnd")}
	}
	for _, name := range []string{"school", "weekend", "dinner", "밤"} {
		if rapid.IntRange(0, 4).Draw(t, "window") == 0 {
			if c.Windows == nil {
				c.Windows = map[string]policy.Window{}
			}
			c.Windows[name] = policy.Window{
				Start: genHHMM(t, "wStart"), End: genHHMM(t, "wEnd"),
				Days: policy.Days(rapid.IntRange(0, 127).Draw(t, "days") << 1),
			}
		}
	}
	if rapid.Bool().Draw(t, "hasDaily") {
		c.DailyLimit = policy.Limit(rapid.Int64Range(0, 20*mb).Draw(t, "daily"))
	}
	if rapid.Bool().Draw(t, "hasMonthly") {
		c.MonthlyLimit = policy.Limit(rapid.Int64Range(0, 60*mb).Draw(t, "monthly"))
	}
	if rapid.IntRange(0, 3).Draw(t, "throttle") == 0 {
		c.ThrottleKbps = rapid.Int64Range(1, 100_000).Draw(t, "kbps")
	}
	// Always allowed during downtime: apps (the unknown one too) and categories.
	for _, a := range testApps {
		if rapid.IntRange(0, 5).Draw(t, "allowApp") == 0 {
			c.AllowedApps = append(c.AllowedApps, a.ID)
		}
	}
	for _, cat := range policy.Categories() {
		if rapid.IntRange(0, 7).Draw(t, "allowCat") == 0 {
			c.AllowedCategories = append(c.AllowedCategories, cat)
		}
	}
	return c.Map()
}

// genBudgets adds daily data budgets (LIMIT:DATA:APP:<app>,
// LIMIT:DATA:CATEGORY:<c>) to cons in the scale of the events (0–3 MB
// mostly), so the engine meets budgets left, used up and just reached.
func genBudgets(t *rapid.T, cons map[string]string) map[string]string {
	for _, a := range testApps {
		if rapid.IntRange(0, 3).Draw(t, "budgetApp") == 0 {
			cons[policy.AppBudgetKey(a.ID)] = fmt.Sprint(rapid.Int64Range(0, 8*mb).Draw(t, "appBudget"))
		}
	}
	for _, cat := range []policy.Category{policy.CategoryVideo, policy.CategoryMessaging, policy.CategoryGame} {
		if rapid.IntRange(0, 3).Draw(t, "budgetCat") == 0 {
			cons[policy.CategoryBudgetKey(cat)] = fmt.Sprint(rapid.Int64Range(0, 12*mb).Draw(t, "catBudget"))
		}
	}
	return cons
}

// genExceptions adds exceptions ("30분 더": EXCEPT:TIME, EXCEPT:APP:<app>)
// ending around now — within the events' ±3 h and at the minutes either
// side of an event's — so the engine meets exceptions in effect, just
// ended and ended long ago, across days and months.
func genExceptions(t *rapid.T, cons map[string]string, now time.Time, loc *time.Location) map[string]string {
	end := func(label string) string {
		off := rapid.OneOf(rapid.IntRange(-300, 300), rapid.SampledFrom([]int{-1, 0, 1, 30})).Draw(t, label)
		return policy.MomentOf(now.Add(time.Duration(off)*time.Minute), loc).Stamp()
	}
	if rapid.IntRange(0, 2).Draw(t, "exceptTime") == 0 {
		cons[policy.KeyExceptTime] = end("exceptTimeEnd")
	}
	for _, a := range testApps {
		if rapid.IntRange(0, 4).Draw(t, "exceptApp") == 0 {
			cons[policy.KeyExceptAppPrefix+a.ID] = end("exceptAppEnd")
		}
	}
	return cons
}

// genExtras adds period-scoped extra allowances (LIMIT:DATA:EXTRA:<period>)
// and gifts (LIMIT:DATA:GIFT:<month>)
// to cons for periods around now: yesterday, today, tomorrow and the previous,
// current and next month, so the engine's clock, stepping over days and months,
// meets extras that are current, expired and not yet in effect.
func genExtras(t *rapid.T, cons map[string]string, now time.Time, loc *time.Location) map[string]string {
	lt := now.In(loc)
	first := time.Date(lt.Year(), lt.Month(), 1, 12, 0, 0, 0, loc)
	periods := []string{
		lt.AddDate(0, 0, -1).Format("20060102"), lt.Format("20060102"), lt.AddDate(0, 0, 1).Format("20060102"),
		first.AddDate(0, -1, 0).Format("200601"), first.Format("200601"), first.AddDate(0, 1, 0).Format("200601"),
	}
	for _, p := range periods {
		if rapid.IntRange(0, 2).Draw(t, "extra") == 0 {
			cons[policy.ExtraKey(p)] = fmt.Sprint(rapid.Int64Range(0, 30*mb).Draw(t, "extraBytes"))
		}
	}
	// Gifts ("데이터 선물하기"): months around now, received or given,
	// given more than the limit at times (the limit then stays at 0).
	for _, p := range periods[3:] {
		if rapid.IntRange(0, 2).Draw(t, "gift") == 0 {
			cons[policy.KeyLimitGiftPrefix+p] = fmt.Sprint(rapid.Int64Range(-70*mb, 30*mb).Draw(t, "giftBytes"))
		}
	}
	return cons
}

var checkSeq atomic.Int64

// checkEngineMatchesModel is the differential property: random operation
// sequences against the Lua engine on rdb and against the model must give the
// same result for every operation and the same state after every step.
func checkEngineMatchesModel(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	loc, _ := policy.LoadZone(policy.DefaultZone)
	rapid.Check(t, func(rt *rapid.T) {
		// Start a few hours before a month's end so days and months roll over.
		base := time.Date(2026, time.Month(rapid.IntRange(1, 12).Draw(rt, "month")), 1, 0, 0, 0, 0, loc)
		now := base.Add(-time.Duration(rapid.IntRange(0, 48*60).Draw(rt, "startBeforeMonth")) * time.Minute)
		prefix := fmt.Sprintf("prop%d:%d:", time.Now().UnixNano(), checkSeq.Add(1))
		// Each check's keys go when it ends: the server is shared by every
		// check, and a keyspace growing by a check's keys each time makes
		// every SCAN (snapshots, rollbacks) slower than the last.
		defer dropPrefix(context.Background(), rdb, prefix)
		e, err := New(rdb, WithKeyPrefix(prefix), WithLocation(loc), WithClock(func() time.Time { return now }),
			WithGrantSizes(testGrantSizes))
		if err != nil {
			rt.Fatal(err)
		}
		m := newModel(loc)
		families := []int64{1, 2}
		var sent []Event
		nextID := 0
		gd := newGrantDriver(m, loc)
		customers := func(int64) []int64 { return []int64{1, 2, 3, 4} }

		must := func(err error) {
			if err != nil {
				rt.Fatalf("engine error: %v", err)
			}
		}
		for _, f := range families {
			for c := int64(1); c <= 3; c++ {
				must(e.AddMember(ctx, f, c))
				m.members[fc{f, c}] = true
			}
		}
		plan := rapid.Int64Range(0, 40*mb).Draw(rt, "plan")
		_, err = e.SetPlan(ctx, 1, plan)
		must(err)
		m.plan[1] = plan
		m.rearm(1, policy.MomentOf(now, loc).Month)

		newEvent := func(rt *rapid.T) Event {
			f := rapid.SampledFrom(families).Draw(rt, "family")
			app := rapid.SampledFrom(testApps).Draw(rt, "app")
			mo := policy.MomentOf(now, loc)
			remaining := m.pool(f, mo.Month).Remaining()
			bytes := rapid.OneOf(
				rapid.Int64Range(0, 3*mb),
				rapid.Just(remaining),
				rapid.Just(remaining+1),
				rapid.Int64Range(0, 100*mb),
			).Draw(rt, "bytes")
			nextID++
			return Event{
				ID: fmt.Sprintf("evt_%d", nextID), FamilyID: f, CustomerID: rapid.Int64Range(1, 4).Draw(rt, "customer"),
				Bytes: bytes, AppID: app.ID, Category: app.Category,
				At: now.Add(time.Duration(rapid.IntRange(-180, 180).Draw(rt, "offsetMin")) * time.Minute),
			}
		}
		// recent are the sent events first judged within the dedupe window:
		// the ones a replay must find (older ones a consumer rejects by age).
		recent := func() []Event {
			var out []Event
			for _, ev := range sent {
				if j, ok := m.results[fid{ev.FamilyID, ev.ID}]; ok && now.Sub(j.at) < 24*time.Hour {
					out = append(out, ev)
				}
			}
			return out
		}
		compare := func(what string, want, got any) {
			if d := gocmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
				rt.Fatalf("%s: engine differs from model (-model +engine):\n%s", what, d)
			}
		}
		// judgeBoth judges events and grant steps in one pipeline on the
		// engine and the model, and checks the invariants of grants.
		judgeBoth := func(rt *rapid.T, evs []Event, ops []GrantOp) []GrantResult {
			ps := newPeriods()
			for _, ev := range evs {
				ps.add(ev.FamilyID, ev.CustomerID, ev.At, loc)
			}
			for _, op := range ops {
				ps.add(op.FamilyID, op.CustomerID, op.At, loc)
				if g, ok := m.grants[fcg{op.FamilyID, op.CustomerID, op.GrantID}]; ok {
					ps.add(op.FamilyID, op.CustomerID, g.at, loc)
				}
			}
			before := gd.bounds(ps)
			var want []Result
			for _, ev := range evs {
				want = append(want, m.apply(ev, now))
			}
			var wantG []GrantResult
			opens := make([]int64, len(ops)) // the family's open grants after each step
			for i, op := range ops {
				wantG = append(wantG, m.grant(op, now))
				opens[i] = m.openGrants(op.FamilyID)
			}
			got, gotG, err := e.judgeBatch(ctx, "", nil, evs, ops)
			must(err)

			compare(fmt.Sprintf("apply %+v", evs), want, got)
			compare(fmt.Sprintf("grant steps %+v", ops), wantG, gotG)
			var overage int64
			for i, op := range ops {
				gd.stepped(rt, op, gotG[i], opens[i])
				if !gotG[i].Duplicate {
					overage += gotG[i].Overage
				}
			}
			gd.check(rt, fmt.Sprintf("events %+v, steps %+v", evs, ops), ps, before, gd.bounds(ps), overage)
			return gotG
		}
		applyBoth := func(rt *rapid.T, evs []Event) { judgeBoth(rt, evs, nil) }

		rt.Repeat(map[string]func(*rapid.T){
			"apply": func(rt *rapid.T) {
				ev := newEvent(rt)
				sent = append(sent, ev)
				applyBoth(rt, []Event{ev})
			},
			"applyBatch": func(rt *rapid.T) {
				n := rapid.IntRange(1, 20).Draw(rt, "batch")
				var evs []Event
				for range n {
					if r := recent(); len(r) > 0 && rapid.IntRange(0, 4).Draw(rt, "replayInBatch") == 0 {
						evs = append(evs, rapid.SampledFrom(r).Draw(rt, "replayed"))
						continue
					}
					ev := newEvent(rt)
					sent = append(sent, ev)
					evs = append(evs, ev)
				}
				applyBoth(rt, evs)
			},
			"replay": func(rt *rapid.T) {
				r := recent()
				if len(r) == 0 {
					rt.Skip("nothing sent within the window")
				}
				applyBoth(rt, []Event{rapid.SampledFrom(r).Draw(rt, "replayed")})
			},
			"replayOtherTime": func(rt *rapid.T) {
				// The same event id with another timestamp (across days and
				// months too) is the same event: judged once.
				r := recent()
				if len(r) == 0 {
					rt.Skip("nothing sent within the window")
				}
				ev := rapid.SampledFrom(r).Draw(rt, "replayed")
				ev.At = ev.At.Add(time.Duration(rapid.IntRange(-40*60, 40*60).Draw(rt, "shiftMin")) * time.Minute)
				applyBoth(rt, []Event{ev})
			},
			"setPlan": func(rt *rapid.T) {
				f := rapid.SampledFrom(families).Draw(rt, "family")
				b := rapid.Int64Range(0, 60*mb).Draw(rt, "plan")
				got, err := e.SetPlan(ctx, f, b)
				must(err)
				m.plan[f] = b
				compare("setPlan", m.rearm(f, policy.MomentOf(now, loc).Month), got)
			},
			"topUp": func(rt *rapid.T) {
				f := rapid.SampledFrom(families).Draw(rt, "family")
				b := rapid.Int64Range(1, 30*mb).Draw(rt, "topup")
				got, err := e.TopUp(ctx, f, b)
				must(err)
				month := policy.MomentOf(now, loc).Month
				m.topup[fp{f, month}] += b
				compare("topUp", m.rearm(f, month), got)
			},
			// The API's top-up: the month's total as SQL saw it, raising
			// only (a late or repeated write changes nothing).
			"setTopUps": func(rt *rapid.T) {
				f := rapid.SampledFrom(families).Draw(rt, "family")
				month := policy.MomentOf(now, loc).Month
				cur := m.topup[fp{f, month}]
				total := rapid.Int64Range(max(cur-10*mb, 0), cur+30*mb).Draw(rt, "total")
				got, err := e.SetTopUps(ctx, f, month, total)
				must(err)
				m.topup[fp{f, month}] = max(cur, total)
				compare("setTopUps", m.rearm(f, month), got)
			},
			"setThresholds": func(rt *rapid.T) {
				f := rapid.SampledFrom(families).Draw(rt, "family")
				var th policy.Thresholds
				for _, p := range []int{90, 75, 50, 30, 10, 5, 1} {
					if rapid.Bool().Draw(rt, "threshold") {
						th = append(th, p)
					}
				}
				must(e.SetThresholds(ctx, f, th))
				canon, _ := th.Canonical()
				m.thr[f] = canon
				m.rearm(f, policy.MomentOf(now, loc).Month)
			},
			"setConstraints": func(rt *rapid.T) {
				f := rapid.SampledFrom(families).Draw(rt, "family")
				c := rapid.Int64Range(1, 4).Draw(rt, "customer")
				cur := m.ver[fc{f, c}]
				v := rapid.Int64Range(max(cur-2, 1), cur+3).Draw(rt, "version")
				cons := genBudgets(rt, genExceptions(rt, genExtras(rt, genConstraints(rt), now, loc), now, loc))
				got, err := e.SetConstraints(ctx, f, c, v, cons)
				must(err)
				compare("setConstraints applied", m.setConstraints(f, c, v, cons), got)
			},
			"enforce": func(rt *rapid.T) {
				f := rapid.SampledFrom(families).Draw(rt, "family")
				c := rapid.Int64Range(1, 4).Draw(rt, "customer")
				v := m.ver[fc{f, c}] + rapid.Int64Range(0, 1).Draw(rt, "bump")
				cons := genBudgets(rt, genExceptions(rt, genExtras(rt, genConstraints(rt), now, loc), now, loc))
				if v == 0 {
					v = 1
				}
				got, err := e.Enforce(ctx, f, c, v, rules(rt, cons))
				must(err)
				applied := m.setConstraints(f, c, v, cons)
				compare("enforce", Enforcement{Applied: applied, Status: m.status(f, c, policy.MomentOf(now, loc))}, got)
			},
			"addMember": func(rt *rapid.T) {
				f := rapid.SampledFrom(families).Draw(rt, "family")
				c := rapid.Int64Range(1, 4).Draw(rt, "customer")
				must(e.AddMember(ctx, f, c))
				m.members[fc{f, c}] = true
			},
			"removeMember": func(rt *rapid.T) {
				f := rapid.SampledFrom(families).Draw(rt, "family")
				c := rapid.Int64Range(1, 4).Draw(rt, "customer")
				must(e.RemoveMember(ctx, f, c))
				delete(m.members, fc{f, c})
				delete(m.cons, fc{f, c})
			},
			"grant": func(rt *rapid.T) {
				judgeBoth(rt, nil, []GrantOp{gd.draw(rt, families, customers, now)})
			},
			"grantRetry": func(rt *rapid.T) {
				op, ok := gd.retry(rt, now)
				if !ok {
					rt.Skip("no step within the window")
				}
				judgeBoth(rt, nil, []GrantOp{op})
			},
			// Events and steps of several sessions in one pipeline.
			"mixed": func(rt *rapid.T) {
				var evs []Event
				for range rapid.IntRange(0, 4).Draw(rt, "mixedEvents") {
					ev := newEvent(rt)
					if rapid.Bool().Draw(rt, "holderEvent") {
						nextID++
						if hev, ok := gd.event(rt, fmt.Sprintf("evt_%d", nextID), now); ok {
							ev = hev
						}
					}
					sent = append(sent, ev)
					evs = append(evs, ev)
				}
				var ops []GrantOp
				for range rapid.IntRange(1, 4).Draw(rt, "mixedSteps") {
					if op, ok := gd.retry(rt, now); ok && rapid.IntRange(0, 4).Draw(rt, "retryInBatch") == 0 {
						ops = append(ops, op)
						continue
					}
					ops = append(ops, gd.draw(rt, families, customers, now))
				}
				judgeBoth(rt, evs, ops)
			},
			"starve": func(rt *rapid.T) {
				gd.starvationRound(rt, now, func(op GrantOp) GrantResult { return judgeBoth(rt, nil, []GrantOp{op})[0] })
			},
			"tick": func(rt *rapid.T) {
				now = now.Add(time.Duration(rapid.IntRange(1, 180).Draw(rt, "minutes")) * time.Minute)
			},
			"nextDay": func(rt *rapid.T) {
				now = now.Add(time.Duration(rapid.IntRange(1, 3).Draw(rt, "days")) * 24 * time.Hour)
			},
			"": func(rt *rapid.T) {
				for _, f := range families {
					got, err := e.Family(ctx, f)
					must(err)
					compare(fmt.Sprintf("family %d state", f), m.family(f, now), got)
				}
			},
		})
	})
}

func TestEngineMatchesModel(t *testing.T) {
	t.Parallel() // with TestRecoveryMatchesModel: each check has its own key prefix
	eachBackendOnce(t, checkEngineMatchesModel)
}
