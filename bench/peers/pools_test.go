package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// A pool's overshoot is what used + reserved is above its total; a pool
// with less than one grant left is used up.
func TestCheckPools(t *testing.T) {
	pools := map[int64]pool{
		1: {total: 100, used: 40, reserved: 10}, // 50 left
		2: {total: 100, used: 95, reserved: 0},  // 5 left: used up for grants of 10
		3: {total: 100, used: 90, reserved: 30}, // 20 over
		4: {total: 100, used: 100, reserved: 0}, // none left
		5: {total: 0, used: 0, reserved: 0},     // no plan left
		6: {total: 100, used: 101, reserved: 2}, // 3 over
	}
	c := checkPools(pools, 10)
	if c != (poolCheck{overshoot: 20, usedUp: 5}) {
		t.Errorf("checkPools = %+v", c)
	}
}

// readPools reads the plan, the month's used, top-ups and reservations,
// caps the total as the engine does, and refuses a family without a plan
// or a field that is not a number.
func TestReadPools(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	mr.HSet("family:{1}", "plan", "1000")
	mr.HSet("family:{1}:pool:202611", "used", "300", "topup", "500", "r", "70")
	mr.HSet("family:{1}:pool:202610", "used", "999999")
	mr.HSet("family:{2}", "plan", "2000") // nothing used this month
	mr.HSet("family:{3}", "plan", strconv.FormatInt(1<<47, 10))
	got, err := readPools(ctx, rdb, []int64{1, 2, 3}, "202611")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]pool{1: {total: 1500, used: 300, reserved: 70}, 2: {total: 2000}, 3: {total: maxTotal}}
	for f, p := range want {
		if got[f] != p {
			t.Errorf("family %d: %+v, want %+v", f, got[f], p)
		}
	}
	if _, err := readPools(ctx, rdb, []int64{2, 3}, "202611"); err == nil || !strings.Contains(err.Error(), "no family of 2 read has a pool of 202611") {
		t.Errorf("families without the month's pool read as %v", err)
	}
	if _, err := readPools(ctx, rdb, []int64{1, 4}, "202611"); err == nil || !strings.Contains(err.Error(), "family 4") {
		t.Errorf("a family without a plan read as %v", err)
	}
	mr.HSet("family:{2}:pool:202611", "used", "lots")
	if _, err := readPools(ctx, rdb, []int64{2}, "202611"); err == nil {
		t.Error("a used that is not a number was read")
	}
}

// A pool's month is the server's: in its DPCS_TIMEZONE, -server-env's or
// the default.
func TestPoolMonth(t *testing.T) {
	at := time.Date(2026, 11, 30, 15, 30, 0, 0, time.UTC) // 2026-12-01 00:30 in Seoul
	for _, tc := range []struct {
		env  []string
		want string
	}{{nil, "202612"}, {[]string{"GOGC=400", "DPCS_TIMEZONE=UTC"}, "202611"}} {
		loc, err := serverZone(config{serverEnv: tc.env})
		if err != nil {
			t.Fatal(err)
		}
		if m := poolMonth(at, loc); m != tc.want {
			t.Errorf("%v: poolMonth = %q, want %q", tc.env, m, tc.want)
		}
	}
	if _, err := serverZone(config{serverEnv: []string{"DPCS_TIMEZONE=Nowhere/Else"}}); err == nil {
		t.Error("an unknown zone was accepted")
	}
}

// fakeCHF answers Nchf creates, updates and releases over one family's pool
// in miniredis, the engine's way: a grant reserves (r), a report charges
// (used), a release returns what is held. overgrant makes it grant
// past the pool's end, which the check must see.
type fakeCHF struct {
	mu        sync.Mutex
	mr        *miniredis.Miniredis
	fid       int64
	overgrant int64
	stall     time.Duration // each answer waits this long first
	held      map[string]int64
	next      int
	creates   int
	releases  int
}

func (f *fakeCHF) field(k string) int64 {
	n, _ := strconv.ParseInt(f.mr.HGet(fmt.Sprintf("family:{%d}:pool:202611", f.fid), k), 10, 64)
	return n
}

func (f *fakeCHF) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		MultipleUnitUsage []struct {
			RequestedUnit *struct {
				TotalVolume int64 `json:"totalVolume"`
			} `json:"requestedUnit"`
			UsedUnitContainer []struct {
				TotalVolume int64 `json:"totalVolume"`
			} `json:"usedUnitContainer"`
		} `json:"multipleUnitUsage"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if f.stall > 0 {
		time.Sleep(f.stall)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key := fmt.Sprintf("family:{%d}:pool:202611", f.fid)
	plan, _ := strconv.ParseInt(f.mr.HGet(fmt.Sprintf("family:{%d}", f.fid), "plan"), 10, 64)
	path := strings.TrimPrefix(r.URL.Path, "/nchf-convergedcharging/v3/chargingdata")
	ref := ""
	switch {
	case path == "":
		f.next++
		f.creates++
		ref = strconv.Itoa(f.next)
	case strings.HasSuffix(path, "/update"), strings.HasSuffix(path, "/release"):
		ref = strings.Split(strings.TrimPrefix(path, "/"), "/")[0]
	}
	var used, want int64
	for _, u := range req.MultipleUnitUsage {
		if u.RequestedUnit != nil {
			want += u.RequestedUnit.TotalVolume
		}
		for _, c := range u.UsedUnitContainer {
			used += c.TotalVolume
		}
	}
	held := f.held[ref]
	f.mr.HSet(key, "used", strconv.FormatInt(f.field("used")+used, 10), "r", strconv.FormatInt(f.field("r")-held, 10))
	delete(f.held, ref)
	if strings.HasSuffix(path, "/release") {
		f.releases++
		w.WriteHeader(http.StatusNoContent)
		return
	}
	g := min(want, max(0, plan+f.overgrant-f.field("used")-f.field("r")))
	f.held[ref] = g
	f.mr.HSet(key, "r", strconv.FormatInt(f.field("r")+g, 10))
	code := "SUCCESS"
	if g == 0 {
		code = "QUOTA_LIMIT_REACHED"
	}
	w.Header().Set("Content-Type", "application/json")
	if path == "" {
		w.Header().Set("Location", "http://chf/nchf-convergedcharging/v3/chargingdata/"+ref)
		w.WriteHeader(http.StatusCreated)
	}
	fmt.Fprintf(w, `{"multipleUnitInformation":[{"resultCode":%q,"ratingGroup":50,"grantedUnit":{"totalVolume":%d}}]}`, code, g)
}

// contentionFixture is a fake CHF over one family's pool in miniredis and
// the SMFs that drive it.
func contentionFixture(t *testing.T, plan, overgrant int64) (*fakeCHF, *smfs, redis.Cmdable) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	mr.HSet("family:{7}", "plan", strconv.FormatInt(plan, 10))
	mr.HSet("family:{7}:pool:202611", "used", "0")
	chf := &fakeCHF{mr: mr, fid: 7, overgrant: overgrant, held: map[string]int64{}}
	srv := httptest.NewServer(chf)
	t.Cleanup(srv.Close)
	s := newSMFs(srv.URL, "token", &generator{families: 6}, 4)
	s.client = srv.Client()
	return chf, s, rdb
}

func month202611() string { return "202611" }

// The contention check drives one family's members until the pool grants
// no more: against a CHF that keeps its pool it reads no overshoot with
// the sessions open, nothing reserved and nothing left after the
// releases; against one that grants past the pool's end it reads the
// overshoot. Creates answered with nothing granted are released, not
// errors.
func TestContend(t *testing.T) {
	for _, tc := range []struct {
		name      string
		overgrant int64
	}{{"kept", 0}, {"overspent", 25 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			const plan = 20<<30 + 5<<20 // 2,048.5 grants of 10 MiB: several rounds
			chf, s, rdb := contentionFixture(t, plan, tc.overgrant)
			chf.stall = time.Millisecond
			c, err := contend(context.Background(), s, rdb, 7, month202611, 4, func(string, ...any) {})
			if err != nil {
				t.Fatal(err)
			}
			total := int64(plan) + tc.overgrant
			if c.granted != total || c.errors != 0 || c.refused == 0 || c.before.left() != plan {
				t.Errorf("granted %d of %d, %d errors, %d refused, %d left before", c.granted, total, c.errors, c.refused, c.before.left())
			}
			if c.overshoot != tc.overgrant || c.open == 0 || c.held.reserved == 0 || c.released.reserved != 0 || c.released.left() != 0 {
				t.Errorf("overshoot %d (want %d); %d reserved by %d sessions open; after the releases %d reserved, %d left",
					c.overshoot, tc.overgrant, c.held.reserved, c.open, c.released.reserved, c.released.left())
			}
			if chf.releases < chf.creates {
				t.Errorf("%d sessions created, %d released", chf.creates, chf.releases)
			}
			if s.family != 0 {
				t.Error("the SMFs stay on the contention family")
			}
			text := c.sentence()
			for _, want := range []string{"family 7:", fmt.Sprintf("**largest overshoot %s bytes**", thousands(float64(tc.overgrant))), "0 reserved, 0 left."} {
				if !strings.Contains(text, want) {
					t.Errorf("%q lacks %q", text, want)
				}
			}
		})
	}
}

// The check refuses to pass on a pool it could not contend for (too little
// left, as in a database an earlier run used up) and on a server that
// answers nothing within a round.
func TestContendRefuses(t *testing.T) {
	_, s, rdb := contentionFixture(t, 30<<20, 0) // less than 4 callers' 10 MiB grants
	if _, err := contend(context.Background(), s, rdb, 7, month202611, 4, func(string, ...any) {}); err == nil || !strings.Contains(err.Error(), "nothing to contend for") {
		t.Errorf("a pool of 30 MiB: %v", err)
	}
	chf, s, rdb := contentionFixture(t, 1<<30, 0)
	chf.stall = 2500 * time.Millisecond // longer than the check waits for an answer
	if _, err := contend(context.Background(), s, rdb, 7, month202611, 4, func(string, ...any) {}); err == nil || !strings.Contains(err.Error(), "no call answered") {
		t.Errorf("a server answering nothing in a round: %v", err)
	}
}

// A call under way when its step ends completes: the session it opened is
// parked, not lost; a call asked for after the end is not made.
func TestCallOutlivesItsStep(t *testing.T) {
	chf, s, _ := contentionFixture(t, 1<<30, 0)
	chf.stall = 200 * time.Millisecond
	s.grant, s.family = 10<<20, 7
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if err := s.call(1)(ctx, rand.New(rand.NewPCG(1, 2))); err != nil {
		t.Fatalf("the call cut off: %v", err)
	}
	if s.parked() != 1 || chf.creates != 1 {
		t.Errorf("%d sessions parked of %d created", s.parked(), chf.creates)
	}
	if err := s.call(1)(ctx, rand.New(rand.NewPCG(1, 2))); err == nil || chf.creates != 1 {
		t.Errorf("a call after the end: %v, %d creates", err, chf.creates)
	}
}
