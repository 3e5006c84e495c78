//go:build chaos

package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/e2e"
	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/recovery"
	"github.com/dabom/dpcs/service/store"
	"github.com/dabom/dpcs/simulate"
	"github.com/dabom/dpcs/writebehind"
)

// config is the run's shape, from DPCS_CHAOS_* variables (CI defaults).
type config struct {
	Duration       time.Duration // DPCS_CHAOS_DURATION: traffic, faults included (100s)
	MySQLDown      time.Duration // DPCS_CHAOS_MYSQL_DOWN: how long MariaDB stays stopped (30s)
	RedisDown      time.Duration // DPCS_CHAOS_REDIS_DOWN: between redis-server's SIGKILL and restart (12s)
	Burst          time.Duration // DPCS_CHAOS_BURST: length of the 10× burst (3s)
	Drain          time.Duration // DPCS_CHAOS_DRAIN_TIMEOUT: how long catching up after traffic may go without progress (150s)
	SessionTimeout time.Duration // DPCS_CHAOS_SESSION_TIMEOUT: the processors' Kafka session (10s)
	ReplayDelay    time.Duration // DPCS_CHAOS_REPLAY_DELAY: delay of each event's last copy (2s)
	Rate           float64       // DPCS_CHAOS_RATE: distinct events per second (250)
	Families       int           // DPCS_CHAOS_FAMILIES: provisioned families (3000)
	Copies         int           // DPCS_CHAOS_COPIES: deliveries of every event (3)
	Seed           uint64        // DPCS_CHAOS_SEED: population and event stream (1)
	Processor      string        // DPCS_CHAOS_PROCESSOR: a prebuilt examples/processor; default: built here
	Keep           bool          // DPCS_CHAOS_KEEP=1 keeps the work directory after a green run too
	// Faults (DPCS_CHAOS_FAULTS, comma-separated) runs only the named steps
	// of the schedule (faultNames), one after another; empty: all of them.
	Faults []string
	// DPCS_CHAOS_KAFKA_PORT (the first of three), DPCS_CHAOS_REDIS_PORT,
	// DPCS_CHAOS_MYSQL_PORT: loopback ports for the servers; 0 (default) picks
	// free ones.
	KafkaPort, RedisPort, MySQLPort int
}

func loadConfig(t *testing.T) config {
	t.Helper()
	c := config{Duration: 100 * time.Second, MySQLDown: 30 * time.Second, RedisDown: 12 * time.Second,
		Burst: 3 * time.Second, Drain: 150 * time.Second, SessionTimeout: 10 * time.Second,
		ReplayDelay: 2 * time.Second, Rate: 250, Families: 3000, Copies: 3, Seed: 1,
		Processor: os.Getenv("DPCS_CHAOS_PROCESSOR"), Keep: os.Getenv("DPCS_CHAOS_KEEP") == "1"}
	var errs []error
	dur := func(name string, dst *time.Duration, lo time.Duration) {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < lo {
				errs = append(errs, fmt.Errorf("%s: want a duration ≥ %s, got %q", name, lo, v))
				return
			}
			*dst = d
		}
	}
	num := func(name string, set func(float64), lo, hi float64) {
		if v := os.Getenv(name); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < lo || f > hi {
				errs = append(errs, fmt.Errorf("%s: want a number from %g to %g, got %q", name, lo, hi, v))
				return
			}
			set(f)
		}
	}
	dur("DPCS_CHAOS_DURATION", &c.Duration, 0)
	dur("DPCS_CHAOS_MYSQL_DOWN", &c.MySQLDown, time.Second)
	dur("DPCS_CHAOS_REDIS_DOWN", &c.RedisDown, 0)
	dur("DPCS_CHAOS_BURST", &c.Burst, time.Second)
	dur("DPCS_CHAOS_DRAIN_TIMEOUT", &c.Drain, 10*time.Second)
	dur("DPCS_CHAOS_SESSION_TIMEOUT", &c.SessionTimeout, 6*time.Second) // kfake's minimum
	dur("DPCS_CHAOS_REPLAY_DELAY", &c.ReplayDelay, 0)
	num("DPCS_CHAOS_RATE", func(f float64) { c.Rate = f }, 1, 100_000)
	num("DPCS_CHAOS_FAMILIES", func(f float64) { c.Families = int(f) }, 10, 250_000)
	num("DPCS_CHAOS_COPIES", func(f float64) { c.Copies = int(f) }, 1, 10)
	num("DPCS_CHAOS_SEED", func(f float64) { c.Seed = uint64(f) }, 0, 1<<53)
	num("DPCS_CHAOS_KAFKA_PORT", func(f float64) { c.KafkaPort = int(f) }, 1024, 65533)
	num("DPCS_CHAOS_REDIS_PORT", func(f float64) { c.RedisPort = int(f) }, 1024, 65535)
	num("DPCS_CHAOS_MYSQL_PORT", func(f float64) { c.MySQLPort = int(f) }, 1024, 65535)
	if v := os.Getenv("DPCS_CHAOS_FAULTS"); v != "" {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); !slices.Contains(faultNames, name) {
				errs = append(errs, fmt.Errorf("DPCS_CHAOS_FAULTS: %q is not a step (%s)", name, strings.Join(faultNames, ", ")))
			} else if !slices.Contains(c.Faults, name) {
				c.Faults = append(c.Faults, name)
			}
		}
	}
	// Fourteen steps of at least 4 s (a rebalance takes about a heartbeat, 3 s)
	// around the Redis and MariaDB outages; the named steps alone, 4 s each.
	if n := len(c.Faults); n > 0 {
		if min := time.Duration(n+1) * 4 * time.Second; c.Duration < min {
			errs = append(errs, fmt.Errorf("DPCS_CHAOS_DURATION: at least 4s per step named in DPCS_CHAOS_FAULTS and 4s more = %s, got %s", min, c.Duration))
		}
	} else if min := c.MySQLDown + c.RedisDown + 56*time.Second; c.Duration < min {
		errs = append(errs, fmt.Errorf("DPCS_CHAOS_DURATION: at least DPCS_CHAOS_MYSQL_DOWN + DPCS_CHAOS_REDIS_DOWN + 56s = %s, got %s", min, c.Duration))
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return c
}

// harness is one run: the servers, the processors and what happened.
type harness struct {
	t   *testing.T
	cfg config
	dir string
	ctx context.Context
	bin string
	// serverBin is examples/server, built for the gateway load (server_test.go).
	serverBin string
	brokers   []string
	kafka     *kfake.Cluster
	redis     *Redis
	maria     *MariaDB
	rdb       *redis.Client
	eng       *quota.Engine
	db        *sql.DB
	adm       *kadm.Client
	admCl     *kgo.Client

	mu       sync.Mutex
	procs    []*Process // every processor ever started
	live     []*Process // processors meant to be running
	n        int        // processors started so far (names them)
	kills    int        // processors SIGKILLed
	stops    int        // processors stopped with SIGTERM
	servers  []*Process
	judges   []*Process // server deployables: they judge and may rebuild too
	t0       time.Time  // traffic start
	events   []string   // the timeline
	timings  []string   // measured recoveries
	families []int64
	monthly  map[int64]int64   // customer → monthly limit, the whole run
	daily    map[int64]int64   // customer → daily limit, the whole run
	members  map[int64][]int64 // family → its members
	owners   map[int64]int64   // family → its first owner
	rearmed  map[int64]bool    // families topped up through the API
	gateway  string            // the gateway load's figures, for the summary
	charging string            // the simulated SMFs' figures, for the summary
}

func (h *harness) logf(format string, args ...any) {
	h.t.Helper()
	msg := fmt.Sprintf(format, args...)
	at := "setup"
	if !h.t0.IsZero() {
		at = fmt.Sprintf("t+%5.1fs", time.Since(h.t0).Seconds())
	}
	h.mu.Lock()
	h.events = append(h.events, at+"  "+msg)
	h.mu.Unlock()
	h.t.Logf("%s  %s", at, msg)
}

func (h *harness) timing(format string, args ...any) {
	h.t.Helper()
	msg := fmt.Sprintf(format, args...)
	h.mu.Lock()
	h.timings = append(h.timings, msg)
	h.mu.Unlock()
	h.logf("%s", msg)
}

// at sleeps until d after the traffic started (at once if that is past).
func (h *harness) at(d time.Duration) {
	if w := time.Until(h.t0.Add(d)); w > 0 {
		time.Sleep(w)
	}
}

func TestChaos(t *testing.T) {
	cfg := loadConfig(t)
	began := time.Now()
	dir, err := os.MkdirTemp("", "dpcs-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, cfg: cfg, dir: dir, ctx: context.Background()}
	t.Cleanup(func() {
		if t.Failed() || cfg.Keep {
			t.Logf("work directory (logs, data) kept: %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	t.Cleanup(h.stopAll) // runs before the directory cleanup
	t.Cleanup(h.tailsOnFailure)
	t.Logf("config: %+v", cfg)
	t.Logf("work directory: %s", dir)

	var phase []string
	mark := time.Now()
	lap := func(name string) {
		phase = append(phase, fmt.Sprintf("%-28s %s", name, time.Since(mark).Round(100*time.Millisecond)))
		mark = time.Now()
	}

	// 1. Build, servers, provisioning.
	h.build()
	h.serverBin = h.buildServer()
	h.startServers()
	stopWatch, watchDone := make(chan struct{}), make(chan struct{})
	go h.watchGroups(stopWatch, watchDone)
	t.Cleanup(func() { close(stopWatch); <-watchDone }) // before stopAll
	lap("setup: build, servers")
	h.provision()
	lap("setup: provision")

	// 2. One processor, then traffic.
	h.startProcessor()
	h.waitMembers("1 processor", 1)
	lap("setup: first processor")
	traffic, sim := h.startTraffic()
	h.t0 = time.Now()
	h.logf("traffic started: %.0f events/s × %d copies", cfg.Rate, cfg.Copies)
	srv := h.startServer()
	srv.run()
	srv.startSMFs()

	// 3. Faults (see faults), then traffic stops.
	h.faults(sim)
	h.at(cfg.Duration)
	stopCtx, cancel := context.WithTimeout(h.ctx, 60*time.Second)
	if err := sim.Stop(stopCtx); err != nil {
		t.Errorf("simulator stop: %v", err)
	}
	if err := traffic.Close(stopCtx); err != nil {
		t.Errorf("traffic flush: %v", err)
	}
	cancel()
	srv.close()
	smf := srv.closeSMFs()
	ts := traffic.Stats()
	h.logf("traffic stopped: %d records, %d distinct events, %d failed", ts.Records, ts.Distinct, ts.Failed)
	lap("traffic with faults")

	// 4. Catch up.
	produced := traffic.IDs()
	h.drain(len(produced))
	lap("drain")

	// 5. Checks.
	for id := range srv.check(h.ctx) {
		produced[id] = struct{}{}
	}
	h.rearmed = srv.toppedUp()
	srv.checkSMFs(smf)
	sum := h.check(produced, ts)
	lap("checks")
	total := time.Since(began).Round(100 * time.Millisecond)
	h.summary(sum, ts, phase, total)
}

func (h *harness) build() {
	h.t.Helper()
	if h.cfg.Processor != "" {
		h.bin = h.cfg.Processor
		return
	}
	h.bin = filepath.Join(h.dir, "processor")
	cmd := exec.Command("go", "build", "-o", h.bin, "./examples/processor")
	cmd.Dir = ".." // the module root
	if out, err := cmd.CombinedOutput(); err != nil {
		h.t.Fatalf("go build ./examples/processor: %v\n%s", err, out)
	}
}

func lookPath(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, d := range []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin"} {
		if p := filepath.Join(d, name); fileExists(p) {
			return p
		}
	}
	t.Fatalf("%s not found: run scripts/chaos.sh (it installs redis-server and mariadb-server)", name)
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func (h *harness) startServers() {
	t := h.t
	t.Helper()
	ports, err := FreePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	if p := h.cfg.KafkaPort; p != 0 {
		ports[0], ports[1], ports[2] = p, p+1, p+2
	}
	if p := h.cfg.RedisPort; p != 0 {
		ports[3] = p
	}
	if p := h.cfg.MySQLPort; p != 0 {
		ports[4] = p
	}
	h.kafka, err = kfake.NewCluster(kfake.NumBrokers(3), kfake.Ports(ports[0], ports[1], ports[2]),
		kfake.SeedTopics(envelope.DefaultPartitions, envelope.Topics()...))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	h.brokers = h.kafka.ListenAddrs()
	h.logf("kfake: brokers %v, topics %v × %d partitions", h.brokers, envelope.Topics(), envelope.DefaultPartitions)

	if h.redis, err = NewRedis(lookPath(t, "redis-server"), filepath.Join(h.dir, "redis"), ports[3]); err != nil {
		t.Fatal(err)
	}
	if err := h.redis.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.addServer(h.redis.Process())
	h.logf("redis-server: %s (pid %d, appendonly, appendfsync always)", h.redis.Addr(), h.redis.Process().PID())

	h.maria, err = NewMariaDB(h.ctx, lookPath(t, "mariadb-install-db"), lookPath(t, "mariadbd"), filepath.Join(h.dir, "mariadb"), ports[4])
	if err != nil {
		t.Fatal(err)
	}
	if err := h.maria.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.addServer(h.maria.Process())
	h.logf("mariadbd: 127.0.0.1:%d (pid %d)", h.maria.Port, h.maria.Process().PID())

	h.rdb = redis.NewClient(&redis.Options{Addr: h.redis.Addr()})
	zone, err := policy.LoadZone(policy.DefaultZone)
	if err != nil {
		t.Fatal(err)
	}
	if h.eng, err = quota.New(h.rdb, quota.WithLocation(zone)); err != nil {
		t.Fatal(err)
	}
	if h.db, err = sql.Open("mysql", h.maria.DSN()); err != nil {
		t.Fatal(err)
	}
	if err := service.Migrate(h.ctx, h.db); err != nil {
		t.Fatal(err)
	}
	if h.admCl, err = kgo.NewClient(kgo.SeedBrokers(h.brokers...)); err != nil {
		t.Fatal(err)
	}
	h.adm = kadm.NewClient(h.admCl)
}

func (h *harness) addServer(p *Process) {
	h.mu.Lock()
	h.servers = append(h.servers, p)
	h.mu.Unlock()
}

// provision writes the population into SQL, as the API would (families,
// members, policies): a plan per family, a monthly limit on a child of every
// third family, a daily limit on a parent of every fourth, a video block on
// every seventh and custom thresholds on every sixth. Then it rebuilds Redis
// from SQL as the first state generation (recovery.Guard.Bootstrap), so the
// processors' state guard trusts it and every later rebuild restores the
// same population.
func (h *harness) provision() {
	t := h.t
	t.Helper()
	pop, err := simulate.NewPopulation(h.cfg.Seed, simulate.WithFamilies(h.cfg.Families), simulate.WithFirstFamilyID(1000))
	if err != nil {
		t.Fatal(err)
	}
	ctx := h.ctx
	if err := store.Migrate(ctx, h.db); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(h.db, store.WithLocation(h.eng.Location()))
	if err != nil {
		t.Fatal(err)
	}
	// Plans small enough that pools run dry and thresholds fire within a run.
	plans := []int64{4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30}
	h.monthly, h.daily = map[int64]int64{}, map[int64]int64{}
	h.members, h.owners = map[int64][]int64{}, map[int64]int64{}
	// The API families' first owners log in (server_test.go).
	ownerHash, err := st.HashPassword(apiPassword)
	if err != nil {
		t.Fatal(err)
	}
	var fams []simulate.Family
	members := 0
	for f := range pop.Families() {
		h.families = append(h.families, f.ID)
		fams = append(fams, f)
		for _, m := range f.Members {
			members++
			h.members[f.ID] = append(h.members[f.ID], m.CustomerID)
			if _, ok := h.owners[f.ID]; !ok && m.Role == policy.RoleOwner {
				h.owners[f.ID] = m.CustomerID
			}
			switch {
			case m.Index == 2 && f.ID%3 == 0:
				h.monthly[m.CustomerID] = 6 << 20
			case m.Index == 0 && f.ID%4 == 1:
				h.daily[m.CustomerID] = 3 << 20
			}
		}
	}
	one := func(f simulate.Family) error {
		nf := store.NewFamily{ID: f.ID, Name: fmt.Sprintf("chaos family %d", f.ID), PlanBytes: plans[f.ID%int64(len(plans))]}
		if f.ID%6 == 0 {
			nf.Thresholds = policy.Thresholds{75, 50, 25, 5}
		}
		if err := retryDeadlock(func() error { _, err := st.CreateFamily(ctx, nf, store.System); return err }); err != nil {
			return err
		}
		for _, m := range f.Members {
			nm := store.NewMember{ID: m.CustomerID, FamilyID: f.ID, Name: fmt.Sprintf("member %d", m.CustomerID), Role: m.Role}
			if len(h.families) > 0 && h.owners[f.ID] == m.CustomerID && slices.Index(h.families, f.ID) < apiFamilies {
				nm.PasswordHash = ownerHash
			}
			if err := retryDeadlock(func() error { _, err := st.AddMember(ctx, nm, store.System); return err }); err != nil {
				return err
			}
			c := map[string]string{}
			switch {
			case h.monthly[m.CustomerID] > 0:
				c[policy.KeyLimitMonthly] = strconv.FormatInt(h.monthly[m.CustomerID], 10)
			case h.daily[m.CustomerID] > 0:
				c[policy.KeyLimitDaily] = strconv.FormatInt(h.daily[m.CustomerID], 10)
			case m.Index == 1 && f.ID%7 == 0:
				c[policy.KeyBlockCatPrefix+string(policy.CategoryVideo)] = "1"
			}
			if len(c) > 0 {
				pc := store.PolicyChange{FamilyID: f.ID, CustomerID: m.CustomerID, Set: c, By: store.System}
				if err := retryDeadlock(func() error { _, err := st.UpdatePolicy(ctx, pc); return err }); err != nil {
					return err
				}
			}
		}
		return nil
	}
	start := time.Now()
	work := make(chan simulate.Family)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range work {
				if err := one(f); err != nil {
					errs <- fmt.Errorf("provision family %d: %w", f.ID, err)
					return
				}
			}
		}()
	}
feed:
	for _, f := range fams {
		select {
		case work <- f:
		case err := <-errs:
			close(work)
			wg.Wait()
			t.Fatal(err)
			break feed
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	h.logf("provisioned in SQL in %s: %d families, %d members, %d monthly and %d daily limits, plans %v MB",
		time.Since(start).Round(100*time.Millisecond), len(fams), members, len(h.monthly), len(h.daily), []int64{4, 16, 64, 256, 1024})
	qs, err := judge.NewState(h.eng)
	if err != nil {
		t.Fatal(err)
	}
	rec, closeRec, err := recovery.NewDeployable(qs, h.db, []kgo.Opt{kgo.SeedBrokers(h.brokers...)}, nil, recovery.Automatic, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeRec()
	info, err := rec.Bootstrap(ctx, "chaos: provisioned in SQL")
	if err != nil {
		t.Fatalf("rebuild Redis from SQL: %v", err)
	}
	h.timing("Redis built from SQL at start: generation %s, %d families in %s", info.Generation, info.Families, info.Total.Round(10*time.Millisecond))
}

// retryDeadlock runs a transaction again (up to 5 times) when InnoDB chose
// it as a deadlock victim or it timed out waiting for a lock: concurrent
// provisioning transactions (their outbox and audit inserts) can deadlock,
// and MySQL's documented answer is to run the transaction again.
func retryDeadlock(tx func() error) error {
	for try := 1; ; try++ {
		err := tx()
		var me *mysql.MySQLError
		if err == nil || try == 5 || !errors.As(err, &me) || me.Number != 1213 && me.Number != 1205 {
			return err
		}
		time.Sleep(time.Duration(try) * 10 * time.Millisecond)
	}
}

// startProcessor starts one more processor deployable.
func (h *harness) startProcessor() *Process {
	h.t.Helper()
	h.mu.Lock()
	h.n++
	name := fmt.Sprintf("processor-%d", h.n)
	h.mu.Unlock()
	env := h.childEnv(
		"DPCS_KAFKA_SESSION_TIMEOUT="+h.cfg.SessionTimeout.String(),
		"DPCS_LOG_LEVEL=info",
		"DPCS_ADMIN_ADDR=127.0.0.1:0", // several run side by side
		// The invariants count one stored QUOTA_UPDATED per allowed row
		// (exactly once through kills and replays): store them, not only
		// push them live (the default).
		"DPCS_NOTIFIER_STORE_QUOTA_UPDATED=true",
	)
	p, err := StartProcess(name, filepath.Join(h.dir, name+".log"), env, h.bin)
	if err != nil {
		h.t.Fatal(err)
	}
	h.mu.Lock()
	h.procs = append(h.procs, p)
	h.live = append(h.live, p)
	n := len(h.live)
	h.mu.Unlock()
	h.logf("started %s (pid %d): %d processors running", name, p.PID(), n)
	return p
}

// childEnv is the environment of a deployable the harness starts: the
// test's own without its DPCS_* variables, then the run's servers and extra.
func (h *harness) childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DPCS_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"DPCS_KAFKA_BROKERS="+strings.Join(h.brokers, ","),
		"DPCS_REDIS_ADDR="+h.redis.Addr(),
		"DPCS_MYSQL_DSN="+h.maria.DSN())
	return append(env, extra...)
}

// victim returns the oldest running processor and takes it off the live list.
func (h *harness) victim() *Process {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.live) == 0 {
		h.t.Fatal("no processor to stop")
	}
	p := h.live[0]
	h.live = h.live[1:]
	return p
}

func (h *harness) killProcessor() {
	h.t.Helper()
	p := h.victim()
	if err := p.Kill(); err != nil {
		h.t.Error(err)
	}
	h.mu.Lock()
	h.kills++
	n := len(h.live)
	h.mu.Unlock()
	h.logf("kill -9 %s (pid %d): %d processors running", p.Name, p.PID(), n)
}

func (h *harness) terminateProcessor() {
	h.t.Helper()
	p := h.victim()
	start := time.Now()
	err := p.Terminate(45 * time.Second)
	h.mu.Lock()
	h.stops++
	n := len(h.live)
	h.mu.Unlock()
	if err != nil {
		h.t.Errorf("graceful stop of %s: %v\n%s", p.Name, err, Tail(p.LogPath, 30))
	}
	h.logf("SIGTERM %s (pid %d): stopped cleanly in %s; %d processors running", p.Name, p.PID(), time.Since(start).Round(10*time.Millisecond), n)
}

// waitMembers waits until the processor group is stable with n members and
// records how long that took. Every change of the group's state or size is
// progress; it fails after e2e.DefaultStall without any.
func (h *harness) waitMembers(what string, n int) {
	h.t.Helper()
	start := time.Now()
	var last string
	var changes int64
	err := e2e.Wait{What: fmt.Sprintf("group %s to be stable with %d members", what, n), Poll: 250 * time.Millisecond}.Until(h.ctx,
		func(ctx context.Context) (e2e.Progress, error) {
			gs, err := h.adm.DescribeGroups(ctx, judge.ProcessorGroup)
			if err != nil {
				return e2e.Progress{}, err
			}
			g := gs[judge.ProcessorGroup]
			if now := fmt.Sprintf("%s with %d members", g.State, len(g.Members)); now != last {
				last, changes = now, changes+1
			}
			return e2e.Progress{Done: g.Err == nil && g.State == "Stable" && len(g.Members) == n, At: changes, Seen: last}, g.Err
		})
	if err != nil {
		h.t.Error(err)
		return
	}
	h.timing("group %s: stable with %d members after %s", what, n, time.Since(start).Round(100*time.Millisecond))
}

func (h *harness) startTraffic() (*Traffic, *simulate.Simulator) {
	t := h.t
	t.Helper()
	cl, err := kgo.NewClient(append(simulate.ProducerOptions(kgo.AllISRAcks()), kgo.SeedBrokers(h.brokers...))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	pub, err := simulate.NewPublisher(cl)
	if err != nil {
		t.Fatal(err)
	}
	traffic, err := NewTraffic(pub, h.cfg.Copies, h.cfg.ReplayDelay)
	if err != nil {
		t.Fatal(err)
	}
	pop, err := simulate.NewPopulation(h.cfg.Seed, simulate.WithFamilies(h.cfg.Families), simulate.WithFirstFamilyID(1000))
	if err != nil {
		t.Fatal(err)
	}
	gen, err := simulate.NewGenerator(pop, simulate.WithLocation(h.eng.Location()), simulate.WithStreamSeed(h.cfg.Seed+1))
	if err != nil {
		t.Fatal(err)
	}
	sim, err := simulate.New(gen, traffic, simulate.WithRate(h.cfg.Rate))
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	return traffic, sim
}

// faults runs the schedule. u is a fourteenth of the traffic time outside
// the Redis and MariaDB outages; every step starts at its time or, if an
// earlier one ran late, right after it. With DPCS_CHAOS_FAULTS only the
// steps it names run, one after another, a duration/(steps+1) apart.
func (h *harness) faults(sim *simulate.Simulator) {
	cfg := h.cfg
	M, R := cfg.MySQLDown, cfg.RedisDown
	u := (cfg.Duration - M - R) / 14
	steps := []struct {
		name string
		at   time.Duration
		run  func()
	}{
		// Rebalance: 1 → 3 → 2 → 3 processors, a u apart.
		{"rebalance", 1 * u, func() {
			from := time.Now()
			h.startProcessor()
			h.startProcessor()
			h.waitMembers("1→3", 3)
			sleepUntil(from.Add(u))
			h.terminateProcessor()
			h.waitMembers("3→2", 2)
			sleepUntil(from.Add(2 * u))
			h.startProcessor()
			h.waitMembers("2→3", 3)
		}},
		// Redis killed and restarted on the same port and AOF, while the
		// group is stable (after a SIGKILL the group waits a session timeout).
		{"redis-outage", 4 * u, h.redisOutage},
		// A processor killed mid-stream and restarted at once.
		{"processor-kill", 5*u + R, func() { h.killProcessor(); h.startProcessor() }},
		// One 10× burst.
		{"burst", 6*u + R, func() {
			if err := sim.SetRate(cfg.Rate * 10); err != nil {
				h.t.Fatal(err)
			}
			h.logf("burst: %.0f events/s for %s", cfg.Rate*10, cfg.Burst)
			time.Sleep(cfg.Burst)
			if err := sim.SetRate(cfg.Rate); err != nil {
				h.t.Fatal(err)
			}
			h.logf("burst over: back to %.0f events/s", cfg.Rate)
		}},
		// MariaDB stopped; a processor killed while it is down and replaced
		// once it is back (a processor cannot start without its database).
		{"mysql-outage", 7*u + R, func() { h.mysqlOutage(M/3, h.killProcessor, func() { h.startProcessor() }) }},
		// Once more, a processor killed and restarted.
		{"processor-kill-again", 8*u + R + M, func() { h.killProcessor(); h.startProcessor() }},
		// Redis comes back empty: the processors must notice, one rebuilds
		// from SQL, the others wait, and all resume.
		{"redis-empty", 9*u + R + M, h.redisEmpty},
		// Redis comes back from a snapshot taken seconds earlier.
		{"redis-snapshot", 10*u + R + M, h.redisSnapshot},
		// Redis comes back empty again, and MariaDB stops while its families
		// are restored (on touch and by the sweep).
		{"redis-empty-sql-down", 11*u + R + M, h.redisEmptySQLDown},
		// A replica a second behind takes over, under the gateways'
		// decisions and the owners' top-ups.
		{"redis-failover", 12*u + R + M, h.redisFailover},
		// Redis comes back from a snapshot a second old.
		{"redis-young-snapshot", 13*u + R + M, h.redisYoungSnapshot},
	}
	if len(cfg.Faults) == 0 {
		for _, s := range steps {
			h.at(s.at)
			s.run()
		}
		return
	}
	gap := cfg.Duration / time.Duration(len(cfg.Faults)+1)
	at := time.Duration(0)
	for _, s := range steps {
		if !slices.Contains(cfg.Faults, s.name) {
			continue
		}
		at += gap
		h.at(at)
		h.logf("step %s (DPCS_CHAOS_FAULTS)", s.name)
		s.run()
	}
}

// runs reports whether the schedule runs the step name (DPCS_CHAOS_FAULTS).
func (h *harness) runs(name string) bool {
	return len(h.cfg.Faults) == 0 || slices.Contains(h.cfg.Faults, name)
}

// faultNames are the steps of faults, in their order (DPCS_CHAOS_FAULTS).
var faultNames = []string{"rebalance", "redis-outage", "processor-kill", "burst", "mysql-outage",
	"processor-kill-again", "redis-empty", "redis-snapshot", "redis-empty-sql-down", "redis-failover",
	"redis-young-snapshot"}

func sleepUntil(t time.Time) {
	if w := time.Until(t); w > 0 {
		time.Sleep(w)
	}
}

// committed sums the processor group's committed offsets.
func (h *harness) committed(ctx context.Context) (int64, error) {
	offs, err := h.adm.FetchOffsets(ctx, judge.ProcessorGroup)
	if err != nil {
		return 0, err
	}
	var sum int64
	offs.Each(func(o kadm.OffsetResponse) { sum += max(o.At, 0) })
	return sum, nil
}

// call runs f with its own bounded context (one request to a server).
func call[T any](h *harness, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(h.ctx, e2e.DefaultCall)
	defer cancel()
	return f(ctx)
}

// redisOutage kills redis-server and starts it again after RedisDown on
// the same port and AOF (fsync always): it lost nothing, but a restart
// cannot be told from one that did (doc/architecture.md, "No window"), so
// the node is stale at once and one processor rebuilds it from SQL.
func (h *harness) redisOutage() {
	h.t.Helper()
	f := h.beginRedisFault()
	pid := h.redis.Process().PID()
	atKill, _ := call(h, h.committed)
	if err := h.redis.Kill(); err != nil {
		h.t.Fatal(err)
	}
	h.logf("kill -9 redis-server (pid %d); processor group committed %d offsets", pid, atKill)
	time.Sleep(h.cfg.RedisDown)
	before, err := call(h, h.committed)
	if err != nil {
		h.t.Errorf("committed offsets while Redis was down: %v", err)
	}
	if err := h.redis.Start(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	h.addServer(h.redis.Process())
	f.back = time.Now()
	h.logf("redis-server restarted on %s (pid %d) after %s down; committed offsets %d while it was down",
		h.redis.Addr(), h.redis.Process().PID(), h.cfg.RedisDown, before-atKill)
	h.awaitRecovery("Redis restarted with its data (AOF, fsync always)", f)
}

func (h *harness) usageRows(ctx context.Context) (int64, error) {
	var n int64
	err := h.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM usage_record`).Scan(&n)
	return n, err
}

// mysqlOutage stops MariaDB for the configured time, runs during() after
// the given time into it, starts it again, runs back() and waits until the
// write-behind writes again.
func (h *harness) mysqlOutage(after time.Duration, during, back func()) {
	h.t.Helper()
	before, _ := call(h, h.usageRows)
	pid := h.maria.Process().PID()
	start := time.Now()
	if err := h.maria.Stop(); err != nil {
		h.t.Errorf("mariadb stop: %v", err)
	}
	h.logf("mariadbd stopped (SIGTERM, pid %d) in %s; usage_record had %d rows", pid, time.Since(start).Round(10*time.Millisecond), before)
	time.Sleep(after)
	during()
	if w := time.Until(start.Add(h.cfg.MySQLDown)); w > 0 {
		time.Sleep(w)
	}
	if err := h.maria.Start(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	h.addServer(h.maria.Process())
	up := time.Now()
	h.logf("mariadbd started again on the same datadir and port (pid %d) after %s down", h.maria.Process().PID(), up.Sub(start).Round(100*time.Millisecond))
	back()
	var n int64
	err := e2e.Wait{What: fmt.Sprintf("usage_record to grow after MariaDB came back (%d rows)", before),
		Poll: 200 * time.Millisecond}.Until(h.ctx, func(ctx context.Context) (e2e.Progress, error) {
		var err error
		n, err = h.usageRows(ctx)
		return e2e.Progress{Done: err == nil && n > before, Seen: fmt.Sprintf("%d rows", n)}, err
	})
	if err != nil {
		h.t.Error(err)
		return
	}
	h.timing("write-behind writing again %s after MariaDB came back (usage_record %d → %d rows)",
		time.Since(up).Round(100*time.Millisecond), before, n)
}

type groupTopics struct {
	group  string
	topics []string
}

// groups are the consumer groups of the processor deployable and their topics.
func groups() []groupTopics {
	return []groupTopics{
		{judge.ProcessorGroup, judge.ProcessorTopics()},
		{writebehind.DefaultGroup, []string{envelope.TopicUsagePersist}},
		{notify.DefaultGroup, notify.Topics()},
	}
}

// watchGroups adds every change of a consumer group's state or size to the
// timeline, until stop is closed; it closes done when it returns.
func (h *harness) watchGroups(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	last := map[string]string{}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, g := range groups() {
			ctx, cancel := context.WithTimeout(h.ctx, 2*time.Second)
			gs, err := h.adm.DescribeGroups(ctx, g.group)
			cancel()
			if err != nil {
				continue
			}
			d := gs[g.group]
			now := fmt.Sprintf("%s, %d members", d.State, len(d.Members))
			if now != last[g.group] {
				last[g.group] = now
				h.logf("group %s: %s", g.group, now)
			}
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// lags returns the lag of every consumer group of the processor deployable,
// the lines of lagging partitions, and the sum of their committed offsets.
func (h *harness) lags(ctx context.Context) (map[string]int64, []string, int64, error) {
	out := map[string]int64{}
	var lines []string
	var committed int64
	for _, g := range groups() {
		n, l, err := GroupLag(ctx, h.adm, g.group, g.topics...)
		if err != nil {
			return nil, nil, 0, err
		}
		out[g.group] = n
		lines = append(lines, l...)
		offs, err := h.adm.FetchOffsets(ctx, g.group)
		if err != nil {
			return nil, nil, 0, err
		}
		offs.Each(func(o kadm.OffsetResponse) { committed += max(o.At, 0) })
	}
	return out, lines, committed, nil
}

// drain waits until usage_record holds want distinct events and no group
// lags. It waits as long as rows are written or offsets committed; the run
// fails after DPCS_CHAOS_DRAIN_TIMEOUT without either.
func (h *harness) drain(want int) {
	h.t.Helper()
	start := time.Now()
	lastLog := time.Time{}
	err := e2e.Wait{What: fmt.Sprintf("usage_record to hold the %d events and every group to reach lag 0", want),
		Stall: h.cfg.Drain, Poll: time.Second}.Until(h.ctx, func(ctx context.Context) (e2e.Progress, error) {
		rows, err := h.usageRows(ctx)
		if err != nil {
			return e2e.Progress{}, fmt.Errorf("count usage_record: %w", err)
		}
		lag, lines, committed, err := h.lags(ctx)
		if err != nil {
			return e2e.Progress{}, err
		}
		total := int64(0)
		for _, n := range lag {
			total += n
		}
		if rows >= int64(want) && total == 0 {
			h.timing("drained %s after traffic stopped: %d rows, every group at lag 0", time.Since(start).Round(100*time.Millisecond), rows)
			return e2e.Progress{Done: true}, nil
		}
		if time.Since(lastLog) >= 10*time.Second {
			h.logf("drain: usage_record %d of %d, lag %v", rows, want, lag)
			lastLog = time.Now()
		}
		return e2e.Progress{At: rows + committed, Seen: fmt.Sprintf("usage_record %d rows for %d events; lag %v\n%s",
			rows, want, lag, strings.Join(lines, "\n"))}, nil
	})
	if err != nil {
		h.t.Error(err)
	}
}

type results struct {
	usage    UsageStats
	plans    int        // family-months checked against plan + top-ups
	limits   int        // member months and days checked against limits
	topic    AlertStats // THRESHOLD_ALERT records on notification-events
	kinds    map[string]int64
	alerts   int
	topics   map[string]int64
	evidence map[string]int // log lines showing the faults were met
}

func (h *harness) check(produced map[string]struct{}, ts TrafficStats) results {
	t := h.t
	t.Helper()
	var r results
	h.mu.Lock()
	all := append(slices.Clone(h.procs), h.servers...)
	h.mu.Unlock()
	for _, p := range all {
		if err := p.Unexpected(); err != nil {
			t.Errorf("unexpected exit: %v\n%s", err, Tail(p.LogPath, 30))
		}
	}
	var logs []string
	for _, p := range all {
		if strings.HasPrefix(p.Name, "processor-") {
			logs = append(logs, p.LogPath)
		}
	}
	// The write-behind and the notifier log through envelope/consumer: a
	// failed batch is retried with fetching paused, a refused commit retried.
	const (
		batchFailed   = `msg="consumer: batch failed; fetching paused, retrying"`
		commitRefused = `msg="consumer: commit refused; retrying"`
		writeBehind   = `worker=write-behind`
		notifier      = `worker=notifier`
	)
	r.evidence = map[string]int{
		"processor: redis retries":          CountLines(logs, `what="redis apply"`),
		"processor: circuit breaker moves":  CountLines(logs, `msg="redis circuit breaker"`),
		"write-behind: writes refused":      CountLines(logs, batchFailed, writeBehind, `connection refused`),
		"write-behind: other failed writes": CountLines(logs, batchFailed, writeBehind) - CountLines(logs, batchFailed, writeBehind, `connection refused`),
		"notifier: retries":                 CountLines(logs, batchFailed, notifier),
		"notifier: failed commits":          CountLines(logs, commitRefused, notifier),
	}
	if r.evidence["processor: redis retries"] == 0 && h.runs("redis-outage") {
		t.Errorf("no processor log shows a failed Redis call: the Redis outage did not meet active processing")
	}
	if r.evidence["write-behind: writes refused"] == 0 && h.runs("mysql-outage") {
		t.Errorf("no processor log shows a write-behind batch refused by the stopped MariaDB: the outage did not meet active writing")
	}
	if ts.Failed > 0 {
		t.Errorf("%d records could not be produced (last error: %v)", ts.Failed, ts.LastErr)
	}
	ctx, cancel := context.WithTimeout(h.ctx, 5*time.Minute)
	defer cancel()
	var err error
	// The grant steps' rows are the SMFs' creates, updates and releases:
	// one row each, like an event's.
	steps, err := GrantSteps(ctx, h.db)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range steps {
		produced[id] = struct{}{}
	}
	if err := CheckEvents(ctx, h.db, produced); err != nil {
		t.Errorf("usage_record vs produced events:\n%v", err)
	}
	if r.usage, err = Usage(ctx, h.db); err != nil {
		t.Fatal(err)
	}
	if err := recovery.CheckInvariants(ctx, h.eng, h.db, h.families); err != nil {
		t.Errorf("recovery.CheckInvariants over %d families:\n%v", len(h.families), err)
	}
	if err := CheckNotMember(ctx, h.db); err != nil {
		t.Error(err)
	}
	if r.plans, err = CheckPlans(ctx, h.db, h.eng.Location()); err != nil {
		t.Errorf("nobody over plan:\n%v", err)
	}
	if r.limits, err = CheckMemberLimits(ctx, h.db, h.eng.Location(), h.monthly, h.daily); err != nil {
		t.Errorf("no member over a limit:\n%v", err)
	}
	if r.kinds, err = NotificationStats(ctx, h.db); err != nil {
		t.Fatal(err)
	}
	grantQuota, grantBlocked, err := GrantNotices(ctx, h.db, steps)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckNotified(r.kinds, r.usage, grantQuota, grantBlocked); err != nil {
		t.Errorf("notifications:\n%v", err)
	}
	r.alerts, err = CheckThresholds(ctx, h.db, h.eng, h.families, h.rearmed)
	if err != nil {
		t.Errorf("threshold alerts:\n%v", err)
	}
	topics := envelope.Topics()
	if r.topics, err = TopicSizes(ctx, h.adm, topics...); err != nil {
		t.Fatal(err)
	}
	for _, tp := range topics {
		if strings.HasSuffix(tp, ".DLT") && r.topics[tp] > 0 {
			dl, _ := DeadLetters(ctx, h.brokers, tp, 10)
			t.Errorf("%s holds %d records:\n%s", tp, r.topics[tp], strings.Join(dl, "\n"))
		}
	}
	if r.topic, err = CheckAlertTopic(ctx, h.brokers, envelope.TopicNotificationEvents, r.topics[envelope.TopicNotificationEvents]); err != nil {
		t.Errorf("threshold alerts on %s:\n%v", envelope.TopicNotificationEvents, err)
	}
	if got := r.topics[envelope.TopicUsageEvents]; got != ts.Records {
		t.Errorf("usage-events holds %d records, %d were acknowledged", got, ts.Records)
	}
	return r
}

func (h *harness) summary(r results, ts TrafficStats, phase []string, total time.Duration) {
	var b strings.Builder
	status := "PASS"
	if h.t.Failed() {
		status = "FAIL"
	}
	fmt.Fprintf(&b, "\n==================== chaos summary: %s ====================\n", status)
	fmt.Fprintf(&b, "families %d; rate %.0f/s (burst %.0f/s for %s); every event delivered %d×\n",
		len(h.families), h.cfg.Rate, h.cfg.Rate*10, h.cfg.Burst, h.cfg.Copies)
	fmt.Fprintf(&b, "records produced (acked)   %d (failed %d)\n", ts.Records, ts.Failed)
	fmt.Fprintf(&b, "distinct events            %d\n", ts.Distinct)
	fmt.Fprintf(&b, "usage_record rows          %d (distinct ids %d; events' rows by result:)\n", r.usage.Rows, r.usage.Distinct)
	for _, k := range slices.Sorted(maps.Keys(r.usage.ByResult)) {
		fmt.Fprintf(&b, "  %-24s %d\n", k, r.usage.ByResult[k])
	}
	fmt.Fprintf(&b, "inbox                      %d QUOTA_UPDATED, %d CUSTOMER_BLOCKED, %d THRESHOLD_ALERT\n",
		r.kinds[string(envelope.SubQuotaUpdated)], r.kinds[string(envelope.SubCustomerBlocked)], r.alerts)
	if h.gateway != "" {
		fmt.Fprintf(&b, "gateway (server-1)         %s\n", h.gateway)
	}
	if h.charging != "" {
		fmt.Fprintf(&b, "SMFs (charging, server-1)  %s; %d grant steps in usage_record (%d of them charged bytes)\n",
			h.charging, r.usage.Grants, r.usage.GrantsCharged)
	}
	fmt.Fprintf(&b, "checked from SQL           %d family-months ≤ plan + top-ups, %d member months/days ≤ limit, %d BLOCKED_NOT_MEMBER\n",
		r.plans, r.limits, r.usage.ByResult[string(policy.BlockedNotMember)])
	fmt.Fprintf(&b, "alerts on the topic        %d THRESHOLD_ALERT records for %d thresholds (%d duplicate deliveries)\n",
		r.topic.Alerts, r.topic.Keys, r.topic.Redeliver)
	fmt.Fprintf(&b, "topics                     usage-events %d, usage-persist %d, notification-events %d\n",
		r.topics[envelope.TopicUsageEvents], r.topics[envelope.TopicUsagePersist], r.topics[envelope.TopicNotificationEvents])
	h.mu.Lock()
	fmt.Fprintf(&b, "processors                 %d started, %d kill -9, %d SIGTERM, %d running at the end\n",
		len(h.procs), h.kills, h.stops, len(h.live))
	fmt.Fprintf(&b, "redis-server               %d kill -9, %d starts\n", h.redis.Kills, h.redis.Starts)
	fmt.Fprintf(&b, "mariadbd                   %d stops of %s, %d starts\n", h.maria.Stops, h.cfg.MySQLDown, h.maria.Starts)
	b.WriteString("faults seen in the processors' logs:\n")
	for _, k := range slices.Sorted(maps.Keys(r.evidence)) {
		fmt.Fprintf(&b, "  %-32s %d\n", k, r.evidence[k])
	}
	b.WriteString("recoveries:\n")
	for _, s := range h.timings {
		fmt.Fprintf(&b, "  %s\n", s)
	}
	h.mu.Unlock()
	b.WriteString("phases:\n")
	for _, p := range phase {
		fmt.Fprintf(&b, "  %s\n", p)
	}
	fmt.Fprintf(&b, "total                      %s\n", total)
	h.t.Log(b.String())
}

// tailsOnFailure prints the end of every child's log when the run failed.
func (h *harness) tailsOnFailure() {
	if !h.t.Failed() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[string]bool{}
	for _, p := range append(slices.Clone(h.procs), h.servers...) {
		if seen[p.LogPath] {
			continue
		}
		seen[p.LogPath] = true
		h.t.Logf("---- tail of %s ----\n%s", p.LogPath, Tail(p.LogPath, 40))
	}
	h.t.Logf("---- timeline ----\n%s", strings.Join(h.events, "\n"))
}

// stopAll kills every child the run started (by PID) and closes the rest.
func (h *harness) stopAll() {
	h.mu.Lock()
	procs := slices.Clone(h.procs)
	h.mu.Unlock()
	for _, p := range procs {
		p.Kill()
	}
	if h.db != nil {
		h.db.Close()
	}
	if h.rdb != nil {
		h.rdb.Close()
	}
	if h.admCl != nil {
		h.admCl.Close()
	}
	if h.redis != nil {
		h.redis.Stop()
	}
	if h.maria != nil {
		h.maria.Kill()
	}
	if h.kafka != nil {
		h.kafka.Close()
	}
}
