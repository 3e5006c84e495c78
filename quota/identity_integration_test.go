//go:build integration

package quota

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/policy"
)

// ownRedis is a redis-server this test starts, stops and starts again
// from its RDB snapshot (the integration environment's servers are
// shared: they cannot be restarted).
type ownRedis struct {
	t    *testing.T
	addr string
	dir  string
	cmd  *exec.Cmd
}

func startOwnRedis(t *testing.T) *ownRedis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server: %v (run `make integration`)", err)
	}
	r := &ownRedis{t: t, addr: testenv.FreeAddr(t), dir: t.TempDir()}
	r.start(bin)
	t.Cleanup(r.stop)
	return r
}

func (r *ownRedis) start(bin string) {
	r.t.Helper()
	_, port, _ := net.SplitHostPort(r.addr)
	r.cmd = exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--dir", r.dir,
		"--save", "", "--appendonly", "no", "--dbfilename", "dump.rdb")
	log, err := os.Create(filepath.Join(r.dir, fmt.Sprintf("redis-%d.log", time.Now().UnixNano())))
	if err != nil {
		r.t.Fatal(err)
	}
	r.cmd.Stdout, r.cmd.Stderr = log, log
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.addr})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server on %s did not answer PING in 20 s", r.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *ownRedis) stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}

// restartFromSnapshot kills the server (kill -9: nothing saved) and starts
// it again from the snapshot SAVE wrote.
func (r *ownRedis) restartFromSnapshot() {
	r.t.Helper()
	bin := r.cmd.Path
	r.stop()
	r.start(bin)
}

// No window: a Redis node that restarted — from a snapshot of any age, a
// second old or taken just before — is stale before the next decision of
// any process, whether or not the marks recorded so far tell (the state
// marker names the node's identity its generation was named on;
// doc/architecture.md, "No window"). It failed before: process B, whose
// own marks and the counts recorded in SQL did not cover process A's
// grant of the last second, judged on the snapshot and granted 5 MB of a
// 20 MB plan A had already granted 18 MB of.
func TestRestartedNodeIsStale(t *testing.T) {
	ctx := context.Background()
	srv := startOwnRedis(t)
	now := time.Date(2026, 5, 6, 12, 0, 0, 0, time.UTC)
	engine := func() (*Engine, *redis.Client) {
		rdb := redis.NewClient(&redis.Options{Addr: srv.addr})
		t.Cleanup(func() { rdb.Close() })
		e, err := New(rdb, WithLocation(time.UTC), WithClock(func() time.Time { return now }))
		if err != nil {
			t.Fatal(err)
		}
		return e, rdb
	}
	a, rdb := engine() // process A: a synchronous-decisions instance
	gen := NewOnTouchGeneration(now, "restart")
	if _, err := a.BeginRebuild(ctx, gen); err != nil {
		t.Fatal(err)
	}
	if err := a.FinishRebuild(ctx, gen, nil); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.RestoreUnrestored(ctx, FamilyState{FamilyID: 1, Provisioned: true, Plan: 20 * mb,
		Members: []MemberState{{CustomerID: 11}, {CustomerID: 12}}, Generation: gen}, ""); err != nil || !ok {
		t.Fatalf("restore: %v, %v", ok, err)
	}
	grant := func(e *Engine, stream string, from int64, id string, cid, bytes int64) ([]Result, error) {
		return e.ApplyMarked(ctx, gen, []Mark{{Stream: stream, From: from, To: from + 1}},
			[]Event{{ID: id, FamilyID: 1, CustomerID: cid, Bytes: bytes, AppID: "app", At: now}})
	}
	if rs, err := grant(a, "decisions/a/0", 0, "g1", 11, 12*mb); err != nil || rs[0].Decision != policy.Allowed {
		t.Fatalf("A's first grant: %+v, %v", rs, err)
	}

	t.Run("a snapshot a grant older", func(t *testing.T) {
		if err := rdb.Save(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		// Within the second the counts reach SQL, A grants 6 MB more,
		// and the node restarts from the snapshot.
		if rs, err := grant(a, "decisions/a/0", 1, "g2", 11, 6*mb); err != nil || rs[0].Decision != policy.Allowed {
			t.Fatalf("A's second grant: %+v, %v", rs, err)
		}
		srv.restartFromSnapshot()
		b, _ := engine() // process B: its own slot, no count of A's recorded yet
		rs, err := grant(b, "decisions/b/0", 0, "g3", 12, 5*mb)
		if !errors.Is(err, ErrStale) {
			t.Fatalf("B judged on the restarted node: %+v, %v; want ErrStale", rs, err)
		}
		t.Logf("refused: %v", err)
	})

	t.Run("a snapshot taken just before", func(t *testing.T) {
		// A restart from a snapshot holding everything is not told apart
		// from one that lost writes: stale too (a rebuild follows).
		e, rdb := engine()
		gen2 := NewOnTouchGeneration(now, "again")
		if _, err := e.BeginRebuild(ctx, gen2); err != nil {
			t.Fatal(err)
		}
		if err := e.FinishRebuild(ctx, gen2, nil); err != nil {
			t.Fatal(err)
		}
		if err := e.CheckState(ctx, gen2, nil); err != nil {
			t.Fatalf("a new generation on the restarted node: %v", err)
		}
		if err := rdb.Save(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		srv.restartFromSnapshot()
		if err := e.CheckState(ctx, gen2, nil); !errors.Is(err, ErrStale) {
			t.Errorf("after a restart from a snapshot of now: %v, want ErrStale", err)
		}
	})

	t.Run("a rebuild the node restarted during", func(t *testing.T) {
		e, rdb := engine()
		if _, err := e.BeginRebuild(ctx, "t:during"); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Save(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		srv.restartFromSnapshot()
		if err := e.FinishRebuild(ctx, "t:during", nil); err == nil {
			t.Error("a rebuild finished on a node that restarted since it began (its restores may be lost)")
		}
	})
}

// No window: a replica promoted after a failover is stale before the next
// decision, however little it lagged: its replication id is not the one
// the generation was named on. It failed before for a replica that had
// every batch but lacked the grants of the last second that only SQL's
// counts (recorded once a second) could tell.
func TestPromotedReplicaIsStale(t *testing.T) {
	primary, replica := realReplicated(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("%s:%d:", t.Name(), time.Now().UnixNano())
	now := time.Date(2026, 5, 6, 12, 0, 0, 0, time.UTC)
	e, err := New(primary, WithKeyPrefix(prefix), WithLocation(time.UTC), WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	gen := NewOnTouchGeneration(now, "failover")
	if _, err := e.BeginRebuild(ctx, gen); err != nil {
		t.Fatal(err)
	}
	if err := e.FinishRebuild(ctx, gen, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.CheckState(ctx, gen, nil); err != nil {
		t.Fatal(err)
	}
	// The replica has it all (WAIT), and is promoted.
	if n := primary.Wait(ctx, 1, 5*time.Second).Val(); n < 1 {
		t.Fatalf("WAIT 1: %d replicas", n)
	}
	if err := replica.Do(ctx, "replicaof", "no", "one").Err(); err != nil {
		t.Fatal(err)
	}
	promoted, err := New(replica, WithKeyPrefix(prefix), WithLocation(time.UTC), WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	if err := promoted.CheckState(ctx, gen, nil); !errors.Is(err, ErrStale) {
		t.Errorf("the promoted replica: %v, want ErrStale", err)
	}
	// A rebuild on it names a generation it holds again.
	if _, err := promoted.BeginRebuild(ctx, "t:after"); err != nil {
		t.Fatal(err)
	}
	if err := promoted.FinishRebuild(ctx, "t:after", nil); err != nil {
		t.Fatal(err)
	}
	if err := promoted.CheckState(ctx, "t:after", nil); err != nil {
		t.Errorf("after its rebuild: %v", err)
	}
}
