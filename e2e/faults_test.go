package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/internal/testenv"
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

// Story 6 traffic: faultFamilies families of four (plan faultPlan, the
// fourth member with a monthly limit of faultLimit) and faultEvents usage
// events of 1 B–4 MiB, a tenth of them replays of earlier ones — enough
// that pools run dry, limits bite and every threshold fires.
const (
	faultFamilies = 8
	faultEvents   = 400
	faultPlan     = 64 << 20
	faultLimit    = 12 << 20
	// redisOutage is how long Redis stays away at least.
	redisOutage = 1500 * time.Millisecond
)

// Story 6 on the whole processor deployable, composed from its parts so the
// test can kill it (service.Workers: processor, write-behind and notifier
// on kfake) and take its Redis and SQL away: the processor is killed
// mid-stream — after Redis judged a batch, before anything was emitted or
// committed — and restarted; Redis goes down while events arrive; SQL goes
// down while events arrive (backends that can); the processor is stopped
// under load and a new one takes over. Afterwards every event was judged
// exactly once — each decision equals the one a fresh engine gives the same
// events in order, usage_record holds each event once, the SQL history
// equals Redis — and every notification reached the inbox once.
func TestFaults(t *testing.T) {
	testenv.SkipShort(t, "the fault stories on the whole system (make e2e runs them on real servers too)")
	t.Parallel()
	var runs []subtest
	for _, b := range backends() {
		runs = append(runs, subtest{b.name, func(t *testing.T) { storyFaults(t, b) }})
	}
	concurrently(t, runs)
}

func storyFaults(t *testing.T, b backend) {
	ctx := context.Background()
	r := newRig(t, b)
	evs := r.traffic(faultEvents, rand.Uint64())
	chunk := func(i int) []simulate.Event { return evs[i*faultEvents/4 : (i+1)*faultEvents/4] }

	// 1. Killed mid-stream, restarted.
	crash := &crashingDecider{Engine: r.eng, after: 2, crashed: make(chan struct{})}
	w := r.start(crash)
	r.send(chunk(0))
	r.await("the processor to judge a third batch", crash.calls.Load, func() bool {
		select {
		case <-crash.crashed:
			return true
		default:
			return false
		}
	})
	w.wait()
	r.logf("processor killed after Redis judged its third batch; %d events persisted, Redis used %s",
		r.rows(), mib(r.redisUsed()))
	w = r.start(r.eng)
	r.waitPersisted(distinct(evs[:faultEvents/4]))

	// 2. Redis down while events arrive: nothing is judged, nothing dropped.
	r.caughtUp(judge.ProcessorGroup, notify.DefaultGroup, writebehind.DefaultGroup)
	judged, retries, rows := r.judged.Load(), r.redisRetries.Load(), r.rows()
	r.inf.redisDown()
	down := time.Now()
	r.send(chunk(1))
	// Down long enough for the circuit breaker to open (3 failures) and
	// stay open a while.
	r.await("the processor retrying Redis", r.redisRetries.Load, func() bool {
		return r.redisRetries.Load() >= retries+3 && time.Since(down) >= redisOutage
	})
	if n := r.judged.Load(); n != judged {
		t.Errorf("%d events judged while Redis was down", n-judged)
	}
	if n := r.rows(); n != rows {
		t.Errorf("%d events persisted while Redis was down", n-rows)
	}
	r.inf.redisUp()
	r.logf("Redis was down for %v; %d processor retries", time.Since(down).Round(time.Millisecond), r.redisRetries.Load()-retries)
	r.waitPersisted(distinct(evs[:2*faultEvents/4]))

	// 3. SQL down while events arrive: judging goes on, persisting waits.
	if r.inf.sqlDown == nil {
		r.logf("this backend cannot take SQL down; the integration form does")
		r.send(chunk(2))
	} else {
		r.caughtUp(judge.ProcessorGroup, notify.DefaultGroup, writebehind.DefaultGroup)
		sqlErrs, rows := r.sqlErrors.Load(), r.rows()
		r.inf.sqlDown()
		r.send(chunk(2))
		r.caughtUp(judge.ProcessorGroup)
		r.await("the write-behind failing on SQL", r.sqlErrors.Load, func() bool { return r.sqlErrors.Load() > sqlErrs })
		if n := r.rows(); n != rows {
			t.Errorf("%d events persisted while SQL was down", n-rows)
		}
		r.inf.sqlUp()
		r.logf("SQL was down while %d events were judged; %d failed writes", len(chunk(2)), r.sqlErrors.Load()-sqlErrs)
	}
	r.waitPersisted(distinct(evs[:3*faultEvents/4]))

	// 4. Stopped under load; a new deployable takes over.
	r.send(chunk(3))
	w.kill()
	w.wait()
	r.start(r.eng)
	r.waitPersisted(distinct(evs))

	r.caughtUp(judge.ProcessorGroup, notify.DefaultGroup, writebehind.DefaultGroup)
	r.verify(ctx, evs)
}

// rig is the processor deployable's world for story 6: kfake, the backend's
// Redis and SQL (with their switches), the quota engine and the families.
type rig struct {
	t     *testing.T
	name  string
	ctx   context.Context
	inf   *infra
	zone  *time.Location
	kopts []kgo.Opt
	eng   *quota.Engine
	prod  *kgo.Client
	watch *watcher
	fams  []int64

	// What the running workers report through their hooks.
	judged, redisRetries, sqlErrors atomic.Int64
}

func newRig(t *testing.T, b backend) *rig {
	t.Helper()
	ctx := context.Background()
	r := &rig{t: t, name: b.name, ctx: ctx, inf: b.open(t), zone: storyZone(time.Now())}
	c := testenv.Kafka(t)
	r.kopts = testenv.KafkaOpts(c)
	r.prod = testenv.Client(t, c)
	r.watch = newWatcher(t, c.ListenAddrs())
	var err error
	if r.eng, err = quota.New(r.inf.rdb, quota.WithLocation(r.zone)); err != nil {
		t.Fatal(err)
	}
	if err := r.eng.Load(ctx); err != nil {
		t.Fatal(err)
	}
	// The families as the API would create them: SQL first, then Redis
	// rebuilt from SQL (doc/architecture.md, "Never trust Redis blindly").
	if err := store.Migrate(ctx, r.inf.direct); err != nil {
		t.Fatal(err)
	}
	if err := service.Migrate(ctx, r.inf.direct); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(r.inf.direct, store.WithLocation(r.zone))
	if err != nil {
		t.Fatal(err)
	}
	base := familyBase()
	for i := range faultFamilies {
		fid := base + int64(i)
		if _, err := st.CreateFamily(ctx, store.NewFamily{ID: fid, Name: fmt.Sprint("faults ", fid), PlanBytes: faultPlan}, store.System); err != nil {
			t.Fatal(err)
		}
		for j := range 4 {
			role := policy.RoleMember
			if j < 2 {
				role = policy.RoleOwner
			}
			m := store.NewMember{ID: simulate.CustomerID(fid, j), FamilyID: fid, Name: fmt.Sprint("member ", j), Role: role}
			if _, err := st.AddMember(ctx, m, store.System); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.UpdatePolicy(ctx, store.PolicyChange{FamilyID: fid, CustomerID: simulate.CustomerID(fid, 3),
			Set: map[string]string{policy.KeyLimitMonthly: fmt.Sprint(faultLimit)}, By: store.System}); err != nil {
			t.Fatal(err)
		}
		r.fams = append(r.fams, fid)
	}
	if _, err := recovery.Rebuild(ctx, st, mustState(t, r.eng), "", r.fams...); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) logf(format string, args ...any) {
	r.t.Helper()
	r.t.Logf("%s: "+format, append([]any{r.name}, args...)...)
}

// traffic returns n usage events over the families, now, a tenth of them
// replays of earlier events (the same envelope again).
func (r *rig) traffic(n int, seed uint64) []simulate.Event {
	rnd := rand.New(rand.NewPCG(seed, 6))
	apps := []string{"com.youtube.app", "com.kakao.talk", "com.android.chrome", "com.roblox.client"}
	now := time.Now().Truncate(time.Millisecond)
	evs := make([]simulate.Event, 0, n)
	for i := range n {
		if i > 10 && rnd.IntN(10) == 0 {
			evs = append(evs, evs[rnd.IntN(i)])
			continue
		}
		fid := r.fams[rnd.IntN(len(r.fams))]
		evs = append(evs, envelope.New(envelope.NewID(envelope.PrefixEvent), now, envelope.UsagePayload{
			FamilyID: fid, CustomerID: simulate.CustomerID(fid, rnd.IntN(4)), AppID: apps[rnd.IntN(len(apps))],
			BytesUsed: rnd.Int64N(4<<20) + 1}))
	}
	return evs
}

// send produces evs into usage-events, a fresh record for each.
func (r *rig) send(evs []simulate.Event) {
	r.t.Helper()
	recs := make([]*kgo.Record, len(evs))
	for i, ev := range evs {
		rec, err := kafkarecord.New(envelope.TopicUsageEvents, ev)
		if err != nil {
			r.t.Fatal(err)
		}
		recs[i] = rec
	}
	if err := r.prod.ProduceSync(r.ctx, recs...).FirstErr(); err != nil {
		r.t.Fatal(err)
	}
}

// workers is one running processor deployable.
type workers struct {
	w      *service.Workers
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	t      *testing.T
}

// start runs a processor deployable judging with dec until it is killed.
func (r *rig) start(dec judge.Engine) *workers {
	r.t.Helper()
	// QUOTA_UPDATED stored too: the checks count one per allowed event.
	nopts, err := service.Config{Zone: r.zone, StoreQuotaUpdated: true}.NotifierOptions(r.inf.rdb)
	if err != nil {
		r.t.Fatal(err)
	}
	hooks := judge.ProcessorHooks{
		OnBatch: func(b judge.BatchInfo) { r.judged.Add(int64(b.Usage)) },
		OnRetry: func(i judge.RetryInfo) {
			if i.What == "redis apply" {
				r.redisRetries.Add(1)
			}
		},
	}
	w, err := service.NewWorkers(mustState(r.t, dec), r.inf.db, r.kopts, service.WorkersConfig{Logger: logger(),
		Processor: []judge.ProcessorOpt{judge.WithLocation(r.zone), judge.WithProcessorHooks(hooks),
			judge.WithRetryBackoff(10*time.Millisecond, 200*time.Millisecond), judge.WithMaxPollRecords(25)},
		WriteBehind: []writebehind.Option{writebehind.WithInterval(50 * time.Millisecond),
			writebehind.WithBackoff(10*time.Millisecond, 200*time.Millisecond),
			writebehind.WithHooks(writebehind.Hooks{OnError: func(writebehind.ErrorInfo) { r.sqlErrors.Add(1) }})},
		Notifier: append(nopts, notify.WithBackoff(10*time.Millisecond, 200*time.Millisecond)),
	})
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	h := &workers{w: w, cancel: cancel, done: make(chan error, 1), t: r.t}
	go func() { h.done <- w.Run(ctx) }()
	r.t.Cleanup(h.wait)
	return h
}

// kill stops the deployable where it is, without waiting.
func (h *workers) kill() { h.cancel() }

// wait kills the deployable if it runs and waits until it stopped.
func (h *workers) wait() {
	h.once.Do(func() {
		h.cancel()
		if err := <-h.done; err != nil {
			h.t.Errorf("workers: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		if err := h.w.Close(ctx); err != nil {
			h.t.Errorf("close workers: %v", err)
		}
	})
}

// crashingDecider judges its first after batches normally; from then on it
// lets Redis judge each batch and fails before the processor could emit or
// commit anything — a processor dying at the worst moment, until the test
// kills its deployable.
type crashingDecider struct {
	judge.Engine
	after   int64
	calls   atomic.Int64
	crashed chan struct{}
	once    sync.Once
}

func (c *crashingDecider) ApplyBatch(ctx context.Context, evs []quota.Event) ([]quota.Result, error) {
	if c.calls.Add(1) <= c.after {
		return c.Engine.ApplyBatch(ctx, evs)
	}
	if _, err := c.Engine.ApplyBatch(ctx, evs); err != nil {
		return nil, err
	}
	c.once.Do(func() { close(c.crashed) })
	return nil, errors.New("e2e: processor died after Redis judged the batch")
}

// await polls cond until it holds. It waits while at (a counter of what
// the workers do) grows, and fails the test after DefaultStall without.
func (r *rig) await(what string, at func() int64, cond func() bool) {
	r.t.Helper()
	err := Wait{What: what}.Until(r.ctx, func(context.Context) (Progress, error) {
		n := at()
		return Progress{Done: cond(), At: n, Seen: fmt.Sprintf("counter at %d", n)}, nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
}

// caughtUp waits until the groups committed everything in their topics.
func (r *rig) caughtUp(groups ...string) {
	r.t.Helper()
	if err := r.watch.caughtUp(r.ctx, groups...); err != nil {
		r.t.Fatal(err)
	}
}

// familyArgs is the families as SQL placeholders and arguments.
func (r *rig) familyArgs() (string, []any) {
	args := make([]any, len(r.fams))
	for i, f := range r.fams {
		args[i] = f
	}
	return "?" + strings.Repeat(", ?", len(r.fams)-1), args
}

// rows counts the families' usage_record rows (around any SQL switch).
func (r *rig) rows() int {
	r.t.Helper()
	n, err := r.countRows(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	return n
}

func (r *rig) countRows(ctx context.Context) (int, error) {
	in, args := r.familyArgs()
	var n int
	err := r.inf.direct.QueryRowContext(ctx, `SELECT COUNT(*) FROM usage_record WHERE family_id IN (`+in+`)`, args...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count usage_record: %w", err)
	}
	return n, nil
}

// waitPersisted waits until usage_record holds want events, as long as
// rows are being written; it fails at once if it holds more.
func (r *rig) waitPersisted(want int) {
	r.t.Helper()
	got := 0
	err := Wait{What: fmt.Sprintf("usage_record to hold the %d distinct events sent", want)}.Until(r.ctx,
		func(ctx context.Context) (Progress, error) {
			n, err := r.countRows(ctx)
			if err != nil {
				return Progress{}, err
			}
			got = n
			return Progress{Done: n >= want, At: int64(n), Seen: fmt.Sprintf("%d rows", n)}, nil
		})
	if err == nil && got == want {
		return
	}
	if err == nil {
		err = fmt.Errorf("usage_record holds %d events, %d distinct were sent", got, want)
	}
	var lag []string
	for _, g := range slices.Sorted(maps.Keys(groupTopics())) {
		ctx, cancel := context.WithTimeout(r.ctx, DefaultCall)
		l, _, lerr := r.watch.behind(ctx, g, groupTopics()[g]...)
		cancel()
		switch {
		case lerr != nil:
			lag = append(lag, g+": "+lerr.Error())
		case l != "":
			lag = append(lag, g+": "+l)
		}
	}
	r.t.Fatalf("%v (dead letters: %v; lag: %v)", err, r.watch.deadLetters(), lag)
}

// redisUsed is what Redis says the families used this month.
func (r *rig) redisUsed() int64 {
	var used int64
	for _, f := range r.fams {
		if fs, err := r.eng.Family(r.ctx, f); err == nil {
			used += fs.Used
		}
	}
	return used
}

func distinct(evs []simulate.Event) int {
	seen := map[string]bool{}
	for _, ev := range evs {
		seen[ev.EventID] = true
	}
	return len(seen)
}

// oracle judges evs in order on a fresh engine (miniredis) provisioned
// like the rig's families: what exactly-once judging in partition order
// must have decided. Replays come back as duplicates and are left out.
func (r *rig) oracle(evs []simulate.Event) (map[string]quota.Result, []string) {
	r.t.Helper()
	// A slow reply must not be retried: the retried pipeline would find its
	// events judged and answer "duplicate" (on a loaded machine the default
	// 3 s read timeout did exactly that, and the oracle judged 26 of 362
	// events). No retries, a generous read timeout, short batches.
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(r.t).Addr(), MaxRetries: -1, ReadTimeout: DefaultCall})
	defer rdb.Close()
	eng, err := quota.New(rdb, quota.WithLocation(r.zone))
	if err != nil {
		r.t.Fatal(err)
	}
	for _, f := range r.fams {
		if _, err := eng.SetPlan(r.ctx, f, faultPlan); err != nil {
			r.t.Fatal(err)
		}
		for j := range 4 {
			if err := eng.AddMember(r.ctx, f, simulate.CustomerID(f, j)); err != nil {
				r.t.Fatal(err)
			}
		}
		if _, err := eng.SetConstraints(r.ctx, f, simulate.CustomerID(f, 3), 1,
			map[string]string{policy.KeyLimitMonthly: fmt.Sprint(faultLimit)}); err != nil {
			r.t.Fatal(err)
		}
	}
	catalog := policy.NewCatalog(policy.DefaultApps())
	qs := make([]quota.Event, len(evs))
	for i, ev := range evs {
		p := ev.Payload
		qs[i] = quota.Event{ID: ev.EventID, FamilyID: p.FamilyID, CustomerID: p.CustomerID, Bytes: p.BytesUsed,
			AppID: p.AppID, Category: catalog.Category(p.AppID), At: ev.Timestamp}
	}
	var res []quota.Result
	for b := range slices.Chunk(qs, 25) {
		rs, err := eng.ApplyBatch(r.ctx, b)
		if err != nil {
			r.t.Fatalf("oracle: judging %d events from the %dth: %v", len(b), len(res), err)
		}
		res = append(res, rs...)
	}
	want, order := map[string]quota.Result{}, []string{}
	for i, x := range res {
		if !x.Duplicate {
			want[evs[i].EventID] = x
			order = append(order, evs[i].EventID)
		}
	}
	return want, order
}

// verify checks story 6's promises after the run.
func (r *rig) verify(ctx context.Context, evs []simulate.Event) {
	t := r.t
	t.Helper()
	// SQL history equals Redis; thresholds announced once.
	if err := recovery.CheckInvariants(ctx, r.eng, r.inf.direct, r.fams); err != nil {
		t.Errorf("invariants:\n%v", err)
	}
	if err := CheckThresholdAlertsOnce(ctx, r.inf.direct, r.fams); err != nil {
		t.Errorf("threshold alerts:\n%v", err)
	}

	want, order := r.oracle(evs)
	byID := map[string]simulate.Event{}
	for _, ev := range evs {
		byID[ev.EventID] = ev
	}

	// Every event judged exactly once: persisted once, as the oracle decided.
	in, args := r.familyArgs()
	rows, err := r.inf.direct.QueryContext(ctx, `SELECT event_id, process_result, remaining_after FROM usage_record
		WHERE family_id IN (`+in+`)`, args...)
	if err != nil {
		t.Fatalf("reading usage_record: %v", err)
	}
	got := map[string][]judgement{}
	for rows.Next() {
		var id string
		var x judgement
		if err := rows.Scan(&id, &x.decision, &x.remaining); err != nil {
			t.Fatalf("reading usage_record: %v", err)
		}
		got[id] = append(got[id], x)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatalf("reading usage_record: %v", err)
	}
	decisions := map[policy.Decision]int{}
	for _, id := range order {
		decisions[want[id].Decision]++
	}
	if err := judgedOnce(evs, want, order, got); errors.Is(err, errOracle) {
		t.Fatal(err) // the notification counts below rest on the oracle too
	} else if err != nil {
		t.Error(err)
	}
	r.logf("%d events (%d distinct), decisions %v", len(evs), len(order), decisions)

	// Every notification the decisions cause reached the inbox once.
	wantNotes := map[string]int{}
	for _, id := range order {
		w, f := want[id], byID[id].Payload.FamilyID
		kind := envelope.SubQuotaUpdated
		if w.Decision.Blocked() {
			kind = envelope.SubCustomerBlocked
		}
		wantNotes[fmt.Sprintf("family %d %s", f, kind)]++
		for range w.Crossed {
			wantNotes[fmt.Sprintf("family %d %s", f, envelope.SubThresholdAlert)]++
		}
	}
	gotNotes := map[string]int{}
	nrows, err := r.inf.direct.QueryContext(ctx, `SELECT family_id, kind, COUNT(*), COUNT(DISTINCT event_id) FROM notification
		WHERE family_id IN (`+in+`) GROUP BY family_id, kind`, args...)
	if err != nil {
		t.Fatal(err)
	}
	for nrows.Next() {
		var f int64
		var kind string
		var n, ids int
		if err := nrows.Scan(&f, &kind, &n, &ids); err != nil {
			t.Fatal(err)
		}
		gotNotes[fmt.Sprintf("family %d %s", f, kind)] = n
		if n != ids {
			t.Errorf("inbox: family %d: %d %s rows for %d events", f, n, kind, ids)
		}
	}
	nrows.Close()
	if err := nrows.Err(); err != nil {
		t.Fatal(err)
	}
	var noteDiffs []string
	keys := slices.Collect(maps.Keys(wantNotes))
	for k := range gotNotes {
		if _, ok := wantNotes[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if wantNotes[k] != gotNotes[k] {
			noteDiffs = append(noteDiffs, fmt.Sprintf("%s: want %d, got %d", k, wantNotes[k], gotNotes[k]))
		}
	}
	if len(noteDiffs) > 0 {
		t.Errorf("inbox notification counts:\n  %s", strings.Join(noteDiffs, "\n  "))
	}
	if dead := r.watch.deadLetters(); len(dead) > 0 {
		t.Errorf("dead letters: %v", dead)
	}
}

// errOracle is an oracle that failed to judge the events sent: the checks
// resting on it cannot be made.
var errOracle = errors.New("the oracle is incomplete")

// judgement is what usage_record holds about one event.
type judgement struct {
	decision  string
	remaining int64
}

// judgedOnce compares usage_record (got: the rows of each event id) with
// the oracle's decisions on the events sent (want, for the ids in order).
// An oracle that did not judge every distinct event sent is an error of the
// check itself, reported as such: nothing is compared against it.
func judgedOnce(evs []simulate.Event, want map[string]quota.Result, order []string, got map[string][]judgement) error {
	byID := map[string]simulate.Event{}
	var sent []string
	for _, ev := range evs {
		if _, ok := byID[ev.EventID]; !ok {
			sent = append(sent, ev.EventID)
		}
		byID[ev.EventID] = ev
	}
	var unjudged []string
	for _, id := range sent {
		if _, ok := want[id]; !ok {
			unjudged = append(unjudged, id)
		}
	}
	if len(unjudged) > 0 || len(order) != len(sent) {
		slices.Sort(unjudged)
		return fmt.Errorf("%w: it judged %d of the %d distinct events sent (not judged: %s); "+
			"without the expected decisions the %d events in usage_record were not compared",
			errOracle, len(order), len(sent), strings.Join(unjudged[:min(len(unjudged), 10)], ", "), len(got))
	}
	got = maps.Clone(got)
	var diffs []string
	for _, id := range order {
		w, ev := want[id], byID[id]
		wr := judgement{string(w.Decision), w.Remaining}
		switch rs := got[id]; {
		case len(rs) != 1:
			diffs = append(diffs, fmt.Sprintf("%s (family %d member %d, %s): persisted %d times", id,
				ev.Payload.FamilyID, ev.Payload.CustomerID, mib(ev.Payload.BytesUsed), len(rs)))
		case rs[0] != wr:
			diffs = append(diffs, fmt.Sprintf("%s (family %d member %d, %s): want %s rem %s, got %s rem %s", id,
				ev.Payload.FamilyID, ev.Payload.CustomerID, mib(ev.Payload.BytesUsed), wr.decision, mib(wr.remaining),
				rs[0].decision, mib(rs[0].remaining)))
		}
		delete(got, id)
	}
	for _, id := range slices.Sorted(maps.Keys(got)) {
		diffs = append(diffs, fmt.Sprintf("%s: persisted but never sent", id))
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%d of the %d distinct events sent not judged exactly once as an in-order judge would:\n  %s",
			len(diffs), len(sent), strings.Join(diffs[:min(len(diffs), 30)], "\n  "))
	}
	return nil
}

// mustState is the door to eng's state.
func mustState(t testing.TB, eng judge.Engine) *judge.State {
	t.Helper()
	qs, err := judge.NewState(eng)
	if err != nil {
		t.Fatal(err)
	}
	return qs
}
