package recoverybench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/bench/pipebench"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/recovery"
	"github.com/dabom/dpcs/service/store"
)

// Config is one measurement over a seeded database.
type Config struct {
	// PerFamily is how many families (1..PerFamily) are also rebuilt one
	// recovery.Rebuild call each, the shape of a rebuild that reads and
	// restores one family at a time, for the ratio. 0: not measured.
	PerFamily int
	// Quiet is the recovery's drain quiet period (recovery.Config.
	// Quiet). Default: the recovery's default, 3 s.
	Quiet time.Duration
	// Progress, when set, is told what is being measured.
	Progress func(format string, args ...any)
}

// Report is what Run measured.
type Report struct {
	Families int
	// Rebuild is recovery.Rebuild over every family.
	Rebuild time.Duration
	// PerFamily families were rebuilt one call each in PerFamilyTook.
	PerFamily     int
	PerFamilyTook time.Duration
	// Recovery is the whole recovery.Guard.RebuildNow: a generation
	// restored on touch (Recovery.Available until it is named, then the
	// sweep, Recovery.Rebuild).
	Recovery recovery.Info
	// FirstDecision is how long after RebuildNow began a decision for the
	// last family (the one the sweep reaches last) was answered, its family
	// restored by that decision; FirstDecisionTook how long that decision
	// took.
	FirstDecision, FirstDecisionTook time.Duration
	// MemBefore is Redis's used_memory before the first rebuild, MemAfter
	// after the recovery.
	MemBefore, MemAfter int64
	// Keys is the Redis key count after the recovery (DBSIZE).
	Keys int64
}

// Rate is families rebuilt per second by the whole rebuild.
func (r *Report) Rate() float64 { return rate(r.Families, r.Rebuild) }

// PerFamilyRate is families per second one call each.
func (r *Report) PerFamilyRate() float64 { return rate(r.PerFamily, r.PerFamilyTook) }

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Run measures on a seeded database (Seed) and the engine's Redis, which
// should hold none of the families yet: (a) recovery.Rebuild over every
// family, (b) the same families one call each for cfg.PerFamily of them, (c) a
// whole recovery.Guard.RebuildNow with Kafka in process (kfake, nothing to
// drain), and Redis's memory before and after. Any family not rebuilt is an
// error.
func Run(ctx context.Context, db *sql.DB, rdb redis.UniversalClient, engine *quota.Engine, cfg Config) (*Report, error) {
	st, err := store.New(db, store.WithLocation(engine.Location()))
	if err != nil {
		return nil, err
	}
	// The deployables' door: families restored on touch after a rebuild.
	eng, err := judge.NewState(engine, judge.WithFamilySource(recovery.NewFamilySource(st, engine)))
	if err != nil {
		return nil, err
	}
	progress := cfg.Progress
	if progress == nil {
		progress = func(string, ...any) {}
	}
	var rep Report
	if rep.MemBefore, err = pipebench.RedisMemory(ctx, rdb); err != nil {
		return nil, err
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM families`).Scan(&rep.Families); err != nil {
		return nil, fmt.Errorf("recoverybench: count families: %w", err)
	}

	progress("rebuild of %d families (recovery.Rebuild)", rep.Families)
	start := time.Now()
	rr, err := recovery.Rebuild(ctx, st, eng, "bench-rebuild")
	rep.Rebuild = time.Since(start)
	if err != nil {
		return nil, err
	}
	if rr.Rebuilt != rep.Families {
		return nil, fmt.Errorf("recoverybench: rebuilt %d of %d families", rr.Rebuilt, rep.Families)
	}

	rep.PerFamily = min(cfg.PerFamily, rep.Families)
	if rep.PerFamily > 0 {
		progress("rebuild of %d families one call each", rep.PerFamily)
		start = time.Now()
		for f := int64(1); f <= int64(rep.PerFamily); f++ {
			if _, err := recovery.Rebuild(ctx, st, eng, "bench-rebuild", f); err != nil {
				return nil, err
			}
		}
		rep.PerFamilyTook = time.Since(start)
	}

	progress("whole recovery (recovery.Guard.RebuildNow)")
	var last struct{ family, member int64 }
	if err := db.QueryRowContext(ctx, `SELECT family_id, id FROM members WHERE family_id = (SELECT MAX(id) FROM families)
		ORDER BY id LIMIT 1`).Scan(&last.family, &last.member); err != nil {
		return nil, fmt.Errorf("recoverybench: last family: %w", err)
	}
	if rep.Recovery, rep.FirstDecision, rep.FirstDecisionTook, err = recoverOnce(ctx, db, eng, cfg.Quiet, last.family, last.member); err != nil {
		return nil, err
	}
	if rep.Recovery.Families != rep.Families || rep.Recovery.Failed != 0 {
		return nil, fmt.Errorf("recoverybench: recovery rebuilt %d of %d families, %d failed",
			rep.Recovery.Families, rep.Families, rep.Recovery.Failed)
	}
	if rep.MemAfter, err = pipebench.RedisMemory(ctx, rdb); err != nil {
		return nil, err
	}
	if c, ok := rdb.(*redis.Client); ok {
		if rep.Keys, err = c.DBSize(ctx).Result(); err != nil {
			return nil, fmt.Errorf("recoverybench: dbsize: %w", err)
		}
	}
	return &rep, nil
}

// recoverOnce runs recovery.Guard.RebuildNow as a processor deployable
// would: Kafka (in process) with the service's topics and nothing written, so
// the drain is the quiet period alone. Meanwhile a synchronous decision for
// member of family is asked for until it is answered (refused as stale
// while the drain runs): the first decision after the loss.
func recoverOnce(ctx context.Context, db *sql.DB, eng *judge.State, quiet time.Duration, family, member int64) (info recovery.Info, first, took time.Duration, err error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(envelope.DefaultPartitions, envelope.Topics()...))
	if err != nil {
		return info, 0, 0, fmt.Errorf("recoverybench: kafka: %w", err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		return info, 0, 0, fmt.Errorf("recoverybench: kafka client: %w", err)
	}
	defer cl.Close()
	st, err := store.New(db, store.WithLocation(eng.Location()))
	if err != nil {
		return info, 0, 0, err
	}
	rec, err := recovery.New(recovery.Config{Store: st, State: eng, Admin: kadm.NewClient(cl), Quiet: quiet,
		Rebuild: func(ctx context.Context, gen string) (recovery.Report, error) {
			return recovery.Rebuild(ctx, st, eng, gen)
		}})
	if err != nil {
		return info, 0, 0, err
	}
	defer rec.Close()
	dec, err := judge.NewDecisions(eng, []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, judge.WithStateGuard(rec))
	if err != nil {
		return info, 0, 0, err
	}
	defer func() {
		if cerr := dec.Close(context.WithoutCancel(ctx)); cerr != nil && err == nil {
			err = cerr
		}
	}()
	start := time.Now()
	type decided struct {
		at, took time.Duration
		err      error
	}
	got := make(chan decided, 1)
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for i := 0; ; i++ {
			asked := time.Now()
			res, err := dec.Decide(dctx, []envelope.Envelope[envelope.UsagePayload]{envelope.New(fmt.Sprint("recoverybench-", i), time.Now(),
				envelope.UsagePayload{FamilyID: family, CustomerID: member, AppID: "com.example.app", BytesUsed: 1})})
			switch {
			case err == nil && res[0].Decision == "BLOCKED_NOT_MEMBER":
				got <- decided{err: fmt.Errorf("recoverybench: member %d of family %d judged not a member", member, family)}
				return
			case err == nil:
				got <- decided{at: time.Since(start), took: time.Since(asked)}
				return
			case !errors.Is(err, quota.ErrStale) || dctx.Err() != nil:
				got <- decided{err: fmt.Errorf("recoverybench: first decision: %w", err)}
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	info, err = rec.RebuildNow(ctx, "recoverybench")
	if errors.Is(err, recovery.ErrIncomplete) {
		return info, 0, 0, fmt.Errorf("recoverybench: %d families failed: %w", info.Failed, err)
	}
	if err != nil {
		return info, 0, 0, err
	}
	d := <-got
	return info, d.at, d.took, d.err
}

// Markdown is the report as the "Recovery time" section of doc/benchmarks.md.
func (r *Report) Markdown(seeded Seeded, command, setting string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n```sh\n%s\n```\n\n", setting, command)
	fmt.Fprintf(&b, "Seeded in bulk: %s families, %s members, %s policies, %s top-ups, %s usage_record rows (%s rows in %.1f s).\n\n",
		n(seeded.Families), n(seeded.Members), n(seeded.Policies), n(seeded.TopUps), n(seeded.UsageRows),
		n(seeded.Rows()), seeded.Took.Seconds())
	b.WriteString("| measured | families | took | families/s |\n|---|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| `recovery.Rebuild`, every family | %s | %.1f s | %s |\n", n(r.Families), r.Rebuild.Seconds(), n(int(r.Rate())))
	if r.PerFamily > 0 {
		fmt.Fprintf(&b, "| the same, one call per family (first %s) | %s | %.1f s | %s |\n",
			n(r.PerFamily), n(r.PerFamily), r.PerFamilyTook.Seconds(), n(int(r.PerFamilyRate())))
	}
	ri := r.Recovery
	fmt.Fprintf(&b, "| `Recovery.RebuildNow`: drain (quiet period, nothing pending) | — | %.1f s | — |\n", ri.Drain.Seconds())
	fmt.Fprintf(&b, "| `Recovery.RebuildNow`: generation named, judging again (restored on touch) | — | **%.1f s** | — |\n", ri.Available.Seconds())
	fmt.Fprintf(&b, "| first decision answered, for the last family (restored by it; the decision took %.0f ms) | 1 | **%.1f s** | — |\n",
		float64(r.FirstDecisionTook.Microseconds())/1000, r.FirstDecision.Seconds())
	fmt.Fprintf(&b, "| `Recovery.RebuildNow`: the sweep, every family | %s | %.1f s | %s |\n", n(ri.Families), ri.Rebuild.Seconds(), n(int(rate(ri.Families, ri.Rebuild))))
	fmt.Fprintf(&b, "| `Recovery.RebuildNow`: total, every family restored | %s | **%.1f s** | — |\n\n", n(ri.Families), ri.Total.Seconds())
	if r.PerFamily > 0 && r.PerFamilyRate() > 0 {
		fmt.Fprintf(&b, "Batched ÷ one call per family: **%.1f×** families/s.\n", r.Rate()/r.PerFamilyRate())
	}
	fmt.Fprintf(&b, "Redis `used_memory`: %.1f MiB before, %.1f MiB after (%s keys; %.0f bytes per family).\n",
		mib(r.MemBefore), mib(r.MemAfter), n(int(r.Keys)), float64(r.MemAfter-r.MemBefore)/float64(max(r.Families, 1)))
	return b.String()
}

func mib(v int64) float64 { return float64(v) / (1 << 20) }

// n formats with thousands separators.
func n(v int) string {
	s := fmt.Sprint(v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
