package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The tariff plan gives each family one shared group: the first member's
// account tops up the pool, the other three join with an empty balance of
// the same group; the contention family has the small pool.
func TestTariffPlan(t *testing.T) {
	dir := t.TempDir()
	if err := writeTariffPlan(dir, 2, 5000, 3); err != nil {
		t.Fatal(err)
	}
	read := func(name string) []string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if !strings.HasPrefix(lines[0], "#") {
			t.Errorf("%s has no header: %q", name, lines[0])
		}
		return lines[1:]
	}
	if sg := read("SharedGroups.csv"); len(sg) != 3 || sg[0] != "SG_F1,*any,*highest," {
		t.Errorf("shared groups %q", sg)
	}
	acts := read("Actions.csv")
	if len(acts) != 6 || acts[0] != "POOL_F1,*topup_reset,,,family,*data,,*any,,SG_F1,*unlimited,,5000,10,false,false,10" ||
		acts[1] != "JOIN_F1,*topup_reset,,,family,*data,,*any,,SG_F1,*unlimited,,0,10,false,false,10" ||
		!strings.Contains(acts[4], ",SG_F3,*unlimited,,1073741824,") {
		t.Errorf("actions %q", acts)
	}
	for _, a := range acts {
		if n := strings.Count(a, ","); n != 16 {
			t.Errorf("action %q has %d columns, want 17", a, n+1)
		}
	}
	accts := read("AccountActions.csv")
	if len(accts) != 12 || accts[0] != "cgrates.org,m11,AP_POOL_F1,,false,false" || accts[1] != "cgrates.org,m12,AP_JOIN_F1,,false,false" ||
		accts[11] != "cgrates.org,m34,AP_JOIN_F3,,false,false" {
		t.Errorf("account actions %q", accts)
	}
	if plans := read("ActionPlans.csv"); len(plans) != 6 || plans[0] != "AP_POOL_F1,POOL_F1,*asap,10" {
		t.Errorf("action plans %q", plans)
	}
	if ch := read("Chargers.csv"); len(ch) != 1 || !strings.Contains(ch[0], ",*default,*none,") {
		t.Errorf("chargers %q", ch)
	}
}

// cgr-engine's configuration is JSON with the run's ports and increment.
func TestCGRConfig(t *testing.T) {
	var c struct {
		Listen map[string]string
		Rals   struct{ Balance_rating_subject map[string]string }
		DataDB struct {
			DBType string `json:"db_type"`
		} `json:"data_db"`
	}
	if err := json.Unmarshal([]byte(cgrConfig(1, 2, 3, 1<<20, 0)), &c); err != nil {
		t.Fatal(err)
	}
	if c.Listen["http"] != "127.0.0.1:3" || c.Listen["rpc_json"] != "127.0.0.1:1" ||
		c.Rals.Balance_rating_subject["*data"] != "*zero1048576ns" || c.DataDB.DBType != "*internal" {
		t.Errorf("config %+v", c)
	}
}

// cgrates runs by default only with -cgr-engine, and -only cgrates needs it.
func TestSelectTargets(t *testing.T) {
	base := []string{"-redis", "r", "-mysql", "m", "-server", "s", "-recoverybench", "rb"}
	for _, tc := range []struct {
		args    []string
		cgrates bool
		fails   bool
	}{
		{nil, false, false},
		{[]string{"-cgr-engine", "x"}, true, false},
		{[]string{"-only", "charging,cgrates", "-cgr-engine", "x"}, true, false},
		{[]string{"-only", "cgrates"}, false, true},
		{[]string{"-only", "charging", "-cgr-engine", "x"}, false, false},
	} {
		c, err := parseFlags(append(base, tc.args...))
		if err != nil {
			t.Fatal(err)
		}
		got, err := selectTargets(c)
		if (err != nil) != tc.fails || err == nil && got["cgrates"] != tc.cgrates {
			t.Errorf("%q: cgrates %v, error %v", tc.args, got["cgrates"], err)
		}
	}
	if _, err := parseFlags(append(base, "-cgr-increment", "0")); err == nil {
		t.Error("-cgr-increment 0 accepted")
	}
}

// The pools are read from the members' accounts: a family's overshoot is
// its sum's or any one balance's bytes below 0; JSON-RPC errors are errors.
func TestCGRBalances(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Method string
			Params []struct{ AccountIDs []string }
			ID     int64
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Params) != 1 {
			t.Errorf("request %+v: %v", req, err)
			return
		}
		if req.Method != "APIerSv2.GetAccounts" {
			json.NewEncoder(w).Encode(map[string]any{"id": req.ID, "result": nil, "error": "SERVER_ERROR"})
			return
		}
		values := map[string]float64{"m11": 100, "m21": -5, "m22": 0, "m31": 30, "m32": -40}
		var accounts []any
		for _, id := range req.Params[0].AccountIDs {
			accounts = append(accounts, map[string]any{"ID": "cgrates.org:" + id, "BalanceMap": map[string]any{
				"*data": []any{map[string]any{"ID": "family", "Value": values[id]}, map[string]any{"ID": "other", "Value": -1e9}}}})
		}
		json.NewEncoder(w).Encode(map[string]any{"id": req.ID, "result": accounts, "error": nil})
	}))
	defer srv.Close()
	c := &cgrPeer{url: srv.URL, client: srv.Client(), families: 2, pool: 100, contention: 3}
	ctx := context.Background()
	b, err := c.balances(ctx, []int64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if b[1] != (familyBalance{sum: 100, lowest: 0, n: 4}) || b[2] != (familyBalance{sum: -5, lowest: -5, n: 4}) ||
		b[3] != (familyBalance{sum: -10, lowest: -40, n: 4}) {
		t.Errorf("balances %+v", b)
	}
	over, spent, err := c.overshoot(ctx)
	if err != nil || over != 40 || spent != 0+105+contendedPool+10 {
		t.Errorf("overshoot = %d, spent %d, %v", over, spent, err)
	}
	var pong string
	if err := c.rpc(ctx, "APIerSv1.Ping", map[string]any{}, &pong); err == nil || !strings.Contains(err.Error(), "SERVER_ERROR") {
		t.Errorf("a JSON-RPC error was %v", err)
	}
}

// The grant table names the peer's rows and its overshoot read; DPCS's
// rows say how many pools were used up beside theirs, or that it was not
// read; the DPCS contention check has its sentence.
func TestGrantReport(t *testing.T) {
	w := window{Calls: 100, Elapsed: time.Second, lat: []time.Duration{time.Millisecond, 2 * time.Millisecond}}
	r := &report{results: []result{
		{target: "DPCS charging interface (Nchf update over h2c)", step: "closed loop, 50 callers, 1 MiB grants", per: 1, w: w, authorised: 100 << 20},
		{target: "CGRateS v0.10.4 SessionS", step: "closed loop, 50 callers, 1 MiB grants", per: 1, w: w, authorised: 100 << 20,
			overshoot: 0, overshootRead: true},
	}, contended: &contention{calls: 150, granted: 1 << 30, unreturned: 4096}}
	md := r.markdown("")
	r.contended = &contention{calls: 180, errors: 78, failed: "SessionSv1.UpdateSession: RALS_ERROR:RATING_PLAN_NOT_FOUND"}
	r.cfg.families = 20_000
	r.results = append(r.results, result{target: "DPCS charging interface (Nchf update over h2c)", step: "closed loop, 50 callers, 100 MiB grants",
		per: 1, w: w, authorised: 100 << 20, overshootRead: true, usedUp: 201})
	r.dpcsContended = &poolContention{family: 20_001, grant: 10 << 20, rounds: 2, calls: 7952, refused: 6004, granted: 1 << 30,
		before: pool{total: 2 << 30, used: 1 << 30}, held: pool{total: 2 << 30, used: 2<<30 - 500<<20, reserved: 500 << 20}, open: 50,
		released: pool{total: 2 << 30, used: 2 << 30}}
	dpcs := r.markdown("")
	for _, want := range []string{"| 0 bytes (201 of 20,000 pools with less than a grant left) |",
		"family 20,001: a pool of 2,147,483,648 bytes with 1,073,741,824 left, 10 MiB grants", "7,952 calls in 2 rounds of 200 ms, 0 failed, 6,004 answered with nothing granted",
		"Read after every round: **largest overshoot 0 bytes**; the most reserved at once 524,288,000 bytes, by 50 open sessions (1,623,195,648 used of 2,147,483,648 then);",
		"after the releases 2,147,483,648 bytes used, 0 reserved, 0 left."} {
		if !strings.Contains(dpcs, want) {
			t.Errorf("report lacks %q:\n%s", want, dpcs)
		}
	}
	r.results, r.dpcsContended = r.results[:2], nil
	if failed := r.markdown(""); !strings.Contains(failed, "**most calls of a 2 s round failed** after 180 calls (78 failed; the first: `SessionSv1.UpdateSession: RALS_ERROR:RATING_PLAN_NOT_FOUND`)") {
		t.Errorf("a contention check the peer failed:\n%s", failed)
	}
	for _, want := range []string{"| closed loop, 50 callers, 1 MiB grants | 100 | 2.0 ms |", "| not read |",
		"| CGRateS v0.10.4 SessionS, closed loop, 50 callers, 1 MiB grants | 100 | 2.0 ms |", "| 0 bytes |",
		"150 calls, 0 failed; 1,073,741,824 bytes granted", "lost 4,096 bytes more than the answers granted"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
