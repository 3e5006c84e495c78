package quota

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
)

const gb = 1 << 30

type fixture struct {
	t   *testing.T
	e   *Engine
	ctx context.Context
	now time.Time
	seq int
}

func newFixture(t *testing.T, rdb redis.UniversalClient, now time.Time) *fixture {
	t.Helper()
	f := &fixture{t: t, ctx: context.Background(), now: now}
	e, err := New(rdb, WithClock(func() time.Time { return f.now }), WithKeyPrefix(fmt.Sprintf("%s:%d:", t.Name(), time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	f.e = e
	return f
}

func (f *fixture) family(fid, plan int64, members ...int64) {
	f.t.Helper()
	if _, err := f.e.SetPlan(f.ctx, fid, plan); err != nil {
		f.t.Fatal(err)
	}
	for _, c := range members {
		if err := f.e.AddMember(f.ctx, fid, c); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fixture) use(fid, cid, bytes int64, app string, at time.Time) Result {
	f.t.Helper()
	f.seq++
	r, err := f.e.Apply(f.ctx, Event{ID: fmt.Sprintf("evt_%d", f.seq), FamilyID: fid, CustomerID: cid, Bytes: bytes, AppID: app, At: at})
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func kst(t *testing.T, s string) time.Time {
	t.Helper()
	loc, _ := policy.LoadZone(policy.DefaultZone)
	tm, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// Story 1 (doc/testing.md, "Acceptance stories"): Last 10 MB — never a partial
// grant, never overspent.
func TestStoryLast10MB(t *testing.T) { eachBackend(t, storyLast10MB) }

func storyLast10MB(t *testing.T, rdb redis.UniversalClient) {
	now := kst(t, "2026-02-06 14:30")
	f := newFixture(t, rdb, now)
	f.family(100, 10*mb, 1, 2, 3, 4)
	type step struct {
		who       int64
		bytes     int64
		app       string
		want      policy.Decision
		remaining int64
	}
	for i, s := range []step{
		{1, 5 * mb, "com.naver.news", policy.Allowed, 5 * mb},
		{2, 3 * mb, "com.kakao.talk", policy.Allowed, 2 * mb},
		{3, 8 * mb, "com.youtube.app", policy.BlockedFamilyQuota, 2 * mb},
		{4, 4 * mb, "com.roblox.client", policy.BlockedFamilyQuota, 2 * mb},
	} {
		r := f.use(100, s.who, s.bytes, s.app, now)
		if r.Decision != s.want || r.Remaining != s.remaining {
			t.Errorf("step %d: got %s with %d left, want %s with %d left", i, r.Decision, r.Remaining, s.want, s.remaining)
		}
		if s.want.Blocked() && r.Rule != policy.RulePool {
			t.Errorf("step %d: rule %q, want POOL", i, r.Rule)
		}
	}
	fs, err := f.e.Family(f.ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if fs.Used != 8*mb || fs.Remaining != 2*mb {
		t.Errorf("pool used %d remaining %d, want 8 MB / 2 MB", fs.Used, fs.Remaining)
	}
}

// Story 2: limit cut while over — blocked at once, derived not stored, and
// raising the limit unblocks.
func TestStoryLimitCutWhileOver(t *testing.T) { eachBackend(t, storyLimitCutWhileOver) }

func storyLimitCutWhileOver(t *testing.T, rdb redis.UniversalClient) {
	now := kst(t, "2026-02-20 10:00")
	f := newFixture(t, rdb, now)
	f.family(100, 100*gb, 1, 3)
	twoGB := map[string]string{policy.KeyLimitMonthly: fmt.Sprint(2 * gb)}
	if _, err := f.e.SetConstraints(f.ctx, 100, 3, 1, twoGB); err != nil {
		t.Fatal(err)
	}
	// 1.2 GB used this month, over several days.
	for d := 1; d <= 12; d++ {
		if r := f.use(100, 3, gb/10, "com.youtube.app", now.AddDate(0, 0, -d)); r.Decision != policy.Allowed {
			t.Fatalf("day -%d: %s", d, r.Decision)
		}
	}
	enf, err := f.e.Enforce(f.ctx, 100, 3, 2, rules(t, map[string]string{policy.KeyLimitMonthly: fmt.Sprint(500 * mb)}))
	if err != nil {
		t.Fatal(err)
	}
	if !enf.Applied || !enf.Status.Blocked() || enf.Status.Decision != policy.BlockedLimitMonthly || enf.Status.Rule != policy.KeyLimitMonthly {
		t.Fatalf("after cut: %+v, want applied and BLOCKED_LIMIT_MONTHLY", enf)
	}
	if enf.Status.MonthlyUsed != 12*(gb/10) {
		t.Errorf("monthly used %d", enf.Status.MonthlyUsed)
	}
	if _, ok := enf.Status.Constraints[policy.KeyBlockAccess]; ok {
		t.Error("enforcement wrote BLOCK:ACCESS; blocks by limit must be derived")
	}
	if r := f.use(100, 3, 1, "com.kakao.talk", now); r.Decision != policy.BlockedLimitMonthly {
		t.Errorf("next event: %s, want BLOCKED_LIMIT_MONTHLY", r.Decision)
	}
	// A stale replay of the old policy (version 1) changes nothing.
	if enf, err := f.e.Enforce(f.ctx, 100, 3, 1, rules(t, twoGB)); err != nil || enf.Applied || !enf.Status.Blocked() {
		t.Errorf("stale update: %+v %v, want ignored and still blocked", enf, err)
	}
	enf, err = f.e.Enforce(f.ctx, 100, 3, 3, rules(t, twoGB))
	if err != nil || !enf.Applied || enf.Status.Blocked() {
		t.Fatalf("after raise: %+v %v, want unblocked", enf, err)
	}
	if r := f.use(100, 3, mb, "com.kakao.talk", now); r.Decision != policy.Allowed {
		t.Errorf("after raise: %s", r.Decision)
	}
	// A new month unblocks by itself too.
	f.e.Enforce(f.ctx, 100, 3, 4, rules(t, map[string]string{policy.KeyLimitMonthly: fmt.Sprint(500 * mb)}))
	f.now = kst(t, "2026-03-01 00:00")
	st, err := f.e.Status(f.ctx, 100, 3)
	if err != nil || st.Blocked() || st.MonthlyUsed != 0 {
		t.Errorf("new month: %+v %v, want unblocked with 0 used", st, err)
	}
}

// Story 3: night block 22:00–07:00 KST.
func TestStoryNightBlock(t *testing.T) { eachBackend(t, storyNightBlock) }

func storyNightBlock(t *testing.T, rdb redis.UniversalClient) {
	f := newFixture(t, rdb, kst(t, "2026-02-06 12:00"))
	f.family(100, 10*gb, 3)
	f.e.SetConstraints(f.ctx, 100, 3, 1, map[string]string{policy.KeyBlockTimeStart: "2200", policy.KeyBlockTimeEnd: "0700"})
	for _, c := range []struct {
		at   string
		want policy.Decision
	}{
		{"2026-02-06 21:59", policy.Allowed},
		{"2026-02-06 22:00", policy.BlockedTime},
		{"2026-02-06 23:59", policy.BlockedTime},
		{"2026-02-07 00:00", policy.BlockedTime},
		{"2026-02-07 06:59", policy.BlockedTime},
		{"2026-02-07 07:00", policy.Allowed},
	} {
		r := f.use(100, 3, mb, "com.youtube.app", kst(t, c.at))
		if r.Decision != c.want {
			t.Errorf("%s: %s, want %s", c.at, r.Decision, c.want)
		}
	}
	// The same instant stamped in UTC is judged in KST: 13:30Z is 22:30 KST.
	if r := f.use(100, 3, mb, "x", time.Date(2026, 2, 7, 13, 30, 0, 0, time.UTC)); r.Decision != policy.BlockedTime {
		t.Errorf("13:30Z: %s, want BLOCKED_TIME", r.Decision)
	}
	f.now = kst(t, "2026-02-07 23:00")
	if st, _ := f.e.Status(f.ctx, 100, 3); st.Decision != policy.BlockedTime {
		t.Errorf("status at 23:00: %+v", st)
	}
}

// Story 4: thresholds fire once each per period, even hovering and replayed;
// several at once; re-armed by a top-up; a new month re-arms everything.
func TestStoryThresholds(t *testing.T) { eachBackend(t, storyThresholds) }

func storyThresholds(t *testing.T, rdb redis.UniversalClient) {
	now := kst(t, "2026-02-06 12:00")
	f := newFixture(t, rdb, now)
	f.family(100, 100*mb, 1)
	steps := []struct {
		bytes   int64
		crossed []int
	}{
		{49 * mb, nil},       // 51 % left
		{1 * mb, []int{50}},  // exactly 50 % left: reached
		{1, nil},             // hovering below 50
		{20 * mb, []int{30}}, // 29.99 % left
		{25 * mb, []int{10}}, // 5 % left
		{4 * mb, nil},        // 1 % left
	}
	for i, s := range steps {
		r := f.use(100, 1, s.bytes, "x", now)
		if diff := cmp.Diff(s.crossed, r.Crossed); diff != "" || r.Decision != policy.Allowed {
			t.Errorf("step %d (%s): crossed diff %s", i, r.Decision, diff)
		}
	}
	// Replays return the original result and fire nothing new.
	f.seq = 1
	r, _ := f.e.Apply(f.ctx, Event{ID: "evt_2", FamilyID: 100, CustomerID: 1, Bytes: mb, AppID: "x", At: now})
	if !r.Duplicate || !cmp.Equal(r.Crossed, []int{50}) {
		t.Errorf("replay: %+v, want the original result marked duplicate", r)
	}
	f.seq = 100
	// A top-up to 51/150 MB (34 %) re-arms 30 and 10 but not 50.
	ps, err := f.e.TopUp(f.ctx, 100, 50*mb)
	if err != nil || ps.Total != 150*mb {
		t.Fatal(ps, err)
	}
	fs, _ := f.e.Family(f.ctx, 100)
	if !cmp.Equal(fs.Fired, []int{50}) {
		t.Errorf("after top-up fired %v, want [50]", fs.Fired)
	}
	// One event down to 1 % crosses 30 and 10 at once.
	if r := f.use(100, 1, 50*mb+mb/2, "x", now); !cmp.Equal(r.Crossed, []int{30, 10}) || !cmp.Equal(r.Arms, []int{2, 2}) {
		t.Errorf("big drop crossed %v (arms %v), want [30 10] for the second time each", r.Crossed, r.Arms)
	}
	// A new month starts full with everything re-armed.
	next := kst(t, "2026-03-01 00:05")
	if r := f.use(100, 1, 60*mb, "x", next); r.Remaining != 40*mb || !cmp.Equal(r.Crossed, []int{50}) {
		t.Errorf("new month: %+v", r)
	}
	// Per-family thresholds.
	if err := f.e.SetThresholds(f.ctx, 100, policy.Thresholds{25}); err != nil {
		t.Fatal(err)
	}
	if r := f.use(100, 1, 20*mb, "x", next); !cmp.Equal(r.Crossed, []int{25}) {
		t.Errorf("custom threshold: %+v", r)
	}
}

// Story 5 at the engine level: the same event 3 times is deducted once.
func TestStoryDuplicates(t *testing.T) { eachBackend(t, storyDuplicates) }

func storyDuplicates(t *testing.T, rdb redis.UniversalClient) {
	now := kst(t, "2026-02-06 12:00")
	f := newFixture(t, rdb, now)
	f.family(100, 10*mb, 1)
	ev := Event{ID: "evt_550e8400-e29b-41d4-a716-446655440000", FamilyID: 100, CustomerID: 1, Bytes: 3 * mb, AppID: "com.youtube.app", At: now}
	rs, err := f.e.ApplyBatch(f.ctx, []Event{ev, ev, ev})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Duplicate != (i > 0) || r.Remaining != 7*mb || r.Decision != policy.Allowed {
			t.Errorf("delivery %d: %+v", i, r)
		}
	}
}

func TestUnprovisionedAndNonMember(t *testing.T) { eachBackend(t, unprovisionedAndNonMember) }

func unprovisionedAndNonMember(t *testing.T, rdb redis.UniversalClient) {
	now := kst(t, "2026-02-06 12:00")
	f := newFixture(t, rdb, now)
	f.e.AddMember(f.ctx, 7, 1)
	if r := f.use(7, 1, 1, "x", now); r.Decision != policy.BlockedFamilyQuota || r.Rule != policy.RulePoolUnprovisioned {
		t.Errorf("unprovisioned: %+v", r)
	}
	if r := f.use(7, 1, 0, "x", now); r.Decision != policy.Allowed {
		t.Errorf("0 bytes on an empty pool: %+v", r)
	}
	f.family(8, 10*mb, 1)
	if r := f.use(8, 2, mb, "x", now); r.Decision != policy.BlockedNotMember || r.Remaining != 10*mb {
		t.Errorf("non-member: %+v", r)
	}
	if err := f.e.RemoveMember(f.ctx, 8, 1); err != nil {
		t.Fatal(err)
	}
	if r := f.use(8, 1, mb, "x", now); r.Decision != policy.BlockedNotMember {
		t.Errorf("removed member: %+v", r)
	}
	fs, _ := f.e.Family(f.ctx, 8)
	if fs.Used != 0 || len(fs.Members) != 0 {
		t.Errorf("family after removal: %+v", fs)
	}
}

func TestThrottleAndAppBlocks(t *testing.T) { eachBackend(t, throttleAndAppBlocks) }

func throttleAndAppBlocks(t *testing.T, rdb redis.UniversalClient) {
	now := kst(t, "2026-02-06 12:00")
	f := newFixture(t, rdb, now)
	f.family(1, gb, 1)
	f.e.SetConstraints(f.ctx, 1, 1, 1, map[string]string{
		"BLOCK:APP:com.youtube.app": "1", "BLOCK:CATEGORY:GAME": "1", "THROTTLE:SPEED": "512",
		"BLOCK:TIME:school": "0900-1500@MON-FRI",
	})
	cases := []struct {
		app  string
		cat  policy.Category
		at   time.Time
		want policy.Decision
		rule string
	}{
		{"com.youtube.app", policy.CategoryVideo, now.Add(-4 * time.Hour), policy.BlockedApp, "BLOCK:APP:com.youtube.app"},
		{"com.roblox.client", policy.CategoryGame, now.Add(-4 * time.Hour), policy.BlockedApp, "BLOCK:CATEGORY:GAME"},
		{"com.kakao.talk", policy.CategoryMessaging, now, policy.BlockedTime, "BLOCK:TIME:school"},
		{"com.kakao.talk", policy.CategoryMessaging, now.AddDate(0, 0, 1), policy.Allowed, ""}, // Saturday
	}
	for _, c := range cases {
		f.seq++
		r, err := f.e.Apply(f.ctx, Event{ID: fmt.Sprint("e", f.seq), FamilyID: 1, CustomerID: 1, Bytes: 1, AppID: c.app, Category: c.cat, At: c.at})
		if err != nil || r.Decision != c.want || r.Rule != c.rule {
			t.Errorf("%s at %s: %+v %v, want %s %s", c.app, c.at, r, err, c.want, c.rule)
		}
		if c.want == policy.Allowed && r.ThrottleKbps != 512 {
			t.Errorf("throttle %d, want 512", r.ThrottleKbps)
		}
	}
}

// Many goroutines applying to one family never overspend and every allowed
// byte is accounted for exactly once.
func TestConcurrentAppliesNeverOverspend(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) { testConcurrentNeverOverspend(t, rdb, 16, 25) })
}

func testConcurrentNeverOverspend(t *testing.T, rdb redis.UniversalClient, workers, perWorker int) {
	now := kst(t, "2026-02-06 12:00")
	f := newFixture(t, rdb, now)
	const pool = 50 * mb
	f.family(42, pool, 1, 2, 3, 4)
	var mu sync.Mutex
	var allowed int64
	decided := map[string]policy.Decision{}
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker*2+workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var evs []Event
			for i := range perWorker {
				evs = append(evs, Event{ID: fmt.Sprintf("w%d-%d", w, i), FamilyID: 42, CustomerID: int64(w%4 + 1),
					Bytes: int64((w*7+i*13)%400+1) * 1024, AppID: "x", At: now})
			}
			// Half the workers send batches, half single events; every batch is
			// sent twice to mix replays in.
			for k := 0; k < 2; k++ {
				var rs []Result
				var err error
				if w%2 == 0 {
					rs, err = f.e.ApplyBatch(f.ctx, evs)
				} else {
					for _, ev := range evs {
						r, e := f.e.Apply(f.ctx, ev)
						if e != nil {
							err = e
							break
						}
						rs = append(rs, r)
					}
				}
				if err != nil {
					errs <- err
					return
				}
				// Counted by event id, not by the Duplicate flag: a
				// pipeline the client sent again after a read timeout
				// (go-redis retries them; -race on a loaded machine) finds
				// its first run's results and flags them Duplicate, the
				// same answers. A replay must answer as the first did.
				mu.Lock()
				for i, r := range rs {
					if first, ok := decided[evs[i].ID]; ok {
						if first != r.Decision {
							errs <- fmt.Errorf("event %s: %s, then %s", evs[i].ID, first, r.Decision)
						}
					} else {
						decided[evs[i].ID] = r.Decision
						if r.Decision == policy.Allowed {
							allowed += evs[i].Bytes
						}
					}
					if r.Remaining < 0 {
						errs <- errors.New("negative remaining")
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	fs, err := f.e.Family(f.ctx, 42)
	if err != nil {
		t.Fatal(err)
	}
	var members int64
	for _, m := range fs.Members {
		members += m.MonthlyUsed
	}
	if allowed > pool || fs.Used != allowed || members != allowed || fs.Remaining != pool-allowed {
		t.Fatalf("pool %d: allowed %d, engine used %d (members %d), remaining %d", pool, allowed, fs.Used, members, fs.Remaining)
	}
	if allowed < pool-400*1024 {
		t.Fatalf("allowed only %d of %d although requests kept coming", allowed, pool)
	}
}

func TestInvalidArguments(t *testing.T) {
	f := newFixture(t, newMiniredis(t), kst(t, "2026-02-06 12:00"))
	good := Event{ID: "a", FamilyID: 1, CustomerID: 1, Bytes: 1, At: f.now}
	bad := []Event{
		{FamilyID: 1, CustomerID: 1, At: f.now},
		{ID: strings.Repeat("x", 201), FamilyID: 1, CustomerID: 1, At: f.now},
		{ID: "a", CustomerID: 1, At: f.now},
		{ID: "a", FamilyID: 1, At: f.now},
		{ID: "a", FamilyID: 1, CustomerID: 1, Bytes: -1, At: f.now},
		{ID: "a", FamilyID: 1, CustomerID: 1, Bytes: policy.MaxBytes + 1, At: f.now},
		{ID: "a", FamilyID: 1, CustomerID: 1},
	}
	for i, ev := range bad {
		_, err := f.e.ApplyBatch(f.ctx, []Event{good, ev})
		var ee *EventError
		if !errors.As(err, &ee) || ee.Index != 1 || !errors.Is(err, ErrInvalid) {
			t.Errorf("case %d: %v, want EventError at index 1 wrapping ErrInvalid", i, err)
		}
	}
	checks := []error{
		func() error { _, err := f.e.SetPlan(f.ctx, 0, 1); return err }(),
		func() error { _, err := f.e.SetPlan(f.ctx, 1, -1); return err }(),
		func() error { _, err := f.e.TopUp(f.ctx, 1, 0); return err }(),
		func() error { _, err := f.e.SetTopUps(f.ctx, 1, "2026-02", 1); return err }(),
		func() error { _, err := f.e.SetTopUps(f.ctx, 1, "202613", 1); return err }(),
		func() error { _, err := f.e.SetTopUps(f.ctx, 1, "202602", -1); return err }(),
		func() error { _, err := f.e.SetTopUps(f.ctx, 1, "202602", policy.MaxBytes+1); return err }(),
		func() error { _, err := f.e.SetConstraints(f.ctx, 1, 1, 0, nil); return err }(),
		func() error { _, err := f.e.SetConstraints(f.ctx, 1, 0, 1, nil); return err }(),
		func() error {
			_, err := f.e.SetConstraints(f.ctx, 1, 1, 1, map[string]string{"LIMIT:DATA:DAILY": "-5"})
			return err
		}(),
		f.e.SetThresholds(f.ctx, 1, policy.Thresholds{150}),
		f.e.AddMember(f.ctx, 1, 0),
		f.e.RemoveMember(f.ctx, -1, 1),
		func() error { _, err := f.e.Status(f.ctx, 1, 0); return err }(),
		func() error { _, err := f.e.Family(f.ctx, 0); return err }(),
	}
	for i, err := range checks {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("check %d: %v, want ErrInvalid", i, err)
		}
	}
	// Plan + top-ups may not pass MaxBytes.
	if _, err := f.e.SetPlan(f.ctx, 1, policy.MaxBytes); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.TopUp(f.ctx, 1, 1); err == nil {
		t.Error("top-up past MaxBytes accepted")
	}
	for _, o := range []Option{WithLocation(nil), WithClock(nil), WithDedupeTTL(0), WithKeyPrefix("{x}"), WithDefaultThresholds(policy.Thresholds{0})} {
		if _, err := New(newMiniredis(t), o); err == nil {
			t.Error("bad option accepted")
		}
	}
	if _, err := New(nil); err == nil {
		t.Error("nil client accepted")
	}
}

func TestNoScriptRecovery(t *testing.T) {
	rdb := newMiniredis(t)
	f := newFixture(t, rdb, kst(t, "2026-02-06 12:00"))
	f.family(1, 10*mb, 1)
	if err := f.e.Load(f.ctx); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(f.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rs, err := f.e.ApplyBatch(f.ctx, []Event{{ID: "a", FamilyID: 1, CustomerID: 1, Bytes: mb, At: f.now}, {ID: "b", FamilyID: 1, CustomerID: 1, Bytes: mb, At: f.now}})
	if err != nil || rs[1].Remaining != 8*mb {
		t.Fatalf("after SCRIPT FLUSH: %+v %v", rs, err)
	}
}

func TestHooksAndRedisDown(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	var infos []ApplyInfo
	e, err := New(rdb, WithHooks(Hooks{OnApply: func(i ApplyInfo) { infos = append(infos, i) }}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Apply(context.Background(), Event{ID: "a", FamilyID: 1, CustomerID: 1, At: time.Now()})
	if err == nil || len(infos) != 1 || infos[0].Err == nil || infos[0].Events != 1 {
		t.Fatalf("err %v, hooks %+v", err, infos)
	}
	if _, err := e.Family(context.Background(), 1); err == nil {
		t.Error("Family with Redis down: no error")
	}
	if _, err := e.Status(context.Background(), 1, 1); err == nil {
		t.Error("Status with Redis down: no error")
	}
}

// An event that names only its app is judged against category blocks when
// the engine has a catalog (WithCatalog); a category the event carries wins.
// Without a catalog an empty Category means "no category".
func TestCatalogFillsCategory(t *testing.T) { eachBackend(t, catalogFillsCategory) }

func catalogFillsCategory(t *testing.T, rdb redis.UniversalClient) {
	now := kst(t, "2026-02-06 12:00")
	catalog := policy.NewCatalog(policy.DefaultApps())
	cases := []struct {
		name    string
		catalog policy.Catalog
		app     string
		cat     policy.Category
		want    policy.Decision
		rule    string
	}{
		{"catalog fills an empty category", catalog, "com.roblox.client", "", policy.BlockedApp, "BLOCK:CATEGORY:GAME"},
		{"the event's category wins", catalog, "com.roblox.client", policy.CategoryMessaging, policy.Allowed, ""},
		{"an app the catalog does not know", catalog, "some.unknown.app", "", policy.Allowed, ""},
		{"no catalog: empty is no category", nil, "com.roblox.client", "", policy.Allowed, ""},
		{"no catalog: the event's category", nil, "com.roblox.client", policy.CategoryGame, policy.BlockedApp, "BLOCK:CATEGORY:GAME"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := []Option{WithClock(func() time.Time { return now }), WithKeyPrefix(fmt.Sprintf("%s:%d:", t.Name(), time.Now().UnixNano()))}
			if c.catalog != nil {
				opts = append(opts, WithCatalog(c.catalog))
			}
			e, err := New(rdb, opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := e.SetPlan(ctx, 1, gb); err != nil {
				t.Fatal(err)
			}
			if err := e.AddMember(ctx, 1, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := e.SetConstraints(ctx, 1, 1, 1, map[string]string{"BLOCK:CATEGORY:GAME": "1"}); err != nil {
				t.Fatal(err)
			}
			r, err := e.Apply(ctx, Event{ID: fmt.Sprint("e", i), FamilyID: 1, CustomerID: 1, Bytes: 1, AppID: c.app, Category: c.cat, At: now})
			if err != nil {
				t.Fatal(err)
			}
			if r.Decision != c.want || r.Rule != c.rule {
				t.Errorf("%s (%q): %s %q, want %s %q", c.app, c.cat, r.Decision, r.Rule, c.want, c.rule)
			}
		})
	}
	if _, err := New(rdb, WithCatalog(nil)); !errors.Is(err, ErrInvalid) {
		t.Errorf("WithCatalog(nil): %v, want ErrInvalid", err)
	}
}
