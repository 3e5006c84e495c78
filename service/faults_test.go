package service

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/internal/testenv/pipetest"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/recovery"
	"github.com/dabom/dpcs/service/store"
	"github.com/dabom/dpcs/writebehind"
)

const faultFamilies = 20

// openSQLite is a migrated SQLite database for the workers.
func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	db := testenv.SQLite(t)
	if err := Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return db
}

// openStore is a SQLite database with the whole store's schema, and its
// store.
func openStore(t *testing.T) (*sql.DB, *store.Store) {
	t.Helper()
	db := openSQLite(t)
	if err := store.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(db)
	if err != nil {
		t.Fatal(err)
	}
	return db, st
}

// harness is a pipeline (internal/testenv) for running processor
// deployables.
type harness struct {
	*pipetest.Pipeline
	t *testing.T
	// marks, when set, is the processor's door's mark store (judge.WithMarkStore).
	marks judge.MarkStore
	// src, when set, is the processor's door's family source
	// (judge.WithFamilySource: families restored on touch after a rebuild).
	src judge.FamilySource
}

func newHarness(t *testing.T) *harness { return &harness{Pipeline: pipetest.New(t), t: t} }

// newHarnessOn builds a harness on any Redis (keys prefixed per test).
func newHarnessOn(t *testing.T, rdb redis.UniversalClient) *harness {
	return &harness{Pipeline: pipetest.On(t, rdb), t: t}
}

const mb = 1 << 20

// startWorkers runs a processor deployable until stop is called.
func (h *harness) startWorkers(db *sql.DB, opts ...judge.ProcessorOpt) (stop func()) {
	h.t.Helper()
	var log *slog.Logger
	if os.Getenv("DPCS_TEST_DEBUG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	popts := append([]judge.ProcessorOpt{judge.WithClock(func() time.Time { return h.Now }),
		judge.WithRetryBackoff(10*time.Millisecond, 100*time.Millisecond), judge.WithMaxPollRecords(50)}, opts...)
	var sopts []judge.StateOption
	if h.marks != nil {
		sopts = append(sopts, judge.WithMarkStore(h.marks))
	}
	if h.src != nil {
		sopts = append(sopts, judge.WithFamilySource(h.src))
	}
	qs := mustState(h.t, h.Engine, sopts...)
	w, err := NewWorkers(qs, db, h.KafkaOpts(), WorkersConfig{Logger: log, Processor: popts,
		WriteBehind: []writebehind.Option{writebehind.WithInterval(50 * time.Millisecond), writebehind.WithBackoff(10*time.Millisecond, 100*time.Millisecond)},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.Ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			h.t.Errorf("workers: %v", err)
		}
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		if err := w.Close(sctx); err != nil {
			h.t.Errorf("workers close: %v", err)
		}
	}
	h.t.Cleanup(stop)
	return stop
}

// trafficFor provisions faultFamilies families (member 4 with a 20 MB monthly
// limit) and returns n usage records, a tenth of them replays.
func (h *harness) trafficFor(n int, seed uint64) (recs []*kgo.Record, distinct int) {
	h.t.Helper()
	var fams []int64
	for f := int64(1); f <= faultFamilies; f++ {
		h.Family(f, 200*mb, 1, 2, 3, 4)
		if _, err := h.Engine.SetConstraints(h.Ctx, f, 4, 1, map[string]string{policy.KeyLimitMonthly: fmt.Sprint(20 * mb)}); err != nil {
			h.t.Fatal(err)
		}
		fams = append(fams, f)
	}
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range n {
		id := fmt.Sprintf("evt_%d", i)
		if i > 10 && r.IntN(10) == 0 {
			// A replay: an earlier event delivered again as it was (a new
			// *kgo.Record: kgo owns a record until its produce finished).
			old := recs[r.IntN(i)]
			recs = append(recs, &kgo.Record{Topic: old.Topic, Key: old.Key, Value: old.Value, Headers: old.Headers})
			continue
		}
		distinct++
		f := fams[r.IntN(len(fams))]
		recs = append(recs, h.Usage(id, f, int64(r.IntN(5)+1), int64(r.IntN(5*mb)+1), "com.youtube.app", h.Now))
	}
	return recs, distinct
}

func (h *harness) waitRows(db *sql.DB, want int) {
	h.t.Helper()
	var got int
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err := db.QueryRow(`SELECT COUNT(*) FROM usage_record`).Scan(&got); err != nil {
			h.t.Fatal(err)
		}
		if got == want {
			return
		}
	}
	adm := kadm.NewClient(h.Prod)
	var diag []string
	for _, g := range []string{judge.ProcessorGroup, writebehind.DefaultGroup} {
		ends, _ := adm.ListEndOffsets(h.Ctx, "usage-events", "usage-persist")
		committed, _ := adm.FetchOffsets(h.Ctx, g)
		ends.Each(func(o kadm.ListedOffset) {
			c, _ := committed.Lookup(o.Topic, o.Partition)
			if o.Offset > 0 {
				diag = append(diag, fmt.Sprintf("%s %s/%d end %d committed %d", g, o.Topic, o.Partition, o.Offset, c.At))
			}
		})
	}
	h.t.Fatalf("usage_record has %d rows, want %d\n%s", got, want, strings.Join(diag, "\n"))
}

func (h *harness) checkInvariants(db *sql.DB) {
	h.t.Helper()
	var fams []int64
	for f := int64(1); f <= faultFamilies; f++ {
		fams = append(fams, f)
	}
	if err := recovery.CheckInvariants(h.Ctx, h.Engine, db, fams); err != nil {
		h.t.Fatalf("invariants:\n%v", err)
	}
}

// Three processor deployables share the group; one leaves mid-run and the
// others take its partitions over. Every event is judged once in effect.
func TestThreeWorkersWithRebalance(t *testing.T) {
	testenv.SkipShort(t, "three workers through a rebalance")
	h := newHarness(t)
	db := openSQLite(t)
	recs, distinct := h.trafficFor(600, 7)
	stops := []func(){h.startWorkers(db), h.startWorkers(db), h.startWorkers(db)}
	h.Produce(recs[:300]...)
	h.waitRows(db, countDistinct(recs[:300]))
	stops[1]() // one leaves mid-run
	h.Produce(recs[300:]...)
	h.waitRows(db, distinct)
	h.Settled(judge.ProcessorGroup, "usage-events")
	h.checkInvariants(db)
}

// Redis goes away for a while mid-run: processing pauses and resumes, and the
// invariants hold.
func TestRedisDownMidRun(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	h := newHarnessOn(t, rdb)
	db := openSQLite(t)
	recs, distinct := h.trafficFor(400, 11)
	h.startWorkers(db)
	h.Produce(recs[:200]...)
	h.waitRows(db, countDistinct(recs[:200]))
	mr.Close() // Redis down…
	h.Produce(recs[200:]...)
	time.Sleep(1500 * time.Millisecond)
	var during int
	db.QueryRow(`SELECT COUNT(*) FROM usage_record`).Scan(&during)
	if err := mr.Restart(); err != nil { // …and back, with its data
		t.Fatal(err)
	}
	h.waitRows(db, distinct)
	h.Settled(judge.ProcessorGroup, "usage-events")
	h.checkInvariants(db)
	if during > countDistinct(recs[:200]) {
		t.Errorf("%d rows written while Redis was down; nothing may be judged without Redis", during-countDistinct(recs[:200]))
	}
}

func countDistinct(recs []*kgo.Record) int {
	seen := map[string]bool{}
	for _, r := range recs {
		seen[string(r.Value)] = true
	}
	return len(seen)
}

// mustState is the door to eng's state.
func mustState(t testing.TB, eng judge.Engine, opts ...judge.StateOption) *judge.State {
	t.Helper()
	qs, err := judge.NewState(eng, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return qs
}
