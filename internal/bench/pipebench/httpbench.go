package pipebench

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service"
	"github.com/dabom/dpcs/service/api"
	"github.com/dabom/dpcs/service/api/gateway"
	"github.com/dabom/dpcs/service/family"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/store"
	"github.com/dabom/dpcs/simulate"
)

// HTTPConfig configures the synchronous-endpoint benchmark (issue #16 part
// 4): POST /decisions served by the real API (SyncDecisions on the engine,
// an embedded Kafka, SQLite for the API's store), driven over loopback HTTP.
type HTTPConfig struct {
	// Redis is the server judged on (required); it is flushed first.
	Redis redis.UniversalClient
	// Families provisioned (default 250,000).
	Families int
	// Concurrency of the closed-loop step and of the EVALSHA baseline
	// (default 50).
	Concurrency int
	// Rate of the fixed-rate step, decisions/s (default 5,000).
	Rate float64
	// Batch > 1 adds a closed-loop step whose requests carry Batch events
	// each (a gateway asking about several usage records at once); the
	// step's ops/s count decisions.
	Batch int
	// Duration of each step (default 20 s) after a warmup (default 3 s).
	Duration, Warmup time.Duration
	// Linger and MaxBatch of the group commits (defaults: SyncDecisions').
	Linger   time.Duration
	MaxBatch int
	// Guarded judges as the server and the all-in-one do: under a state
	// generation, each group commit checking and raising the instance's
	// watermarks in the state marker (judge.WithGenerations). Default: the
	// state is trusted.
	Guarded bool
	// Dir holds the SQLite file (default a temporary directory).
	Dir string
	// Progress receives progress lines (default none).
	Progress io.Writer
}

// HTTPStep is one measured step.
type HTTPStep struct {
	Name      string
	Ops       int64
	Errors    int64
	PerSecond float64
	P50, P99  time.Duration
	P999, Max time.Duration
	// Of the step's group commits (warmup included; none for the
	// baseline): how many, the mean events in one, and the p50/p99 of the
	// engine pipeline (Judge) and of Kafka's acknowledgement after it (Ack).
	Batches            int
	BatchEvents        float64
	JudgeP50, JudgeP99 time.Duration
	AckP50, AckP99     time.Duration
}

// HTTPReport is the benchmark's result.
type HTTPReport struct {
	Families, Members int
	Steps             []HTTPStep
	// Batch is the mean events per group commit over the run; Judge the
	// mean time of its engine pipeline and Commit of the whole commit
	// (judging, then Kafka's acknowledgement).
	Batch         float64
	Judge, Commit time.Duration
}

// Markdown renders the report as a table.
func (r *HTTPReport) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s families (%s members); a group commit held %.1f events on average and took %s (engine pipeline %s, the rest Kafka's acknowledgement).\n\n",
		thousands(float64(r.Families)), thousands(float64(r.Members)), r.Batch, ms(r.Commit), ms(r.Judge))
	b.WriteString("| step | ops | errors | ops/s | p50 | p99 | p99.9 | max | events per group | group: engine p50 / p99 | group: Kafka ack p50 / p99 |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Steps {
		groups := "| — | — | —"
		if s.Batches > 0 {
			groups = fmt.Sprintf("| %.1f | %s / %s | %s / %s", s.BatchEvents, ms(s.JudgeP50), ms(s.JudgeP99), ms(s.AckP50), ms(s.AckP99))
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %s | %s | %s %s |\n", s.Name, s.Ops, s.Errors, thousands(s.PerSecond),
			ms(s.P50), ms(s.P99), ms(s.P999), ms(s.Max), groups)
	}
	return b.String()
}

// trivialDebit is the baseline: the least a Redis script can do per
// decision (one DECRBY), over the same connection count.
var trivialDebit = redis.NewScript(`return redis.call('DECRBY', KEYS[1], ARGV[1])`)

// RunHTTP runs the closed-loop step, the fixed-rate step and the EVALSHA
// baseline, in that order, on one provisioned population.
func RunHTTP(ctx context.Context, cfg HTTPConfig) (*HTTPReport, error) {
	if cfg.Redis == nil {
		return nil, errors.New("pipebench: HTTPConfig.Redis is required")
	}
	if cfg.Families <= 0 {
		cfg.Families = 250_000
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 50
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 5000
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 20 * time.Second
	}
	if cfg.Warmup <= 0 {
		cfg.Warmup = 3 * time.Second
	}
	say := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "[httpbench %s] "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
		}
	}
	if err := eachNode(ctx, cfg.Redis, func(n *redis.Client) error { return n.FlushAll(ctx).Err() }); err != nil {
		return nil, err
	}
	engine, err := quota.New(cfg.Redis)
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
	pop, err := simulate.NewPopulation(1, simulate.WithFamilies(cfg.Families))
	if err != nil {
		return nil, err
	}
	say("provisioning %d families", cfg.Families)
	members, err := Provision(ctx, eng, pop, 16)
	if err != nil {
		return nil, err
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(envelope.DefaultPartitions, envelope.Topics()...))
	if err != nil {
		return nil, err
	}
	defer kc.Close()
	var batches, events, judgeNs, totalNs atomic.Int64
	var groupMu sync.Mutex
	var groupEvents int64
	var judges, acks []int64           // of the current step
	groupStats := func(st *HTTPStep) { // and reset for the next step
		groupMu.Lock()
		defer groupMu.Unlock()
		if st.Batches = len(judges); st.Batches > 0 {
			st.BatchEvents = float64(groupEvents) / float64(st.Batches)
			st.JudgeP50, st.JudgeP99, _, _ = percentiles(judges)
			st.AckP50, st.AckP99, _, _ = percentiles(acks)
		}
		judges, acks, groupEvents = nil, nil, 0
	}
	opts := []judge.DecisionsOpt{judge.WithDecisionHooks(judge.DecisionHooks{OnBatch: func(b judge.DecisionBatchInfo) {
		batches.Add(1)
		events.Add(int64(b.Events))
		judgeNs.Add(int64(b.Judge))
		totalNs.Add(int64(b.Duration))
		groupMu.Lock()
		judges, acks = append(judges, int64(b.Judge)), append(acks, int64(b.Duration-b.Judge))
		groupEvents += int64(b.Events)
		groupMu.Unlock()
	}})}
	if cfg.Linger > 0 {
		opts = append(opts, judge.WithLinger(cfg.Linger))
	}
	if cfg.MaxBatch > 0 {
		opts = append(opts, judge.WithMaxBatch(cfg.MaxBatch))
	}
	if cfg.Guarded {
		const gen = "httpbench"
		if err := eng.FinishRebuild(ctx, gen, nil); err != nil {
			return nil, err
		}
		opts = append(opts, judge.WithGenerations(fixedGeneration(gen)))
	}
	dec, err := judge.NewDecisions(eng, []kgo.Opt{kgo.SeedBrokers(kc.ListenAddrs()...)}, opts...)
	if err != nil {
		return nil, err
	}
	defer dec.Close(context.Background())
	srvURL, stopAPI, err := serveAPI(ctx, cfg.Dir, eng, dec)
	if err != nil {
		return nil, err
	}
	defer stopAPI()

	first, _ := pop.FamilyIDs()
	// Connections are bounded (the fixed-rate step queues for one past
	// them; its latency counts from the scheduled time).
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency * 4, MaxConnsPerHost: cfg.Concurrency * 4}}
	var seq atomic.Int64
	postN := func(rng *rand.Rand, n int) error {
		var body strings.Builder
		body.WriteString(`{"events":[`)
		for i := range n {
			fid := first + rng.Int64N(int64(cfg.Families))
			size, err := pop.FamilySize(fid)
			if err != nil {
				return err
			}
			cid := simulate.CustomerID(fid, rng.IntN(size))
			if i > 0 {
				body.WriteByte(',')
			}
			body.WriteString(`{"eventId":"hb_` + strconv.FormatInt(seq.Add(1), 36) + `_` + strconv.FormatInt(time.Now().UnixNano(), 36) +
				`","timestamp":"` + time.Now().UTC().Format(time.RFC3339Nano) + `","familyId":` + strconv.FormatInt(fid, 10) +
				`,"customerId":` + strconv.FormatInt(cid, 10) + `,"appId":"com.youtube.app","bytesUsed":1024}`)
		}
		body.WriteString(`]}`)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srvURL+"/decisions", strings.NewReader(body.String()))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+benchGateway)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var out gateway.DecisionList
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || len(out.Decisions) != n {
			return fmt.Errorf("POST /decisions: %d %v", resp.StatusCode, err)
		}
		return nil
	}
	post := func(rng *rand.Rand) error { return postN(rng, 1) }
	rep := &HTTPReport{Families: cfg.Families, Members: members}

	say("closed loop, c=%d, %s", cfg.Concurrency, cfg.Duration)
	groupStats(&HTTPStep{})
	st, err := closedLoop(ctx, fmt.Sprintf("POST /decisions closed loop c=%d", cfg.Concurrency), cfg, post)
	if err != nil {
		return nil, err
	}
	groupStats(&st)
	rep.Steps = append(rep.Steps, st)
	say("%s: %.0f/s p99 %s", st.Name, st.PerSecond, st.P99)

	say("fixed rate %.0f/s, %s", cfg.Rate, cfg.Duration)
	st, err = fixedRate(ctx, fmt.Sprintf("POST /decisions at %s", rateLabel(cfg.Rate)), cfg, post)
	if err != nil {
		return nil, err
	}
	groupStats(&st)
	rep.Steps = append(rep.Steps, st)
	say("%s: %.0f/s p99 %s", st.Name, st.PerSecond, st.P99)

	if cfg.Batch > 1 {
		say("closed loop, c=%d, %d events per request, %s", cfg.Concurrency, cfg.Batch, cfg.Duration)
		groupStats(&HTTPStep{})
		st, err = closedLoop(ctx, fmt.Sprintf("POST /decisions closed loop c=%d, %d events per request", cfg.Concurrency, cfg.Batch),
			cfg, func(rng *rand.Rand) error { return postN(rng, cfg.Batch) })
		if err != nil {
			return nil, err
		}
		groupStats(&st)
		st.Ops *= int64(cfg.Batch) // decisions
		st.PerSecond *= float64(cfg.Batch)
		rep.Steps = append(rep.Steps, st)
		say("%s: %.0f decisions/s p99 %s", st.Name, st.PerSecond, st.P99)
	}

	if n := batches.Load(); n > 0 {
		rep.Batch = float64(events.Load()) / float64(n)
		rep.Judge = time.Duration(judgeNs.Load() / n)
		rep.Commit = time.Duration(totalNs.Load() / n)
	}

	say("EVALSHA trivial debit, c=%d, %s", cfg.Concurrency, cfg.Duration)
	if err := trivialDebit.Load(ctx, cfg.Redis).Err(); err != nil {
		return nil, err
	}
	st, err = closedLoop(ctx, fmt.Sprintf("EVALSHA trivial debit c=%d", cfg.Concurrency), cfg, func(rng *rand.Rand) error {
		key := "bench:debit:{" + strconv.FormatInt(first+rng.Int64N(int64(cfg.Families)), 10) + "}"
		return trivialDebit.EvalSha(ctx, cfg.Redis, []string{key}, 1024).Err()
	})
	if err != nil {
		return nil, err
	}
	rep.Steps = append(rep.Steps, st)
	say("%s: %.0f/s p99 %s", st.Name, st.PerSecond, st.P99)
	return rep, nil
}

const benchGateway = "gw_pipebench_0123456789abcdef0123456789"

// serveAPI serves the real API with dec on a loopback port, its store in
// SQLite under dir.
func serveAPI(ctx context.Context, dir string, eng *judge.State, dec *judge.Decisions) (string, func(), error) {
	if dir == "" {
		d, err := os.MkdirTemp("", "httpbench")
		if err != nil {
			return "", nil, err
		}
		dir = d
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "httpbench.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return "", nil, err
	}
	if err := store.Migrate(ctx, db); err != nil {
		db.Close()
		return "", nil, err
	}
	st, err := store.New(db)
	if err != nil {
		db.Close()
		return "", nil, err
	}
	inbox, err := notify.NewSQLInbox(db)
	if err != nil {
		db.Close()
		return "", nil, err
	}
	hub, err := notify.NewHub()
	if err != nil {
		db.Close()
		return "", nil, err
	}
	fam, err := family.New(st, eng)
	if err != nil {
		db.Close()
		return "", nil, err
	}
	apiServer, err := api.New(api.Config{Store: st, State: eng, Family: fam, Hub: hub, Inbox: inbox,
		Secret: []byte("httpbench-secret-0123456789abcdef0123"), NoWeb: true,
		Decisions: dec, GatewayTokens: []string{benchGateway}})
	if err != nil {
		db.Close()
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		db.Close()
		return "", nil, err
	}
	srv := service.NewHTTPServer(apiServer.Handler(), service.HTTPServerConfig{})
	go srv.Serve(ln) // ends with Shutdown below
	return "http://" + ln.Addr().String(), func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hub.Close(sctx)
		_ = srv.Shutdown(sctx)
		db.Close()
	}, nil
}

// closedLoop runs cfg.Concurrency callers back to back for the warmup,
// then measures cfg.Duration, or longer until at least one call ended.
func closedLoop(ctx context.Context, name string, cfg HTTPConfig, op func(*rand.Rand) error) (HTTPStep, error) {
	var measuring atomic.Bool
	var mu sync.Mutex
	var lat []int64
	var ops, errs atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var mine []int64
			for {
				select {
				case <-stop:
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
					return
				default:
				}
				t0 := time.Now()
				err := op(rng)
				if !measuring.Load() {
					continue
				}
				if err != nil {
					errs.Add(1)
					continue
				}
				ops.Add(1)
				mine = append(mine, int64(time.Since(t0)))
			}
		}()
	}
	if err := sleep(ctx, cfg.Warmup); err != nil {
		close(stop)
		wg.Wait()
		return HTTPStep{}, err
	}
	measuring.Store(true)
	start := time.Now()
	err := sleep(ctx, cfg.Duration)
	// A step that measured nothing says nothing: on a busy machine one slow
	// call can outlast a short window, so the window stays open until a
	// call has ended in it.
	for err == nil && ops.Load()+errs.Load() == 0 {
		err = sleep(ctx, 10*time.Millisecond)
	}
	measuring.Store(false)
	took := time.Since(start)
	close(stop)
	wg.Wait()
	return step(name, ops.Load(), errs.Load(), took, lat), err
}

// fixedRate issues cfg.Rate operations a second (open loop: latency is from
// each operation's scheduled time, so a stall counts against every
// operation it delays).
func fixedRate(ctx context.Context, name string, cfg HTTPConfig, op func(*rand.Rand) error) (HTTPStep, error) {
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	var mu sync.Mutex
	var lat []int64
	var ops, errs atomic.Int64
	var wg sync.WaitGroup
	var n atomic.Uint64
	run := func(at time.Time, measure bool) {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(n.Add(1), 11))
		err := op(rng)
		if !measure {
			return
		}
		if err != nil {
			errs.Add(1)
			return
		}
		ops.Add(1)
		d := int64(time.Since(at))
		mu.Lock()
		lat = append(lat, d)
		mu.Unlock()
	}
	begin := time.Now()
	measureFrom := begin.Add(cfg.Warmup)
	end := measureFrom.Add(cfg.Duration)
	for i := 0; ; i++ {
		at := begin.Add(time.Duration(i) * interval)
		if !at.Before(end) {
			break
		}
		if d := time.Until(at); d > 0 {
			if err := sleep(ctx, d); err != nil {
				wg.Wait()
				return HTTPStep{}, err
			}
		}
		wg.Add(1)
		go run(at, !at.Before(measureFrom))
	}
	wg.Wait()
	// Decisions/s over the time they took: behind the schedule, the step
	// lasts longer than cfg.Duration and the rate is what was served.
	return step(name, ops.Load(), errs.Load(), max(time.Since(measureFrom), cfg.Duration), lat), nil
}

func step(name string, ops, errs int64, took time.Duration, lat []int64) HTTPStep {
	s := HTTPStep{Name: name, Ops: ops, Errors: errs, PerSecond: float64(ops) / took.Seconds()}
	s.P50, s.P99, s.P999, s.Max = percentiles(lat)
	return s
}

// fixedGeneration is a judge.GenerationSource naming one generation.
type fixedGeneration string

func (g fixedGeneration) Generation(context.Context) (string, error) { return string(g), nil }
