//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/e2e"
	"github.com/dabom/dpcs/service/store"
)

// Log messages of the state guard (service/processor.go, service/recovery.go).
const (
	msgStale      = `msg="the Redis state cannot be trusted: judging paused until Redis is rebuilt from SQL"`
	msgResumes    = `msg="the Redis state is trusted again: judging resumes"`
	msgRebuilding = `msg="rebuilding Redis from SQL"`
	msgRebuilt    = `msg="Redis rebuilt from SQL"`
	msgWaiting    = `msg="recovery: another instance is rebuilding Redis; waiting"`
)

// redisState reads SQL's redis_state row.
func (h *harness) redisState(ctx context.Context) (store.RedisState, error) {
	st, err := store.New(h.db, store.WithLocation(h.eng.Location()))
	if err != nil {
		return store.RedisState{}, err
	}
	return st.RedisState(ctx)
}

// generation is the state generation SQL names ("?" when it cannot be read).
func (h *harness) generation() string {
	st, err := call(h, h.redisState)
	if err != nil {
		h.t.Errorf("read redis_state: %v", err)
		return "?"
	}
	return st.Generation
}

func (h *harness) processorLogs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var logs []string
	for _, p := range h.procs {
		logs = append(logs, p.LogPath)
	}
	for _, p := range h.judges {
		logs = append(logs, p.LogPath)
	}
	return logs
}

// redisEmpty kills redis-server and starts it at once on the same port in an
// empty directory: Redis came back with nothing.
func (h *harness) redisEmpty() {
	h.t.Helper()
	f := h.beginRedisFault()
	if err := h.redis.Kill(); err != nil {
		h.t.Fatal(err)
	}
	pid := h.redis.Process().PID()
	if err := h.redis.StartFresh(h.ctx, filepath.Join(h.dir, "redis-empty"), ""); err != nil {
		h.t.Fatal(err)
	}
	h.addServer(h.redis.Process())
	h.logf("kill -9 redis-server (pid %d), started empty on %s (pid %d, new directory)", pid, h.redis.Addr(), h.redis.Process().PID())
	h.awaitRecovery("Redis came back empty", f)
}

// redisEmptySQLDown brings Redis back empty and, as soon as the recovery
// named its generation (SQL held every judged event), stops MariaDB for
// sqlDownInRestore: the families not restored yet cannot be read, so their
// events wait (the processors retry, the gateway is refused unjudged) and
// the sweep retries; once MariaDB is back every family is restored and
// judged — none as not a member from an empty family, nobody over plan.
func (h *harness) redisEmptySQLDown() {
	h.t.Helper()
	f := h.beginRedisFault()
	if err := h.redis.Kill(); err != nil {
		h.t.Fatal(err)
	}
	if err := h.redis.StartFresh(h.ctx, filepath.Join(h.dir, "redis-empty-2"), ""); err != nil {
		h.t.Fatal(err)
	}
	h.addServer(h.redis.Process())
	f.back = time.Now()
	h.logf("kill -9 redis-server, started empty on %s (pid %d); MariaDB to be stopped once the recovery names a generation",
		h.redis.Addr(), h.redis.Process().PID())
	err := e2e.Wait{What: "the recovery to name a generation after Redis came back empty", Poll: 50 * time.Millisecond}.
		Until(h.ctx, func(ctx context.Context) (e2e.Progress, error) {
			st, err := h.redisState(ctx)
			return e2e.Progress{Done: err == nil && st.Generation != f.gen, Seen: fmt.Sprintf("generation %q", st.Generation)}, err
		})
	if err != nil {
		h.t.Fatal(err)
	}
	stop := time.Now()
	if err := h.maria.Stop(); err != nil {
		h.t.Errorf("mariadb stop: %v", err)
	}
	h.logf("generation named; mariadbd stopped in %s, for %s, while families are restored on touch and swept",
		time.Since(stop).Round(10*time.Millisecond), sqlDownInRestore)
	time.Sleep(time.Until(stop.Add(sqlDownInRestore)))
	if err := h.maria.Start(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	h.addServer(h.maria.Process())
	h.logf("mariadbd started again after %s down", time.Since(stop).Round(100*time.Millisecond))
	h.awaitRecovery("Redis came back empty, MariaDB stopped while its families were restored", f)
}

// sqlDownInRestore is how long redisEmptySQLDown stops MariaDB.
const sqlDownInRestore = 6 * time.Second

// redisSnapshot has redis-server write an RDB snapshot, lets the processors
// judge a few seconds more (progress: 2 s of traffic committed), kills it and
// starts it on the same port from that snapshot: Redis came back seconds old.
func (h *harness) redisSnapshot() {
	h.t.Helper()
	snap := filepath.Join(h.dir, "snapshot.rdb")
	at, err := h.redis.Snapshot(h.ctx, snap)
	if err != nil {
		h.t.Fatal(err)
	}
	from, err := call(h, h.committed)
	if err != nil {
		h.t.Fatal(err)
	}
	want := from + int64(2*h.cfg.Rate*float64(h.cfg.Copies))
	h.logf("BGSAVE done (LASTSAVE %s); processor group committed %d offsets; judging on until %d", at.Format(time.TimeOnly), from, want)
	var c int64
	err = e2e.Wait{What: fmt.Sprintf("the processors to commit 2 s of traffic after the snapshot (%d → %d)", from, want),
		Poll: 200 * time.Millisecond}.Until(h.ctx, func(ctx context.Context) (e2e.Progress, error) {
		var err error
		c, err = h.committed(ctx)
		return e2e.Progress{Done: err == nil && c >= want, At: c, Seen: fmt.Sprintf("committed %d", c)}, err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	f := h.beginRedisFault()
	if err := h.redis.Kill(); err != nil {
		h.t.Fatal(err)
	}
	pid := h.redis.Process().PID()
	if err := h.redis.StartFresh(h.ctx, filepath.Join(h.dir, "redis-snapshot"), snap); err != nil {
		h.t.Fatal(err)
	}
	h.addServer(h.redis.Process())
	h.logf("kill -9 redis-server (pid %d) %s after the snapshot, %d offsets committed since; started from the snapshot (pid %d)",
		pid, time.Since(at).Round(100*time.Millisecond), c-from, h.redis.Process().PID())
	h.awaitRecovery("Redis came back from a snapshot "+time.Since(at).Round(time.Second).String()+" old", f)
}

// redisFault is the state before a Redis fault.
type redisFault struct {
	// back is when Redis answered again; zero: when awaitRecovery began.
	back       time.Time
	gen        string
	stale      int // "judging paused" log lines so far
	rebuilding int
	waiting    int
}

func (h *harness) beginRedisFault() redisFault {
	logs := h.processorLogs()
	return redisFault{gen: h.generation(), stale: CountLines(logs, msgStale),
		rebuilding: CountLines(logs, msgRebuilding), waiting: CountLines(logs, msgWaiting)}
}

// awaitRecovery waits until a processor rebuilt Redis from SQL (SQL names a
// new generation) and the group commits again, checks that exactly one
// processor rebuilt, and records the recovery's figures.
func (h *harness) awaitRecovery(what string, f redisFault) {
	h.t.Helper()
	back := f.back
	if back.IsZero() {
		back = time.Now()
	}
	var st store.RedisState
	var genAt time.Time
	var committedAtGen, c int64
	logs := h.processorLogs()
	err := e2e.Wait{What: fmt.Sprintf("a processor to rebuild Redis from SQL after %s (generation %s) and the group to commit again", what, f.gen),
		Poll: 200 * time.Millisecond}.Until(h.ctx, func(ctx context.Context) (e2e.Progress, error) {
		var err error
		if st, err = h.redisState(ctx); err != nil {
			return e2e.Progress{}, err
		}
		if c, err = h.committed(ctx); err != nil {
			return e2e.Progress{}, err
		}
		stale := CountLines(logs, msgStale) - f.stale
		stage := int64(stale)
		if st.Owner != "" {
			stage += 100
		}
		if st.Generation != f.gen {
			if genAt.IsZero() {
				genAt, committedAtGen = time.Now(), c
			}
			stage += 1000
		}
		return e2e.Progress{Done: !genAt.IsZero() && c > committedAtGen, At: stage + c,
			Seen: fmt.Sprintf("%d processors reported the state stale; redis_state generation %q, lease owner %q; committed %d",
				stale, st.Generation, st.Owner, c)}, nil
	})
	if err != nil {
		h.t.Errorf("%s: %v", what, err)
		return
	}
	judging := time.Since(back)
	// The generation is named once SQL holds every judged event; each
	// family is restored by its first touch, the others by a sweep whose
	// end is logged as a whole rebuild's (and counted in redis_state).
	var rebuilt []string
	err = e2e.Wait{What: fmt.Sprintf("the sweep of generation %s to restore every family after %s", st.Generation, what),
		Poll: 200 * time.Millisecond}.Until(h.ctx, func(ctx context.Context) (e2e.Progress, error) {
		rebuilt = GrepLines(h.processorLogs(), msgRebuilt, "generation="+st.Generation+" ")
		return e2e.Progress{Done: len(rebuilt) > 0, At: int64(len(rebuilt))}, nil
	})
	if err != nil {
		h.t.Errorf("%s: %v", what, err)
		return
	}
	swept := time.Since(back)
	if st, err = call(h, h.redisState); err != nil {
		h.t.Fatal(err)
	}
	logs = h.processorLogs()
	stale := CountLines(logs, msgStale) - f.stale
	rebuilding := CountLines(logs, msgRebuilding) - f.rebuilding
	waited := CountLines(logs, msgWaiting) - f.waiting
	if stale == 0 {
		h.t.Errorf("%s: no processor logged the state stale", what)
	}
	if rebuilding != 1 || len(rebuilt) != 1 {
		h.t.Errorf("%s: %d processors began a rebuild and %d logged one for generation %s; want exactly one\n%s",
			what, rebuilding, len(rebuilt), st.Generation, strings.Join(rebuilt, "\n"))
	}
	if st.Families != int64(len(h.families)) || st.Failed != 0 {
		h.t.Errorf("%s: redis_state says %d families rebuilt, %d failed; want %d, 0", what, st.Families, st.Failed, len(h.families))
	}
	figures := ""
	if len(rebuilt) == 1 {
		figures = " (" + Fields(rebuilt[0], "families", "drain", "available", "rebuild", "total") + ")"
	}
	h.timing("%s: %d processors paused, 1 rebuilt from SQL, %d waited for it; redis_state: %d families in %s, generation named %s after Redis answered%s; judging again %s after Redis answered, every family restored %s after",
		what, stale, waited, st.Families, st.Duration, st.RebuiltAt.Sub(back).Round(100*time.Millisecond), figures,
		judging.Round(100*time.Millisecond), swept.Round(100*time.Millisecond))
}

// replicaLag is how far behind the master the replica that takes over in
// redisFailover is, and how old the snapshot of redisYoungSnapshot.
const replicaLag = time.Second

// redisFailover starts a replica of redis-server, waits until it holds
// everything (and for the rebuild its attaching causes: the master's first
// replica gives it a new replication id), detaches it (REPLICAOF NO ONE: it lags from now on), lets the
// processors, the gateways and the owners' top-ups go on for replicaLag,
// then kills the master and puts the replica's data in its place (the
// address the deployables use, as a failover's virtual address would):
// a replica a second behind took over. Nothing answered may be lost —
// the node is not the one the generation was named on, so it is stale
// before the next decision and rebuilt from SQL.
func (h *harness) redisFailover() {
	h.t.Helper()
	ports, err := FreePorts(1)
	if err != nil {
		h.t.Fatal(err)
	}
	if p := h.cfg.RedisPort; p != 0 {
		ports[0] = p + 1 // DPCS_CHAOS_REDIS_PORT's neighbour
	}
	replica, err := NewRedis(h.redis.Bin, filepath.Join(h.dir, "redis-replica"), ports[0])
	if err != nil {
		h.t.Fatal(err)
	}
	replica.ReplicaOf = fmt.Sprintf("127.0.0.1 %d", h.redis.Port)
	attach := h.beginRedisFault()
	if err := replica.Start(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	h.addServer(replica.Process())
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	defer rc.Close()
	err = e2e.Wait{What: "the replica to hold everything the master has", Poll: 50 * time.Millisecond}.
		Until(h.ctx, func(ctx context.Context) (e2e.Progress, error) {
			n, err := h.rdb.Wait(ctx, 1, 200*time.Millisecond).Result()
			return e2e.Progress{Done: err == nil && n >= 1, Seen: fmt.Sprintf("WAIT 1: %d, %v", n, err)}, nil
		})
	if err != nil {
		h.t.Fatal(err)
	}
	// A master without a replication backlog (none had a replica since it
	// started) takes a new replication id when its first replica attaches:
	// its identity changed, so the state is stale and rebuilt from SQL
	// (doc/runbook.md, "Redis replicas"). The lag is measured from a
	// trusted state again.
	h.logf("replica %s attached and in sync: the master's replication id is new", replica.Addr())
	h.awaitRecovery("the first replica attached to the master", attach)
	err = e2e.Wait{What: "the replica to hold everything the master has after the rebuild", Poll: 50 * time.Millisecond}.
		Until(h.ctx, func(ctx context.Context) (e2e.Progress, error) {
			n, err := h.rdb.Wait(ctx, 1, 200*time.Millisecond).Result()
			return e2e.Progress{Done: err == nil && n >= 1, Seen: fmt.Sprintf("WAIT 1: %d, %v", n, err)}, nil
		})
	if err != nil {
		h.t.Fatal(err)
	}
	f := h.beginRedisFault()
	if err := rc.Do(h.ctx, "replicaof", "no", "one").Err(); err != nil {
		h.t.Fatal(err)
	}
	from, _ := call(h, h.committed)
	detached := time.Now()
	time.Sleep(replicaLag)
	c, _ := call(h, h.committed)
	snap := filepath.Join(h.dir, "replica.rdb")
	if _, err := replica.Snapshot(h.ctx, snap); err != nil {
		h.t.Fatal(err)
	}
	if err := h.redis.Kill(); err != nil {
		h.t.Fatal(err)
	}
	replica.Stop()
	if err := h.redis.StartFresh(h.ctx, filepath.Join(h.dir, "redis-failover"), snap); err != nil {
		h.t.Fatal(err)
	}
	h.addServer(h.redis.Process())
	h.logf("a replica detached %s before the master was killed (%d offsets committed meanwhile) took over %s (pid %d)",
		time.Since(detached).Round(10*time.Millisecond), c-from, h.redis.Addr(), h.redis.Process().PID())
	h.awaitRecovery(fmt.Sprintf("a replica %s behind took over", replicaLag), f)
}

// redisYoungSnapshot is redisSnapshot with a snapshot replicaLag old: within
// the second the marks reach SQL, the window the node's identity closes.
func (h *harness) redisYoungSnapshot() {
	h.t.Helper()
	snap := filepath.Join(h.dir, "snapshot-young.rdb")
	at, err := h.redis.Snapshot(h.ctx, snap)
	if err != nil {
		h.t.Fatal(err)
	}
	taken := time.Now()
	time.Sleep(replicaLag)
	f := h.beginRedisFault()
	if err := h.redis.Kill(); err != nil {
		h.t.Fatal(err)
	}
	if err := h.redis.StartFresh(h.ctx, filepath.Join(h.dir, "redis-snapshot-young"), snap); err != nil {
		h.t.Fatal(err)
	}
	h.addServer(h.redis.Process())
	h.logf("kill -9 redis-server %s after a snapshot (LASTSAVE %s); started from it (pid %d)",
		time.Since(taken).Round(10*time.Millisecond), at.Format(time.TimeOnly), h.redis.Process().PID())
	h.awaitRecovery("Redis came back from a snapshot "+replicaLag.String()+" old", f)
}
