package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// config is the run's flags.
type config struct {
	redis, mysql          string
	server, recoverybench string
	processor, pipebench  string
	families              int
	seed                  bool
	callers, inFlight     int
	rate, eventRate       float64
	grantRate             float64
	batch                 int
	warmup, duration      time.Duration
	dir, doc              string
	only                  string
	profile               string
	serverEnv             []string
	processorEnv          []string
	cgrEngine             string
	cgrFamilies           int
	cgrIncrement          int64
	cgrLockingTimeout     time.Duration
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.StringVar(&c.redis, "redis", "", "redis-server host:port (DPCS's state, envoy ratelimit's counters, the trivial script; flushed)")
	fs.StringVar(&c.mysql, "mysql", "", "MariaDB/MySQL DSN; the database dpcs_recoverybench is seeded on its server")
	fs.StringVar(&c.server, "server", "", "the DPCS server deployable's binary (go build ./examples/server)")
	fs.StringVar(&c.recoverybench, "recoverybench", "", "the seeding binary (go build ./examples/recoverybench)")
	fs.StringVar(&c.processor, "processor", "", "the processor deployable's binary (go build ./examples/processor); empty: no pipeline steps")
	fs.StringVar(&c.pipebench, "pipebench", "", "the pipeline benchmark's binary (go build ./examples/pipebench): measures the engine's Redis ceiling after the pipeline steps; empty: none")
	fs.Float64Var(&c.grantRate, "grant-rate", 200, "updates per second of the grant path's fixed-rate step (each moves a whole grant: an SMF reports far less often than a gateway asks)")
	fs.Float64Var(&c.eventRate, "event-rate", 5000, "usage events per second of the pipeline's fixed-rate step")
	fs.IntVar(&c.families, "families", 80_000, "families seeded (4 members each)")
	fs.BoolVar(&c.seed, "seed", true, "seed the database again (false: use the one a run before seeded with the same -families)")
	fs.IntVar(&c.callers, "c", 50, "callers of the closed-loop steps")
	fs.Float64Var(&c.rate, "rate", 5000, "calls per second of the fixed-rate steps")
	fs.IntVar(&c.inFlight, "in-flight", 500, "calls at most in flight in the fixed-rate steps")
	fs.IntVar(&c.batch, "batch", 10, "decisions per call of the batched steps (0: none)")
	fs.DurationVar(&c.warmup, "warmup", 3*time.Second, "warmup of each step, not measured")
	fs.DurationVar(&c.duration, "duration", 15*time.Second, "measured window of each step")
	fs.StringVar(&c.dir, "dir", "", "directory for the processes' logs and envoy's configuration (default: a temporary one)")
	fs.StringVar(&c.doc, "doc", "", "write the table into this markdown file (the peers section)")
	fs.StringVar(&c.profile, "profile", "", "directory for CPU profiles of the DPCS server and the processor deployable, one per step (DPCS_ADMIN_PPROF)")
	fs.StringVar(&c.only, "only", "", "comma-separated targets to run (dpcs, charging, cgrates, gubernator, envoy, floor, floor-h2c, script, pipeline: the processor's steps alone); default all (cgrates only with -cgr-engine)")
	fs.StringVar(&c.cgrEngine, "cgr-engine", "", "CGRateS's cgr-engine binary (v0.10.4; PEERS_CGRATES=1 make bench-peers builds it): the grant path's peer, target cgrates; empty: none")
	fs.Int64Var(&c.cgrIncrement, "cgr-increment", 1<<20, "bytes of CGRateS's data debit increment (its balance rating subject *zero<N>ns); the grants are whole MiB")
	fs.DurationVar(&c.cgrLockingTimeout, "cgr-locking-timeout", 0, "CGRateS's general.locking_timeout (0, its default: a lock is held until released)")
	fs.IntVar(&c.cgrFamilies, "cgr-families", 2000, "families of CGRateS's tariff plan (4 member accounts sharing a data balance each)")
	fs.Func("server-env", "`KEY=VALUE` added to the DPCS server's environment (repeatable): a DPCS_ setting (e.g. DPCS_DECISION_LINGER=1ms) or Go's GOGC, GOMAXPROCS, GOMEMLIMIT",
		envFlag(&c.serverEnv, "DPCS_KAFKA_BROKERS", "DPCS_REDIS_ADDR", "DPCS_MYSQL_DSN", "DPCS_JWT_SECRET", "DPCS_GATEWAY_TOKENS", "DPCS_CHARGING_ADDR", "DPCS_CHARGING_TOKENS",
			"DPCS_HTTP_ADDR", "DPCS_ADMIN_ADDR", "DPCS_ADMIN_PPROF"))
	fs.Func("processor-env", "`KEY=VALUE` added to the processor deployable's environment (repeatable): a DPCS_ setting or Go's GOGC, GOMAXPROCS, GOMEMLIMIT",
		envFlag(&c.processorEnv, "DPCS_KAFKA_BROKERS", "DPCS_REDIS_ADDR", "DPCS_MYSQL_DSN", "DPCS_ADMIN_ADDR", "DPCS_ADMIN_PPROF"))
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.redis == "" || c.mysql == "" || c.server == "" || c.recoverybench == "" {
		return c, errors.New("-redis, -mysql, -server and -recoverybench are required")
	}
	if c.cgrFamilies < 1 || c.cgrIncrement < 1 {
		return c, errors.New("-cgr-families and -cgr-increment must be positive")
	}
	if c.families < 1 || c.callers < 1 || c.rate <= 0 || c.inFlight < 1 || c.batch < 0 {
		return c, errors.New("-families, -c, -rate and -in-flight must be positive, -batch not negative")
	}
	return c, nil
}

// envFlag is a repeatable KEY=VALUE flag appending to dst: a DPCS_
// variable or Go's GOGC, GOMAXPROCS and GOMEMLIMIT, none of the run's own
// (its calls and measurements depend on them).
func envFlag(dst *[]string, own ...string) func(string) error {
	return func(kv string) error {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, "DPCS_") && k != "GOGC" && k != "GOMAXPROCS" && k != "GOMEMLIMIT" {
			return errors.New("want DPCS_NAME=value, GOGC=, GOMAXPROCS= or GOMEMLIMIT=")
		}
		if slices.Contains(own, k) {
			return fmt.Errorf("%s is the run's own", k)
		}
		*dst = append(*dst, kv)
		return nil
	}
}

// seededDatabase is the database recoverybench seeds.
const seededDatabase = "dpcs_recoverybench"

// withDatabase returns dsn naming database db instead of its own.
func withDatabase(dsn, db string) (string, error) {
	q := ""
	if i := strings.IndexByte(dsn, '?'); i >= 0 {
		dsn, q = dsn[:i], dsn[i:]
	}
	i := strings.LastIndexByte(dsn, '/')
	if i < 0 {
		return "", fmt.Errorf("-mysql: %q names no database (user:password@tcp(host:port)/db)", dsn)
	}
	return dsn[:i+1] + db + q, nil
}

// child is a process the run started.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan error
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// untilReady calls try every interval until it succeeds, c (if not nil)
// ends, ctx ends or two minutes pass; the error says which, naming what
// was awaited and c's log.
func untilReady(ctx context.Context, c *child, dir, what string, interval time.Duration, try func() error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := try()
		if err == nil {
			return nil
		}
		if c != nil {
			select {
			case werr := <-c.done:
				c.done <- werr // stop waits on it too
				return fmt.Errorf("%s: %s stopped: %v (see %s/%s.log)", what, c.name, werr, dir, c.name)
			default:
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within 2 minutes: %w", what, err)
		}
		if err := sleep(ctx, interval); err != nil {
			return err
		}
	}
}

// stop ends the process: SIGTERM, then SIGKILL after 15 s.
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// start starts path with args and env, its stderr (and stdout unless
// ready) appended to dir/name.log; with ready it waits for the process's
// "ready <addr>" line on stdout and returns addr.
func start(dir, name, path string, args, env []string, ready bool) (*child, string, error) {
	log, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stderr = log
	var out io.Reader
	if ready {
		if out, err = cmd.StdoutPipe(); err != nil {
			log.Close()
			return nil, "", err
		}
	} else {
		cmd.Stdout = log
	}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan error, 1)}
	addr := ""
	if ready {
		if addr, err = waitReady(out, log, 2*time.Minute); err != nil {
			_ = cmd.Process.Kill()
		}
	}
	go func() { c.done <- cmd.Wait(); log.Close() }()
	if err != nil {
		<-c.done
		return nil, "", fmt.Errorf("%s: %w (see %s)", name, err, filepath.Join(dir, name+".log"))
	}
	return c, addr, nil
}

// baseEnv is what every child gets of this process's environment: no DPCS_
// variable (the server refuses ones it does not know), no proxies.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH", "HOME", "TMPDIR", "LANG", "GOMAXPROCS", "GOGC":
			env = append(env, kv)
		}
	}
	return env
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// redisPID returns the pid of the redis-server rdb talks to.
func redisPID(ctx context.Context, rdb *redis.Client) (int, error) {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("redis INFO server carries no process_id")
}

func run(ctx context.Context, args []string, progress io.Writer) error {
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	say := func(format string, a ...any) {
		fmt.Fprintf(progress, "[peers %s] "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
	}
	if cfg.dir == "" {
		if cfg.dir, err = os.MkdirTemp("", "peers"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: cfg.redis, PoolSize: max(cfg.callers, cfg.inFlight) + 10})
	defer rdb.Close()
	rpid, err := redisPID(ctx, rdb)
	if err != nil {
		return fmt.Errorf("-redis: %w", err)
	}
	dsn, err := withDatabase(cfg.mysql, seededDatabase)
	if err != nil {
		return err
	}
	targets, err := selectTargets(cfg)
	if err != nil {
		return err
	}
	gen := &generator{families: cfg.families}
	rep := &report{cfg: cfg, started: time.Now()}
	base := []proc{{"load generator", os.Getpid()}}

	if targets["dpcs"] || targets["charging"] || targets["pipeline"] {
		if cfg.seed {
			say("seeding %d families (recoverybench -seed-only)", cfg.families)
			// One family more than the steps draw from: the grant path's
			// contention check's (contentionFamily).
			seed, _, err := start(cfg.dir, "seed", cfg.recoverybench, []string{"-redis", cfg.redis, "-mysql", cfg.mysql,
				"-families", strconv.Itoa(cfg.families + 1), "-rows", "5", "-per-family", "0", "-seed-only"}, baseEnv(), false)
			if err != nil {
				return err
			}
			if err := <-seed.done; err != nil {
				return fmt.Errorf("seeding: %w (see %s/seed.log)", err, cfg.dir)
			}
		}
		d, err := startDPCS(ctx, cfg, self, dsn, say)
		if err != nil {
			return err
		}
		defer d.stop()
		procs := append([]proc{{"DPCS server", d.server.pid()}, {"redis-server", rpid}, {"Kafka (kfake)", d.kafka.pid()}}, base...)
		if pid := findMariaDB(cfg.mysql); pid != 0 {
			procs = append(procs, proc{"MariaDB", pid})
		}
		rep.onWindow = d.profileWindow
		rep.settle = func(ctx context.Context) error { return settle(ctx, d.kafkaAddr, say) }
		if targets["dpcs"] {
			err = rep.steps(ctx, "DPCS `POST /decisions`", procs, d.call, say)
		}
		if err == nil && targets["charging"] {
			err = rep.grantSteps(ctx, d, rdb, procs, say)
		}
		rep.onWindow, rep.settle = nil, nil
		if err != nil {
			return err
		}
		if rep.serverRSS, err = peakRSS(d.server.pid()); err != nil {
			return err
		}
		if cfg.processor != "" && targets["pipeline"] {
			// The server goes first: its notifier would share the
			// processor's notifications.
			d.server.stop()
			d.server = nil
			if err := rep.pipelineSteps(ctx, cfg, d, dsn, rpid, say); err != nil {
				return err
			}
		}
		if cfg.pipebench != "" && targets["pipeline"] {
			say("the engine's ceiling (pipebench -ceiling-only)")
			if rep.ceiling, rep.script, rep.ceilingCmd, err = measureCeiling(ctx, cfg); err != nil {
				return err
			}
			say("  %s judgements/s; the script %.1f µs per call (%.1f µs of CPU), its first version %.1f (%.1f)",
				thousands(rep.ceiling), rep.script[0], rep.script[1], rep.script[2], rep.script[3])
		}
		d.stop()
	}
	if targets["cgrates"] {
		say("CGRateS: starting cgr-engine (%s)", cfg.cgrEngine)
		c, err := startCGRates(ctx, cfg, say)
		if err != nil {
			return err
		}
		procs := append([]proc{{"cgr-engine", c.child.pid()}}, base...)
		err = rep.cgrSteps(ctx, c, procs, say)
		c.child.stop()
		if err != nil {
			return err
		}
	}
	if targets["gubernator"] {
		g, err := startGubernator(cfg, self, gen)
		if err != nil {
			return err
		}
		procs := append([]proc{{"gubernator", g.child.pid()}}, base...)
		err = rep.steps(ctx, "gubernator v2.13.0 `GetRateLimits` (gRPC, in memory)", procs, g.call, say)
		g.stop()
		if err != nil {
			return err
		}
	}
	if targets["envoy"] {
		e, err := startEnvoy(ctx, cfg, self, gen)
		if err != nil {
			return err
		}
		procs := append([]proc{{"envoy ratelimit", e.child.pid()}, {"redis-server", rpid}}, base...)
		err = rep.steps(ctx, "envoy ratelimit `ShouldRateLimit` (gRPC, Redis)", procs, e.call, say)
		e.stop()
		if err != nil {
			return err
		}
	}
	for _, h2c := range []bool{false, true} {
		name, target := "floor", "Go net/http floor: the same request and answer, nothing judged (HTTP/1.1)"
		if h2c {
			name, target = "floor-h2c", "Go net/http floor: the same request and answer, nothing judged (h2c)"
		}
		if !targets[name] {
			continue
		}
		c, call, err := startFloor(cfg, self, gen, h2c)
		if err != nil {
			return err
		}
		procs := append([]proc{{"net/http", c.pid()}}, base...)
		err = rep.steps(ctx, target, procs, call, say)
		c.stop()
		if err != nil {
			return err
		}
	}
	if targets["script"] {
		s, err := newScript(ctx, rdb, gen)
		if err != nil {
			return err
		}
		procs := append([]proc{{"redis-server", rpid}}, base...)
		if err := rep.steps(ctx, "trivial Redis script (`EVALSHA`: check a limit, debit it)", procs, s.call, say); err != nil {
			return err
		}
	}
	md := rep.markdown(strings.Join(args, " "))
	fmt.Println(md)
	if cfg.doc != "" {
		return replaceSection(cfg.doc, "<!-- peers:begin -->", "<!-- peers:end -->", md)
	}
	return nil
}

// selectTargets returns the targets -only names (all by default; cgrates
// by default only with -cgr-engine).
func selectTargets(cfg config) (map[string]bool, error) {
	targets := map[string]bool{"dpcs": true, "charging": true, "pipeline": true, "gubernator": true, "envoy": true, "floor": true, "floor-h2c": true, "script": true,
		"cgrates": cfg.cgrEngine != ""}
	if cfg.only != "" {
		targets = map[string]bool{}
		for t := range strings.SplitSeq(cfg.only, ",") {
			targets[strings.TrimSpace(t)] = true
		}
	}
	if targets["cgrates"] && cfg.cgrEngine == "" {
		return nil, errors.New("-only cgrates needs -cgr-engine (PEERS_CGRATES=1 make bench-peers builds it)")
	}
	return targets, nil
}

// pipelineSteps runs the processor deployable fed through Kafka by this
// process: at the fixed event rate and as fast as it judges.
func (r *report) pipelineSteps(ctx context.Context, cfg config, d *dpcs, dsn string, rpid int, say func(string, ...any)) error {
	p, err := startPipeline(ctx, cfg, d.kafkaAddr, dsn, d.gen)
	if err != nil {
		return err
	}
	defer p.stop()
	if err := p.drain(ctx, say); err != nil {
		return err
	}
	procs := []proc{{"DPCS processor", p.proc.pid()}, {"redis-server", rpid}, {"Kafka (kfake)", d.kafka.pid()}}
	if pid := findMariaDB(cfg.mysql); pid != 0 {
		procs = append(procs, proc{"MariaDB", pid})
	}
	procs = append(procs, proc{"load generator", os.Getpid()})
	const target = "DPCS processor deployable (usage events through Kafka)"
	// At rest first: what the deployable and its servers spend with no
	// event coming (fetch waits, heartbeats, timers), which the fixed-rate
	// step's events share and the flat-out step's hardly do.
	say("%s: at rest (nothing produced)", target)
	rest := newMeter(procs)
	rest.mark()
	t0 := time.Now()
	if p.profiles != "" {
		profile(ctx, p.admin, filepath.Join(p.profiles, "processor-at-rest.pprof"), cfg.duration)
	}
	if err := sleep(ctx, cfg.duration); err != nil {
		return err
	}
	rest.mark()
	if rest.err != nil {
		return rest.err
	}
	r.rest = &atRest{procs: procs, cpu: rest.spent, elapsed: time.Since(t0)}
	say("  %s", r.rest.text())
	for _, rate := range []float64{cfg.eventRate, 0} {
		name := "as fast as it judges"
		if rate > 0 {
			name = thousands(rate) + " events/s"
		}
		say("%s: %s", target, name)
		m := newMeter(procs)
		var scraped [2]samples
		mark := func() {
			if m.marked == 0 && p.profiles != "" {
				profile(ctx, p.admin, filepath.Join(p.profiles, "processor-"+fileName(name)+".pprof"), cfg.duration)
			}
			scraped[min(m.marked, 1)], _ = scrape(ctx, p.admin) // what it did, when it says
			m.mark()
		}
		w, err := p.step(ctx, rate, cfg.warmup, cfg.duration, mark)
		if err != nil {
			return err
		}
		if m.err != nil {
			return m.err
		}
		res := result{target: target, step: name, per: 1, w: w, procs: procs, cpu: m.spent}
		say("%s", res.line())
		if scraped[0] != nil && scraped[1] != nil {
			say("  %s", pipelineText(scraped[0], scraped[1], w.Elapsed.Seconds()))
		}
		if w.Calls == 0 || w.Errors > 0 {
			return fmt.Errorf("%s, %s: %d events judged, %d not produced (first: %v)", target, name, w.Calls, w.Errors, w.FirstErr)
		}
		r.results = append(r.results, res)
	}
	return nil
}

// caller makes the calls of one target: n decisions per call.
type caller func(n int) call

// steps runs the three steps on one target: closed loop, fixed rate, closed
// loop batched.
func (r *report) steps(ctx context.Context, target string, procs []proc, c caller, say func(string, ...any)) error {
	type step struct {
		name string
		n    int
		run  func(call, func()) (window, error)
	}
	cfg := r.cfg
	steps := []step{
		{fmt.Sprintf("closed loop, %d callers", cfg.callers), 1, func(f call, mark func()) (window, error) {
			return closedLoop(ctx, cfg.callers, cfg.warmup, cfg.duration, f, mark)
		}},
		{fmt.Sprintf("%s calls/s", thousands(cfg.rate)), 1, func(f call, mark func()) (window, error) {
			return openLoop(ctx, cfg.rate, cfg.inFlight, cfg.warmup, cfg.duration, f, mark)
		}},
	}
	if cfg.batch > 1 {
		steps = append(steps, step{fmt.Sprintf("closed loop, %d callers, %d per call", cfg.callers, cfg.batch), cfg.batch,
			func(f call, mark func()) (window, error) {
				return closedLoop(ctx, cfg.callers, cfg.warmup, cfg.duration, f, mark)
			}})
	}
	for _, s := range steps {
		if r.settle != nil {
			if err := r.settle(ctx); err != nil {
				return err
			}
		}
		say("%s: %s", target, s.name)
		m := newMeter(procs)
		mark := m.mark
		if r.onWindow != nil {
			mark = func() {
				if m.marked == 0 {
					r.onWindow(ctx, s.name, cfg.duration)
				}
				m.mark()
			}
		}
		w, err := s.run(c(s.n), mark)
		if err != nil {
			return err
		}
		if m.err != nil {
			return m.err
		}
		res := result{target: target, step: s.name, per: s.n, w: w, procs: procs, cpu: m.spent}
		say("%s", res.line())
		if w.Errors > 0 {
			say("  %d calls failed; the first: %v", w.Errors, w.FirstErr)
		}
		if w.Calls == 0 || w.Errors*10 > w.Calls {
			return fmt.Errorf("%s, %s: %d of %d calls failed (first: %v)", target, s.name, w.Errors, w.Calls, w.FirstErr)
		}
		r.results = append(r.results, res)
	}
	return nil
}

// grantSteps runs the grant path on the server d: closed loops at grant
// sizes of 1, 10 and 100 MiB, then the fixed rate at 10 MiB; sessions are
// released between steps.
func (r *report) grantSteps(ctx context.Context, d *dpcs, rdb redis.Cmdable, procs []proc, say func(string, ...any)) error {
	cfg := r.cfg
	const target = "DPCS charging interface (Nchf update over h2c)"
	s := newSMFs(d.chargingURL, d.chargingToken, d.gen, max(cfg.callers, cfg.inFlight))
	defer s.releaseAll(context.WithoutCancel(ctx))
	loc, err := serverZone(cfg)
	if err != nil {
		return err
	}
	month := func() string { return poolMonth(time.Now(), loc) }
	steps := grantPlan(ctx, cfg)
	for _, st := range steps {
		if err := s.releaseAll(ctx); err != nil {
			return fmt.Errorf("%s: releasing the sessions: %w", target, err)
		}
		s.grant = st.grant
		if r.settle != nil {
			if err := r.settle(ctx); err != nil {
				return err
			}
		}
		say("%s: %s", target, st.name)
		m := newMeter(procs)
		var g0, g1 int64
		mark := func() {
			if m.marked == 0 {
				g0 = s.granted.Load()
				if r.onWindow != nil {
					r.onWindow(ctx, "charging "+st.name, cfg.duration)
				}
			} else {
				g1 = s.granted.Load()
			}
			m.mark()
		}
		w, err := st.run(s.call(1), mark)
		if err != nil {
			return err
		}
		if m.err != nil {
			return m.err
		}
		res := result{target: target, step: st.name, per: 1, w: w, procs: procs, cpu: m.spent, authorised: g1 - g0}
		// The pools as the step left them, its sessions still open: what
		// they hold is reserved, and used + reserved must stay within
		// every pool's total.
		pools, err := readPools(ctx, rdb, seq(1, int64(cfg.families)), month())
		if err != nil {
			return fmt.Errorf("%s, %s: %w", target, st.name, err)
		}
		pc := checkPools(pools, st.grant)
		res.overshoot, res.overshootRead, res.usedUp = pc.overshoot, true, pc.usedUp
		say("%s; largest pool overshoot %d bytes, %d of %d pools with less than a grant left", res.line(), pc.overshoot, pc.usedUp, len(pools))
		if w.Errors > 0 {
			say("  %d calls failed; the first: %v", w.Errors, w.FirstErr)
		}
		if w.Calls == 0 || w.Errors*10 > w.Calls {
			return fmt.Errorf("%s, %s: %d of %d calls failed (first: %v)", target, st.name, w.Errors, w.Calls, w.FirstErr)
		}
		r.results = append(r.results, res)
	}
	c, err := contend(ctx, s, rdb, contentionFamily(cfg), month, cfg.callers, say)
	if err != nil {
		return fmt.Errorf("%s, contention: %w", target, err)
	}
	r.dpcsContended = c
	return nil
}

// contentionFamily is the seeded family no step draws from, whose pool the
// grant path's contention check uses up.
func contentionFamily(cfg config) int64 { return int64(cfg.families) + 1 }

// contend is the grant path's contention check: every caller on one
// family's four members, 10 MiB grants, in rounds of 200 ms until a round
// in which nothing was granted. The pool is read before, after every round
// (the sessions open then parked, holding what they were granted) and
// after every release. It fails when the pool had too little left to
// contend for (a database an earlier run used up: reseed), when no call
// was answered for 2 s (a server that stopped answering grants nothing
// too), and when nothing more was granted with a grant still left.
func contend(ctx context.Context, s *smfs, rdb redis.Cmdable, fid int64, month func() string, callers int, say func(string, ...any)) (*poolContention, error) {
	const round, stalled, most = 200 * time.Millisecond, 2 * time.Second, 300
	if err := s.releaseAll(ctx); err != nil {
		return nil, fmt.Errorf("releasing the sessions: %w", err)
	}
	read := func() (pool, error) {
		p, err := readPools(ctx, rdb, []int64{fid}, month())
		return p[fid], err
	}
	c := &poolContention{family: fid, grant: 10 << 20}
	var err error
	if c.before, err = read(); err != nil {
		return nil, err
	}
	if need := int64(callers) * c.grant; c.before.left() < need {
		return nil, fmt.Errorf("family %d's pool has %d bytes left, less than %d callers' grants: nothing to contend for (reseed: -seed)", fid, c.before.left(), callers)
	}
	s.grant, s.family = c.grant, fid
	defer func() { s.family = 0 }()
	say("every caller on family %d's four members, 10 MiB grants, until its pool (%d bytes left) grants no more", fid, c.before.left())
	g0, refused0 := s.granted.Load(), s.refused.Load()
	for answered := time.Now(); ; {
		if c.rounds == most {
			return nil, fmt.Errorf("family %d's pool still granting after %d rounds of %v", fid, most, round)
		}
		c.rounds++
		g := s.granted.Load()
		w, err := closedLoop(ctx, callers, 0, round, s.call(1), func() {})
		if err != nil {
			return nil, err
		}
		c.calls, c.errors = c.calls+w.Calls, c.errors+w.Errors
		if w.Errors*10 > w.Calls {
			return nil, fmt.Errorf("%d of %d calls failed (first: %v)", w.Errors, w.Calls, w.FirstErr)
		}
		if w.Calls > 0 {
			answered = time.Now()
		} else if time.Since(answered) >= stalled {
			return nil, fmt.Errorf("no call answered in %v", time.Since(answered).Round(time.Second))
		}
		p, err := read()
		if err != nil {
			return nil, err
		}
		c.overshoot = max(c.overshoot, p.over())
		if open := s.parked(); p.reserved >= c.held.reserved {
			c.held, c.open = p, open
		}
		if w.Calls > 0 && s.granted.Load() == g {
			break
		}
	}
	c.granted, c.refused = s.granted.Load()-g0, s.refused.Load()-refused0
	if err := s.releaseAll(ctx); err != nil {
		return nil, fmt.Errorf("releasing the sessions: %w", err)
	}
	if c.released, err = read(); err != nil {
		return nil, err
	}
	c.overshoot = max(c.overshoot, c.released.over())
	say("  %s", c.sentence())
	if c.released.left() >= c.grant {
		return c, fmt.Errorf("nothing more granted with %d bytes of the pool left", c.released.left())
	}
	return c, nil
}

// seq is from, from+1, …, to.
func seq(from, to int64) []int64 {
	out := make([]int64, 0, max(0, to-from+1))
	for f := from; f <= to; f++ {
		out = append(out, f)
	}
	return out
}

// measureCeiling runs `pipebench -ceiling-only` on the run's redis-server:
// the engine script's rate fed by redis-benchmark, the script's server µs
// and CPU µs per call and its first version's (script), and the ceiling's
// command. Its members are families 999,998 and 999,999's, beyond any
// seeded population.
func measureCeiling(ctx context.Context, cfg config) (float64, [4]float64, string, error) {
	var script [4]float64
	if cfg.families+1 >= 999_998 { // the contention family is seeded too
		return 0, script, "", errors.New("-pipebench: the ceiling's families 999998 and 999999 are seeded ones")
	}
	cmd := exec.CommandContext(ctx, cfg.pipebench, "-redis", cfg.redis, "-ceiling-only", "-first-family", "1000000")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, script, "", fmt.Errorf("pipebench -ceiling-only: %w: %s", err, stderr.String())
	}
	return parseCeiling(string(out))
}

// parseCeiling reads what `pipebench -ceiling-only` prints.
func parseCeiling(out string) (float64, [4]float64, string, error) {
	var script [4]float64
	lines := strings.SplitN(strings.TrimSpace(out), "\n", 3)
	bad := fmt.Errorf("pipebench -ceiling-only said %q", out)
	if len(lines) != 3 {
		return 0, script, "", bad
	}
	v, ok := strings.CutPrefix(lines[0], "ceiling ")
	rps, err := strconv.ParseFloat(v, 64)
	if !ok || err != nil || rps <= 0 {
		return 0, script, "", bad
	}
	f := strings.Fields(lines[1])
	if len(f) != 5 || f[0] != "script" {
		return 0, script, "", bad
	}
	for i := range script {
		if script[i], err = strconv.ParseFloat(f[i+1], 64); err != nil {
			return 0, script, "", bad
		}
	}
	return rps, script, strings.TrimSpace(lines[2]), nil
}
