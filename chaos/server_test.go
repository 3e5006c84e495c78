//go:build chaos

package chaos

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/dabom/dpcs/e2e"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/charging/smfsim"
	"github.com/dabom/dpcs/service/store"
)

// The server deployable joins the run (#23): gateways' POST /decisions and
// owners' top-ups through the API hit the same families, the same Redis and
// the same MariaDB as the processors, through every fault. What a gateway
// was told must be what SQL holds at the end: an answered event has its
// usage_record row with the same decision, a refused one (503, "nothing
// granted") has none; the processors' invariants (nobody over plan or a
// limit, SQL = Redis) hold with both writers.

// apiFamilies are the families whose owners log in and top up, and whose
// members the gateway asks about.
const apiFamilies = 40

// apiPassword is the provisioned owners' password.
const apiPassword = "chaos-owner-Pw-7261"

type serverLoad struct {
	h      *harness
	proc   *Process
	base   string
	gw     string
	client *http.Client
	stop   chan struct{}
	wg     sync.WaitGroup

	mu        sync.Mutex
	answered  map[string]policy.Decision // 200
	refused   map[string]bool            // 503: nothing granted
	unknown   map[string]bool            // no answer (transport error, other status)
	lastErr   string
	topUps    int // 200
	topUpNo   int // refused (503) or failed
	tokens    map[int64]string
	tried     map[int64]bool // families a top-up was asked for
	statusSeq map[int]int
	why       map[string]int // 503s by their detail

	// The charging interface (#37): simulated SMFs hold PDU sessions on
	// the API families' members through every fault.
	charging string // its base URL
	chfToken string
	smf      *smfsim.Simulator
}

// buildServer builds examples/server next to the processor binary.
func (h *harness) buildServer() string {
	h.t.Helper()
	bin := filepath.Join(h.dir, "server")
	cmd := exec.Command("go", "build", "-o", bin, "./examples/server")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		h.t.Fatalf("go build ./examples/server: %v\n%s", err, out)
	}
	return bin
}

// startServer starts one server deployable (with /decisions) and waits for
// its health endpoint.
func (h *harness) startServer() *serverLoad {
	h.t.Helper()
	bin := h.serverBin
	ports, err := FreePorts(2)
	if err != nil {
		h.t.Fatal(err)
	}
	secret, gw, chf := make([]byte, 32), make([]byte, 32), make([]byte, 32)
	_, _ = crand.Read(secret)
	_, _ = crand.Read(gw)
	_, _ = crand.Read(chf)
	s := &serverLoad{h: h, base: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), gw: "gw_" + hex.EncodeToString(gw),
		charging: fmt.Sprintf("http://127.0.0.1:%d", ports[1]), chfToken: "chf_" + hex.EncodeToString(chf),
		client: &http.Client{Timeout: 30 * time.Second}, stop: make(chan struct{}),
		answered: map[string]policy.Decision{}, refused: map[string]bool{}, unknown: map[string]bool{},
		tokens: map[int64]string{}, tried: map[int64]bool{}, why: map[string]int{}, statusSeq: map[int]int{}}
	env := h.childEnv(
		fmt.Sprintf("DPCS_HTTP_ADDR=127.0.0.1:%d", ports[0]),
		"DPCS_ADMIN_ADDR=off",
		"DPCS_JWT_SECRET="+hex.EncodeToString(secret),
		"DPCS_GATEWAY_TOKENS="+s.gw,
		"DPCS_LOG_LEVEL=info",
		"DPCS_TOPUP_OFFERS=1MB=0,100MB=2200", // the load's owners buy 1 MiB top-ups
		// It joins the processors' notifier group: store QUOTA_UPDATED as
		// they do (the invariants count one per allowed row).
		"DPCS_NOTIFIER_STORE_QUOTA_UPDATED=true",
		// The charging interface, with short validities, holding times and
		// sweeps so that a session whose answer was lost in a fault is
		// closed (its reservation returned) within seconds of the run.
		fmt.Sprintf("DPCS_CHARGING_ADDR=127.0.0.1:%d", ports[1]),
		"DPCS_CHARGING_TOKENS="+s.chfToken,
		"DPCS_CHARGING_VALIDITY=10s",
		"DPCS_CHARGING_HOLDING_TIME=5s",
		"DPCS_CHARGING_SWEEP=2s",
		"DPCS_CHARGING_NOTIFY_NETWORKS=127.0.0.0/8",
	)
	if s.proc, err = StartProcess("server-1", filepath.Join(h.dir, "server-1.log"), env, bin); err != nil {
		h.t.Fatal(err)
	}
	h.addServer(s.proc)
	h.mu.Lock()
	h.judges = append(h.judges, s.proc)
	h.mu.Unlock()
	err = e2e.Wait{What: "the server deployable to answer /healthz", Poll: 100 * time.Millisecond}.Until(h.ctx, func(ctx context.Context) (e2e.Progress, error) {
		resp, err := s.client.Get(s.base + "/healthz")
		if err != nil {
			return e2e.Progress{Seen: err.Error()}, nil
		}
		resp.Body.Close()
		return e2e.Progress{Done: resp.StatusCode == http.StatusOK, Seen: resp.Status}, nil
	})
	if err != nil {
		h.t.Fatalf("%v\n%s", err, Tail(s.proc.LogPath, 30))
	}
	h.logf("started server-1 (pid %d) on %s: gateways' /decisions and owners' top-ups; charging on %s", s.proc.PID(), s.base, s.charging)
	return s
}

// smfSessions is how many PDU sessions the simulated SMFs hold at once.
const smfSessions = 20

// startSMFs gives the API families' members IMSIs and starts the simulated
// SMFs on them: modest rates and short sessions, so that pools are touched
// and grants are created, updated and released through every fault.
func (s *serverLoad) startSMFs() {
	h := s.h
	st, err := store.New(h.db, store.WithLocation(h.eng.Location()))
	if err != nil {
		h.t.Fatal(err)
	}
	var subs []string
	for _, f := range h.families[:min(apiFamilies, len(h.families))] {
		for _, cid := range h.members[f] {
			imsi := fmt.Sprintf("45099%010d", cid)
			if err := retryDeadlock(func() error { return st.SetMemberIMSI(h.ctx, f, cid, imsi, store.System) }); err != nil {
				h.t.Fatalf("member %d's IMSI: %v", cid, err)
			}
			subs = append(subs, "imsi-"+imsi)
		}
	}
	s.smf, err = smfsim.New(smfsim.Config{URL: s.charging, Token: s.chfToken, Subscribers: subs, Sessions: smfSessions,
		NotifyAddr: "127.0.0.1:0", Seed: h.cfg.Seed, Rate: [2]int64{64 << 10, 512 << 10},
		Lifetime: [2]time.Duration{5 * time.Second, 30 * time.Second}})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := s.smf.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.logf("simulated SMFs started: %d sessions over %d subscribers", smfSessions, len(subs))
}

// closeSMFs ends every session (each releases what it holds) and records
// the SMFs' figures for the summary.
func (s *serverLoad) closeSMFs() smfsim.Stats {
	h := s.h
	ctx, cancel := context.WithTimeout(h.ctx, time.Minute)
	defer cancel()
	if err := s.smf.Close(ctx); err != nil {
		h.t.Errorf("simulated SMFs: close (release every session): %v", err)
	}
	st := s.smf.Stats()
	h.logf("simulated SMFs closed: %+v", st)
	h.charging = fmt.Sprintf("%d creates, %d updates, %d releases, %d REAUTHORIZATIONs; %d bytes granted, %d used; %d rating groups refused, %d last units; %d errors (faults); %d open",
		st.Creates, st.Updates, st.Releases, st.Notifications, st.GrantedBytes, st.UsedBytes, st.Refused, st.Final, st.Errors, st.Open)
	return st
}

// checkSMFs fails the run when charging silently never ran, or a session
// is still open after Close; then waits until no grant holds anything in
// Redis (the sweep closes sessions whose answers a fault lost within
// validity + holding time + sweep, about 20 s) and checks it.
func (s *serverLoad) checkSMFs(st smfsim.Stats) {
	h := s.h
	if st.Creates == 0 || st.Updates == 0 || st.Releases == 0 || st.GrantedBytes == 0 || st.UsedBytes == 0 {
		h.t.Errorf("charging did not run: the simulated SMFs got %+v (want creates, updates, releases and bytes granted and used)", st)
	}
	if st.Open != 0 {
		h.t.Errorf("simulated SMFs: %d sessions still open after Close", st.Open)
	}
	var last error
	err := e2e.Wait{What: "every grant's reservation returned", Stall: time.Minute, Poll: time.Second}.Until(h.ctx, func(ctx context.Context) (e2e.Progress, error) {
		last = CheckReleased(ctx, h.eng, h.families[:min(apiFamilies, len(h.families))])
		if last == nil {
			return e2e.Progress{Done: true}, nil
		}
		return e2e.Progress{Seen: last.Error()}, nil
	})
	if err != nil {
		h.t.Errorf("every release returned: %v", err)
		return
	}
	// Every family, not only the SMFs' ones.
	if err := CheckReleased(h.ctx, h.eng, h.families); err != nil {
		h.t.Errorf("every release returned: %v", err)
	}
}

// post sends a JSON body and decodes a 200's answer into out.
func (s *serverLoad) post(path, token string, in, out any) (int, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(s.h.ctx, http.MethodPost, s.base+path, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode/100 == 2 && out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode %s: %w", body, err)
		}
	} else if resp.StatusCode/100 != 2 {
		err = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	}
	return resp.StatusCode, err
}

// run asks about ~40 events a second (one per request, 256 KiB each, on the
// API families' members, so their pools run dry with the processors'
// traffic) and tops an API family up by 1 MiB every 700 ms, until stopped.
func (s *serverLoad) run() {
	h := s.h
	rnd := rand.New(rand.NewPCG(h.cfg.Seed, 7))
	fams := h.families[:min(apiFamilies, len(h.families))]
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(25 * time.Millisecond)
		defer t.Stop()
		for n := 0; ; n++ {
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
			f := fams[rnd.IntN(len(fams))]
			ms := h.members[f]
			id := fmt.Sprintf("gw-%d", n)
			ask := map[string]any{"events": []map[string]any{{"eventId": id, "timestamp": time.Now(), "familyId": f,
				"customerId": ms[rnd.IntN(len(ms))], "appId": "com.youtube.app", "bytesUsed": 256 << 10}}}
			var out struct {
				Decisions []struct {
					EventID  string          `json:"eventId"`
					Decision policy.Decision `json:"decision"`
				} `json:"decisions"`
			}
			code, err := s.post("/decisions", s.gw, ask, &out)
			s.mu.Lock()
			s.statusSeq[code]++
			switch {
			case err == nil && len(out.Decisions) == 1:
				s.answered[id] = out.Decisions[0].Decision
			case code == http.StatusServiceUnavailable:
				s.refused[id] = true
				s.lastErr = err.Error()
				var p struct {
					Detail string `json:"detail"`
				}
				_, body, _ := strings.Cut(err.Error(), ": ")
				_ = json.Unmarshal([]byte(body), &p)
				s.why[p.Detail]++
			default:
				s.unknown[id] = true
				s.lastErr = fmt.Sprint(err)
			}
			s.mu.Unlock()
		}
	}()
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(700 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
			f := fams[rnd.IntN(min(len(fams), 20))]
			s.mu.Lock()
			s.tried[f] = true
			s.mu.Unlock()
			ok := s.topUp(f)
			s.mu.Lock()
			if ok {
				s.topUps++
			} else {
				s.topUpNo++
			}
			s.mu.Unlock()
		}
	}()
}

// topUp logs the family's owner in (once) and buys the family the 1 MiB
// offer.
func (s *serverLoad) topUp(f int64) bool {
	s.mu.Lock()
	tok := s.tokens[f]
	s.mu.Unlock()
	if tok == "" {
		var out struct {
			AccessToken string `json:"accessToken"`
		}
		if _, err := s.post("/auth/token", "", map[string]any{"login": fmt.Sprint(s.h.owners[f]), "password": apiPassword}, &out); err != nil {
			s.mu.Lock()
			s.lastErr = "login: " + err.Error()
			s.mu.Unlock()
			return false
		}
		tok = out.AccessToken
		s.mu.Lock()
		s.tokens[f] = tok
		s.mu.Unlock()
	}
	_, err := s.post(fmt.Sprintf("/families/%d/topups", f), tok, map[string]any{"offerId": "1MB"}, nil)
	return err == nil
}

// close stops the load.
func (s *serverLoad) close() {
	close(s.stop)
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h.logf("gateway load stopped: %d decisions answered, %d refused (503), %d without an answer; top-ups %d done, %d not (last error: %s); statuses %v",
		len(s.answered), len(s.refused), len(s.unknown), s.topUps, s.topUpNo, s.lastErr, s.statusSeq)
	s.h.gateway = fmt.Sprintf("%d decisions answered (each as SQL recorded it), %d refused with 503 (none recorded) %v, %d without an answer; %d top-ups through the API, %d refused",
		len(s.answered), len(s.refused), s.why, len(s.unknown), s.topUps, s.topUpNo)
}

// check compares the gateway's answers with usage_record and returns the
// ids of the rows they account for (to add to the produced events).
func (s *serverLoad) check(ctx context.Context) map[string]struct{} {
	t := s.h.t
	rows, err := s.h.db.QueryContext(ctx, `SELECT event_id, process_result FROM usage_record WHERE event_id LIKE 'gw-%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]policy.Decision{}
	for rows.Next() {
		var id string
		var d policy.Decision
		if err := rows.Scan(&id, &d); err != nil {
			t.Fatal(err)
		}
		got[id] = d
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var missing, differ, refused, stray []string
	ids := map[string]struct{}{}
	for id, d := range s.answered {
		ids[id] = struct{}{}
		switch g, ok := got[id]; {
		case !ok:
			missing = append(missing, id)
		case g != d:
			differ = append(differ, fmt.Sprintf("%s: answered %s, SQL %s", id, d, g))
		}
	}
	for id := range got {
		switch {
		case s.refused[id]:
			refused = append(refused, id)
		case s.unknown[id]:
			ids[id] = struct{}{} // no answer: judged or not, either is right
		case !s.hasAnswer(id):
			stray = append(stray, id)
		}
	}
	for what, list := range map[string][]string{
		"answered but not in usage_record":                       missing,
		"answered one decision, recorded another":                differ,
		"refused with 503 (nothing granted) but in usage_record": refused,
		"in usage_record but never asked":                        stray,
	} {
		if len(list) > 0 {
			t.Errorf("gateway decisions %s: %d: %s", what, len(list), listed(list))
		}
	}
	if len(s.answered) == 0 || s.topUps == 0 {
		t.Errorf("the gateway load did nothing: %d decisions answered, %d top-ups", len(s.answered), s.topUps)
	}
	return ids
}

func (s *serverLoad) hasAnswer(id string) bool {
	_, ok := s.answered[id]
	return ok
}

// toppedUp returns the families a top-up was asked for (answered or not: a
// refused one may still be recorded and reach Redis with a later one).
func (s *serverLoad) toppedUp() map[int64]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.tried)
}
