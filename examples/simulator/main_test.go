package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/internal/testenv/chargertest"
	"github.com/dabom/dpcs/internal/testenv/storetest"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/charging"
	"github.com/dabom/dpcs/service/store"
)

// lines collects run's output and lets the test wait for a line.
type lines struct {
	mu   sync.Mutex
	all  []string
	cond *sync.Cond
}

func newLines(r io.Reader) *lines {
	l := &lines{}
	l.cond = sync.NewCond(&l.mu)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			l.mu.Lock()
			l.all = append(l.all, sc.Text())
			l.cond.Broadcast()
			l.mu.Unlock()
		}
	}()
	return l
}

// wait returns the first line from index from on that matches re, waiting
// up to d; ok is false on timeout.
func (l *lines) wait(re *regexp.Regexp, from int, d time.Duration) (string, int, bool) {
	deadline := time.Now().Add(d)
	timer := time.AfterFunc(d, func() { l.mu.Lock(); l.cond.Broadcast(); l.mu.Unlock() })
	defer timer.Stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := from; ; {
		for ; i < len(l.all); i++ {
			if re.MatchString(l.all[i]) {
				return l.all[i], i + 1, true
			}
		}
		if time.Now().After(deadline) {
			return "", i, false
		}
		l.cond.Wait()
	}
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}

func setEnv(t *testing.T, kv map[string]string) {
	for k, v := range kv {
		t.Setenv(k, v)
	}
}

// The command alone (embedded kfake) prints progress every interval and
// obeys PUT /simulator/rate while running, then shuts down cleanly.
func TestRunProgressAndRateChange(t *testing.T) {
	setEnv(t, map[string]string{
		"DPCS_KAFKA_BROKERS": "", "DPCS_SIMULATOR_ADDR": "127.0.0.1:0", "DPCS_SIMULATOR_RATE": "100",
		"DPCS_SIMULATOR_FAMILIES": "1000", "DPCS_SIMULATOR_PROGRESS": "250ms", "DPCS_SIMULATOR_SCENARIO": "",
		"DPCS_ADMIN_ADDR": "127.0.0.1:0",
	})
	pr, pw := io.Pipe()
	out := newLines(pr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, []string{"simulator"}, pw); pw.Close() }()

	line, _, ok := out.wait(regexp.MustCompile(`^admin on http://\S+`), 0, 20*time.Second)
	if !ok {
		t.Fatalf("no admin line:\n%s", out)
	}
	admin := regexp.MustCompile(`http://\S+`).FindString(line)
	line, next, ok := out.wait(regexp.MustCompile(`control API on (http://\S+)`), 0, 20*time.Second)
	if !ok {
		t.Fatalf("no control API line:\n%s", out)
	}
	base := regexp.MustCompile(`http://\S+`).FindString(line)
	progress := regexp.MustCompile(`^rate=(\S+)/s achieved=(\d+)/s total=(\d+) errors=0`)
	if _, next, ok = out.wait(progress, next, 10*time.Second); !ok {
		t.Fatalf("no progress line:\n%s", out)
	}

	req, _ := http.NewRequest(http.MethodPut, base+"/simulator/rate", strings.NewReader(`{"rate": 2000}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT rate: %s", resp.Status)
	}
	// The control port says which build runs.
	var v map[string]any
	if resp, err = http.Get(base + "/version"); err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /version: %s %v", resp.Status, err)
	}
	for _, k := range []string{"version", "commit", "commitTime", "modified", "goVersion"} {
		if v[k] == nil || v[k] == "" {
			t.Errorf("GET /version: no %s in %v", k, v)
		}
	}
	// Within a few seconds a progress line shows the new rate achieved
	// (judged loosely: at least 5× the old rate).
	var achieved int
	for achieved < 500 {
		var line string
		if line, next, ok = out.wait(regexp.MustCompile(`^rate=2000/s`), next, 10*time.Second); !ok {
			t.Fatalf("rate change not seen:\n%s", out)
		}
		achieved, _ = strconv.Atoi(progress.FindStringSubmatch(line)[2])
	}
	// The admin address: ready while Kafka answers; metrics of the producer
	// and the simulator.
	for path, want := range map[string]string{"/healthz": "ok\n", "/readyz": "ready\n"} {
		if got := testenv.Get(t, admin+path); got != want {
			t.Errorf("admin %s: %q", path, got)
		}
	}
	scraped := testenv.Get(t, admin+"/metrics")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^dpcs_simulator_produced_total [1-9]`), regexp.MustCompile(`(?m)^dpcs_simulator_rate 2000$`),
		regexp.MustCompile(`(?m)^dpcs_kafka_produce_records_total\{client="simulator",.*\} [1-9]`),
		regexp.MustCompile(`(?m)^go_goroutines `),
	} {
		if !want.MatchString(scraped) {
			t.Errorf("admin /metrics lacks %s", want)
		}
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if _, _, ok := out.wait(regexp.MustCompile(`^stopped: sent=(\d+) produced=(\d+) errors=0$`), next, 5*time.Second); !ok {
		t.Fatalf("no clean stop line:\n%s", out)
	}
	m := regexp.MustCompile(`stopped: sent=(\d+) produced=(\d+)`).FindStringSubmatch(out.String())
	if m[1] != m[2] {
		t.Errorf("sent %s but produced %s: not flushed", m[1], m[2])
	}
}

// Scenario mode publishes the scenario's records and prints its
// expectations; "list" lists the scenarios; -h prints the environment.
func TestRunScenarioAndList(t *testing.T) {
	setEnv(t, map[string]string{"DPCS_KAFKA_BROKERS": "", "DPCS_SIMULATOR_STEP_DELAY": "0s", "DPCS_SIMULATOR_SCENARIO": "",
		"DPCS_ADMIN_ADDR": "off"})
	var b strings.Builder
	if err := run(context.Background(), []string{"simulator", "-scenario", "limit-cut-while-over"}, &b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{`"name": "limit-cut-while-over"`, "step 12 POLICY dad cuts the monthly limit to 500 MB → policy-updated/",
		"expect BLOCKED_LIMIT_MONTHLY", "scenario limit-cut-while-over: published 16 records"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := run(context.Background(), []string{"simulator", "-scenario", "list"}, &b); err != nil || !strings.Contains(b.String(), "night-block") {
		t.Errorf("list: %v %s", err, b.String())
	}
	b.Reset()
	if err := run(context.Background(), []string{"simulator", "-h"}, &b); err != nil || !strings.Contains(b.String(), "DPCS_KAFKA_BROKERS") {
		t.Errorf("-h: %v %s", err, b.String())
	}
	if err := run(context.Background(), []string{"simulator", "-scenario", "nope"}, io.Discard); err == nil {
		t.Error("unknown scenario accepted")
	}
	t.Setenv("DPCS_KAFKA_ACKS", "2")
	if err := run(context.Background(), []string{"simulator"}, io.Discard); err == nil {
		t.Error("bad acks accepted")
	}
}

// -version prints one line naming the program and the build and exits,
// without starting anything (no Kafka here: DPCS_KAFKA_BROKERS is a closed port).
func TestRunVersion(t *testing.T) {
	setEnv(t, map[string]string{"DPCS_KAFKA_BROKERS": "127.0.0.1:1", "DPCS_SIMULATOR_SCENARIO": ""})
	line := regexp.MustCompile(`^dpcs simulator \S+ \(commit \S+, \S+, go[0-9.]+\S*\)\n$`)
	for _, args := range [][]string{{"simulator", "-version"}, {"simulator", "-rate", "5", "--version"}} {
		var b strings.Builder
		if err := run(context.Background(), args, &b); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if !line.MatchString(b.String()) {
			t.Errorf("%q printed %q, want a line like %q", args, b.String(), "dpcs simulator v0.1.0 (commit 5102705, 2026-11-23, go1.26.8)")
		}
	}
}

// With DPCS_SIMULATOR_CHARGING_URL the command is a set of simulated SMFs
// against a charging interface (here one on an in-memory engine): sessions
// open, report and are released when it stops; a URL without its
// credential is refused.
func TestRunSMFs(t *testing.T) {
	ctx := t.Context()
	st := storetest.New(t, testenv.SQLite(t))
	if _, err := st.S.CreateFamily(ctx, store.NewFamily{ID: 100, Name: "f", PlanBytes: 1 << 40}, store.System); err != nil {
		t.Fatal(err)
	}
	if _, err := st.S.AddMember(ctx, store.NewMember{ID: 1001, FamilyID: 100, Name: "m", Phone: "010-0001-0001", Role: policy.RoleOwner}, store.System); err != nil {
		t.Fatal(err)
	}
	fake := chargertest.New()
	fake.SetPool(100, 1<<40)
	svc, err := charging.New(fake, st.S, charging.WithNotifyNetworks(true), charging.WithGrantSizes(1<<10, 256<<10, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	const token = "simulator-test-credential-0123456789abcdef"
	srv := httptest.NewUnstartedServer(charging.Handler(svc, charging.HandlerConfig{Tokens: []string{token}}))
	srv.EnableHTTP2 = true
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()

	setEnv(t, map[string]string{"DPCS_SIMULATOR_CHARGING_URL": srv.URL, "DPCS_SIMULATOR_CHARGING_TOKEN": token,
		"DPCS_SIMULATOR_SMF_SESSIONS": "3", "DPCS_SIMULATOR_SUBSCRIBERS": "msisdn-821000010001", "DPCS_SIMULATOR_PROGRESS": "50ms"})
	pr, pw := io.Pipe()
	out := newLines(pr)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- run(rctx, []string{"simulator"}, pw); pw.Close() }()
	if _, _, ok := out.wait(regexp.MustCompile(`^simulating 3 SMF sessions for 1 subscribers against http://`), 0, 20*time.Second); !ok {
		t.Fatalf("no start line:\n%s", out)
	}
	if _, _, ok := out.wait(regexp.MustCompile(`^open=\d+ creates=[1-9]\d* updates=\d+ releases=\d+ granted=[1-9]\d* used=\d+ refused=0 final=0 notifications=\d+ errors=0`), 0, 30*time.Second); !ok {
		t.Fatalf("no progress with sessions granted:\n%s", out)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if _, _, ok := out.wait(regexp.MustCompile(`^stopped: open=0 .* errors=0`), 0, 5*time.Second); !ok {
		t.Fatalf("not every session released:\n%s", out)
	}
	if n := fake.Outstanding(); n != 0 {
		t.Errorf("the engine still holds %d grants", n)
	}

	t.Setenv("DPCS_SIMULATOR_CHARGING_TOKEN", "")
	if err := run(ctx, []string{"simulator"}, io.Discard); err == nil || !strings.Contains(err.Error(), "DPCS_SIMULATOR_CHARGING_TOKEN") {
		t.Errorf("a URL without a credential: %v", err)
	}
}
