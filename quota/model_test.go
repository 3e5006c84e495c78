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
	results map[fid]judged
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
)

func newModel(loc *time.Location) *model {
	return &model{
		loc: loc, defaultThr: policy.DefaultThresholds(),
		plan: map[int64]int64{}, thr: map[int64]policy.Thresholds{},
		topup: map[fp]int64{}, used: map[fp]int64{}, fired: map[fp]map[int]bool{}, arms: map[fp]map[int]int{},
		members: map[fc]bool{}, cons: map[fc]map[string]string{}, ver: map[fc]int64{},
		daily: map[fcp]int64{}, monthly: map[fcp]int64{}, results: map[fid]judged{},
	}
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
	res := policy.Evaluate(m.constraints(f, c),
		policy.Member{Member: m.members[fc{f, c}], DailyUsed: m.daily[dk], MonthlyUsed: m.monthly[mk]},
		pool, policy.Request{Bytes: ev.Bytes, AppID: ev.AppID, Category: ev.Category, At: mo})
	r := Result{Decision: res.Decision, Rule: res.Rule, ThrottleKbps: res.ThrottleKbps}
	if res.Decision == policy.Allowed {
		m.used[fp{f, mo.Month}] += res.Deduct
		m.daily[dk] += res.Deduct
		m.monthly[mk] += res.Deduct
		pool = m.pool(f, mo.Month)
	}
	// Crossings are judged on every event of a member, allowed or blocked.
	if res.Decision != policy.BlockedNotMember && pool.Total > 0 {
		fired := m.fired[fp{f, mo.Month}]
		if fired == nil {
			fired = map[int]bool{}
			m.fired[fp{f, mo.Month}] = fired
		}
		for _, p := range m.thresholds(f) {
			if policy.Reached(p, pool.Total, pool.Remaining()) && !fired[p] {
				fired[p] = true
				if m.arms[fp{f, mo.Month}] == nil {
					m.arms[fp{f, mo.Month}] = map[int]int{}
				}
				m.arms[fp{f, mo.Month}][p]++
				r.Crossed = append(r.Crossed, p)
				r.Arms = append(r.Arms, m.arms[fp{f, mo.Month}][p])
			}
		}
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
		Thresholds: m.thresholds(f),
	}
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
		e, err := New(rdb, WithKeyPrefix(prefix), WithLocation(loc), WithClock(func() time.Time { return now }))
		if err != nil {
			rt.Fatal(err)
		}
		m := newModel(loc)
		families := []int64{1, 2}
		var sent []Event
		nextID := 0

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
		applyBoth := func(rt *rapid.T, evs []Event) {
			var want []Result
			for _, ev := range evs {
				want = append(want, m.apply(ev, now))
			}
			got, err := e.ApplyBatch(ctx, evs)
			must(err)
			compare(fmt.Sprintf("apply %+v", evs), want, got)
		}

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
				cons := genExceptions(rt, genExtras(rt, genConstraints(rt), now, loc), now, loc)
				got, err := e.SetConstraints(ctx, f, c, v, cons)
				must(err)
				compare("setConstraints applied", m.setConstraints(f, c, v, cons), got)
			},
			"enforce": func(rt *rapid.T) {
				f := rapid.SampledFrom(families).Draw(rt, "family")
				c := rapid.Int64Range(1, 4).Draw(rt, "customer")
				v := m.ver[fc{f, c}] + rapid.Int64Range(0, 1).Draw(rt, "bump")
				cons := genExceptions(rt, genExtras(rt, genConstraints(rt), now, loc), now, loc)
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
