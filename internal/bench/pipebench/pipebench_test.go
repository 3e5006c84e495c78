package pipebench

import (
	"context"
	"encoding/xml"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/service"
	"github.com/dabom/dpcs/simulate"
)

// The harness runs end to end on embedded infrastructure: every produced
// event is judged and persisted, latencies are measured, the invariants hold
// and the report renders.
func TestRunEmbedded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the pipeline")
	}
	testenv.AwayFromMidnight(t)
	ctx := context.Background()
	kc := testenv.Kafka(t)
	_, rdb := testenv.Redis(t)
	db, err := service.Config{SQLitePath: filepath.Join(t.TempDir(), "b.db")}.SQL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pop, err := simulate.NewPopulation(7, simulate.WithFamilies(40), simulate.WithFirstFamilyID(5000))
	if err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	var stepped []string
	rep, err := Run(ctx, Config{
		Brokers: kc.ListenAddrs(), Redis: rdb, DB: db,
		Steps: []StepSpec{
			{Label: "40", Rate: 40, Population: pop, Processors: 1},
			{Label: "max", Rate: MaxRate, Population: pop, Processors: 2},
		},
		Warmup: 300 * time.Millisecond, Duration: 1500 * time.Millisecond, MaxBacklog: 100,
		Progress: &progress, CheckFamilies: 40,
		OnStep: func(l string, begin bool) { stepped = append(stepped, l) },
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if rep.InvariantsErr != nil {
		t.Fatal(rep.InvariantsErr)
	}
	if len(rep.Steps) != 2 || len(stepped) != 4 {
		t.Fatalf("steps %d, step callbacks %v", len(rep.Steps), stepped)
	}
	for _, s := range rep.Steps {
		if s.Decided == 0 || s.Throughput <= 0 || s.P50 <= 0 || s.P99 < s.P50 || s.Max < s.P999 || s.ScriptP99 <= 0 {
			t.Errorf("step %s: implausible %+v", s.Label, s)
		}
		if s.RSS <= 0 || s.MeanBatch <= 0 {
			t.Errorf("step %s: rss %d, mean batch %.1f", s.Label, s.RSS, s.MeanBatch)
		}
		// This process did the work; the host saw at least that much.
		if c := s.CPU; c.Process <= 0 || c.Host < c.Process/2 || c.HostCores < 1 {
			t.Errorf("step %s: cpu %+v", s.Label, c)
		}
	}
	// The offered rate bounds what the step produces: 40/s over a window
	// of 1.5 s that ends on a 1 s tick, so at most 2 s, is 80 events, and
	// the max step produces thousands. (What it judges in the window may be
	// fewer, miniredis under -race on a busy machine, or more, a backlog
	// left by a group still settling.)
	if s := rep.Steps[0]; s.Throughput <= 0 || s.Produced <= 0 || s.Produced > 2*80 {
		t.Errorf("offered 40/s: produced %d in the window, judged %.0f/s\n%s", s.Produced, s.Throughput, progress.String())
	}
	// miniredis has no INFO memory: unknown, not made up.
	if rep.Members != pop.NumMembers() || rep.BytesPerMember != 0 || rep.BytesPerMemberAfter != 0 {
		t.Errorf("members %d (want %d), bytes/member %.0f → %.0f", rep.Members, pop.NumMembers(), rep.BytesPerMember, rep.BytesPerMemberAfter)
	}
	var rows int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM usage_record").Scan(&rows); err != nil || rows == 0 {
		t.Fatalf("usage_record rows %d, %v", rows, err)
	}
	if !strings.Contains(progress.String(), "decided") {
		t.Errorf("no progress lines:\n%s", progress.String())
	}

	rep.Ceiling = 1000
	rep.Scripts = &ScriptComparison{Old: ScriptCost{Rate: 40_000, PerCall: 22_400 * time.Nanosecond, CPUPerCall: 25 * time.Microsecond},
		New: ScriptCost{Rate: 80_000, PerCall: 10_500 * time.Nanosecond, CPUPerCall: 12 * time.Microsecond}}
	md := rep.Markdown("go run ./examples/pipebench", "setting")
	for _, want := range []string{"| 40 | 40 |", "| max | max |", "÷ ceiling", "**pass**", "1,000 judgements/s",
		"| `apply_v1.lua` (first) | 22.4 µs | 25.0 µs | 40,000 |", "| `apply.lua` | 10.5 µs | 12.0 µs | 80,000 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	svg := rep.SVG(rep.Steps, 10*time.Millisecond)
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Errorf("chart is not XML: %v", err)
	}
	if !strings.Contains(svg, "60% goal") || !strings.Contains(svg, "<polyline") {
		t.Error("chart lacks the goal line or the series")
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := Run(context.Background(), Config{}); err == nil {
		t.Error("empty config accepted")
	}
	pop, _ := simulate.NewPopulation(1, simulate.WithFamilies(2))
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	cfg := Config{Brokers: []string{"x"}, Redis: rdb, DB: nil, Steps: []StepSpec{{Population: pop}}}
	if _, err := Run(context.Background(), cfg); err == nil {
		t.Error("nil db accepted")
	}
}

func TestPercentilesAndFormatting(t *testing.T) {
	var ns []int64
	for i := 1000; i >= 1; i-- {
		ns = append(ns, int64(i)*int64(time.Microsecond))
	}
	p50, p99, p999, mx := percentiles(ns)
	if p50 != 500*time.Microsecond || p99 != 990*time.Microsecond || p999 != 999*time.Microsecond || mx != time.Millisecond {
		t.Errorf("p50 %s p99 %s p999 %s max %s", p50, p99, p999, mx)
	}
	if a, b, c, d := percentiles(nil); a+b+c+d != 0 {
		t.Error("percentiles of nothing")
	}
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -4200: "-4,200"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%v) = %q, want %q", in, got, want)
		}
	}
	for d, want := range map[time.Duration]string{0: "—", 250 * time.Microsecond: "0.25 ms", 12300 * time.Microsecond: "12.3 ms", 2 * time.Second: "2000 ms"} {
		if got := ms(d); got != want {
			t.Errorf("ms(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestReplaceSection(t *testing.T) {
	p := filepath.Join(t.TempDir(), "b.md")
	if err := os.WriteFile(p, []byte("# B\n\nintro\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"first\n", "second\n"} {
		if err := ReplaceSection(p, "<!-- b -->", "<!-- e -->", body); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := os.ReadFile(p)
	if want := "# B\n\nintro\n\n<!-- b -->\nsecond\n<!-- e -->\n"; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestInfoField(t *testing.T) {
	v, err := infoField("# Memory\r\nused_memory:12345\r\nused_memory_human:12K\r\n", "used_memory")
	if err != nil || v != 12345 {
		t.Errorf("%d %v", v, err)
	}
	if _, err := infoField("x:1", "used_memory"); err == nil {
		t.Error("missing field accepted")
	}
	if processRSS() <= 0 {
		t.Error("no RSS on Linux")
	}
	f, err := infoFloat("# CPU\r\nused_cpu_sys:0.5\r\nused_cpu_user:1.25\r\n", "used_cpu_user")
	if err != nil || f != 1.25 {
		t.Errorf("%v %v", f, err)
	}
	if _, err := infoFloat("used_cpu_user:x", "used_cpu_user"); err == nil {
		t.Error("bad number accepted")
	}
}

func TestCPUBetween(t *testing.T) {
	if _, ok := hostCPU(); !ok {
		t.Fatal("no /proc/stat on Linux")
	}
	a := cpuSample{at: time.Unix(100, 0), redis: time.Second, proc: 2 * time.Second, hostUse: 3 * time.Second, hostOK: true}
	b := cpuSample{at: time.Unix(102, 0), redis: 2 * time.Second, proc: 3 * time.Second, hostUse: 6 * time.Second, hostOK: true}
	c := cpuBetween(a, b)
	if c.Redis != 0.5 || c.Process != 0.5 || c.Host != 1.5 || c.HostCores < 1 {
		t.Errorf("%+v", c)
	}
	b.hostOK = false
	if c := cpuBetween(a, b); c.Host != 0 {
		t.Errorf("host without /proc/stat: %+v", c)
	}
	if c := cpuBetween(b, a); c != (CPU{}) {
		t.Errorf("reversed samples: %+v", c)
	}
	// Burn some CPU: the process clock moves.
	p0, end := processCPU(), time.Now().Add(5*time.Second)
	for x := 0; processCPU()-p0 < 20*time.Millisecond; x++ {
		if time.Now().After(end) {
			t.Fatal("the process CPU clock did not move in 5 s of work")
		}
		_ = strconv.Itoa(x)
	}
}
