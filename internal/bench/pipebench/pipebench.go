// Package pipebench measures the whole DPCS pipeline: simulator → Kafka →
// processor(s) → Redis → write-behind → SQL, at offered rates, with
// produce→decision latency, script latency, backlog, write-behind rows/s,
// Redis memory per member and process RSS, and the invariants checked after
// the run. examples/pipebench is its command; `make bench` runs it.
package pipebench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/recovery"
	"github.com/dabom/dpcs/simulate"
	"github.com/dabom/dpcs/writebehind"
)

// HeaderProduced carries the time (Unix nanoseconds) an event was handed to
// the Kafka producer; the decision hook measures latency from it.
const HeaderProduced = "pipebench-produced-ns"

// MaxRate as a step's rate means "as fast as the producer goes".
const MaxRate = 0

// StepSpec is one measured step.
type StepSpec struct {
	// Label names the step in the report ("5k", "max", "1k families", ...).
	Label string
	// Rate is the offered rate in events/s; MaxRate offers as fast as the
	// producer accepts.
	Rate float64
	// Population is the traffic's population (provisioned before the run).
	Population *simulate.Population
	// Processors is the number of processor deployables sharing the group.
	Processors int
}

// Config is a run.
type Config struct {
	Brokers []string
	Redis   redis.UniversalClient
	// DB receives usage_record (migrated by Run).
	DB *sql.DB
	// Steps run in order; the workers are restarted when the processor count
	// changes.
	Steps []StepSpec
	// Warmup runs before each step's measured Duration.
	Warmup, Duration time.Duration
	// Drain bounds the wait for the backlog to clear after each step.
	Drain time.Duration
	// Zone judges days and months. Default: Asia/Seoul.
	Zone *time.Location
	// Progress receives a line per second. Default: discarded.
	Progress io.Writer
	// CheckFamilies is how many families of each population the invariant
	// checker inspects after the run (0: 2,000).
	CheckFamilies int
	// ProvisionWorkers parallelises provisioning (0: 16).
	ProvisionWorkers int
	// MaxBacklog bounds, at the max rate, how far the producer runs ahead
	// of the decisions (0: 5,000 events).
	MaxBacklog int
	// ProcessorOptions are added to every processor's options (tuning).
	ProcessorOptions []judge.ProcessorOpt
	// OnStep, if set, is called when a step's measured window begins and
	// ends (for profiling one step).
	OnStep func(label string, begin bool)
	// Notifier runs the notifier in the processor deployables, as they do
	// by default, and measures it (Step.Notified, alert latency to a hub
	// subscriber of each of the first NotifyFamilies families of every
	// population, 0: 1,000). In a population of at least 100 times as many
	// families, those families' plans are cut to AlertPlan bytes (the
	// median event is ≈ 1 MiB), so that their events cross thresholds and
	// then block, and the alerts' latency is measured too.
	// StoreQuotaUpdated stores QUOTA_UPDATED in the inbox too
	// (notify.WithStoreQuotaUpdated).
	Notifier          bool
	NotifyFamilies    int
	StoreQuotaUpdated bool
}

// Step is one step's measurements.
type Step struct {
	Label      string
	Offered    float64 // events/s, 0 = max
	Families   int
	Members    int
	Processors int
	// Produced and Decided are counted in the measured window.
	Produced, Decided int64
	Throughput        float64 // decided events/s in the measured window
	// Produce→decision latency of events decided in the window.
	P50, P99, P999, Max time.Duration
	// Script latency: one ApplyBatch call (a poll's partition group) in the
	// window, seen by the client.
	ScriptP50, ScriptP99 time.Duration
	// Server is the apply script's latency as Redis measured it (zero
	// when the server does not report it, e.g. miniredis).
	Server    ServerScript
	MeanBatch float64
	// ProcessorBusy is the fraction of the window the processors spent
	// handling polls (rather than waiting in poll), EngineBusy the part of it
	// spent waiting for the engine; both summed over processors.
	ProcessorBusy, EngineBusy float64
	// Backlog = produced − decided, sampled every second; MaxLag is the
	// largest consumer lag a poll reported.
	BacklogMax, BacklogEnd int64
	MaxLag                 int64
	// Write-behind: rows written per second, and rows still to write
	// (decided − written) at the start and the end of the window.
	RowsPerSec                      float64
	PersistPendingStart, PersistEnd int64
	RSS                             int64 // bytes, this process, end of step
	// CPU is where the machine's processor time went in the window.
	CPU       CPU
	Decisions map[policy.Decision]int64
	DrainTime time.Duration
	// Notifier (Config.Notifier): notifications handled per second in the
	// window, and the latency to a live hub subscriber (what SSE streams
	// read) of the notifications of every kind (Live of them) and of the
	// alerts alone (Alerts of them), from the usage event's timestamp.
	Notified           float64
	LiveP50, LiveP99   time.Duration
	AlertP50, AlertP99 time.Duration
	Live, Alerts       int
}

// Report is a run's result.
type Report struct {
	Steps []Step
	// Ceiling is redis-benchmark's pipelined EVALSHA rate of the engine's own
	// script on the same server, if measured (see Ceiling).
	Ceiling float64
	// Scripts is the engine's apply script beside its first version, if
	// measured (see CompareScripts).
	Scripts *ScriptComparison
	// ProvisionTime and the Redis memory per provisioned member (before
	// traffic) and after the run (counters and dedupe records added).
	ProvisionTime       time.Duration
	Members             int
	BytesPerMember      float64
	BytesPerMemberAfter float64
	InvariantsChecked   int
	InvariantsErr       error
}

type recorder struct {
	mu        sync.Mutex
	on        bool
	latencies []int64
	scripts   []int64
	batches   int64
	events    int64
	// busy sums the polls' processing time, scriptBusy their engine time.
	busy, scriptBusy time.Duration
	maxLag           int64
	decisions        map[policy.Decision]int64

	sent     atomic.Int64 // handed to the producer, always counted
	produced atomic.Int64 // acknowledged by Kafka, always counted
	decided  atomic.Int64 // judged by the engine, always counted
	rows     atomic.Int64 // written by write-behind, always counted
	failed   atomic.Int64
	// notifier measures the notifier (Config.Notifier), else nil.
	notifier *notifierBench
}

func (r *recorder) start() {
	r.mu.Lock()
	r.on, r.latencies, r.scripts, r.batches, r.events, r.maxLag = true, r.latencies[:0], r.scripts[:0], 0, 0, 0
	r.busy, r.scriptBusy = 0, 0
	r.decisions = map[policy.Decision]int64{}
	r.mu.Unlock()
}

func (r *recorder) stop() {
	r.mu.Lock()
	r.on = false
	r.mu.Unlock()
}

func (r *recorder) onDecided(recs []*kgo.Record, at time.Time) {
	r.decided.Add(int64(len(recs)))
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.on {
		return
	}
	now := at.UnixNano()
	for _, rec := range recs {
		for _, h := range rec.Headers {
			if h.Key == HeaderProduced {
				if ns, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
					r.latencies = append(r.latencies, now-ns)
				}
				break
			}
		}
	}
}

func (r *recorder) batch(b judge.BatchInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.on || b.Usage == 0 {
		return
	}
	r.scripts = append(r.scripts, int64(b.ScriptLatency))
	r.busy += b.Duration
	r.scriptBusy += b.ScriptLatency
	r.batches++
	r.events += int64(b.Usage)
	r.maxLag = max(r.maxLag, b.Lag)
	for d, n := range b.Decisions {
		r.decisions[d] += int64(n)
	}
}

// Run provisions every step's population, then runs the steps. The report
// carries the invariant checker's verdict; the error is for failures of the
// harness itself.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	engine, err := quota.New(cfg.Redis, quota.WithLocation(cfg.Zone))
	if err != nil {
		return nil, err
	}
	if err := engine.Load(ctx); err != nil {
		return nil, err
	}
	eng, err := judge.NewState(engine) // the door every write goes through
	if err != nil {
		return nil, err
	}
	if err := service.Migrate(ctx, cfg.DB); err != nil {
		return nil, err
	}
	rep := &Report{}
	// Memory is unknown on servers without INFO memory (miniredis).
	memBefore, memErr := RedisMemory(ctx, cfg.Redis)
	start := time.Now()
	var pops []*simulate.Population
	for _, s := range cfg.Steps {
		if !slices.Contains(pops, s.Population) {
			pops = append(pops, s.Population)
			n, err := Provision(ctx, eng, s.Population, cfg.ProvisionWorkers)
			if err != nil {
				return nil, err
			}
			rep.Members += n
			cfg.progress("provisioned %d families, %d members in %s", s.Population.NumFamilies(), n, time.Since(start).Round(time.Millisecond))
		}
	}
	if cfg.Notifier {
		if err := alertFamilies(ctx, eng, pops, cfg.NotifyFamilies); err != nil {
			return nil, err
		}
	}
	rep.ProvisionTime = time.Since(start)
	if memAfter, err := RedisMemory(ctx, cfg.Redis); err == nil && memErr == nil {
		rep.BytesPerMember = float64(memAfter-memBefore) / float64(max(rep.Members, 1))
	}

	rec := &recorder{decisions: map[policy.Decision]int64{}}
	producer, err := kgo.NewClient(append(simulate.ProducerOptions(kgo.LeaderAck()), kgo.SeedBrokers(cfg.Brokers...))...)
	if err != nil {
		return nil, err
	}
	defer producer.Close()
	if err := service.EnsureTopics(ctx, producer, envelope.DefaultPartitions, envelope.Topics()...); err != nil {
		return nil, err
	}
	if cfg.Notifier {
		nb := newNotifierBench(pops, cfg.NotifyFamilies)
		defer nb.close() // after pool.stop, deferred below
		rec.notifier = nb
	}
	var pool workerPool
	defer pool.stop()
	for _, spec := range cfg.Steps {
		changed, err := pool.scale(ctx, spec.Processors, eng, cfg, rec)
		if err != nil {
			return nil, err
		}
		warmup := cfg.Warmup
		if changed && spec.Processors > 1 {
			// Members join the group one rebalance at a time.
			warmup += time.Duration(spec.Processors) * 3 * time.Second
		}
		st, err := runStep(ctx, cfg, spec, warmup, producer, rec)
		if err != nil {
			return nil, err
		}
		rep.Steps = append(rep.Steps, st)
		cfg.progress("step %s: %.0f ev/s, p50 %s p99 %s p999 %s, script p99 %s, rows/s %.0f",
			st.Label, st.Throughput, st.P50, st.P99, st.P999, st.ScriptP99, st.RowsPerSec)
	}
	// Everything produced is judged and persisted before the check.
	if err := waitFor(ctx, cfg.Drain, func() bool {
		return rec.decided.Load() >= rec.produced.Load() && rec.rows.Load() >= rec.decided.Load()
	}); err != nil {
		cfg.progress("final drain: produced %d decided %d rows %d", rec.produced.Load(), rec.decided.Load(), rec.rows.Load())
	}
	pool.stop()
	if memEnd, err := RedisMemory(ctx, cfg.Redis); err == nil && memErr == nil {
		rep.BytesPerMemberAfter = float64(memEnd-memBefore) / float64(max(rep.Members, 1))
	}
	var fams []int64
	for _, p := range pops {
		first, last := p.FamilyIDs()
		n := int64(cfg.CheckFamilies)
		step := max((last-first+1)/n, 1)
		for f := first; f <= last && int64(len(fams)) < n*int64(len(pops)); f += step {
			fams = append(fams, f)
		}
	}
	rep.InvariantsChecked = len(fams)
	rep.InvariantsErr = recovery.CheckInvariants(ctx, eng, cfg.DB, fams)
	return rep, nil
}

func (cfg *Config) defaults() error {
	if len(cfg.Brokers) == 0 || cfg.Redis == nil || cfg.DB == nil {
		return errors.New("pipebench: brokers, redis and db are required")
	}
	if len(cfg.Steps) == 0 {
		return errors.New("pipebench: no steps")
	}
	for i, s := range cfg.Steps {
		if s.Population == nil || s.Processors < 1 || s.Rate < 0 {
			return fmt.Errorf("pipebench: step %d: population, ≥ 1 processor and a rate ≥ 0 are required", i)
		}
	}
	if cfg.Zone == nil {
		loc, err := policy.LoadZone(policy.DefaultZone)
		if err != nil {
			return err
		}
		cfg.Zone = loc
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 15 * time.Second
	}
	if cfg.Drain <= 0 {
		cfg.Drain = 2 * time.Minute
	}
	if cfg.CheckFamilies <= 0 {
		cfg.CheckFamilies = 2000
	}
	if cfg.MaxBacklog <= 0 {
		cfg.MaxBacklog = 5_000
	}
	if cfg.ProvisionWorkers <= 0 {
		cfg.ProvisionWorkers = 16
	}
	if cfg.NotifyFamilies <= 0 {
		cfg.NotifyFamilies = 1000
	}
	return nil
}

// AlertPlan is the plan of the families whose alerts the notifier benchmark
// measures: two median events' worth, so a family's first events cross its
// thresholds and the next ones are blocked.
const AlertPlan = 2 << 20

// alertFamilies cuts the plans of the first n families of each population
// of at least 100·n families to AlertPlan (see Config.Notifier).
func alertFamilies(ctx context.Context, eng *judge.State, pops []*simulate.Population, n int) error {
	for _, p := range pops {
		if p.NumFamilies() < 100*n {
			continue
		}
		first, _ := p.FamilyIDs()
		for f := first; f < first+int64(n); f++ {
			if _, err := eng.SetPlan(ctx, f, AlertPlan); err != nil {
				return fmt.Errorf("alert family %d: %w", f, err)
			}
		}
	}
	return nil
}

func (cfg *Config) progress(format string, args ...any) {
	fmt.Fprintf(cfg.Progress, "[pipebench %s] "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// Provision writes the population's families into the engine (plan and
// members, one atomic Restore per family) with workers in parallel and
// returns the number of members.
func Provision(ctx context.Context, eng *judge.State, pop *simulate.Population, workers int) (int, error) {
	fams := make(chan simulate.Family, 256)
	var members atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range fams {
				st := quota.FamilyState{FamilyID: f.ID, Provisioned: true, Plan: f.PlanBytes}
				for _, m := range f.Members {
					st.Members = append(st.Members, quota.MemberState{CustomerID: m.CustomerID})
				}
				if err := eng.Restore(ctx, st); err != nil {
					errs[w] = fmt.Errorf("provision family %d: %w", f.ID, err)
					cancel()
					return
				}
				members.Add(int64(len(f.Members)))
			}
		}()
	}
feed:
	for f := range pop.Families() {
		select {
		case fams <- f:
		case <-ctx.Done():
			break feed
		}
	}
	close(fams)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return int(members.Load()), ctx.Err()
}

// workerPool is the processor deployables (processor + write-behind) of a run.
type workerPool struct {
	ws     []*service.Workers
	cancel context.CancelFunc
	done   chan struct{}
}

func (p *workerPool) scale(ctx context.Context, n int, eng *judge.State, cfg Config, rec *recorder) (bool, error) {
	if len(p.ws) == n {
		return false, nil
	}
	p.stop()
	hooks := judge.ProcessorHooks{OnBatch: rec.batch, OnDecided: rec.onDecided}
	wbHooks := writebehind.Hooks{OnFlush: func(f writebehind.FlushInfo) { rec.rows.Add(int64(f.Items)) }}
	kopts := []kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}
	wcfg := service.WorkersConfig{NoNotifier: true}
	if nb := rec.notifier; nb != nil {
		nopts, err := nb.options(cfg)
		if err != nil {
			return false, err
		}
		hub, err := nb.attach()
		if err != nil {
			return false, err
		}
		wcfg = service.WorkersConfig{Notifier: nopts, Hub: hub}
	}
	for range n {
		w, err := service.NewWorkers(eng, cfg.DB, kopts, service.WorkersConfig{
			NoNotifier: wcfg.NoNotifier, Notifier: wcfg.Notifier, Hub: wcfg.Hub,
			Processor: append([]judge.ProcessorOpt{judge.WithProcessorHooks(hooks), judge.WithLocation(cfg.Zone)},
				cfg.ProcessorOptions...),
			WriteBehind: []writebehind.Option{writebehind.WithHooks(wbHooks), writebehind.WithBatchSize(500)},
		})
		if err != nil {
			p.stop()
			return false, err
		}
		p.ws = append(p.ws, w)
	}
	rctx, cancel := context.WithCancel(ctx)
	p.cancel, p.done = cancel, make(chan struct{})
	var wg sync.WaitGroup
	for _, w := range p.ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(rctx); err != nil {
				cfg.progress("workers stopped: %v", err)
			}
		}()
	}
	go func() { wg.Wait(); close(p.done) }()
	return true, nil
}

func (p *workerPool) stop() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	<-p.done
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, w := range p.ws {
		_ = w.Close(ctx)
	}
	p.ws, p.cancel = nil, nil
}

func runStep(ctx context.Context, cfg Config, spec StepSpec, warmup time.Duration, producer *kgo.Client, rec *recorder) (Step, error) {
	st := Step{Label: spec.Label, Offered: spec.Rate, Families: spec.Population.NumFamilies(),
		Members: spec.Population.NumMembers(), Processors: spec.Processors}
	gen, err := simulate.NewGenerator(spec.Population, simulate.WithLocation(cfg.Zone),
		simulate.WithStreamSeed(uint64(time.Now().UnixNano())))
	if err != nil {
		return st, err
	}
	sink := simulate.SinkFunc(func(ctx context.Context, ev simulate.Event, done func(error)) {
		// At the max rate the producer stays at most MaxBacklog events ahead
		// of the processors (closed loop): the step measures what the
		// pipeline sustains, not how fast a queue grows.
		for spec.Rate == MaxRate && rec.sent.Load()-rec.decided.Load() > int64(cfg.MaxBacklog) && ctx.Err() == nil {
			time.Sleep(200 * time.Microsecond)
		}
		rec.sent.Add(1)
		r, err := kafkarecord.New(envelope.TopicUsageEvents, ev)
		if err != nil {
			done(err)
			return
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderProduced, Value: strconv.AppendInt(nil, time.Now().UnixNano(), 10)})
		producer.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err == nil {
				rec.produced.Add(1)
			} else {
				rec.failed.Add(1)
			}
			done(err)
		})
	})
	rate := spec.Rate
	if rate == MaxRate {
		rate = simulate.MaxRate
	}
	sim, err := simulate.New(gen, sink, simulate.WithRate(rate))
	if err != nil {
		return st, err
	}
	if err := sim.Start(); err != nil {
		return st, err
	}
	stopSim := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = sim.Stop(sctx)
	}
	defer stopSim()
	// Warm up: decisions flow (after a group rebalance too), then Warmup.
	d := rec.decided.Load()
	if err := waitFor(ctx, time.Minute, func() bool { return rec.decided.Load() > d }); err != nil {
		return st, fmt.Errorf("step %s: no decision within a minute", spec.Label)
	}
	if err := sleep(ctx, warmup); err != nil {
		return st, err
	}
	// And flow again once the warmup is over: a group still settling (a
	// member joining late on a loaded machine) must not be measured as a
	// pipeline that decides nothing.
	d = rec.decided.Load()
	if err := waitFor(ctx, time.Minute, func() bool { return rec.decided.Load() > d }); err != nil {
		return st, fmt.Errorf("step %s: no decision within a minute after the warmup", spec.Label)
	}
	// The notifier's group settles on its own: measured once it handles
	// notifications too (every decision makes at least one).
	if nb := rec.notifier; nb != nil {
		h := nb.handled.Load()
		if err := waitFor(ctx, time.Minute, func() bool { return nb.handled.Load() > h }); err != nil {
			return st, fmt.Errorf("step %s: no notification handled within a minute after the warmup", spec.Label)
		}
	}
	_ = ResetServerStats(ctx, cfg.Redis) // unsupported on miniredis: no server view
	rec.start()
	if cfg.OnStep != nil {
		cfg.OnStep(spec.Label, true)
	}
	p0, d0, w0 := rec.produced.Load(), rec.decided.Load(), rec.rows.Load()
	var n0 int64
	if nb := rec.notifier; nb != nil {
		nb.start()
		n0 = nb.handled.Load()
	}
	cpu0 := sampleCPU(ctx, cfg.Redis)
	st.PersistPendingStart = d0 - w0
	t0 := time.Now()
	tick := time.NewTicker(time.Second)
	for time.Since(t0) < cfg.Duration {
		select {
		case <-ctx.Done():
			tick.Stop()
			return st, ctx.Err()
		case <-tick.C:
		}
		p, d, w := rec.produced.Load(), rec.decided.Load(), rec.rows.Load()
		el := time.Since(t0).Seconds()
		st.BacklogMax = max(st.BacklogMax, p-d)
		cfg.progress("%s: offered %s, produced %.0f/s, decided %.0f/s, written %.0f rows/s, backlog %d, persist pending %d",
			spec.Label, rateLabel(spec.Rate), float64(p-p0)/el, float64(d-d0)/el, float64(w-w0)/el, p-d, d-w)
	}
	tick.Stop()
	el := time.Since(t0)
	rec.stop()
	st.CPU = cpuBetween(cpu0, sampleCPU(ctx, cfg.Redis))
	if ss, err := ReadServerScript(ctx, cfg.Redis); err == nil {
		st.Server = ss
	}
	if cfg.OnStep != nil {
		cfg.OnStep(spec.Label, false)
	}
	p, d, w := rec.produced.Load(), rec.decided.Load(), rec.rows.Load()
	st.Produced, st.Decided = p-p0, d-d0
	st.Throughput = float64(st.Decided) / el.Seconds()
	st.RowsPerSec = float64(w-w0) / el.Seconds()
	st.BacklogEnd, st.PersistEnd = p-d, d-w
	rec.mu.Lock()
	st.P50, st.P99, st.P999, st.Max = percentiles(rec.latencies)
	st.ScriptP50, st.ScriptP99, _, _ = percentiles(rec.scripts)
	if rec.batches > 0 {
		st.MeanBatch = float64(rec.events) / float64(rec.batches)
	}
	// Summed over processors, so up to Processors × 1.
	st.ProcessorBusy = rec.busy.Seconds() / el.Seconds()
	st.EngineBusy = rec.scriptBusy.Seconds() / el.Seconds()
	st.MaxLag = rec.maxLag
	st.Decisions = rec.decisions
	rec.mu.Unlock()
	if nb := rec.notifier; nb != nil {
		nb.stop(&st)
		st.Notified = float64(nb.handled.Load()-n0) / el.Seconds()
		cfg.progress("%s: notifier %.0f notifications/s; event → live subscriber p50 %s p99 %s (%d notifications), alerts p50 %s p99 %s (%d)",
			spec.Label, st.Notified, st.LiveP50, st.LiveP99, st.Live, st.AlertP50, st.AlertP99, st.Alerts)
	}
	st.RSS = processRSS()
	stopSim()
	drain := time.Now()
	if err := waitFor(ctx, cfg.Drain, func() bool {
		return rec.decided.Load() >= rec.produced.Load() && rec.rows.Load() >= rec.decided.Load()
	}); err != nil {
		return st, fmt.Errorf("step %s: backlog did not drain in %s: produced %d decided %d rows %d",
			spec.Label, cfg.Drain, rec.produced.Load(), rec.decided.Load(), rec.rows.Load())
	}
	st.DrainTime = time.Since(drain)
	return st, nil
}

func rateLabel(r float64) string {
	if r == MaxRate {
		return "max"
	}
	return fmt.Sprintf("%.0f/s", r)
}

// percentiles returns p50, p99, p99.9 and the max of ns values (sorted in
// place).
func percentiles(ns []int64) (p50, p99, p999, mx time.Duration) {
	if len(ns) == 0 {
		return
	}
	slices.Sort(ns)
	at := func(q float64) time.Duration {
		i := int(q * float64(len(ns)-1))
		return time.Duration(ns[i])
	}
	return at(0.50), at(0.99), at(0.999), time.Duration(ns[len(ns)-1])
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func waitFor(ctx context.Context, limit time.Duration, ok func() bool) error {
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			return errors.New("timeout")
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}
