package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The grant path's peer: CGRateS's SessionS (cgr-engine v0.10.4, built from
// the module proxy by scripts/bench-peers.sh with PEERS_CGRATES=1) in a
// process of its own, its data and stor DBs *internal (in its memory). The
// tariff plan, written here and loaded over its API
// (APIerSv1.LoadTariffPlanFromFolder), gives every family one shared data
// balance: the first member's account holds a *data balance "family" in the
// shared group SG_F<family> (strategy *highest), the other three members'
// accounts an empty balance of the same group, so a debit on any member's
// account takes the family's bytes. Sessions are *prepaid *data ones driven
// over its JSON-RPC HTTP endpoint as an SMF would through a Diameter or
// HTTP agent: SessionSv1.InitiateSession reserves the first grant,
// UpdateSession reports the last grant used (LastUsed) and reserves the
// next (Usage), TerminateSession ends it. CGRateS debits a grant when it
// grants it and refunds what a terminate reports unused.

// cgrTenant is the tariff plan's tenant.
const cgrTenant = "cgrates.org"

// cgrPeer is a running cgr-engine and the sessions driven on it.
type cgrPeer struct {
	child    *child
	url      string // its JSON-RPC over HTTP
	client   *http.Client
	families int
	pool     int64 // each family's shared bytes
	// contention is the family whose pool is small (contendedPool): the
	// overshoot check drives every caller on its members.
	contention int64
	pick       func(rng *rand.Rand) (fid, cid int64)
	grant      int64
	mu         sync.Mutex
	idle       []*cgrSession
	granted    atomic.Int64
	refused    atomic.Int64 // initiates and updates that granted nothing
	nextID     atomic.Int64
	rpcID      atomic.Int64
	run        string
}

// cgrSession is one open CGRateS session: its OriginID, the member's
// account, the bytes last granted.
type cgrSession struct {
	origin, account string
	held            int64
}

// contendedPool is the contention family's pool: 1 GiB, a hundred 10 MiB
// grants, used up within the check's first second.
const contendedPool = 1 << 30

// cgrConfig is cgr-engine's configuration: JSON-RPC over HTTP on httpPort,
// its other listeners on loopback ports, every DB in its memory, the
// services a *prepaid data session needs (RALs, chargers, SessionS, the
// APIer and the scheduler that runs the tariff plan's top-ups). Data is
// debited in increments of increment bytes (*zero<increment>ns: one
// nanosecond of usage is one byte); at the default *zero1ns a 10 MiB grant
// is refused (MAX_INCREMENTS_EXCEEDED, over rals.max_increments), and
// CGRateS's work per debit grows with the increments a grant holds.
func cgrConfig(jsonPort, gobPort, httpPort int, increment int64, lockingTimeout time.Duration) string {
	return fmt.Sprintf(`{
"general": {"node_id": "peers", "log_level": 3, "locking_timeout": "%s"},
"listen": {"rpc_json": "127.0.0.1:%d", "rpc_gob": "127.0.0.1:%d", "http": "127.0.0.1:%d"},
"data_db": {"db_type": "*internal"},
"stor_db": {"db_type": "*internal"},
"rals": {"enabled": true, "balance_rating_subject": {"*any": "*zero1ns", "*voice": "*zero1s", "*data": "*zero%dns"}},
"schedulers": {"enabled": true},
"chargers": {"enabled": true},
"sessions": {"enabled": true, "chargers_conns": ["*internal"], "rals_conns": ["*internal"]},
"apiers": {"enabled": true, "scheduler_conns": ["*internal"]}
}
`, lockingTimeout, jsonPort, gobPort, httpPort, increment)
}

// cgrAccount is the CGRateS account of member cid.
func cgrAccount(cid int64) string { return "m" + strconv.FormatInt(cid, 10) }

// writeTariffPlan writes the tariff plan's CSV files into dir: families
// 1..families with pool bytes each, and family contention with
// contendedPool, four members each (f*10+1 .. f*10+4, the generator's).
func writeTariffPlan(dir string, families int, pool int64, contention int64) error {
	var sg, acts, plans, accts strings.Builder
	sg.WriteString("#Id,Account,Strategy,RatingSubject\n")
	acts.WriteString("#ActionsId[0],Action[1],ExtraParameters[2],Filter[3],BalanceId[4],BalanceType[5],Categories[6],DestinationIds[7],RatingSubject[8],SharedGroup[9],ExpiryTime[10],TimingIds[11],Units[12],BalanceWeight[13],BalanceBlocker[14],BalanceDisabled[15],Weight[16]\n")
	plans.WriteString("#Id,ActionsId,TimingId,Weight\n")
	accts.WriteString("#Tenant,Account,ActionPlanId,ActionTriggersId,AllowNegative,Disabled\n")
	family := func(f int64, bytes int64) {
		id := strconv.FormatInt(f, 10)
		fmt.Fprintf(&sg, "SG_F%s,*any,*highest,\n", id)
		fmt.Fprintf(&acts, "POOL_F%s,*topup_reset,,,family,*data,,*any,,SG_F%s,*unlimited,,%d,10,false,false,10\n", id, id, bytes)
		fmt.Fprintf(&acts, "JOIN_F%s,*topup_reset,,,family,*data,,*any,,SG_F%s,*unlimited,,0,10,false,false,10\n", id, id)
		fmt.Fprintf(&plans, "AP_POOL_F%s,POOL_F%s,*asap,10\nAP_JOIN_F%s,JOIN_F%s,*asap,10\n", id, id, id, id)
		for m := int64(1); m <= 4; m++ {
			plan := "AP_JOIN_F" + id
			if m == 1 {
				plan = "AP_POOL_F" + id
			}
			fmt.Fprintf(&accts, "%s,%s,%s,,false,false\n", cgrTenant, cgrAccount(f*10+m), plan)
		}
	}
	for f := int64(1); f <= int64(families); f++ {
		family(f, pool)
	}
	family(contention, contendedPool)
	files := map[string]string{
		"SharedGroups.csv":   sg.String(),
		"Actions.csv":        acts.String(),
		"ActionPlans.csv":    plans.String(),
		"AccountActions.csv": accts.String(),
		"Chargers.csv":       "#Tenant,ID,FilterIDs,ActivationInterval,RunID,AttributeIDs,Weight\n" + cgrTenant + ",DEFAULT,,,*default,*none,0\n",
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// startCGRates starts cgr-engine, waits until its API answers and loads the
// tariff plan.
func startCGRates(ctx context.Context, cfg config, say func(string, ...any)) (*cgrPeer, error) {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	confDir, tpDir := filepath.Join(cfg.dir, "cgrates", "etc"), filepath.Join(cfg.dir, "cgrates", "tp")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(confDir, "cgrates.json"), []byte(cgrConfig(ports[0], ports[1], ports[2], cfg.cgrIncrement, cfg.cgrLockingTimeout)), 0o644); err != nil {
		return nil, err
	}
	c := &cgrPeer{url: "http://127.0.0.1:" + strconv.Itoa(ports[2]) + "/jsonrpc", families: cfg.cgrFamilies,
		pool: 1 << 40, contention: int64(cfg.cgrFamilies) + 1, run: randomHex(4),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: max(cfg.callers, cfg.inFlight), IdleConnTimeout: time.Minute},
			Timeout: 30 * time.Second}}
	gen := &generator{families: cfg.cgrFamilies}
	c.pick = gen.member
	if err := writeTariffPlan(tpDir, c.families, c.pool, c.contention); err != nil {
		return nil, err
	}
	var err error
	if c.child, _, err = start(cfg.dir, "cgr-engine", cfg.cgrEngine, []string{"-config_path", confDir, "-logger", "*stdout"}, baseEnv(), false); err != nil {
		return nil, err
	}
	if err := untilReady(ctx, c.child, cfg.dir, "cgr-engine's API", 200*time.Millisecond, func() error {
		var pong string
		return c.rpc(ctx, "APIerSv1.Ping", map[string]any{}, &pong)
	}); err != nil {
		c.child.stop()
		return nil, err
	}
	say("loading the tariff plan: %d families sharing a data balance each (APIerSv1.LoadTariffPlanFromFolder)", c.families+1)
	var reply string
	if err := c.rpc(ctx, "APIerSv1.LoadTariffPlanFromFolder", map[string]any{"FolderPath": tpDir}, &reply); err != nil {
		c.child.stop()
		return nil, fmt.Errorf("loading the tariff plan: %w", err)
	}
	// The top-ups are *asap action plans: wait until the last family's
	// pool is there.
	if err := untilReady(ctx, c.child, cfg.dir, "the tariff plan's top-ups", 200*time.Millisecond, func() error {
		b, err := c.balances(ctx, []int64{c.contention})
		if err != nil {
			return err
		}
		if b[c.contention].sum != contendedPool || b[c.contention].n != 4 {
			return fmt.Errorf("family %d holds %+v", c.contention, b[c.contention])
		}
		return nil
	}); err != nil {
		c.child.stop()
		return nil, err
	}
	return c, nil
}

// rpc makes one JSON-RPC call over HTTP.
func (c *cgrPeer) rpc(ctx context.Context, method string, params, reply any) error {
	body, err := json.Marshal(map[string]any{"method": method, "params": []any{params}, "id": c.rpcID.Add(1)})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %d %s", method, resp.StatusCode, data)
	}
	var a struct {
		Result json.RawMessage `json:"result"`
		Error  any             `json:"error"`
	}
	if err := json.Unmarshal(data, &a); err != nil {
		return fmt.Errorf("%s: %w in %s", method, err, data)
	}
	if a.Error != nil {
		return fmt.Errorf("%s: %v", method, a.Error)
	}
	if err := json.Unmarshal(a.Result, reply); err != nil {
		return fmt.Errorf("%s: %w in %s", method, err, a.Result)
	}
	return nil
}

// event is the CGREvent of one step of session s: usage bytes asked for,
// used bytes reported (LastUsed; <0: none).
func (c *cgrPeer) event(s *cgrSession, usage, used int64) map[string]any {
	now := time.Now().UTC().Format(time.RFC3339Nano)
	ev := map[string]any{"ToR": "*data", "OriginID": s.origin, "OriginHost": "peers", "RequestType": "*prepaid",
		"Tenant": cgrTenant, "Category": "data", "Account": s.account, "Subject": s.account, "Destination": "internet",
		"SetupTime": now, "AnswerTime": now, "Usage": usage}
	if used >= 0 {
		ev["LastUsed"] = used
	}
	return map[string]any{"Tenant": cgrTenant, "ID": c.run + "-" + strconv.FormatInt(c.nextID.Add(1), 36), "Event": ev}
}

// maxUsage is what InitiateSession and UpdateSession answer: the bytes
// granted (a duration in nanoseconds, one per byte for *data).
type maxUsage struct {
	MaxUsage int64
}

// call takes one step, as smfs.call does: an update reporting the whole
// last grant used and asking for the next; an initiate when the caller
// holds no session, a terminate when nothing more is granted.
func (c *cgrPeer) call(int) call {
	return func(ctx context.Context, rng *rand.Rand) error {
		c.mu.Lock()
		var s *cgrSession
		if n := len(c.idle); n > 0 {
			s, c.idle = c.idle[n-1], c.idle[:n-1]
		}
		c.mu.Unlock()
		if s == nil {
			_, cid := c.pick(rng)
			s = &cgrSession{origin: c.run + "-s" + strconv.FormatInt(c.nextID.Add(1), 36), account: cgrAccount(cid)}
			args := c.event(s, c.grant, -1)
			args["InitSession"] = true
			var r maxUsage
			if err := c.rpc(ctx, "SessionSv1.InitiateSession", args, &r); err != nil {
				return err
			}
			if r.MaxUsage <= 0 { // the family's pool is used up
				c.refused.Add(1)
				return c.terminate(ctx, s, 0)
			}
			c.granted.Add(r.MaxUsage)
			s.held = r.MaxUsage
			c.park(s)
			return nil
		}
		args := c.event(s, c.grant, s.held)
		args["UpdateSession"] = true
		var r maxUsage
		if err := c.rpc(ctx, "SessionSv1.UpdateSession", args, &r); err != nil {
			return err
		}
		if r.MaxUsage <= 0 {
			c.refused.Add(1)
			return c.terminate(ctx, s, 0)
		}
		c.granted.Add(r.MaxUsage)
		s.held = r.MaxUsage
		c.park(s)
		return nil
	}
}

// terminate ends s, used bytes of its last grant used.
func (c *cgrPeer) terminate(ctx context.Context, s *cgrSession, used int64) error {
	args := c.event(s, 0, used)
	delete(args["Event"].(map[string]any), "Usage")
	args["TerminateSession"] = true
	var reply string
	return c.rpc(ctx, "SessionSv1.TerminateSession", args, &reply)
}

func (c *cgrPeer) park(s *cgrSession) {
	c.mu.Lock()
	c.idle = append(c.idle, s)
	c.mu.Unlock()
}

// releaseAll terminates every session held, none of their last grants
// used: those bytes go back to the pools.
func (c *cgrPeer) releaseAll(ctx context.Context) error {
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	var first error
	for _, s := range idle {
		if err := c.terminate(ctx, s, 0); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// familyBalance is a family's shared data balance as its members' accounts
// hold it: the sum, the lowest single balance and how many there are.
type familyBalance struct {
	sum, lowest int64
	n           int
}

// balances reads the shared data balances of families over the API.
func (c *cgrPeer) balances(ctx context.Context, families []int64) (map[int64]familyBalance, error) {
	ids := make([]string, 0, 4*len(families))
	for _, f := range families {
		for m := int64(1); m <= 4; m++ {
			ids = append(ids, cgrAccount(f*10+m))
		}
	}
	var accounts []struct {
		ID         string
		BalanceMap map[string][]struct {
			ID    string
			Value float64
		}
	}
	if err := c.rpc(ctx, "APIerSv2.GetAccounts", map[string]any{"Tenant": cgrTenant, "AccountIDs": ids}, &accounts); err != nil {
		return nil, err
	}
	out := make(map[int64]familyBalance, len(families))
	for _, a := range accounts {
		_, acc, _ := strings.Cut(a.ID, ":")
		cid, err := strconv.ParseInt(strings.TrimPrefix(acc, "m"), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("account %q: %w", a.ID, err)
		}
		f := cid / 10
		fb := out[f]
		for _, b := range a.BalanceMap["*data"] {
			if b.ID != "family" {
				continue
			}
			v := int64(b.Value)
			if fb.n == 0 || v < fb.lowest {
				fb.lowest = v
			}
			fb.sum += v
			fb.n++
		}
		out[f] = fb
	}
	return out, nil
}

// overshoot reads every family's shared balance and returns the largest
// overshoot (bytes below 0 of a family's sum or of any one balance) and
// the bytes the pools have lost since the tariff plan was loaded.
func (c *cgrPeer) overshoot(ctx context.Context) (over, spent int64, err error) {
	const page = 500
	for first := int64(1); first <= int64(c.families)+1; first += page {
		var fams []int64
		for f := first; f < first+page && f <= int64(c.families)+1; f++ {
			fams = append(fams, f)
		}
		b, err := c.balances(ctx, fams)
		if err != nil {
			return 0, 0, err
		}
		for _, f := range fams {
			fb, ok := b[f]
			if !ok || fb.n != 4 {
				return 0, 0, fmt.Errorf("family %d: %d shared balances, want 4", f, fb.n)
			}
			over = max(over, -fb.sum, -fb.lowest)
			pool := c.pool
			if f == c.contention {
				pool = contendedPool
			}
			spent += pool - fb.sum
		}
	}
	return over, spent, nil
}

// cgrSteps runs the grant path on CGRateS: the charging target's steps
// (closed loops at 1, 10 and 100 MiB, the fixed rate at 10 MiB), then
// every caller on the contention family's four members until its 1 GiB is
// used up; the largest overshoot is read after each step.
func (r *report) cgrSteps(ctx context.Context, c *cgrPeer, procs []proc, say func(string, ...any)) error {
	cfg := r.cfg
	const target = "CGRateS v0.10.4 SessionS (JSON-RPC over HTTP, *internal DBs)"
	defer c.releaseAll(context.WithoutCancel(ctx))
	steps := grantPlan(ctx, cfg)
	for _, st := range steps {
		if err := c.releaseAll(ctx); err != nil {
			return fmt.Errorf("%s: terminating the sessions: %w", target, err)
		}
		c.grant = st.grant
		say("%s: %s", target, st.name)
		m := newMeter(procs)
		var g0, g1 int64
		mark := func() {
			if m.marked == 0 {
				g0 = c.granted.Load()
			} else {
				g1 = c.granted.Load()
			}
			m.mark()
		}
		w, err := st.run(c.call(1), mark)
		if err != nil {
			return err
		}
		if m.err != nil {
			return m.err
		}
		if err := c.releaseAll(ctx); err != nil {
			return fmt.Errorf("%s: terminating the sessions: %w", target, err)
		}
		over, spent, err := c.overshoot(ctx)
		if err != nil {
			return fmt.Errorf("%s: reading the pools: %w", target, err)
		}
		res := result{target: target, step: st.name, per: 1, w: w, procs: procs, cpu: m.spent, authorised: g1 - g0,
			overshoot: over, overshootRead: true}
		say("%s; largest overshoot %d bytes, %d bytes debited of %d granted", res.line(), over, spent, c.granted.Load())
		if w.Calls == 0 || w.Errors*10 > w.Calls {
			return fmt.Errorf("%s, %s: %d of %d calls failed (first: %v)", target, st.name, w.Errors, w.Calls, w.FirstErr)
		}
		r.results = append(r.results, res)
	}
	// Contention: every caller on one family's members, 10 MiB grants,
	// until its pool is used up (about a hundred grants, then refusals).
	c.grant = 10 << 20
	c.pick = func(rng *rand.Rand) (int64, int64) { return c.contention, c.contention*10 + 1 + rng.Int64N(4) }
	say("%s: every caller on one family's 1 GiB until it is used up", target)
	g0, refused0 := c.granted.Load(), c.refused.Load()
	var calls, errs int64
	stalled := false
	var failed error // the first error of a round that mostly failed
	for round := 0; c.refused.Load() == refused0; round++ {
		if round == 30 {
			return fmt.Errorf("%s, contention: the 1 GiB pool not used up in 30 rounds of 2 s", target)
		}
		w, err := closedLoop(ctx, cfg.callers, 0, 2*time.Second, c.call(1), func() {})
		if err != nil {
			return err
		}
		calls, errs = calls+w.Calls, errs+w.Errors
		if w.Errors*10 > w.Calls && w.Calls > 0 {
			// The peer's answer to contention, reported as the check's
			// outcome (the run's other rows are kept).
			failed = w.FirstErr
			say("  %d of %d calls failed (first: %v)", w.Errors, w.Calls, w.FirstErr)
			break
		}
		if w.Calls == 0 { // no call answered in 2 s: SessionS is stuck
			stalled = true
			break
		}
	}
	if stalled {
		// Their terminates would wait on the same locks.
		c.mu.Lock()
		c.idle = nil
		c.mu.Unlock()
	} else if err := c.releaseAll(ctx); err != nil {
		if failed == nil {
			return fmt.Errorf("%s: terminating the sessions: %w", target, err)
		}
		say("  terminating the sessions: %v", err) // failing as the calls did
	}
	b, err := c.balances(ctx, []int64{c.contention})
	if err != nil {
		return err
	}
	fb := b[c.contention]
	_, spent, err := c.overshoot(ctx)
	if err != nil {
		return err
	}
	r.contended = &contention{calls: calls, errors: errs, granted: c.granted.Load() - g0, left: fb.sum,
		overshoot: max(0, -fb.sum, -fb.lowest), unreturned: spent - c.granted.Load(), stalled: stalled,
		lockingTimeout: cfg.cgrLockingTimeout}
	if failed != nil {
		r.contended.failed = failed.Error()
	}
	say("  %d calls (%d failed), %d bytes granted of %d, %d left; overshoot %d; stalled %v; %d bytes debited over the run and never granted",
		calls, errs, r.contended.granted, int64(contendedPool), fb.sum, r.contended.overshoot, stalled, r.contended.unreturned)
	return nil
}

// contention is the contention check's outcome.
type contention struct {
	calls, errors            int64
	granted, left, overshoot int64
	// unreturned is what every pool lost over the whole run beyond the
	// bytes the answers granted: calls cut off at a step's end after their
	// debit, and reservations a terminate reported unused that did not go
	// back to the shared balance.
	unreturned int64
	// stalled: a round of 2 s in which no call was answered ended the
	// check before the pool was used up.
	stalled        bool
	lockingTimeout time.Duration
	// failed is the first error of a round in which most calls failed,
	// which ended the check before the pool was used up ("" otherwise).
	failed string
}

// grantStep is one step of a grant path: its name, the bytes asked for each
// time, how it runs.
// grantPlan is the grant path's steps, the same for DPCS and its peer:
// closed loops at 1, 10 and 100 MiB grants, then a fixed rate at 10 MiB.
func grantPlan(ctx context.Context, cfg config) []grantStep {
	closed := func(f call, mark func()) (window, error) {
		return closedLoop(ctx, cfg.callers, cfg.warmup, cfg.duration, f, mark)
	}
	return []grantStep{
		{fmt.Sprintf("closed loop, %d callers, 1 MiB grants", cfg.callers), 1 << 20, closed},
		{fmt.Sprintf("closed loop, %d callers, 10 MiB grants", cfg.callers), 10 << 20, closed},
		{fmt.Sprintf("closed loop, %d callers, 100 MiB grants", cfg.callers), 100 << 20, closed},
		{fmt.Sprintf("%s calls/s, 10 MiB grants", thousands(cfg.grantRate)), 10 << 20, func(f call, mark func()) (window, error) {
			return openLoop(ctx, cfg.grantRate, cfg.inFlight, cfg.warmup, cfg.duration, f, mark)
		}},
	}
}

type grantStep struct {
	name  string
	grant int64
	run   func(call, func()) (window, error)
}
