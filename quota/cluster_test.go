package quota

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
)

// clusterEngine is an engine on a Cluster client over a miniredis (one
// master owning every slot); hook is added to every node's client.
func clusterEngine(t *testing.T, hook *faultHook, opts ...Option) (*miniredis.Miniredis, *redis.ClusterClient, *Engine) {
	t.Helper()
	m := miniredis.RunT(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{m.Addr()}, MaxRetries: -1, MaxRedirects: -1})
	t.Cleanup(func() { cc.Close() })
	cc.OnNewNode(func(node *redis.Client) { node.AddHook(hook) })
	e, err := New(cc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m, cc, e
}

// On a Cluster, replica acks are collected per master, on the connection of
// the master that judged the events.
func TestClusterReplicaAck(t *testing.T) {
	var waits []string
	hook := &faultHook{after: func(cmds []redis.Cmder) {
		ackReplicas(1)(cmds)
		for _, c := range cmds {
			if c.Name() == "wait" {
				waits = append(waits, strings.Join(names(cmds), " "))
			}
		}
	}}
	var infos []ApplyInfo
	_, _, e := clusterEngine(t, hook, WithReplicaAck(1, 50*time.Millisecond), WithHooks(Hooks{OnApply: func(i ApplyInfo) { infos = append(infos, i) }}))
	provision(t, e, 100, 101)
	// Each family write of the provisioning WAITed on its family's master
	// after a barrier.
	if diff := cmp.Diff([]string{"set wait", "set wait", "set wait", "set wait"}, waits); diff != "" {
		t.Errorf("WAIT pipelines of the family writes (-want +got):\n%s", diff)
	}
	waits = nil
	if err := e.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	rs, err := e.ApplyBatch(context.Background(), ackEvents(t, 3))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Decision != policy.Allowed || r.Duplicate {
			t.Errorf("event %d: %+v", i, r)
		}
	}
	if diff := cmp.Diff([]string{"evalsha evalsha evalsha wait"}, waits); diff != "" {
		t.Errorf("WAIT pipelines on the node (-want +got):\n%s", diff)
	}
	if len(infos) != 1 || infos[0].Replicas != 1 || infos[0].Err != nil {
		t.Errorf("OnApply got %+v", infos)
	}
}

// A slot that moved between grouping the batch by master and running it
// (MOVED from the node) fails the batch; once the cluster settles, its
// retry is judged.
func TestClusterMovedSlot(t *testing.T) {
	hook := &faultHook{after: ackReplicas(1)}
	m, _, e := clusterEngine(t, hook, WithReplicaAck(1, 50*time.Millisecond))
	provision(t, e, 100, 101)
	ctx := context.Background()
	if err := e.Load(ctx); err != nil { // the slot map is loaded too
		t.Fatal(err)
	}
	evs := ackEvents(t, 2)
	m.SetError("MOVED 163 " + m.Addr())
	rs, err := e.ApplyBatch(ctx, evs)
	if rs != nil || err == nil || !strings.Contains(err.Error(), "MOVED 163") || errors.Is(err, ErrNotReplicated) {
		t.Fatalf("ApplyBatch while the slot moves = %v, %v; want the MOVED error", rs, err)
	}
	m.SetError("")
	rs, err = e.ApplyBatch(ctx, evs)
	if err != nil || len(rs) != 2 || rs[0].Duplicate || rs[1].Duplicate {
		t.Errorf("retry = %+v, %v; want both judged now", rs, err)
	}
}

// A Cluster whose slot map cannot be read fails every call that needs it,
// naming what it needed.
func TestClusterSlotsUnavailable(t *testing.T) {
	m, _, e := clusterEngine(t, &faultHook{}, WithReplicaAck(1, 50*time.Millisecond))
	m.SetError("ERR cluster down")
	ctx := context.Background()
	ev := Event{ID: "a", FamilyID: 100, CustomerID: 1, Bytes: 1, At: time.Now()}
	for name, tt := range map[string]struct {
		err  error
		want string
	}{
		"State":        {func() error { _, err := e.State(ctx); return err }(), "quota: cluster slots: "},
		"BeginRebuild": {func() error { _, err := e.BeginRebuild(ctx, "g1"); return err }(), "quota: cluster slots: "},
		"ApplyMarked":  {func() error { _, err := e.ApplyMarked(ctx, "g1", nil, []Event{ev}); return err }(), "quota: cluster slots: "},
		"ApplyBatch":   {func() error { _, err := e.ApplyBatch(ctx, []Event{ev}); return err }(), "quota: master of family 100: "},
	} {
		if tt.err == nil || !strings.HasPrefix(tt.err.Error(), tt.want) || errors.Is(tt.err, ErrStale) {
			t.Errorf("%s: %v, want an error starting %q", name, tt.err, tt.want)
		}
	}
}

// twoMasters is a Cluster client over two miniredis, each owning half the
// slots (a slot map the client is given: miniredis does not shard), and
// families 100.. picked so that fa lives on the first and fb on the second;
// hooks[i] is added to the client of master i. (Masters are told apart by
// port: the client drops the loopback host of a node's address.)
func twoMasters(t *testing.T, hooks [2]*faultHook) (cc *redis.ClusterClient, ports [2]string, fa, fb int64) {
	t.Helper()
	a, b := miniredis.RunT(t), miniredis.RunT(t)
	ports = [2]string{a.Port(), b.Port()}
	cc = redis.NewClusterClient(&redis.ClusterOptions{
		MaxRetries: -1,
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			return []redis.ClusterSlot{
				{Start: 0, End: 8191, Nodes: []redis.ClusterNode{{Addr: a.Addr()}}},
				{Start: 8192, End: 16383, Nodes: []redis.ClusterNode{{Addr: b.Addr()}}},
			}, nil
		},
	})
	t.Cleanup(func() { cc.Close() })
	port := func(c *redis.Client) string {
		_, p, _ := net.SplitHostPort(c.Options().Addr)
		return p
	}
	cc.OnNewNode(func(node *redis.Client) {
		for i, p := range ports {
			if p == port(node) {
				node.AddHook(hooks[i])
			}
		}
	})
	ctx := context.Background()
	k := keys{}
	for f := int64(100); f < 200 && (fa == 0 || fb == 0); f++ {
		node, err := cc.MasterForKey(ctx, k.family(f))
		if err != nil {
			t.Fatal(err)
		}
		if port(node) == ports[0] && fa == 0 {
			fa = f
		} else if port(node) == ports[1] && fb == 0 {
			fb = f
		}
	}
	if fa == 0 || fb == 0 {
		t.Fatalf("no family on each master: %d, %d", fa, fb)
	}
	return cc, ports, fa, fb
}

// A batch over two masters is judged on both at once, each group ending in
// its own WAIT; the batch counts the fewest acknowledgements of any master
// and names that master when they are too few.
func TestClusterReplicaAckTwoMasters(t *testing.T) {
	hooks := [2]*faultHook{{after: ackReplicas(2)}, {after: ackReplicas(1)}}
	cc, ports, fa, fb := twoMasters(t, hooks)
	var infos []ApplyInfo
	e, err := New(cc, WithReplicaAck(1, 50*time.Millisecond), WithHooks(Hooks{OnApply: func(i ApplyInfo) { infos = append(infos, i) }}))
	if err != nil {
		t.Fatal(err)
	}
	provision(t, e, fa, fb)
	ctx := context.Background()
	at := kst(t, "2026-02-06 14:30")
	evs := []Event{
		{ID: "a1", FamilyID: fa, CustomerID: 1, Bytes: 10, At: at},
		{ID: "b1", FamilyID: fb, CustomerID: 1, Bytes: 20, At: at},
		{ID: "a2", FamilyID: fa, CustomerID: 1, Bytes: 30, At: at},
	}
	rs, err := e.ApplyBatch(ctx, evs)
	if err != nil {
		t.Fatal(err)
	}
	if got := []int64{rs[0].MonthlyUsed, rs[1].MonthlyUsed, rs[2].MonthlyUsed}; !cmp.Equal([]int64{10, 20, 40}, got) {
		t.Errorf("monthly used %v, want [10 20 40] (results in event order)", got)
	}
	if len(infos) != 1 || infos[0].Replicas != 1 {
		t.Errorf("OnApply got %+v, want Replicas 1 (the fewest)", infos)
	}

	e2, err := New(cc, WithReplicaAck(2, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e2.ApplyBatch(ctx, []Event{{ID: "a3", FamilyID: fa, CustomerID: 1, Bytes: 1, At: at}, {ID: "b3", FamilyID: fb, CustomerID: 1, Bytes: 1, At: at}})
	var nr *NotReplicatedError
	if !errors.As(err, &nr) || !strings.HasSuffix(nr.Addr, ":"+ports[1]) || nr.Acked != 1 || nr.Want != 2 {
		t.Errorf("two replicas asked: %v, want a NotReplicatedError naming port %s", err, ports[1])
	}
	// Only fa's master is written to: its two acknowledgements suffice.
	if _, err := e2.ApplyBatch(ctx, []Event{{ID: "a4", FamilyID: fa, CustomerID: 1, Bytes: 1, At: at}}); err != nil {
		t.Errorf("batch on the acknowledged master: %v", err)
	}

	// One master failing fails the batch with its error.
	hooks[1].before = func([]redis.Cmder) error { return injected }
	if _, err := e.ApplyBatch(ctx, []Event{{ID: "a5", FamilyID: fa, CustomerID: 1, Bytes: 1, At: at}, {ID: "b5", FamilyID: fb, CustomerID: 1, Bytes: 1, At: at}}); err == nil || !strings.Contains(err.Error(), "ERR injected") {
		t.Errorf("one master failing: %v, want its error", err)
	}
}

// On a Cluster as on one Redis, a corrupt dedupe record fails the batch.
func TestClusterCorruptRecord(t *testing.T) {
	m, _, e := clusterEngine(t, &faultHook{after: ackReplicas(1)}, WithReplicaAck(1, 50*time.Millisecond))
	provision(t, e, 100)
	ev := ackEvents(t, 1)[0]
	m.HSet(e.k.events(100, e.bucket(time.Now())), ev.ID, "garbage")
	_, err := e.ApplyBatch(context.Background(), []Event{ev})
	if err == nil || !strings.HasPrefix(err.Error(), `quota: event 0: malformed stored result "garbage"`) {
		t.Errorf("corrupt record: %v", err)
	}
}

// A master added after the engine started (slots moved to it; here it
// holds none of the families' keys, as after losing its data) is checked
// like every other master: it has no state marker, so a batch of a family
// whose slot it now owns is refused as stale — never judged
// BLOCKED_NOT_MEMBER from its empty state. (The markers were found once,
// at the last rebuild, so the new master was never checked.)
func TestClusterMasterAddedLater(t *testing.T) {
	a, b := miniredis.RunT(t), miniredis.RunT(t)
	// b takes the half of the slots without the first marker key, so the
	// marker a holds stays where it was.
	bLow := keySlot(keys{}.state("s0")) >= 8192
	onB := func(slot int) bool { return (slot < 8192) == bLow }
	var split atomic.Bool // false: a owns every slot; true: b owns its half
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		MaxRetries: -1,
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			if !split.Load() {
				return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: a.Addr()}}}}, nil
			}
			low, high := a.Addr(), b.Addr()
			if bLow {
				low, high = high, low
			}
			return []redis.ClusterSlot{
				{Start: 0, End: 8191, Nodes: []redis.ClusterNode{{Addr: low}}},
				{Start: 8192, End: 16383, Nodes: []redis.ClusterNode{{Addr: high}}},
			}, nil
		},
	})
	t.Cleanup(func() { cc.Close() })
	e, err := New(cc)
	if err != nil {
		t.Fatal(err)
	}
	e.markerRefresh = 0 // every batch looks at the topology (production: once a second)
	ctx := context.Background()
	// A family in b's half of the slots.
	fid := int64(100)
	for ; !onB(keySlot(e.k.family(fid))); fid++ {
	}
	provision(t, e, fid)
	if _, err := e.BeginRebuild(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	if err := e.FinishRebuild(ctx, "g1", nil); err != nil {
		t.Fatal(err)
	}
	ev := Event{ID: "e1", FamilyID: fid, CustomerID: 1, Bytes: 1, At: time.Now()}
	if rs, err := e.ApplyMarked(ctx, "g1", nil, []Event{ev}); err != nil || rs[0].Decision != policy.Allowed {
		t.Fatalf("before the new master: %+v, %v", rs, err)
	}
	split.Store(true)
	cc.ReloadState(ctx)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if m, err := cc.MasterForKey(ctx, e.k.family(fid)); err == nil && strings.HasSuffix(m.Options().Addr, ":"+b.Port()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the client did not take the new slot map")
		}
	}
	ev.ID = "e2"
	rs, err := e.ApplyMarked(ctx, "g1", nil, []Event{ev})
	if !errors.Is(err, ErrStale) {
		t.Errorf("a batch on the new master without a marker: %+v, %v; want ErrStale", rs, err)
	}
	// A rebuild marks every master, the new one too.
	if _, err := e.BeginRebuild(ctx, "g2"); err != nil {
		t.Fatal(err)
	}
	provision(t, e, fid)
	if err := e.FinishRebuild(ctx, "g2", nil); err != nil {
		t.Fatal(err)
	}
	if states, err := e.State(ctx); err != nil || len(states) != 2 {
		t.Errorf("markers after the rebuild: %+v, %v; want one per master", states, err)
	}
}
