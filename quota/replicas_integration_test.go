//go:build integration

package quota

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
)

// realReplicated returns clients of the primary and its one replica started by
// `make integration` (DPCS_TEST_REDIS_PRIMARY_ADDR, DPCS_TEST_REDIS_REPLICA_ADDR).
// The replica is attached and in sync when it returns and when the test ends.
func realReplicated(tb testing.TB) (primary, replica *redis.Client) {
	tb.Helper()
	pa, ra := os.Getenv("DPCS_TEST_REDIS_PRIMARY_ADDR"), os.Getenv("DPCS_TEST_REDIS_REPLICA_ADDR")
	if pa == "" || ra == "" {
		tb.Fatal("DPCS_TEST_REDIS_PRIMARY_ADDR and DPCS_TEST_REDIS_REPLICA_ADDR are not set (run `make integration`)")
	}
	primary, replica = redis.NewClient(&redis.Options{Addr: pa}), redis.NewClient(&redis.Options{Addr: ra})
	tb.Cleanup(func() { primary.Close(); replica.Close() })
	attach(tb, primary, replica)
	tb.Cleanup(func() { attach(tb, primary, replica) })
	return primary, replica
}

// attach makes replica replicate primary and waits until it is in sync.
func attach(tb testing.TB, primary, replica *redis.Client) {
	tb.Helper()
	ctx := context.Background()
	host, port, _ := strings.Cut(primary.Options().Addr, ":")
	if err := replica.Do(ctx, "replicaof", host, port).Err(); err != nil {
		tb.Fatalf("replicaof: %v", err)
	}
	var n int64
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		// WAIT 1 on a fresh write: the replica is attached and has it all.
		if err := primary.Set(ctx, "replica-test:attached", time.Now().UnixNano(), time.Minute).Err(); err != nil {
			tb.Fatal(err)
		}
		if n = primary.Wait(ctx, 1, 100*time.Millisecond).Val(); n >= 1 {
			return
		}
	}
	info, _ := replica.Info(ctx, "replication").Result()
	tb.Fatalf("replica %s did not catch up with %s in 20s (WAIT 1 answered %d); replica says:\n%s",
		replica.Options().Addr, primary.Options().Addr, n, info)
}

// sameKeys fails unless every key under prefix on primary has the same value
// on replica.
func sameKeys(t *testing.T, primary, replica *redis.Client, prefix string) {
	t.Helper()
	ctx := context.Background()
	ks, err := primary.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(ks) == 0 {
		t.Fatalf("no keys under %q", prefix)
	}
	for _, k := range ks {
		// The replica-ack barrier lives a second: it may expire on either
		// side between KEYS and DUMP, and it is no state of the engine's.
		if ttl, err := primary.PTTL(ctx, k).Result(); err != nil {
			t.Fatal(err)
		} else if ttl == -2 || ttl > 0 && ttl <= time.Second {
			continue
		}
		want, err := primary.Dump(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			continue // expired since PTTL
		}
		if err != nil {
			t.Fatal(err)
		}
		got, err := replica.Dump(ctx, k).Result()
		if err != nil || got != want {
			t.Errorf("key %s: the replica has %q (%v), the primary %q", k, got, err, want)
		}
	}
}

func TestReplicaAck(t *testing.T) {
	primary, replica := realReplicated(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("%s:%d:", t.Name(), time.Now().UnixNano())
	var mu sync.Mutex
	var infos []ApplyInfo
	engine := func(replicas int, timeout time.Duration) *Engine {
		e, err := New(primary, WithKeyPrefix(prefix), WithReplicaAck(replicas, timeout),
			WithHooks(Hooks{OnApply: func(i ApplyInfo) { mu.Lock(); infos = append(infos, i); mu.Unlock() }}))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	lastInfo := func() ApplyInfo { mu.Lock(); defer mu.Unlock(); return infos[len(infos)-1] }
	plain, err := New(primary, WithKeyPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	provision(t, plain, 100, 101)
	batch := func(name string, n int) []Event {
		evs := ackEvents(t, n)
		for i := range evs {
			evs[i].ID = fmt.Sprintf("evt_%s%d", name, i)
		}
		return evs
	}
	notReplicated := func(t *testing.T, err error, took time.Duration, want NotReplicatedError) {
		t.Helper()
		var nr *NotReplicatedError
		if !errors.As(err, &nr) {
			t.Fatalf("got %v, want a *NotReplicatedError", err)
		}
		if diff := cmp.Diff(want, *nr); diff != "" {
			t.Errorf("error (-want +got):\n%s", diff)
		}
		if took < want.Timeout {
			t.Errorf("returned after %v, before WAIT's timeout %v", took, want.Timeout)
		}
	}

	t.Run("acknowledged", func(t *testing.T) {
		e := engine(1, 2*time.Second)
		res, err := e.ApplyBatch(ctx, batch("ok", 8))
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Duplicate || lastInfo().Replicas != 1 {
			t.Errorf("got %+v and ApplyInfo %+v, want a new result and Replicas 1", res[0], lastInfo())
		}
		// At once: WAIT returned after the replica had the writes.
		sameKeys(t, primary, replica, prefix)
	})

	// The API's family writes wait for the replica too: acknowledged, the
	// replica holds them at once; asking for more replicas than there are,
	// each is a NotReplicatedError after WAIT's timeout, the write made on
	// the primary.
	t.Run("family writes", func(t *testing.T) {
		e := engine(1, 2*time.Second)
		if _, err := e.SetPlan(ctx, 102, 5*gb); err != nil {
			t.Fatal(err)
		}
		if err := e.AddMember(ctx, 102, 7); err != nil {
			t.Fatal(err)
		}
		sameKeys(t, primary, replica, prefix)
		two := engine(2, time.Second)
		start := time.Now()
		err := two.RemoveMember(ctx, 102, 7)
		notReplicated(t, err, time.Since(start), NotReplicatedError{Addr: primary.Options().Addr, Acked: 1, Want: 2, Timeout: time.Second})
		fam, err := plain.Family(ctx, 102)
		if err != nil {
			t.Fatal(err)
		}
		if len(fam.Members) != 0 {
			t.Errorf("members after the unacknowledged removal: %+v, want none (made on the primary)", fam.Members)
		}
	})

	t.Run("fewer replicas than asked", func(t *testing.T) {
		e := engine(2, time.Second)
		start := time.Now()
		_, err := e.ApplyBatch(ctx, batch("two", 4))
		notReplicated(t, err, time.Since(start), NotReplicatedError{Addr: primary.Options().Addr, Acked: 1, Want: 2, Timeout: time.Second})
		if lastInfo().Replicas != 1 {
			t.Errorf("ApplyInfo %+v, want Replicas 1", lastInfo())
		}
	})

	t.Run("replica detached then back", func(t *testing.T) {
		e := engine(1, 100*time.Millisecond)
		evs := batch("detached", 8)
		if err := replica.Do(ctx, "replicaof", "no", "one").Err(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err := e.ApplyBatch(ctx, evs)
		notReplicated(t, err, time.Since(start), NotReplicatedError{Addr: primary.Options().Addr, Acked: 0, Want: 1, Timeout: 100 * time.Millisecond})
		// Applied on the primary: the stored results a retry must return.
		want, err := plain.ApplyBatch(ctx, evs)
		if err != nil {
			t.Fatal(err)
		}
		// A retry while the replica is away fails again.
		start = time.Now()
		_, err = e.ApplyBatch(ctx, evs)
		notReplicated(t, err, time.Since(start), NotReplicatedError{Addr: primary.Options().Addr, Acked: 0, Want: 1, Timeout: 100 * time.Millisecond})

		host, port, _ := strings.Cut(primary.Options().Addr, ":")
		if err := replica.Do(ctx, "replicaof", host, port).Err(); err != nil {
			t.Fatal(err)
		}
		// Retry as the processor does until the replica is back (a full
		// resync here: the detached replica took a new replication id).
		var got []Result
		tries, deadline := 0, time.Now().Add(20*time.Second)
		for got == nil && time.Now().Before(deadline) {
			tries++
			if got, err = e.ApplyBatch(ctx, evs); err != nil && !errors.Is(err, ErrNotReplicated) {
				t.Fatal(err)
			}
		}
		if got == nil {
			t.Fatalf("no retry was acknowledged in 20s (%d tries); last error: %v", tries, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("retry results (-stored +got):\n%s", diff)
		}
		for i, r := range got {
			if !r.Duplicate {
				t.Errorf("event %d: not a duplicate on retry", i)
			}
		}
		sameKeys(t, primary, replica, prefix)
	})

	// A replay retried on another connection (another processor, or a pool
	// connection that made no write) while the replica is attached but
	// behind: WAIT must cover the writes made earlier on the first
	// connection. A WAIT alone on a fresh connection answers 1 at once here
	// (the connection's write offset is 0). Redis 7.0.15 moves a connection's
	// offset with every command, so the replayed scripts alone would do; a
	// Redis that moves it only on writes needs the engine's barrier write.
	t.Run("replay on a fresh connection while the replica lags", func(t *testing.T) {
		e := engine(1, 100*time.Millisecond)
		evs := batch("lag", 8)
		const sleep = 2 * time.Second
		slept := make(chan error, 1)
		start := time.Now()
		go func() { slept <- replica.Do(ctx, "debug", "sleep", sleep.Seconds()).Err() }()
		// The replica is asleep once it stops acknowledging.
		for attached := true; attached; {
			if time.Since(start) > sleep/2 {
				// A loaded machine may run the replica's DEBUG SLEEP late: no
				// lag to test against (the other subtests detach it instead).
				t.Skipf("the replica kept acknowledging for %v after DEBUG SLEEP: could not make it lag", sleep/2)
			}
			if err := primary.Set(ctx, prefix+"probe", 1, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			attached = primary.Wait(ctx, 1, 20*time.Millisecond).Val() == 1
		}
		_, err := e.ApplyBatch(ctx, evs)
		notReplicated(t, err, 100*time.Millisecond, NotReplicatedError{Addr: primary.Options().Addr, Acked: 0, Want: 1, Timeout: 100 * time.Millisecond})
		fresh := redis.NewClient(&redis.Options{Addr: primary.Options().Addr})
		defer fresh.Close()
		e2, err := New(fresh, WithKeyPrefix(prefix), WithReplicaAck(1, 100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		_, err = e2.ApplyBatch(ctx, evs)
		if took := time.Since(start); took > sleep-200*time.Millisecond {
			t.Skipf("the replica's sleep was nearly over (%v of %v): the test would prove nothing", took, sleep)
		}
		notReplicated(t, err, 100*time.Millisecond, NotReplicatedError{Addr: primary.Options().Addr, Acked: 0, Want: 1, Timeout: 100 * time.Millisecond})
		if err := <-slept; err != nil {
			t.Fatalf("debug sleep on the replica (it needs --enable-debug-command local): %v", err)
		}
	})
}

// On a cluster, every master that judged events of the batch gets WAIT on
// the connection that ran them. The cluster of `make integration` has one
// replica per master (DPCS_TEST_REDIS_CLUSTER_REPLICAS).
func TestReplicaAckCluster(t *testing.T) {
	addrs := os.Getenv("DPCS_TEST_REDIS_CLUSTER")
	if addrs == "" || os.Getenv("DPCS_TEST_REDIS_CLUSTER_REPLICAS") == "" {
		t.Fatal("DPCS_TEST_REDIS_CLUSTER with DPCS_TEST_REDIS_CLUSTER_REPLICAS is not set (run `make integration`)")
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
	defer rdb.Close()
	var mu sync.Mutex
	recs := map[string]*pipeRecorder{}
	rdb.OnNewNode(func(c *redis.Client) {
		mu.Lock()
		defer mu.Unlock()
		recs[c.Options().Addr] = &pipeRecorder{}
		c.AddHook(recs[c.Options().Addr])
	})
	ctx := context.Background()
	prefix := fmt.Sprintf("%s:%d:", t.Name(), time.Now().UnixNano())
	var infos []ApplyInfo
	engine := func(replicas int, timeout time.Duration) *Engine {
		e, err := New(rdb, WithKeyPrefix(prefix), WithReplicaAck(replicas, timeout),
			WithHooks(Hooks{OnApply: func(i ApplyInfo) { infos = append(infos, i) }}))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	plain, err := New(rdb, WithKeyPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Load(ctx); err != nil {
		t.Fatal(err)
	}
	masters := map[string][]int64{} // the families of each master, in batch order
	for f := int64(1); f <= 16; f++ {
		provision(t, plain, f)
		node, err := rdb.MasterForKey(ctx, plain.k.family(f))
		if err != nil {
			t.Fatal(err)
		}
		masters[node.Options().Addr] = append(masters[node.Options().Addr], f)
	}
	if len(masters) < 2 {
		t.Fatalf("16 families on %d masters", len(masters))
	}
	batch := func(name string) []Event {
		var evs []Event
		for f := int64(1); f <= 16; f++ {
			evs = append(evs, Event{ID: fmt.Sprintf("evt_%s%d", name, f), FamilyID: f, CustomerID: 1, Bytes: 1, At: kst(t, "2026-02-06 14:30")})
		}
		return evs
	}
	take := func() map[string][]string {
		mu.Lock()
		defer mu.Unlock()
		got := map[string][]string{}
		for addr, r := range recs {
			if p := r.take(); len(p) > 0 {
				got[addr] = p
			}
		}
		return got
	}
	pipes := func(wait string, barrier bool) map[string][]string {
		want := map[string][]string{}
		for addr, fs := range masters {
			want[addr] = []string{strings.Repeat("evalsha | ", len(fs)) + wait}
			if barrier {
				want[addr] = append(want[addr], "set "+plain.k.replicaAck(fs[0])+" | "+wait)
			}
		}
		return want
	}
	take()

	t.Run("acknowledged", func(t *testing.T) {
		res, err := engine(1, time.Second).ApplyBatch(ctx, batch("ok"))
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Duplicate || infos[len(infos)-1].Replicas != 1 {
			t.Errorf("got %+v and ApplyInfo %+v, want a new result and Replicas 1", res[0], infos[len(infos)-1])
		}
		if diff := cmp.Diff(pipes("wait 1 1000", false), take()); diff != "" {
			t.Errorf("pipelines by master (-want +got):\n%s", diff)
		}
	})

	t.Run("fewer replicas than asked", func(t *testing.T) {
		e, evs := engine(2, 50*time.Millisecond), batch("two")
		for _, step := range []struct {
			name    string
			barrier bool
		}{{"first", false}, {"replay", true}} {
			_, err := e.ApplyBatch(ctx, evs)
			var nr *NotReplicatedError
			if !errors.As(err, &nr) || nr.Acked != 1 || nr.Want != 2 || masters[nr.Addr] == nil {
				t.Fatalf("%s: got %v, want 1 of 2 replicas of a master", step.name, err)
			}
			if diff := cmp.Diff(pipes("wait 2 50", step.barrier), take()); diff != "" {
				t.Errorf("%s: pipelines by master (-want +got):\n%s", step.name, diff)
			}
		}
		// Applied although not acknowledged.
		got, err := plain.ApplyBatch(ctx, evs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range got {
			if !r.Duplicate {
				t.Errorf("event %d was not applied", i)
			}
		}
	})
}
