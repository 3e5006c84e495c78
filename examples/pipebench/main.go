// Command pipebench measures the whole DPCS pipeline on this machine:
// simulator → Kafka (kfake, in process) → processor deployable(s) → real
// Redis → write-behind → MariaDB/MySQL, over a rate ladder and the full
// 1M-member population, beside the server's ceiling measured with
// redis-benchmark on the engine's own script; it checks the invariants after
// the run and writes the table into doc/benchmarks.md and a chart.
//
//	go run ./examples/pipebench -redis 127.0.0.1:26379 \
//	  -mysql 'root@tcp(127.0.0.1:23306)/dpcs?parseTime=true'
//
// `make bench` starts the servers and runs it. It empties the Redis server
// (FLUSHALL) and usage_record first unless -keep is given: point it at
// servers of its own.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/bench/pipebench"
	"github.com/dabom/dpcs/internal/buildinfo"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/simulate"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "pipebench:", err)
		os.Exit(1)
	}
}

type options struct {
	redisAddr, cluster, mysql   string
	families, compareFamilies   int
	firstFamily                 int64
	rates, scale                string
	processors, maxPoll, groups int
	duration, warmup            time.Duration
	doc, svg                    string
	keep, ceiling, ceilingOnly  bool
	profileStep, profileDir     string
	section                     string
	brokers                     string
	notifier, storeQuota        bool
}

func run(ctx context.Context, args []string) error {
	if buildinfo.Asked(args) {
		return buildinfo.Print(os.Stdout, "dpcs pipebench")
	}
	var o options
	fs := flag.NewFlagSet("pipebench", flag.ContinueOnError)
	fs.Bool("version", false, "print the version and exit")
	fs.StringVar(&o.redisAddr, "redis", os.Getenv("DPCS_REDIS_ADDR"), "Redis address (host:port)")
	fs.StringVar(&o.cluster, "redis-cluster", os.Getenv("DPCS_REDIS_CLUSTER"), "Redis Cluster addresses, comma-separated (instead of -redis)")
	fs.StringVar(&o.mysql, "mysql", os.Getenv("DPCS_MYSQL_DSN"), "MySQL/MariaDB DSN (go-sql-driver form)")
	fs.StringVar(&o.brokers, "brokers", "", "Kafka brokers, comma-separated (default: an in-process kfake)")
	fs.IntVar(&o.families, "families", 250_000, "families of the population (members ≈ 4×)")
	fs.Int64Var(&o.firstFamily, "first-family", 1_000_000, "first family id; the 1k-family population follows the big one, the ceiling uses the id before")
	fs.IntVar(&o.compareFamilies, "compare-families", 1000, "also run the max rate over a population of this many families (0: skip)")
	fs.StringVar(&o.rates, "rates", "5000,20000,50000,max", "offered rates in events/s, comma-separated; max = as fast as the producer goes")
	fs.StringVar(&o.scale, "scale", "1,2,3", "also run the max rate with these processor counts (empty: skip)")
	fs.IntVar(&o.processors, "processors", 1, "processor deployables for the rate ladder")
	fs.IntVar(&o.maxPoll, "max-poll", 0, "records per poll of each processor (0: the processor's default)")
	fs.IntVar(&o.groups, "apply-concurrency", 0, "partition groups judged concurrently per poll (0: the processor's default)")
	fs.DurationVar(&o.duration, "duration", 15*time.Second, "measured time per step")
	fs.DurationVar(&o.warmup, "warmup", 3*time.Second, "warm-up per step")
	fs.StringVar(&o.doc, "doc", "", "write the result table into this Markdown file between pipeline markers")
	fs.StringVar(&o.svg, "svg", "", "write the chart (throughput and p99 vs offered rate) to this SVG file")
	fs.StringVar(&o.section, "section", "pipeline", "name of the marked section of -doc to write (<!-- NAME:begin --> … <!-- NAME:end -->)")
	fs.BoolVar(&o.keep, "keep", false, "do not FLUSHALL Redis and empty usage_record first")
	fs.BoolVar(&o.ceiling, "ceiling", true, "measure the redis-benchmark ceiling (single Redis only)")
	fs.BoolVar(&o.ceilingOnly, "ceiling-only", false, "only measure the ceiling and the apply script's cost (beside its first version) on -redis and print them; touches only its own two families (-first-family less one and two) and resets the server's statistics, neither SQL nor Kafka")
	fs.StringVar(&o.profileStep, "profile-step", "max", "write CPU and allocation profiles of this step's window (empty: none)")
	fs.BoolVar(&o.notifier, "notifier", true, "run the notifier in the processor deployables and measure it (notifications/s, alert latency to a live subscriber)")
	fs.BoolVar(&o.storeQuota, "store-quota-updated", false, "the notifier stores every QUOTA_UPDATED in the inbox too (DPCS_NOTIFIER_STORE_QUOTA_UPDATED)")
	fs.StringVar(&o.profileDir, "profile-dir", os.TempDir(), "where the profiles go")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.firstFamily < 2 {
		return errors.New("-first-family: must be ≥ 2")
	}
	if o.ceilingOnly && o.redisAddr == "" {
		return errors.New("-ceiling-only: give -redis (the ceiling is one server's)")
	}
	if !o.ceilingOnly && ((o.redisAddr == "") == (o.cluster == "") || o.mysql == "") {
		return errors.New("give -redis or -redis-cluster, and -mysql (or DPCS_REDIS_ADDR / DPCS_REDIS_CLUSTER and DPCS_MYSQL_DSN)")
	}
	if o.ceilingOnly {
		return ceilingOnly(ctx, o)
	}
	rates, err := parseRates(o.rates)
	if err != nil {
		return err
	}
	cfg := service.Config{MySQLDSN: o.mysql, RedisAddr: o.redisAddr, RedisCluster: split(o.cluster)}
	rdb, err := cfg.Redis()
	if err != nil {
		return err
	}
	defer rdb.Close()
	db, err := cfg.SQL(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := service.Migrate(ctx, db); err != nil {
		return err
	}
	if !o.keep {
		if err := flush(ctx, rdb); err != nil {
			return err
		}
		if _, err := db.ExecContext(ctx, "TRUNCATE TABLE usage_record"); err != nil {
			return err
		}
	}
	brokers := split(o.brokers)
	if len(brokers) == 0 {
		kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(envelope.DefaultPartitions, envelope.Topics()...))
		if err != nil {
			return err
		}
		defer kc.Close()
		brokers = kc.ListenAddrs()
	}

	big, err := simulate.NewPopulation(1, simulate.WithFamilies(o.families), simulate.WithFirstFamilyID(o.firstFamily))
	if err != nil {
		return err
	}
	var steps []pipebench.StepSpec
	for _, r := range rates {
		steps = append(steps, pipebench.StepSpec{Label: label(r), Rate: r, Population: big, Processors: o.processors})
	}
	ladder := len(steps)
	if o.compareFamilies > 0 {
		small, err := simulate.NewPopulation(2, simulate.WithFamilies(o.compareFamilies),
			simulate.WithFirstFamilyID(o.firstFamily+int64(o.families)))
		if err != nil {
			return err
		}
		steps = append(steps, pipebench.StepSpec{Label: fmt.Sprintf("max, %s families", thin(o.compareFamilies)),
			Rate: pipebench.MaxRate, Population: small, Processors: o.processors})
	}
	for _, s := range split(o.scale) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return fmt.Errorf("-scale: %q is not a processor count", s)
		}
		steps = append(steps, pipebench.StepSpec{Label: fmt.Sprintf("max, %d proc.", n), Rate: pipebench.MaxRate,
			Population: big, Processors: n})
	}

	pcfg := pipebench.Config{Brokers: brokers, Redis: rdb, DB: db, Steps: steps, Warmup: o.warmup,
		Duration: o.duration, Progress: os.Stdout, Notifier: o.notifier, StoreQuotaUpdated: o.storeQuota}
	if o.maxPoll > 0 {
		pcfg.ProcessorOptions = append(pcfg.ProcessorOptions, judge.WithMaxPollRecords(o.maxPoll))
	}
	if o.groups > 0 {
		pcfg.ProcessorOptions = append(pcfg.ProcessorOptions, judge.WithApplyConcurrency(o.groups))
	}
	var cpu *os.File
	if o.profileStep != "" {
		pcfg.OnStep = func(l string, begin bool) {
			if l != o.profileStep {
				return
			}
			if begin {
				f, err := os.Create(o.profileDir + "/pipebench-cpu.pprof")
				if err == nil && pprof.StartCPUProfile(f) == nil {
					cpu = f
				}
				runtime.MemProfileRate = 64 << 10
				return
			}
			if cpu != nil {
				pprof.StopCPUProfile()
				cpu.Close()
			}
			if f, err := os.Create(o.profileDir + "/pipebench-allocs.pprof"); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
			fmt.Printf("[pipebench] profiles of step %s: %s/pipebench-{cpu,allocs}.pprof\n", l, o.profileDir)
		}
	}
	rep, err := pipebench.Run(ctx, pcfg)
	if err != nil {
		return err
	}
	var ceilingCmd string
	if o.ceiling && o.redisAddr != "" {
		eng, err := quota.New(rdb)
		if err != nil {
			return err
		}
		rep.Ceiling, ceilingCmd, err = pipebench.Ceiling(ctx, eng, pipebench.CeilingConfig{Addr: o.redisAddr, FamilyID: o.firstFamily - 1})
		if err != nil {
			return err
		}
		fmt.Printf("[pipebench] ceiling: %.0f judgements/s (%s)\n", rep.Ceiling, ceilingCmd)
		if c, ok := rdb.(*redis.Client); ok {
			cmp, err := pipebench.CompareScripts(ctx, c, eng, pipebench.CeilingConfig{Addr: o.redisAddr, FamilyID: o.firstFamily - 2})
			if err != nil {
				return err
			}
			rep.Scripts = &cmp
			fmt.Printf("[pipebench] apply script, old → new: %v → %v per call (commandstats), %v → %v CPU per call, %.0f → %.0f calls/s\n",
				cmp.Old.PerCall, cmp.New.PerCall, cmp.Old.CPUPerCall, cmp.New.CPUPerCall, cmp.Old.Rate, cmp.New.Rate)
		}
	}
	backend := "single redis-server " + o.redisAddr
	if o.cluster != "" {
		backend = "3-node Redis Cluster " + o.cluster
	}
	setting := fmt.Sprintf("Run %s on %d CPUs (%s): population %s families / %s members, Kafka = kfake in process "+
		"(%d partitions), %s, MariaDB (usage_record via write-behind, batches of 500), the simulator's producer "+
		"(lz4, linger 5 ms, acks=1) in the same process as the processor deployables (processor + write-behind%s). "+
		"%s warm-up and %s measured per step; the backlog is drained between steps.",
		time.Now().Format("2006-01-02"), runtime.NumCPU(), runtime.Version(), thin(big.NumFamilies()), thin(big.NumMembers()),
		envelope.DefaultPartitions, backend, notifierSetting(o), o.warmup, o.duration)
	quoted := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " &?;'\"$*") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		quoted[i] = a
	}
	cmdline := "go run ./examples/pipebench " + strings.Join(quoted, " ")
	md := rep.Markdown(cmdline, setting)
	if ceilingCmd != "" {
		md += "\nCeiling command: `" + ceilingCmd + "`\n"
	}
	fmt.Println()
	fmt.Println(md)
	if o.doc != "" {
		if err := pipebench.ReplaceSection(o.doc, "<!-- "+o.section+":begin -->", "<!-- "+o.section+":end -->", md); err != nil {
			return err
		}
	}
	if o.svg != "" {
		if err := os.WriteFile(o.svg, []byte(rep.SVG(rep.Steps[:ladder], 10*time.Millisecond)), 0o644); err != nil {
			return err
		}
	}
	if rep.InvariantsErr != nil {
		return fmt.Errorf("invariants: %w", rep.InvariantsErr)
	}
	return nil
}

func flush(ctx context.Context, rdb redis.UniversalClient) error {
	if c, ok := rdb.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.FlushAll(ctx).Err() })
	}
	return rdb.FlushAll(ctx).Err()
}

func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, p := range split(s) {
		if p == "max" {
			out = append(out, pipebench.MaxRate)
			continue
		}
		r, err := strconv.ParseFloat(p, 64)
		if err != nil || r <= 0 {
			return nil, fmt.Errorf("-rates: %q is not a rate (events/s > 0, or max)", p)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, errors.New("-rates: empty")
	}
	return out, nil
}

func label(r float64) string {
	if r == pipebench.MaxRate {
		return "max"
	}
	if r >= 1000 && int(r)%1000 == 0 {
		return fmt.Sprintf("%dk", int(r)/1000)
	}
	return strconv.FormatFloat(r, 'f', -1, 64)
}

func thin(n int) string {
	s := strconv.Itoa(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// notifierSetting describes the notifier's part of the deployables.
func notifierSetting(o options) string {
	switch {
	case !o.notifier:
		return ", no notifier"
	case o.storeQuota:
		return " + notifier: guard on the same Redis, inbox in MariaDB storing every notification"
	}
	return " + notifier: guard on the same Redis, inbox in MariaDB, QUOTA_UPDATED live-only"
}

// ceilingOnly measures the ceiling of the engine's script on o.redisAddr
// and the script's cost beside its first version (bench/peers compares the
// processor deployable with them in its own run) and prints them:
//
//	ceiling <judgements/s>
//	script <µs per call> <µs of CPU per call> <first script's µs> <its CPU µs>
//	<the ceiling's redis-benchmark command>
func ceilingOnly(ctx context.Context, o options) error {
	rdb := redis.NewClient(&redis.Options{Addr: o.redisAddr})
	defer rdb.Close()
	eng, err := quota.New(rdb)
	if err != nil {
		return err
	}
	rps, line, err := pipebench.Ceiling(ctx, eng, pipebench.CeilingConfig{Addr: o.redisAddr, FamilyID: o.firstFamily - 1})
	if err != nil {
		return err
	}
	cmp, err := pipebench.CompareScripts(ctx, rdb, eng, pipebench.CeilingConfig{Addr: o.redisAddr, FamilyID: o.firstFamily - 2})
	if err != nil {
		return err
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	fmt.Printf("ceiling %.0f\nscript %.1f %.1f %.1f %.1f\n%s\n", rps, us(cmp.New.PerCall), us(cmp.New.CPUPerCall),
		us(cmp.Old.PerCall), us(cmp.Old.CPUPerCall), line)
	return nil
}
