package main

import (
	"context"
	"encoding/json"
	"fmt"
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
	if c != (poolCheck{overshoot: 20, read: 6, usedUp: 5}) {
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
	if _, err := readPools(ctx, rdb, []int64{1, 4}, "202611"); err == nil || !strings.Contains(err.Error(), "family 4") {
		t.Errorf("a family without a plan read as %v", err)
	}
	mr.HSet("family:{2}:pool:202611", "used", "lots")
	if _, err := readPools(ctx, rdb, []int64{2}, "202611"); err == nil {
		t.Error("a used that is not a number was read")
	}
}

func TestPoolMonth(t *testing.T) {
	m, err := poolMonth(time.Date(2026, 11, 30, 15, 30, 0, 0, time.UTC)) // 2026-12-01 00:30 in Seoul
	if err != nil || m != "202612" {
		t.Errorf("poolMonth = %q, %v", m, err)
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

// The contention check drives one family's members until the pool grants
// no more: against a CHF that keeps its pool it reads no overshoot and
// nothing reserved after the releases; against one that grants past the
// pool's end it reads the overshoot. Creates answered with nothing granted
// are released, not errors.
func TestContend(t *testing.T) {
	for _, tc := range []struct {
		name      string
		overgrant int64
	}{{"kept", 0}, {"overspent", 25 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			mr := miniredis.RunT(t)
			rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
			defer rdb.Close()
			const fid, plan = 7, 205 << 20 // 20.5 grants of 10 MiB
			mr.HSet(fmt.Sprintf("family:{%d}", fid), "plan", strconv.Itoa(plan))
			chf := &fakeCHF{mr: mr, fid: fid, overgrant: tc.overgrant, held: map[string]int64{}}
			srv := httptest.NewServer(chf)
			defer srv.Close()
			s := newSMFs(srv.URL, "token", &generator{families: 6}, 4)
			s.client = srv.Client()
			c, err := contend(context.Background(), s, rdb, fid, "202611", 4, func(string, ...any) {})
			if err != nil {
				t.Fatal(err)
			}
			total := int64(plan) + tc.overgrant
			if c.granted != total || c.errors != 0 || c.refused == 0 || c.before.left() != plan {
				t.Errorf("granted %d of %d, %d errors, %d refused, %d left before", c.granted, total, c.errors, c.refused, c.before.left())
			}
			if c.held.over() != tc.overgrant || c.released.reserved != 0 {
				t.Errorf("overshoot %d (want %d), %d reserved after the releases", c.held.over(), tc.overgrant, c.released.reserved)
			}
			if chf.releases < chf.creates {
				t.Errorf("%d sessions created, %d released", chf.creates, chf.releases)
			}
			if s.family != 0 {
				t.Error("the SMFs stay on the contention family")
			}
			text := c.sentence()
			for _, want := range []string{"family 7:", fmt.Sprintf("**overshoot %s bytes**", thousands(float64(tc.overgrant))), "after the releases it reserved 0 bytes"} {
				if !strings.Contains(text, want) {
					t.Errorf("%q lacks %q", text, want)
				}
			}
		})
	}
}
