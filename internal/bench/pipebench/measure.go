package pipebench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/simulate"
)

// RedisMemory is used_memory summed over the server (or every cluster master).
func RedisMemory(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	read := func(c *redis.Client) (int64, error) {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return 0, err
		}
		return infoField(info, "used_memory")
	}
	switch c := rdb.(type) {
	case *redis.Client:
		return read(c)
	case *redis.ClusterClient:
		var mu sync.Mutex
		var total int64
		err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			v, err := read(n)
			mu.Lock()
			total += v
			mu.Unlock()
			return err
		})
		return total, err
	}
	return 0, fmt.Errorf("pipebench: unsupported redis client %T", rdb)
}

// eachNode calls fn for the server, or for every cluster master.
func eachNode(ctx context.Context, rdb redis.UniversalClient, fn func(*redis.Client) error) error {
	switch c := rdb.(type) {
	case *redis.Client:
		return fn(c)
	case *redis.ClusterClient:
		var mu sync.Mutex
		return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return fn(n)
		})
	}
	return fmt.Errorf("pipebench: unsupported redis client %T", rdb)
}

// ServerScript is the server's own view of the apply script since the last
// ResetServerStats: latency percentiles (Redis ≥ 7 latency tracking; the
// worst node of a cluster) and the mean server time per call.
type ServerScript struct {
	Calls          int64
	P50, P99, P999 time.Duration
	MeanPerCall    time.Duration
}

// ResetServerStats resets the servers' command statistics (CONFIG RESETSTAT).
func ResetServerStats(ctx context.Context, rdb redis.UniversalClient) error {
	return eachNode(ctx, rdb, func(c *redis.Client) error { return c.ConfigResetStat(ctx).Err() })
}

// ReadServerScript reads EVALSHA's statistics from INFO latencystats and
// INFO commandstats.
func ReadServerScript(ctx context.Context, rdb redis.UniversalClient) (ServerScript, error) {
	var out ServerScript
	var usec int64
	err := eachNode(ctx, rdb, func(c *redis.Client) error {
		info, err := c.Info(ctx, "latencystats", "commandstats").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\n") {
			line = strings.TrimSpace(line)
			if rest, ok := strings.CutPrefix(line, "latency_percentiles_usec_evalsha:"); ok {
				for _, kv := range strings.Split(rest, ",") {
					k, v, _ := strings.Cut(kv, "=")
					f, err := strconv.ParseFloat(v, 64)
					if err != nil {
						continue
					}
					d := time.Duration(f * float64(time.Microsecond))
					switch k {
					case "p50":
						out.P50 = max(out.P50, d)
					case "p99":
						out.P99 = max(out.P99, d)
					case "p99.9":
						out.P999 = max(out.P999, d)
					}
				}
			}
			if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
				for _, kv := range strings.Split(rest, ",") {
					k, v, _ := strings.Cut(kv, "=")
					n, _ := strconv.ParseInt(v, 10, 64)
					switch k {
					case "calls":
						out.Calls += n
					case "usec":
						usec += n
					}
				}
			}
		}
		return nil
	})
	if out.Calls > 0 {
		out.MeanPerCall = time.Duration(usec) * time.Microsecond / time.Duration(out.Calls)
	}
	return out, err
}

func infoField(info, name string) (int64, error) {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok && k == name {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("pipebench: INFO has no %s", name)
}

// processRSS is this process's resident set size in bytes (Linux), 0 when
// unknown.
func processRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// CeilingConfig is a redis-benchmark run of the engine's own script.
type CeilingConfig struct {
	// Benchmark is the redis-benchmark binary. Default: from PATH.
	Benchmark string
	// Addr is the single Redis server (host:port) to measure.
	Addr string
	// Requests per run (default 300,000), Clients (default 4), Pipeline
	// (default 16).
	Requests, Clients, Pipeline int
	// FamilyID is the family the measured calls charge (provisioned here
	// with a pool that does not run out). Default: 1.
	FamilyID int64
	// Rounds is how many times CompareScripts measures each script,
	// alternating, keeping each one's best round (on a shared machine the
	// least disturbed). Default: 3.
	Rounds int
}

func (cfg *CeilingConfig) defaults() error {
	if cfg.Benchmark == "" {
		p, err := exec.LookPath("redis-benchmark")
		if err != nil {
			return fmt.Errorf("pipebench: redis-benchmark: %w", err)
		}
		cfg.Benchmark = p
	}
	if _, _, ok := strings.Cut(cfg.Addr, ":"); !ok {
		return fmt.Errorf("pipebench: redis address %q: want host:port", cfg.Addr)
	}
	if cfg.Requests <= 0 {
		cfg.Requests = 300_000
	}
	if cfg.Clients <= 0 {
		cfg.Clients = 4
	}
	if cfg.Pipeline <= 0 {
		cfg.Pipeline = 16
	}
	if cfg.FamilyID <= 0 {
		cfg.FamilyID = 1
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 3
	}
	return nil
}

var rpsRe = regexp.MustCompile(`([0-9.]+) requests per second`)

// benchMember is the member whose events the ceiling measures: every feature
// on — daily and monthly limits, the seed's night window and two named
// windows (one with days), an app and a category block, a throttle and the
// family's own thresholds — none of which blocks the measured event, so each
// call runs the full allowed path (membership, blocks, windows, limits, pool,
// deduction, thresholds, result stored for replays).
func benchMember(ctx context.Context, eng *quota.Engine, fid int64) (quota.Event, error) {
	cid := simulate.CustomerID(fid, 0)
	apps := policy.DefaultApps()
	if len(apps) < 2 {
		return quota.Event{}, errors.New("pipebench: fewer than 2 apps in the default catalog")
	}
	other := policy.CategoryGame
	if apps[0].Category == other {
		other = policy.CategoryVideo
	}
	constraints := map[string]string{
		policy.KeyLimitDaily:                     strconv.FormatInt(policy.MaxBytes/4, 10),
		policy.KeyLimitMonthly:                   strconv.FormatInt(policy.MaxBytes/2, 10),
		policy.KeyBlockTimeStart:                 "0000",
		policy.KeyBlockTimeEnd:                   "0600",
		policy.KeyBlockTimePrefix + "school":     "0800-1100@MON-FRI",
		policy.KeyBlockTimePrefix + "late":       "2200-0500",
		policy.KeyBlockAppPrefix + apps[1].ID:    "1",
		policy.KeyBlockCatPrefix + string(other): "1",
		policy.KeyThrottleSpeed:                  "5000",
	}
	if apps[1].Category == apps[0].Category || apps[1].ID == apps[0].ID {
		delete(constraints, policy.KeyBlockAppPrefix+apps[1].ID)
		constraints[policy.KeyBlockAppPrefix+"com.example.blocked"] = "1"
	}
	if err := eng.Restore(ctx, quota.FamilyState{FamilyID: fid, Provisioned: true, Plan: policy.MaxBytes / 2,
		Thresholds: policy.Thresholds{80, 50, 30, 10},
		Members:    []quota.MemberState{{CustomerID: cid, Constraints: constraints, Version: 1}}}); err != nil {
		return quota.Event{}, err
	}
	// Noon in the service zone, today: outside every window above.
	lt := time.Now().In(eng.Location())
	at := time.Date(lt.Year(), lt.Month(), lt.Day(), 12, 0, 0, 0, eng.Location())
	return quota.Event{ID: "evt_x", FamilyID: fid, CustomerID: cid, Bytes: 1,
		AppID: apps[0].ID, Category: apps[0].Category, At: at}, nil
}

// benchmark runs redis-benchmark: cfg.Requests pipelined EVALSHA calls of
// sha with keys and args, the event id replaced by a new event id per
// call (the argument equal to id). It returns calls per second and the
// command line.
func benchmark(ctx context.Context, cfg CeilingConfig, sha string, keys []string, args []any, id string) (float64, string, error) {
	host, port, _ := strings.Cut(cfg.Addr, ":")
	cmd := []string{"-h", host, "-p", port, "-c", strconv.Itoa(cfg.Clients), "-P", strconv.Itoa(cfg.Pipeline),
		"-n", strconv.Itoa(cfg.Requests), "-r", "1000000000", "-q",
		"EVALSHA", sha, strconv.Itoa(len(keys))}
	cmd = append(cmd, keys...)
	for _, a := range args {
		s := fmt.Sprint(a)
		if s == id { // the event id: a new one per call
			s = "evt___rand_int__"
		}
		cmd = append(cmd, s)
	}
	out, err := exec.CommandContext(ctx, cfg.Benchmark, cmd...).CombinedOutput()
	line := cfg.Benchmark + " " + strings.Join(quoteAll(cmd), " ")
	if err != nil {
		return 0, line, fmt.Errorf("pipebench: redis-benchmark: %w: %s", err, lastLine(out))
	}
	m := rpsRe.FindAllSubmatch(out, -1)
	if len(m) == 0 {
		return 0, line, fmt.Errorf("pipebench: redis-benchmark printed no rate: %s", lastLine(out))
	}
	rps, err := strconv.ParseFloat(string(m[len(m)-1][1]), 64)
	return rps, line, err
}

// charged checks that every call of a run was judged: the family pool's
// used bytes moved by at least half the calls since before (both scripts
// charge 1 byte a call to the pool; only the engine's keeps the member's
// month in the pool hash).
func charged(ctx context.Context, eng *quota.Engine, ev quota.Event, before int64, calls int) error {
	st, err := eng.Family(ctx, ev.FamilyID)
	if err != nil {
		return err
	}
	if st.Used-before < int64(calls)/2 {
		return fmt.Errorf("pipebench: redis-benchmark calls did not charge the family (pool used %d → %d after %d calls)",
			before, st.Used, calls)
	}
	return nil
}

// Ceiling measures how many judgements per second the server does when fed
// by redis-benchmark: pipelined EVALSHA of the engine's own apply script with
// the engine's own keys and arguments, every call a new event id (the dedupe
// miss path), one member with every feature on charging 1 byte, so each call
// runs the full allowed path (see benchMember). It returns calls per second
// and the command line.
func Ceiling(ctx context.Context, eng *quota.Engine, cfg CeilingConfig) (float64, string, error) {
	if err := cfg.defaults(); err != nil {
		return 0, "", err
	}
	ev, err := benchMember(ctx, eng, cfg.FamilyID)
	if err != nil {
		return 0, "", err
	}
	if err := eng.Load(ctx); err != nil {
		return 0, "", err
	}
	sha, keys, args := eng.ApplyCommand(ev)
	rps, line, err := benchmark(ctx, cfg, sha, keys, args, ev.ID)
	if err != nil {
		return 0, line, err
	}
	return rps, line, charged(ctx, eng, ev, 0, cfg.Requests)
}

func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " {},:") {
			a = "'" + a + "'"
		}
		out[i] = a
	}
	return out
}

func lastLine(b []byte) string {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	if i := bytes.LastIndexByte(b, '\r'); i >= 0 {
		b = b[i+1:]
	}
	return string(b)
}

// CPU is where the machine's processor time went during a step, in cores
// (CPU-seconds per second): Redis (INFO cpu, summed over the cluster's
// masters), this process (the simulator, the in-process Kafka, the
// processors and write-behind), and the whole host (Linux /proc/stat; zero
// when unknown). Host − Redis − Process is everything else: MariaDB and
// whatever else runs there.
type CPU struct {
	Redis, Process, Host float64
	HostCores            int
}

// cpuSample is a point the step's CPU is measured between.
type cpuSample struct {
	at                   time.Time
	redis, proc, hostUse time.Duration
	hostOK               bool
}

func sampleCPU(ctx context.Context, rdb redis.UniversalClient) cpuSample {
	s := cpuSample{at: time.Now()}
	_ = eachNode(ctx, rdb, func(c *redis.Client) error {
		info, err := c.Info(ctx, "cpu").Result()
		if err != nil {
			return err
		}
		for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
			if v, err := infoFloat(info, f); err == nil {
				s.redis += time.Duration(v * float64(time.Second))
			}
		}
		return nil
	})
	s.proc = processCPU()
	s.hostUse, s.hostOK = hostCPU()
	return s
}

// cpuBetween is the CPU used between two samples.
func cpuBetween(a, b cpuSample) CPU {
	el := b.at.Sub(a.at).Seconds()
	if el <= 0 {
		return CPU{}
	}
	c := CPU{Redis: (b.redis - a.redis).Seconds() / el, Process: (b.proc - a.proc).Seconds() / el, HostCores: runtime.NumCPU()}
	if a.hostOK && b.hostOK {
		c.Host = (b.hostUse - a.hostUse).Seconds() / el
	}
	return c
}

func infoFloat(info, name string) (float64, error) {
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && k == name {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("pipebench: INFO has no %s", name)
}

// processCPU is this process's user + system time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// hostCPU is the time all of the host's CPUs spent not idle (Linux
// /proc/stat, in USER_HZ ticks of 10 ms).
func hostCPU() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, false
	}
	var busy int64
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, false
		}
		// user nice system idle iowait irq softirq steal guest guest_nice:
		// idle and iowait are idle; guest time is already in user.
		if i == 3 || i == 4 || i >= 8 {
			continue
		}
		busy += n
	}
	return time.Duration(busy) * 10 * time.Millisecond, true
}
