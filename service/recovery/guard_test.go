package recovery_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/internal/testenv/storetest"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/outbox"
	"github.com/dabom/dpcs/service/recovery"
)

// guardRig is a Guard over an embedded Kafka, Redis and SQLite with three
// families in SQL, none in Redis yet.
type guardRig struct {
	t     *testing.T
	e     *storetest.Env
	mr    *miniredis.Miniredis
	eng   *quota.Engine
	qs    *judge.State
	prod  *kgo.Client
	adm   *kadm.Client
	mu    sync.Mutex
	infos []recovery.Info
}

func newGuardRig(t *testing.T) *guardRig {
	t.Helper()
	r := &guardRig{t: t, e: storetest.New(t, testenv.SQLite(t))}
	mr, client := testenv.Redis(t)
	r.mr = mr
	var err error
	if r.eng, err = quota.New(client, quota.WithClock(r.e.Clock.Now), quota.WithLocation(storetest.Seoul)); err != nil {
		t.Fatal(err)
	}
	r.qs = mustState(t, r.eng)
	k := testenv.Kafka(t)
	r.prod = testenv.Client(t, k)
	r.adm = kadm.NewClient(r.prod)
	for _, fid := range []int64{1, 2, 3} {
		r.e.Family(t, fid)
	}
	return r
}

// guard is a Guard named owner over the rig; rebuild, when not nil,
// replaces recovery.Rebuild.
func (r *guardRig) guard(owner string, manual bool, rebuild recovery.RebuildFunc) *recovery.Guard {
	r.t.Helper()
	if rebuild == nil {
		rebuild = func(ctx context.Context, gen string) (recovery.Report, error) {
			return recovery.Rebuild(ctx, r.e.S, r.qs, gen)
		}
	}
	g, err := recovery.New(recovery.Config{Store: r.e.S, State: r.qs, Admin: r.adm, Rebuild: rebuild,
		Owner: owner, Manual: manual, Quiet: 10 * time.Millisecond, Lease: 2 * time.Second,
		Logger: slog.New(slog.DiscardHandler),
		OnRecovered: func(i recovery.Info) {
			r.mu.Lock()
			r.infos = append(r.infos, i)
			r.mu.Unlock()
		}})
	if err != nil {
		r.t.Fatal(err)
	}
	return g
}

// sqlGeneration is the generation SQL names.
func (r *guardRig) sqlGeneration() string {
	r.t.Helper()
	st, err := r.e.S.RedisState(r.e.Ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	return st.Generation
}

// judged is family 1's member 11 judged with generation gen at stream
// position pos.
func (r *guardRig) judged(gen string, pos int64) ([]quota.Result, error) {
	return r.eng.ApplyMarked(r.e.Ctx, gen, []quota.Mark{{Stream: "usage-events/0", From: pos, To: pos + 1}},
		[]quota.Event{{ID: "evt_" + gen, FamilyID: 1, CustomerID: 11, Bytes: 1, AppID: "a", At: r.e.Clock.Now()}})
}

// Bootstrap rebuilds every family as a new generation named in SQL and in
// Redis; Redis then judges with it and refuses any other.
func TestGuardBootstrap(t *testing.T) {
	r := newGuardRig(t)
	g := r.guard("a", false, nil)
	if gen, err := g.Generation(r.e.Ctx); err != nil || gen != "" {
		t.Fatalf("generation before any rebuild: %q, %v", gen, err)
	}
	info, err := g.Bootstrap(r.e.Ctx, "test start")
	if err != nil || info.Families != 3 || info.Failed != 0 || info.Generation == "" || info.Reason != "test start" {
		t.Fatalf("Bootstrap = %+v, %v", info, err)
	}
	if got := r.sqlGeneration(); got != info.Generation {
		t.Errorf("SQL names %q, the rebuild wrote %q", got, info.Generation)
	}
	if gen, err := g.Generation(r.e.Ctx); err != nil || gen != info.Generation {
		t.Errorf("Generation = %q, %v; want %q", gen, err, info.Generation)
	}
	rs, err := r.judged(info.Generation, 0)
	if err != nil || rs[0].Decision != policy.Allowed {
		t.Errorf("judged with the new generation: %+v, %v", rs, err)
	}
	if _, err := r.judged("another", 1); !errors.Is(err, quota.ErrStale) {
		t.Errorf("judged with another generation: %v, want ErrStale", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.infos) != 1 {
		t.Errorf("OnRecovered called %d times, want 1", len(r.infos))
	}
}

// Recover after Redis lost its state rebuilds it under the lease, with a
// new generation, once; a second instance meanwhile waits for it and
// returns the same generation; a stale batch judged with an old generation
// while SQL already names another is told the new one without a rebuild.
func TestGuardRecover(t *testing.T) {
	r := newGuardRig(t)
	a, b := r.guard("a", false, nil), r.guard("b", false, nil)
	info, err := a.Bootstrap(r.e.Ctx, "start")
	if err != nil {
		t.Fatal(err)
	}
	r.mr.FlushAll()
	_, cause := r.judged(info.Generation, 0)
	if !errors.Is(cause, quota.ErrStale) {
		t.Fatalf("judged on an empty Redis: %v, want ErrStale", cause)
	}
	var wg sync.WaitGroup
	gens := make([]string, 2)
	errs := make([]error, 2)
	for i, g := range []*recovery.Guard{a, b} {
		wg.Go(func() { gens[i], errs[i] = g.Recover(r.e.Ctx, info.Generation, cause) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || gens[0] != gens[1] || gens[0] == info.Generation {
		t.Fatalf("Recover: %q %v, %q %v; want one new generation for both", gens[0], errs[0], gens[1], errs[1])
	}
	r.mu.Lock()
	rebuilds := len(r.infos)
	r.mu.Unlock()
	if rebuilds != 2 { // the bootstrap and one recovery
		t.Errorf("%d rebuilds, want 2", rebuilds)
	}
	if rs, err := r.judged(gens[0], 0); err != nil || rs[0].Decision != policy.Allowed {
		t.Errorf("judged after the recovery: %+v, %v", rs, err)
	}
	// Another processor's batch was judged with the first generation: SQL
	// names a newer one, so it is told that one without rebuilding.
	if gen, err := b.Recover(r.e.Ctx, info.Generation, cause); err != nil || gen != gens[0] {
		t.Errorf("Recover with an outdated generation: %q, %v; want %q", gen, err, gens[0])
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.infos) != rebuilds {
		t.Errorf("a stale generation rebuilt again")
	}
}

// A rebuild that fails (SQL or Redis down) publishes no generation: Recover
// gives the lease up and tries again until one succeeds.
func TestGuardRecoverRetriesFailedRebuild(t *testing.T) {
	r := newGuardRig(t)
	var attempts atomic.Int64
	g := r.guard("a", false, func(ctx context.Context, gen string) (recovery.Report, error) {
		if attempts.Add(1) == 1 {
			if got := r.sqlGeneration(); got != "" {
				t.Errorf("SQL names %q during the first attempt", got)
			}
			return recovery.Report{}, errors.New("dial tcp: connection refused")
		}
		return recovery.Rebuild(ctx, r.e.S, r.qs, gen)
	})
	gen, err := g.Recover(r.e.Ctx, "", &quota.StaleError{Reason: "never rebuilt"})
	if err != nil || gen == "" {
		t.Fatalf("Recover = %q, %v", gen, err)
	}
	if n := attempts.Load(); n != 2 {
		t.Errorf("%d rebuild attempts, want 2", n)
	}
	if got := r.sqlGeneration(); got != gen {
		t.Errorf("SQL names %q, want %q", got, gen)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.infos) != 1 {
		t.Errorf("OnRecovered called %d times, want once (the failed attempt is no recovery)", len(r.infos))
	}
}

// Manual recovery waits for an operator's rebuild (another instance's
// RebuildNow) and returns its generation; a cancelled context ends the
// wait.
func TestGuardManual(t *testing.T) {
	r := newGuardRig(t)
	waiter := r.guard("processor", true, nil)
	ctx, cancel := context.WithCancel(r.e.Ctx)
	cancel()
	if _, err := waiter.Recover(ctx, "", errors.New("stale")); !errors.Is(err, context.Canceled) {
		t.Errorf("Recover with a cancelled context: %v", err)
	}
	done := make(chan string, 1)
	go func() {
		gen, err := waiter.Recover(r.e.Ctx, "", errors.New("stale"))
		if err != nil {
			t.Error(err)
		}
		done <- gen
	}()
	op := r.guard("operator", false, nil)
	info, err := op.RebuildNow(r.e.Ctx, "operator: server rebuild")
	if err != nil {
		t.Fatal(err)
	}
	if gen := <-done; gen != info.Generation {
		t.Errorf("the manual recovery returned %q, want the operator's %q", gen, info.Generation)
	}
}

// Backlog counts the usage-persist records the write-behind has not
// written yet (committed) to SQL.
func TestGuardBacklog(t *testing.T) {
	r := newGuardRig(t)
	g := r.guard("a", false, nil)
	if n, err := g.Backlog(r.e.Ctx); err != nil || n != 0 {
		t.Fatalf("Backlog of an empty topic: %d, %v", n, err)
	}
	for i := range 3 {
		rec := &kgo.Record{Topic: envelope.TopicUsagePersist, Key: []byte{'1' + byte(i)}, Value: []byte("{}")}
		if err := r.prod.ProduceSync(r.e.Ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := g.Backlog(r.e.Ctx); err != nil || n != 3 {
		t.Errorf("Backlog: %d, %v; want 3", n, err)
	}
}

// New refuses a configuration without its dependencies.
func TestGuardConfig(t *testing.T) {
	if _, err := recovery.New(recovery.Config{}); err == nil {
		t.Error("an empty configuration was accepted")
	}
	if _, err := recovery.Rebuild(context.Background(), nil, nil, ""); err == nil {
		t.Error("Rebuild without a store was accepted")
	}
}

// Generations reads the generation SQL names, keeps it for a second, and
// reads again at once after Forget.
func TestGenerations(t *testing.T) {
	r := newGuardRig(t)
	gens := recovery.NewGenerations(r.e.S)
	if gen, err := gens.Generation(r.e.Ctx); err != nil || gen != "" {
		t.Fatalf("before any rebuild: %q, %v", gen, err)
	}
	info, err := r.guard("a", false, nil).Bootstrap(r.e.Ctx, "start")
	if err != nil {
		t.Fatal(err)
	}
	if gen, _ := gens.Generation(r.e.Ctx); gen != "" {
		t.Errorf("read within the second: %q, want the cached %q", gen, "")
	}
	gens.Forget()
	if gen, err := gens.Generation(r.e.Ctx); err != nil || gen != info.Generation {
		t.Errorf("after Forget: %q, %v; want %q", gen, err, info.Generation)
	}
}

// CheckInvariants holds for a Redis rebuilt from SQL and catches a charge
// Redis holds and SQL does not.
func TestCheckInvariants(t *testing.T) {
	r := newGuardRig(t)
	info, err := r.guard("a", false, nil).Bootstrap(r.e.Ctx, "start")
	if err != nil {
		t.Fatal(err)
	}
	fams := []int64{1, 2, 3}
	if err := recovery.CheckInvariants(r.e.Ctx, r.qs, r.e.DB, fams); err != nil {
		t.Errorf("after a rebuild: %v", err)
	}
	if _, err := r.judged(info.Generation, 0); err != nil {
		t.Fatal(err)
	}
	if err := recovery.CheckInvariants(r.e.Ctx, r.eng, r.e.DB, fams); err == nil {
		t.Error("a charge in Redis without its usage_record row passed")
	}
}

// signalHandler is a slog handler that sends each record's message and
// attributes to c (dropping them when c is full).
type signalHandler struct{ c chan map[string]string }

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h signalHandler) WithGroup(string) slog.Handler            { return h }
func (h signalHandler) Handle(_ context.Context, rec slog.Record) error {
	m := map[string]string{"msg": rec.Message}
	rec.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	select {
	case h.c <- m:
	default:
	}
	return nil
}

// A recovery rebuilds only once the synchronous decisions' spooled
// usage-persist rows are published (#23, 5): before that they are in
// neither usage_record nor Kafka, and a rebuild would forget their charges.
func TestGuardWaitsForSpooledUsage(t *testing.T) {
	r := newGuardRig(t)
	logs := make(chan map[string]string, 64)
	var published atomic.Bool
	g, err := recovery.New(recovery.Config{Store: r.e.S, State: r.qs, Admin: r.adm, Quiet: 10 * time.Millisecond,
		Logger: slog.New(signalHandler{logs}),
		Rebuild: func(ctx context.Context, gen string) (recovery.Report, error) {
			if !published.Load() {
				t.Error("rebuilt while a spooled usage-persist row was not published")
			}
			return recovery.Rebuild(ctx, r.e.S, r.qs, gen)
		}})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := outbox.NewSpool(r.e.DB, sqldialect.Unknown, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := r.e.Clock.Now()
	rec, err := kafkarecord.New(envelope.TopicUsagePersist, envelope.New("up_s1", at, envelope.UsagePersistPayload{
		OriginEventID: "s1", FamilyID: 1, CustomerID: 11, AppID: "a", BytesUsed: 1, ProcessResult: "ALLOWED", EventTime: at}))
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.Spool(r.e.Ctx, []*kgo.Record{rec}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := g.Recover(r.e.Ctx, "", &quota.StaleError{Reason: "never rebuilt"})
		done <- err
	}()
	for waiting := false; !waiting; {
		select {
		case m := <-logs:
			waiting = m["msg"] == "recovery: waiting until SQL holds every judged event" && m["usagePersistInOutbox"] == "1"
		case err := <-done:
			t.Fatalf("Recover returned (%v) with a spooled usage-persist row pending", err)
		}
	}
	// The relay published the row (and the write-behind wrote it).
	published.Store(true)
	if _, err := r.e.DB.ExecContext(r.e.Ctx, `UPDATE outbox_cursor SET last_id = (SELECT MAX(id) FROM outbox) WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Generations reads the generation and the family-write marks from SQL,
// and keeps answering with what it read last while SQL cannot be read.
func TestGenerationsThroughSQLOutage(t *testing.T) {
	ctx := context.Background()
	r := newGuardRig(t)
	g := recovery.NewGenerations(r.e.S)
	if gen, err := g.Generation(ctx); err != nil || gen != "" {
		t.Fatalf("before any rebuild: %q, %v", gen, err)
	}
	if _, err := r.e.DB.ExecContext(ctx, `UPDATE redis_state SET generation = 'g1'`); err != nil {
		t.Fatal(err)
	}
	mark := quota.Mark{Stream: "family-writes/x/0", From: 2, To: 3, Node: "n0"}
	if err := g.RecordMark(ctx, "g1", mark); err != nil {
		t.Fatal(err)
	}
	g.Forget()
	if gen, err := g.Generation(ctx); err != nil || gen != "g1" {
		t.Fatalf("after a rebuild: %q, %v", gen, err)
	}
	want := []quota.Mark{{Stream: "family-writes/x/0", From: 3, To: 3, Node: "n0"}}
	if fl, err := g.Floors(ctx, "g1"); err != nil || !slices.Equal(fl, want) {
		t.Fatalf("Floors = %v, %v, want %v", fl, err, want)
	}
	if err := r.e.DB.Close(); err != nil {
		t.Fatal(err)
	}
	g.Forget()
	if gen, err := g.Generation(ctx); err != nil || gen != "g1" {
		t.Errorf("SQL down: %q, %v; want the generation read last", gen, err)
	}
	if fl, err := g.Floors(ctx, "g1"); err != nil || !slices.Equal(fl, want) {
		t.Errorf("SQL down: Floors = %v, %v; want the marks read last", fl, err)
	}
	if _, err := g.Floors(ctx, "g2"); err == nil {
		t.Error("SQL down: Floors of a generation never read answered")
	}
	if err := g.RecordMark(ctx, "g1", mark); err == nil {
		t.Error("SQL down: RecordMark answered nil")
	}
	if _, err := recovery.NewGenerations(r.e.S).Generation(ctx); err == nil {
		t.Error("SQL down, nothing read yet: no error")
	}
}
