package main

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// The command name holds a space and a parenthesis.
	line := []byte("4242 (my (server)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0 123 0 0\n")
	got, err := parseStat(line)
	if err != nil || got != 3250*time.Millisecond {
		t.Errorf("parseStat = %v, %v; want 3.25s (325 ticks)", got, err)
	}
	if _, err := parseStat([]byte("garbage")); err == nil {
		t.Error("parseStat accepted a line with no command name")
	}
	// This process's own CPU shows once it has used a clock tick or more.
	var own time.Duration
	for deadline := time.Now().Add(10 * time.Second); own == 0 && time.Now().Before(deadline); {
		for i := 0; i < 1e6; i++ {
			_ = rand.Int()
		}
		if own, err = cpuTime(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	if own <= 0 {
		t.Errorf("cpuTime(self) = %v after 10 s of work", own)
	}
}

func TestPercentile(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 1000; i++ {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	for q, want := range map[float64]time.Duration{.5: 500 * time.Millisecond, .99: 990 * time.Millisecond,
		.999: 999 * time.Millisecond, 1: time.Second} {
		if got := percentile(lat, q); got != want {
			t.Errorf("percentile(%v) = %v, want %v", q, got, want)
		}
	}
	if percentile(nil, .5) != 0 {
		t.Error("percentile of nothing is not 0")
	}
}

// The closed loop keeps c calls in flight and counts only the window; a
// failing call is counted as an error, not a latency.
func TestClosedLoop(t *testing.T) {
	var inFlight, most atomic.Int64
	var n atomic.Int64
	f := func(ctx context.Context, rng *rand.Rand) error {
		now := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		time.Sleep(time.Millisecond)
		if n.Add(1)%10 == 0 {
			return errors.New("every tenth fails")
		}
		return nil
	}
	marks := 0
	w, err := closedLoop(context.Background(), 4, 20*time.Millisecond, 200*time.Millisecond, f, func() { marks++ })
	if err != nil {
		t.Fatal(err)
	}
	if marks != 2 || w.Calls == 0 || w.Calls >= n.Load() || most.Load() > 4 {
		t.Errorf("marks %d, window %d calls of %d made, at most %d in flight", marks, w.Calls, n.Load(), most.Load())
	}
	if w.Errors == 0 || int64(len(w.lat)) != w.Calls-w.Errors || w.FirstErr == nil {
		t.Errorf("%d errors, %d latencies of %d calls, first %v", w.Errors, len(w.lat), w.Calls, w.FirstErr)
	}
}

// The open loop calls at its rate whatever the calls take, and a slow call
// is charged from its scheduled time: with one call in flight at a time and
// calls slower than the interval, the latencies grow past the call's own
// duration.
func TestOpenLoop(t *testing.T) {
	fast := func(ctx context.Context, rng *rand.Rand) error { return nil }
	w, err := openLoop(context.Background(), 1000, 50, 50*time.Millisecond, 500*time.Millisecond, fast, func() {})
	if err != nil {
		t.Fatal(err)
	}
	if rate := float64(w.Calls) / w.Elapsed.Seconds(); rate < 700 || rate > 1300 {
		t.Errorf("%d calls in %v: %.0f/s, want ≈ 1000/s", w.Calls, w.Elapsed, rate)
	}
	slow := func(ctx context.Context, rng *rand.Rand) error { time.Sleep(5 * time.Millisecond); return nil }
	w, err = openLoop(context.Background(), 1000, 1, 10*time.Millisecond, 300*time.Millisecond, slow, func() {})
	if err != nil {
		t.Fatal(err)
	}
	if p99 := percentile(w.lat, .99); p99 < 50*time.Millisecond {
		t.Errorf("p99 %v with 5 ms calls at 1 ms intervals, one at a time: the waits were not charged", p99)
	}
}

func TestWithDatabase(t *testing.T) {
	got, err := withDatabase("dpcs:pw@tcp(127.0.0.1:3306)/dpcs?parseTime=true", "other")
	if want := "dpcs:pw@tcp(127.0.0.1:3306)/other?parseTime=true"; err != nil || got != want {
		t.Errorf("withDatabase = %q, %v; want %q", got, err, want)
	}
	if _, err := withDatabase("nodb", "x"); err == nil {
		t.Error("a DSN without a database was accepted")
	}
}

func TestReportText(t *testing.T) {
	if got := thousands(1234567.4); got != "1,234,567" {
		t.Errorf("thousands = %q", got)
	}
	if got := redact("-mysql dpcs:secret@tcp(h:1)/d -families 3"); got != "-mysql dpcs:…@tcp(h:1)/d -families 3" {
		t.Errorf("redact = %q", got)
	}
	path := filepath.Join(t.TempDir(), "b.md")
	if err := os.WriteFile(path, []byte("a\n<!-- peers:begin -->\nold\n<!-- peers:end -->\nz\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := replaceSection(path, "<!-- peers:begin -->", "<!-- peers:end -->", "new\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if want := "a\n<!-- peers:begin -->\nnew\n<!-- peers:end -->\nz\n"; string(b) != want {
		t.Errorf("replaced:\n%s\nwant:\n%s", b, want)
	}
}

// A usage record is the wire format's DATA_USAGE envelope, keyed by the
// family id, with its eventType header.
func TestUsageRecord(t *testing.T) {
	at := time.Date(2026, 11, 26, 5, 30, 0, 0, time.UTC)
	r := usageRecord("pp_1", at, 42, 421, 1024)
	var env struct {
		EventID, EventType, Timestamp string
		SubType                       *string
		Payload                       struct {
			FamilyID, CustomerID, BytesUsed int64
			AppID                           string
		}
	}
	if err := json.Unmarshal(r.Value, &env); err != nil {
		t.Fatalf("%s: %v", r.Value, err)
	}
	if env.EventID != "pp_1" || env.EventType != "DATA_USAGE" || env.SubType != nil || env.Timestamp != "2026-11-26T05:30:00Z" ||
		env.Payload.FamilyID != 42 || env.Payload.CustomerID != 421 || env.Payload.BytesUsed != 1024 || env.Payload.AppID == "" {
		t.Errorf("record value %s", r.Value)
	}
	if string(r.Key) != "42" || r.Topic != "usage-events" || len(r.Headers) != 1 || string(r.Headers[0].Value) != "DATA_USAGE" {
		t.Errorf("record %q on %s, headers %v", r.Key, r.Topic, r.Headers)
	}
}

// untilReady returns once try succeeds, and says so when the process it
// waits on ended first (leaving its exit for stop to see).
func TestUntilReady(t *testing.T) {
	ctx := context.Background()
	tries := 0
	err := untilReady(ctx, nil, "", "three tries", time.Millisecond, func() error {
		if tries++; tries < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Errorf("untilReady = %v after %d tries, want nil after 3", err, tries)
	}
	c := &child{name: "server", done: make(chan error, 1)}
	c.done <- errors.New("exit status 1")
	err = untilReady(ctx, c, "/logs", "the first decision", time.Millisecond, func() error { return errors.New("refused") })
	if err == nil || err.Error() != "the first decision: server stopped: exit status 1 (see /logs/server.log)" {
		t.Errorf("untilReady after the process ended = %v", err)
	}
	if len(c.done) != 1 {
		t.Error("untilReady took the process's exit from stop")
	}
}

// -server-env takes only DPCS_ variables and Go's GOGC, GOMAXPROCS and
// GOMEMLIMIT, in order; the report states the
// engine's ceiling and the processor's share of it when measured.
func TestServerEnvAndCeilingReport(t *testing.T) {
	base := []string{"-redis", "r", "-mysql", "m", "-server", "s", "-recoverybench", "rb"}
	c, err := parseFlags(append(base, "-server-env", "DPCS_DECISION_LINGER=1ms", "-server-env", "DPCS_X=a=b"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.serverEnv) != 2 || c.serverEnv[0] != "DPCS_DECISION_LINGER=1ms" || c.serverEnv[1] != "DPCS_X=a=b" {
		t.Errorf("serverEnv = %q", c.serverEnv)
	}
	if _, err := parseFlags(append(base, "-server-env", "GOGC=400", "-server-env", "GOMAXPROCS=1")); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"PATH=/x", "DPCS_NOVALUE", "GODEBUG=x", "DPCS_HTTP_ADDR=127.0.0.1:1", "DPCS_GATEWAY_TOKENS=x"} {
		if _, err := parseFlags(append(base, "-server-env", bad)); err == nil {
			t.Errorf("-server-env %s accepted", bad)
		}
	}
	rps, script, cmd, err := parseCeiling("ceiling 50000\nscript 15.1 17.2 28.9 31.0\nredis-benchmark …\n")
	if err != nil || rps != 50_000 || script != [4]float64{15.1, 17.2, 28.9, 31.0} || cmd != "redis-benchmark …" {
		t.Errorf("parseCeiling = %v %v %q %v", rps, script, cmd, err)
	}
	for _, bad := range []string{"", "ceiling x\nscript 1 2 3 4\nc", "ceiling 5\nscript 1 2 3\nc", "ceiling 5\nc"} {
		if _, _, _, err := parseCeiling(bad); err == nil {
			t.Errorf("parseCeiling(%q) accepted", bad)
		}
	}
	r := &report{cfg: c, ceiling: rps, script: script, ceilingCmd: cmd,
		results: []result{{target: "DPCS processor deployable (usage events through Kafka)", step: "as fast as it judges", per: 1,
			w: window{Calls: 300_000, Elapsed: 10 * time.Second}}}}
	md := r.markdown("")
	for _, want := range []string{"**50,000 judgements/s**", "30,000 events/s = **0.60 of the ceiling**", "`redis-benchmark …`",
		"**15.1 µs of server time per call**"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

func TestParseHWM(t *testing.T) {
	got, err := parseHWM([]byte("Name:\tserver\nVmPeak:\t  999 kB\nVmHWM:\t   56120 kB\nVmRSS:\t 100 kB\n"))
	if err != nil || got != 56120<<10 {
		t.Errorf("parseHWM = %d, %v", got, err)
	}
	if _, err := parseHWM([]byte("Name:\tx\n")); err == nil {
		t.Error("no VmHWM accepted")
	}
	if _, err := peakRSS(os.Getpid()); err != nil {
		t.Error(err)
	}
}

// -processor-env refuses the run's own variables; -only pipeline runs the
// processor's steps alone, and every target runs them by default.
func TestProcessorEnvAndPipelineTarget(t *testing.T) {
	base := []string{"-redis", "r", "-mysql", "m", "-server", "s", "-recoverybench", "rb"}
	c, err := parseFlags(append(base, "-processor-env", "DPCS_KAFKA_FETCH_WAIT=20ms", "-processor-env", "GOGC=200"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.processorEnv) != 2 || c.processorEnv[0] != "DPCS_KAFKA_FETCH_WAIT=20ms" || len(c.serverEnv) != 0 {
		t.Errorf("processorEnv = %q, serverEnv = %q", c.processorEnv, c.serverEnv)
	}
	for _, bad := range []string{"DPCS_REDIS_ADDR=x", "DPCS_ADMIN_PPROF=true", "HOME=/"} {
		if _, err := parseFlags(append(base, "-processor-env", bad)); err == nil {
			t.Errorf("-processor-env %s accepted", bad)
		}
	}
	all, err := selectTargets(c)
	if err != nil || !all["pipeline"] || !all["dpcs"] {
		t.Errorf("default targets = %v, %v", all, err)
	}
	c.only = "pipeline"
	if only, err := selectTargets(c); err != nil || !only["pipeline"] || only["dpcs"] || only["charging"] {
		t.Errorf("-only pipeline = %v, %v", only, err)
	}
}

// A window's figures come from two scrapes of the processor's metrics: the
// counters' differences, and a quantile from the buckets' differences.
func TestPipelineText(t *testing.T) {
	const before = `# HELP dpcs_processor_batches_total Polls processed.
dpcs_processor_batches_total 10
dpcs_processor_records_total 1000
dpcs_writebehind_flush_rows_count 1
dpcs_writebehind_flush_rows_sum 100
dpcs_kafka_request_duration_e2e_seconds_count{client="processor",node_id="0"} 50
dpcs_decision_latency_seconds_bucket{le="0.001"} 100
dpcs_decision_latency_seconds_bucket{le="0.002"} 900
dpcs_decision_latency_seconds_bucket{le="+Inf"} 1000
`
	const after = `dpcs_processor_batches_total 30
dpcs_processor_records_total 11000
dpcs_writebehind_flush_rows_count 11
dpcs_writebehind_flush_rows_sum 10100
dpcs_kafka_request_duration_e2e_seconds_count{client="processor",node_id="0"} 110
dpcs_kafka_request_duration_e2e_seconds_count{client="write-behind",node_id="0"} 4
dpcs_decision_latency_seconds_bucket{le="0.001"} 100
dpcs_decision_latency_seconds_bucket{le="0.002"} 9800
dpcs_decision_latency_seconds_bucket{le="+Inf"} 11000
`
	s0, err := parseSamples(strings.NewReader(before))
	if err != nil {
		t.Fatal(err)
	}
	s1, err := parseSamples(strings.NewReader(after))
	if err != nil {
		t.Fatal(err)
	}
	got := pipelineText(s0, s1, 2)
	// 8,900 of 10,000 decisions within 2 ms, 1,100 above: the p50 is in
	// the 2 ms bucket, the p99 beyond the last bound.
	want := "polls 10/s, 500.0 records each; write-behind flushes 5/s, 1000.0 rows each; Kafka requests/s: processor 30, write-behind 2, notifier 0; produce→decision p50 ≤ 2.0 ms, p99 ≤ +Inf ms"
	if got != want {
		t.Errorf("pipelineText =\n%s\nwant\n%s", got, want)
	}
	if _, err := parseSamples(strings.NewReader("novalue\n")); err == nil {
		t.Error("parseSamples accepted a line without a value")
	}
}

// findProcess finds this test process by its command and an argument of
// its command line, and nothing for an argument it was not given.
func TestFindProcess(t *testing.T) {
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Skip("no /proc")
	}
	name := strings.TrimSpace(string(comm))
	if pid := findProcess(os.Args[0], name); pid != os.Getpid() {
		t.Errorf("findProcess(%q, %q) = %d, want %d", os.Args[0], name, pid, os.Getpid())
	}
	if pid := findProcess("--no-such-argument", name); pid != 0 {
		t.Errorf("found %d by an argument it was not given", pid)
	}
	if pid := findMariaDB("u:p@tcp(127.0.0.1:1)/db"); pid != 0 && findProcess("", "mariadbd", "mysqld") == 0 {
		t.Errorf("findMariaDB found %d on port 1", pid)
	}
}

// The ratio table has a row for each closed loop of one decision per
// call: a target with one per grant size has a row for each size.
func TestReportRatioRows(t *testing.T) {
	c, err := parseFlags([]string{"-redis", "r", "-mysql", "m", "-server", "s", "-recoverybench", "rb"})
	if err != nil {
		t.Fatal(err)
	}
	res := func(target, step string, calls int64) result {
		return result{target: target, step: step, per: 1, w: window{Calls: calls, Elapsed: time.Second}}
	}
	r := &report{cfg: c, results: []result{
		res("charging", "closed loop, 50 callers, 1 MiB grants", 100),
		res("charging", "closed loop, 50 callers, 10 MiB grants", 200),
		res("charging", "200 calls/s, 10 MiB grants", 200),
		res("trivial Redis script", "closed loop, 50 callers", 1000),
	}}
	md := r.markdown("")
	for _, want := range []string{"| charging, 1 MiB grants | 100 | 0.10× |", "| charging, 10 MiB grants | 200 | 0.20× |",
		"| trivial Redis script | 1,000 | 1.00× |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// The report says what the processor deployable's servers spend at rest
// and the fixed-rate step's cost per event beside flat out, with and
// without it.
func TestRestReport(t *testing.T) {
	const target = "DPCS processor deployable (usage events through Kafka)"
	procs := []proc{{"DPCS processor", 1}, {"Kafka (kfake)", 2}, {"load generator", os.Getpid()}}
	r := &report{
		rest: &atRest{procs: procs, elapsed: 10 * time.Second,
			cpu: []time.Duration{200 * time.Millisecond, 300 * time.Millisecond, time.Second}},
		results: []result{
			// 5,000/s: 80 µs per event; flat out, 40,000/s: 47.5 µs.
			{target: target, step: "5,000 events/s", per: 1, procs: procs, w: window{Calls: 50_000, Elapsed: 10 * time.Second},
				cpu: []time.Duration{2 * time.Second, 2 * time.Second, time.Second}},
			{target: target, step: "as fast as it judges", per: 1, procs: procs, w: window{Calls: 400_000, Elapsed: 10 * time.Second},
				cpu: []time.Duration{9 * time.Second, 10 * time.Second, time.Second}},
		},
	}
	if got, want := r.rest.text(), "servers' CPU at rest: 50.0 ms a second (DPCS processor 20.0, Kafka (kfake) 30.0)"; got != want {
		t.Errorf("text = %q, want %q", got, want)
	}
	// At rest 50 ms/s: 10 µs of each event at 5,000/s, 1.25 at 40,000/s;
	// 80 ÷ 47.5 = 1.68×, (80 − 10) ÷ (47.5 − 1.25) = 1.51×.
	want := "its servers spend **50.0 ms of CPU a second** (DPCS processor 20.0, Kafka (kfake) 30.0). That is 10.0 of the 80.0 µs per event at 5,000 events/s and 1.2 of the 47.5 flat out: the fixed-rate step costs 1.68× the flat-out one, and 1.51× less what the servers spend at rest."
	if md := r.markdown(""); !strings.Contains(md, want) {
		t.Errorf("report lacks %q:\n%s", want, md)
	}
	// A rest as costly as the flat-out step's events (noise after a
	// drain) gives no ratio less it, rather than a negative or infinite one.
	r.rest.cpu = []time.Duration{400 * time.Second, 0, time.Second}
	md := r.markdown("")
	if !strings.Contains(md, "the fixed-rate step costs 1.68× the flat-out one.") || strings.Contains(md, "less what the servers") {
		t.Errorf("report with a rest past the flat-out cost:\n%s", md)
	}
}
