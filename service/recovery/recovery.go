package recovery

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/backoff"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/outbox"
	"github.com/dabom/dpcs/service/store"
	"github.com/dabom/dpcs/writebehind"
)

// RebuildFunc rebuilds every family's Redis state from SQL, restored by
// generation gen (Rebuild).
type RebuildFunc func(ctx context.Context, gen string) (Report, error)

// Info describes a finished rebuild, for Config.OnRecovered.
type Info struct {
	Generation string
	Reason     string
	// Drain is how long it took until SQL held every judged event; Rebuild
	// how long rebuilding the families took; Total the whole recovery.
	// Available is how long after the start judging could go on: in a
	// generation restored on touch (OnTouch) once SQL held every judged
	// event (each family is restored by its first touch, or by the sweep
	// that Rebuild times), else the whole recovery.
	Drain, Rebuild, Total, Available time.Duration
	// OnTouch: the generation was named before its families were restored
	// (judge.State.RestoresOnTouch).
	OnTouch          bool
	Families, Failed int
	// Report lists the families that could not be rebuilt.
	Report Report
}

// Config configures a Guard. Store, State, Admin and Rebuild are required.
type Config struct {
	Store   *store.Store
	State   *judge.State
	Admin   *kadm.Client
	Rebuild RebuildFunc
	// Manual leaves the rebuild to an operator (`server rebuild`): the
	// processors stay paused until SQL names a new generation. Default: automatic.
	Manual bool
	// Owner names this instance in the rebuild lease. Default: a random id.
	Owner string
	// Quiet is how long the processors' committed offsets and usage-persist
	// must stay unchanged (with the write-behind caught up) before SQL is
	// taken to hold every judged event. Default: 3 s.
	Quiet time.Duration
	// Lease is how long the rebuild lease lasts without renewal. Default: 30 s.
	Lease time.Duration
	// WriteBehindGroup is the write-behind's consumer group. Default: writebehind.DefaultGroup.
	WriteBehindGroup string
	// Logger: default discard.
	Logger *slog.Logger
	// OnRecovered is called after every rebuild this instance ran.
	OnRecovered func(Info)
}

// Guard is the processor's judge.StateGuard: it knows the state generation SQL
// names and, when the engine reports Redis stale, rebuilds Redis from SQL —
// one instance at a time (a lease row in SQL), only once every judged event
// is in SQL — and writes the new generation. Safe for concurrent use.
type Guard struct {
	cfg Config
	log *slog.Logger

	mu  sync.Mutex // one recovery at a time in this process
	gmu sync.Mutex
	gen string // cached generation; "" = unknown

	// The sweeps of generations restored on touch run in the background
	// until done, their generation is replaced, or Close.
	life   context.Context
	stop   context.CancelFunc
	sweeps sync.WaitGroup
}

var _ judge.StateGuard = (*Guard)(nil)

// New returns a Guard.
func New(cfg Config) (*Guard, error) {
	if cfg.Store == nil || cfg.State == nil || cfg.Admin == nil || cfg.Rebuild == nil {
		return nil, errors.New("recovery: a guard needs a store, a quota state, a kafka admin client and a rebuild function")
	}
	if cfg.Owner == "" {
		cfg.Owner = "recovery-" + randomID()
	}
	if cfg.Quiet <= 0 {
		cfg.Quiet = 3 * time.Second
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.WriteBehindGroup == "" {
		cfg.WriteBehindGroup = writebehind.DefaultGroup
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Guard{cfg: cfg, log: log}
	g.life, g.stop = context.WithCancel(context.Background())
	return g, nil
}

// Close stops a sweep running in the background (its families are restored
// on touch) and waits for it.
func (r *Guard) Close() {
	r.stop()
	r.sweeps.Wait()
}

// Wait waits until no sweep runs in the background.
func (r *Guard) Wait() { r.sweeps.Wait() }

func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Generation returns the generation SQL names (cached after the first read).
func (r *Guard) Generation(ctx context.Context) (string, error) {
	r.gmu.Lock()
	gen := r.gen
	r.gmu.Unlock()
	if gen != "" {
		return gen, nil
	}
	st, err := r.cfg.Store.RedisState(ctx)
	if err != nil {
		return "", err
	}
	r.gmu.Lock()
	defer r.gmu.Unlock()
	if r.gen == "" { // a recovery may have set a newer one meanwhile
		r.gen = st.Generation
	}
	return r.gen, nil
}

func (r *Guard) setGen(gen string) {
	r.gmu.Lock()
	r.gen = gen
	r.gmu.Unlock()
}

// recoverBackoff paces Recover's looks at SQL while it waits for a rebuild.
var recoverBackoff = backoff.Policy{Min: 250 * time.Millisecond, Max: 2 * time.Second}

// Recover brings Redis back after the engine reported it stale for a batch
// judged with generation used: when SQL already names another generation
// (another instance or an operator rebuilt), it returns that one; else it
// takes the rebuild lease and rebuilds (or, Manual, waits for an operator;
// or waits for the instance holding the lease). It returns only with a
// generation to judge with, or ctx's error.
func (r *Guard) Recover(ctx context.Context, used string, cause error) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	waiting := time.Time{}
	for attempt := 0; ; attempt++ {
		st, err := r.cfg.Store.RedisState(ctx)
		var un *quota.UnrestoredError
		switch {
		case err != nil:
			r.log.Warn("recovery: reading redis_state", "err", err)
		case st.Generation != used:
			r.setGen(st.Generation)
			return st.Generation, nil
		case attempt == 0 && errors.As(cause, &un) && un.Generation == used && r.cfg.State.RestoresOnTouch():
			// The caller's door does not restore on touch: this one
			// restores the families its judgement met, and it judges again.
			if err := r.cfg.State.RestoreOnTouch(ctx, used, un.Seen); err != nil {
				r.log.Warn("recovery: restoring families on touch", "families", len(un.Families), "err", err)
				break
			}
			return used, nil
		case r.cfg.Manual:
			if waiting.IsZero() || time.Since(waiting) > time.Minute {
				waiting = time.Now()
				r.log.Error("recovery is manual: waiting for an operator to rebuild Redis from SQL (`server rebuild`)", "cause", cause)
			}
		default:
			ok, err := r.cfg.Store.AcquireRebuild(ctx, r.cfg.Owner, used, r.cfg.Lease)
			if err != nil {
				r.log.Warn("recovery: rebuild lease", "err", err)
				break
			}
			if !ok {
				if waiting.IsZero() || time.Since(waiting) > 30*time.Second {
					waiting = time.Now()
					r.log.Warn("recovery: another instance is rebuilding Redis; waiting", "owner", st.Owner)
				}
				break
			}
			info, err := r.rebuild(ctx, used, fmt.Sprint(cause), true, false)
			if err == nil && info.OnTouch {
				r.sweepLater(ctx, info)
			}
			if err == nil || errors.Is(err, ErrIncomplete) {
				return info.Generation, nil
			}
			_ = r.cfg.Store.ReleaseRebuild(context.WithoutCancel(ctx), r.cfg.Owner)
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			r.log.Error("recovery: rebuild failed; trying again", "err", err)
		}
		if err := backoff.Sleep(ctx, recoverBackoff.Delay(attempt+1)); err != nil {
			return "", err
		}
	}
}

// rebuild runs one rebuild under the lease: mark the state as being rebuilt,
// wait until SQL holds every judged event (unless !drain), rebuild every
// family with a new generation, write it to Redis (with the processors'
// committed offsets as watermarks) and to SQL.
// A planned rebuild (a start, an operator's command) is logged at INFO; one
// forced by an untrusted Redis state at ERROR, then WARN when done.
//
// With a door that restores on touch (judge.State.RestoresOnTouch) the new
// generation is restored on touch (quota.OnTouch) and named as soon as SQL
// holds every judged event: the families are restored by their first
// judgement or write, or by the sweep (Guard.sweep) the caller runs next;
// the returned Info has OnTouch set and no family counts yet.
func (r *Guard) rebuild(ctx context.Context, prev, reason string, drain, planned bool) (Info, error) {
	start := time.Now()
	onTouch := r.cfg.State.RestoresOnTouch()
	next := "g" + strconv.FormatInt(time.Now().UnixMilli(), 36) + "-" + randomID()
	if onTouch {
		next = quota.NewOnTouchGeneration(time.Now(), randomID())
	}
	begun, done := slog.LevelError, slog.LevelWarn
	if planned {
		begun, done = slog.LevelInfo, slog.LevelInfo
	}
	// Logged once the rebuild began: a begin that failed (Redis refusing a
	// connection as it restarts) is the caller's "rebuild failed; trying
	// again", and another instance may take the lease meanwhile.
	if _, err := r.cfg.State.BeginRebuild(ctx, next); err != nil {
		return Info{}, err
	}
	r.log.Log(ctx, begun, "rebuilding Redis from SQL", "generation", next, "previous", prev, "reason", reason)
	// Rebuilding may outlast the lease: keep it, and stop (never finish) if
	// another instance took it meanwhile.
	rctx, keep := r.keepLease(ctx, prev)
	defer keep.stop()
	if onTouch {
		return r.nameOnTouch(ctx, rctx, keep, start, prev, next, reason, drain, done)
	}
	var drained time.Time
	var rep Report
	var rerr error
	var committed map[string]int64
	for {
		var ends map[string]int64
		var err error
		if ends, committed, err = r.drainUnderLease(ctx, rctx, keep, drain); err != nil {
			return Info{}, err
		}
		drained = time.Now()
		rep, rerr = r.cfg.Rebuild(rctx, next)
		if err := keep.lost(ctx); err != nil {
			return Info{}, err
		}
		if rerr != nil && !errors.Is(rerr, ErrIncomplete) {
			return Info{}, rerr
		}
		if !drain {
			break
		}
		// Whatever reached Kafka or was committed after the drain ended was
		// not in SQL when the families were read (a producer slower than the
		// quiet window): rebuild again rather than miss it.
		ends2, err := r.ends(rctx, envelope.TopicUsagePersist)
		if err != nil {
			return Info{}, err
		}
		proc2, err := r.committed(rctx, judge.ProcessorGroup, judge.ProcessorTopics()...)
		if err != nil {
			return Info{}, err
		}
		// A decision's records spooled to the outbox (Kafka down) after the
		// drain ended are not in usage_record either.
		spooled, err := outbox.Pending(rctx, r.cfg.Store.DB(), envelope.TopicUsagePersist)
		if err != nil {
			return Info{}, err
		}
		if maps.Equal(ends, ends2) && maps.Equal(committed, proc2) && spooled == 0 {
			break
		}
		r.log.Warn("recovery: judged events reached Kafka while Redis was rebuilt; rebuilding again")
	}
	for _, f := range rep.Failed {
		r.log.Error("rebuild: family not restored from sql (doc/runbook.md)", "familyId", f.FamilyID, "err", f.Err)
	}
	if err := keep.lost(ctx); err != nil { // last look before the marker names next
		return Info{}, err
	}
	if err := r.cfg.State.FinishRebuild(ctx, next, committed); err != nil {
		return Info{}, err
	}
	info := Info{Generation: next, Reason: reason, Drain: drained.Sub(start), Rebuild: time.Since(drained),
		Total: time.Since(start), Families: rep.Rebuilt, Failed: len(rep.Failed), Report: rep}
	info.Available = info.Total
	if err := r.cfg.Store.RebuildDone(ctx, r.cfg.Owner, next, store.RedisState{Reason: reason,
		Families: int64(info.Families), Failed: int64(info.Failed), Duration: info.Total}); err != nil {
		return Info{}, err
	}
	r.setGen(next)
	// The family-write marks of earlier generations count writes the new
	// one holds by its rebuild; left behind they would only take room.
	if err := r.cfg.Store.DropRedisMarks(ctx, next); err != nil {
		r.log.Warn("recovery: dropping the earlier generations' family-write marks", "err", err)
	}
	r.log.Log(ctx, done, "Redis rebuilt from SQL", "generation", next, "families", info.Families, "failed", info.Failed,
		"drain", info.Drain, "rebuild", info.Rebuild, "total", info.Total)
	if r.cfg.OnRecovered != nil {
		r.cfg.OnRecovered(info)
	}
	return info, rerr
}

// nameOnTouch ends a rebuild to generation next, restored on touch: once
// SQL holds every judged event (the drain) the markers and SQL name next,
// with no family restored yet.
func (r *Guard) nameOnTouch(ctx, rctx context.Context, keep *leaseKeeper, start time.Time, prev, next, reason string, drain bool, done slog.Level) (Info, error) {
	_, committed, err := r.drainUnderLease(ctx, rctx, keep, drain)
	if err != nil {
		return Info{}, err
	}
	drained := time.Now()
	if err := keep.lost(ctx); err != nil { // last look before the marker names next
		return Info{}, err
	}
	if err := r.cfg.State.FinishRebuild(ctx, next, committed); err != nil {
		return Info{}, err
	}
	info := Info{Generation: next, Reason: reason, Drain: drained.Sub(start), OnTouch: true}
	info.Available = time.Since(start)
	if err := r.cfg.Store.RebuildDone(ctx, r.cfg.Owner, next, store.RedisState{Reason: reason, Duration: info.Available}); err != nil {
		return Info{}, err
	}
	// The sweep counts from now (its caller runs it and marks it done):
	// whoever judges with next and then waits (Wait) waits for it too.
	r.sweeps.Add(1)
	r.setGen(next)
	if err := r.cfg.Store.DropRedisMarks(ctx, next); err != nil {
		r.log.Warn("recovery: dropping the earlier generations' family-write marks", "err", err)
	}
	r.log.Log(ctx, done, "Redis state named from SQL; judging again",
		"generation", next, "previous", prev, "drain", info.Drain, "available", info.Available,
		"restore", "each family on its first touch, the others by a sweep in the background")
	return info, nil
}

// sweepBackoff paces a sweep's attempts after a failure.
var sweepBackoff = backoff.Policy{Min: 250 * time.Millisecond, Max: 5 * time.Second}

// sweep restores every family of a generation restored on touch that no
// judgement or write restored first (RebuildFunc; Rebuild with such a
// generation never overwrites one), retrying with backoff until it is done,
// SQL names another generation, or ctx ends; then it records the counts
// (store.SweepDone), logs the families that failed and calls OnRecovered.
func (r *Guard) sweep(ctx context.Context, info Info) (Info, error) {
	begun := time.Now()
	for attempt := 1; ; attempt++ {
		rep, err := r.cfg.Rebuild(ctx, info.Generation)
		if err == nil || errors.Is(err, ErrIncomplete) {
			info.Report, info.Families, info.Failed = rep, rep.Rebuilt, len(rep.Failed)
			info.Rebuild = time.Since(begun)
			info.Total = info.Available + info.Rebuild
			for _, f := range rep.Failed {
				r.log.Error("rebuild: family not restored from sql (doc/runbook.md)", "familyId", f.FamilyID, "err", f.Err)
			}
			if serr := r.cfg.Store.SweepDone(ctx, info.Generation, store.RedisState{Families: int64(info.Families),
				Failed: int64(info.Failed), Duration: info.Total}); serr != nil {
				r.log.Warn("recovery: recording the sweep", "err", serr)
			}
			// The message of a whole rebuild's end: the same tools read both.
			r.log.Info("Redis rebuilt from SQL", "generation", info.Generation, "families", info.Families,
				"failed", info.Failed, "drain", info.Drain, "rebuild", info.Rebuild, "available", info.Available, "total", info.Total)
			if r.cfg.OnRecovered != nil {
				r.cfg.OnRecovered(info)
			}
			return info, err
		}
		if ctx.Err() != nil {
			return info, ctx.Err()
		}
		if st, serr := r.cfg.Store.RedisState(ctx); serr == nil && st.Generation != info.Generation {
			r.log.Info("recovery: sweep ends: another generation was named", "generation", info.Generation, "now", st.Generation)
			return info, nil
		}
		if errors.Is(err, quota.ErrStale) {
			// A node's marker names another generation or none (Redis lost
			// its data again, or a rebuild began): the next judgement finds
			// it stale and a recovery names a new generation.
			r.log.Warn("recovery: sweep ends: the Redis state changed under it", "generation", info.Generation, "err", err)
			return info, err
		}
		r.log.Warn("recovery: sweep failed; its families are restored on touch meanwhile; trying again", "attempt", attempt, "err", err)
		if err := backoff.Sleep(ctx, sweepBackoff.Delay(attempt)); err != nil {
			return info, err
		}
	}
}

// sweepLater runs sweep in the background until it is done, ctx ends or
// Close.
func (r *Guard) sweepLater(ctx context.Context, info Info) {
	sctx, cancel := context.WithCancel(r.life)
	stop := context.AfterFunc(ctx, cancel)
	go func() { // counted in sweeps by nameOnTouch
		defer r.sweeps.Done()
		defer cancel()
		defer stop()
		if _, err := r.sweep(sctx, info); err != nil && sctx.Err() == nil {
			r.log.Error("recovery: sweep", "err", err)
		}
	}()
}

// errLeaseLost: another instance holds the rebuild lease now.
var errLeaseLost = errors.New("recovery: recovery lost its rebuild lease (another instance took it after it expired)")

// Mode says who rebuilds Redis from SQL when a Guard finds it stale.
type Mode int

const (
	// Automatic: the Guard does, one instance at a time (the lease).
	Automatic Mode = iota
	// Manual: an operator does (`server rebuild`); judging stays paused
	// until SQL names a new generation (Config.Manual).
	Manual
)

// NewDeployable builds the Guard of a processor deployable: the
// SQL store on db, a Kafka admin client of its own on kopts (closed by the
// returned func), and Rebuild as the rebuild; mode says who rebuilds,
// log and onRecovered are Config's Logger and OnRecovered (nil: none).
func NewDeployable(qs *judge.State, db *sql.DB, kopts []kgo.Opt, log *slog.Logger, mode Mode, onRecovered func(Info)) (*Guard, func(), error) {
	st, err := store.New(db, store.WithLocation(qs.Location()))
	if err != nil {
		return nil, nil, err
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, nil, fmt.Errorf("recovery: recovery kafka client: %w", err)
	}
	r, err := New(Config{Store: st, State: qs, Admin: kadm.NewClient(cl), Manual: mode == Manual, Logger: log,
		OnRecovered: onRecovered,
		Rebuild: func(ctx context.Context, gen string) (Report, error) {
			return Rebuild(ctx, st, qs, gen)
		}})
	if err != nil {
		cl.Close()
		return nil, nil, err
	}
	return r, func() { r.Close(); cl.Close() }, nil
}

// Bootstrap rebuilds Redis from SQL now, as a new generation, without waiting
// for the write-behind: for a start with an empty embedded Redis, before any
// worker runs. The error wraps ErrIncomplete when some families
// failed (listed in the info's report).
func (r *Guard) Bootstrap(ctx context.Context, reason string) (Info, error) {
	return r.rebuildNow(ctx, reason, false)
}

// RebuildNow is an operator's rebuild (`server rebuild`): under the lease,
// with every processor paused by the state marker and SQL drained, as a
// recovery does.
func (r *Guard) RebuildNow(ctx context.Context, reason string) (Info, error) {
	return r.rebuildNow(ctx, reason, true)
}

func (r *Guard) rebuildNow(ctx context.Context, reason string, drain bool) (Info, error) {
	info, err := r.nameNow(ctx, reason, drain)
	if err == nil && info.OnTouch {
		// Judging goes on meanwhile (and a recovery may run: the sweep
		// holds no lock); the caller wants every family.
		defer r.sweeps.Done() // counted by nameOnTouch
		return r.sweep(ctx, info)
	}
	return info, err
}

// nameNow is rebuildNow up to the new generation's naming (the whole
// rebuild without a door that restores on touch).
func (r *Guard) nameNow(ctx context.Context, reason string, drain bool) (Info, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, err := r.cfg.Store.RedisState(ctx)
	if err != nil {
		return Info{}, err
	}
	ok, err := r.cfg.Store.AcquireRebuild(ctx, r.cfg.Owner, st.Generation, r.cfg.Lease)
	if err != nil {
		return Info{}, err
	}
	if !ok {
		return Info{}, fmt.Errorf("recovery: another instance (%s) is rebuilding Redis", st.Owner)
	}
	info, err := r.rebuild(ctx, st.Generation, reason, drain, true)
	if err != nil && !errors.Is(err, ErrIncomplete) {
		_ = r.cfg.Store.ReleaseRebuild(context.WithoutCancel(ctx), r.cfg.Owner)
	}
	return info, err
}

// fenceRounds bounds how often RebuildFamilies fences a family again when a
// family change claimed it while it waited.
const fenceRounds = 3

// RebuildFamilies is an operator's rebuild of named families (`server
// rebuild <ids>`), in the generation SQL names: each family is fenced
// first (judge.State.Fence: judged no more), then SQL is drained as a
// recovery does (every event judged before the fence is in SQL), and only
// then is each restored from SQL (judge.State.RestoreClaimed), so no event
// judged but not yet in SQL is dropped and none is judged on the state the
// restore replaces. A family a change claimed meanwhile is fenced and
// restored again; one that keeps moving is reported failed. Without a
// generation (never rebuilt) the families are restored as Rebuild does.
func (r *Guard) RebuildFamilies(ctx context.Context, ids ...int64) (Report, error) {
	var rep Report
	st, err := r.cfg.Store.RedisState(ctx)
	if err != nil {
		return rep, err
	}
	if st.Generation == "" {
		return Rebuild(ctx, r.cfg.Store, r.cfg.State, "", ids...)
	}
	left := slices.Clone(ids)
	for round := 0; len(left) > 0; round++ {
		tokens := map[int64]string{}
		for _, fid := range left {
			if tokens[fid], err = r.cfg.State.Fence(ctx, fid); err != nil {
				return rep, fmt.Errorf("recovery: fencing family %d: %w", fid, err)
			}
		}
		if _, _, err := r.drain(ctx); err != nil {
			return rep, err
		}
		var moved []int64
		for ids := left; len(ids) > 0; {
			n := min(len(ids), rebuildNamed)
			states, bad, err := r.cfg.Store.ReadFamilies(ctx, r.cfg.State, ids[:n], false)
			if err != nil {
				return rep, fmt.Errorf("recovery: rebuild: reading SQL: %w", err)
			}
			for _, fid := range ids[:n] {
				fam, ok := states[fid]
				if e, isBad := bad[fid]; isBad || !ok {
					ok = false
					if e == nil {
						e = fmt.Errorf("family %d: not in SQL", fid)
					}
					rep.Failed = append(rep.Failed, FamilyError{FamilyID: fid, Err: e})
					fam = quota.FamilyState{FamilyID: fid}
				}
				fam.Generation = st.Generation
				err := r.cfg.State.RestoreClaimed(ctx, fam, tokens[fid])
				switch {
				case !ok: // failed above; restored empty, as a rebuild does
				case errors.Is(err, quota.ErrMoved) && round+1 < fenceRounds:
					moved = append(moved, fid)
				case err != nil:
					rep.Failed = append(rep.Failed, FamilyError{FamilyID: fid, Err: err})
				default:
					rep.Rebuilt++
				}
			}
			ids = ids[n:]
		}
		left = moved
	}
	return rep, rep.err()
}
