package quota

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
)

func TestWithReplicaAckValidates(t *testing.T) {
	client := func(read time.Duration) redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: read})
	}
	tests := []struct {
		name     string
		rdb      redis.UniversalClient
		replicas int
		timeout  time.Duration
		ok       bool
	}{
		{"client", client(0), 1, 100 * time.Millisecond, true},
		{"cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), 2, time.Second, true},
		{"sentinel failover client", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}}), 1, time.Second, true},
		{"no read timeout", client(-1), 1, time.Minute, true},
		{"zero replicas", client(0), 0, time.Second, false},
		{"negative replicas", client(0), -1, time.Second, false},
		// WAIT 1 0 would block for ever.
		{"zero timeout", client(0), 1, 0, false},
		{"below a millisecond", client(0), 1, 999 * time.Microsecond, false},
		// The pipeline's read would time out before WAIT answers.
		{"timeout at read timeout", client(time.Second), 1, time.Second, false},
		{"ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}), 1, time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer tt.rdb.Close()
			_, err := New(tt.rdb, WithReplicaAck(tt.replicas, tt.timeout))
			if tt.ok && err != nil {
				t.Fatalf("New: %v", err)
			}
			if !tt.ok && !errors.Is(err, ErrInvalid) {
				t.Fatalf("New: got %v, want an ErrInvalid", err)
			}
		})
	}
}

// pipeRecorder records the commands of every pipeline a client sends, one
// string per pipeline ("evalsha … | wait 1 50").
type pipeRecorder struct {
	mu    sync.Mutex
	pipes []string
}

func (r *pipeRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *pipeRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.add([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (r *pipeRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.add(cmds)
		return next(ctx, cmds)
	}
}

func (r *pipeRecorder) add(cmds []redis.Cmder) {
	var names []string
	for _, c := range cmds {
		name := c.Name()
		switch name {
		case "hello", "client": // a new connection's handshake
			return
		case "wait":
			name = strings.TrimSpace(fmt.Sprintln(c.Args()...))
		case "set":
			name = "set " + fmt.Sprint(c.Args()[1])
		}
		names = append(names, name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pipes = append(r.pipes, strings.Join(names, " | "))
}

// take returns the pipelines recorded since the last take.
func (r *pipeRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pipes
	r.pipes = nil
	return p
}

func recordedMiniredis(t *testing.T) (*miniredis.Miniredis, *redis.Client, *pipeRecorder) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	rec := &pipeRecorder{}
	rdb.AddHook(rec)
	return m, rdb, rec
}

func ackEvents(t *testing.T, n int) []Event {
	evs := make([]Event, n)
	for i := range evs {
		evs[i] = Event{ID: fmt.Sprintf("evt_ack%d", i), FamilyID: 100 + int64(i%2), CustomerID: 1,
			Bytes: 1 << 20, AppID: "com.youtube.app", At: kst(t, "2026-02-06 14:30")}
	}
	return evs
}

func provision(t *testing.T, e *Engine, fids ...int64) {
	t.Helper()
	ctx := context.Background()
	for _, f := range fids {
		if _, err := e.SetPlan(ctx, f, 10*gb); err != nil {
			t.Fatal(err)
		}
		if err := e.AddMember(ctx, f, 1); err != nil {
			t.Fatal(err)
		}
	}
}

// Off, ApplyBatch sends the scripts and nothing else.
func TestReplicaAckOffSendsNoWait(t *testing.T) {
	_, rdb, rec := recordedMiniredis(t)
	e, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	provision(t, e, 100, 101)
	if err := e.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec.take()
	var infos []ApplyInfo
	e.hooks.OnApply = func(i ApplyInfo) { infos = append(infos, i) }
	if _, err := e.ApplyBatch(context.Background(), ackEvents(t, 3)); err != nil {
		t.Fatal(err)
	}
	want := []string{"evalsha | evalsha | evalsha"}
	if diff := cmp.Diff(want, rec.take()); diff != "" {
		t.Errorf("pipelines (-want +got):\n%s", diff)
	}
	if len(infos) != 1 || infos[0].Replicas != 0 || infos[0].Err != nil {
		t.Errorf("OnApply got %+v, want one call with Replicas 0 and no error", infos)
	}
}

// miniredis has no replicas and answers WAIT with 0 at once: ApplyBatch makes
// the writes and reports them not replicated. This checks the commands sent
// and the error; the real acknowledgement is TestReplicaAck (integration).
func TestReplicaAckOnMiniredis(t *testing.T) {
	m, rdb, rec := recordedMiniredis(t)
	var infos []ApplyInfo
	e, err := New(rdb, WithReplicaAck(1, 50*time.Millisecond), WithHooks(Hooks{OnApply: func(i ApplyInfo) { infos = append(infos, i) }}))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	provision(t, plain, 100, 101)
	ctx := context.Background()
	if err := e.Load(ctx); err != nil {
		t.Fatal(err)
	}
	evs := ackEvents(t, 3)
	wantErr := &NotReplicatedError{Addr: m.Addr(), Acked: 0, Want: 1, Timeout: 50 * time.Millisecond}
	check := func(step string, err error, pipes []string) {
		t.Helper()
		var nr *NotReplicatedError
		if !errors.As(err, &nr) || !errors.Is(err, ErrNotReplicated) || errors.Is(err, ErrInvalid) {
			t.Fatalf("%s: got %v, want a *NotReplicatedError", step, err)
		}
		if diff := cmp.Diff(wantErr, nr); diff != "" {
			t.Errorf("%s: error (-want +got):\n%s", step, diff)
		}
		if diff := cmp.Diff(pipes, rec.take()); diff != "" {
			t.Errorf("%s: pipelines (-want +got):\n%s", step, diff)
		}
	}

	rec.take()
	res, err := e.ApplyBatch(ctx, evs)
	if res != nil {
		t.Errorf("results %v returned with the error", res)
	}
	// WAIT ends the scripts' pipeline: one connection.
	check("first", err, []string{"evalsha | evalsha | evalsha | wait 1 50"})

	// The replay wrote nothing: a barrier write gives WAIT something to cover.
	_, err = e.ApplyBatch(ctx, evs)
	check("replay", err, []string{"evalsha | evalsha | evalsha | wait 1 50", "set " + e.k.replicaAck(100) + " | wait 1 50"})

	// One new event: its write covers the replays, no barrier.
	evs = append(evs, Event{ID: "evt_new", FamilyID: 101, CustomerID: 1, Bytes: 1, At: evs[0].At})
	_, err = e.ApplyBatch(ctx, evs)
	check("mixed", err, []string{"evalsha | evalsha | evalsha | evalsha | wait 1 50"})

	// After SCRIPT FLUSH: the scripts are loaded and the missing events run
	// again, WAIT after them too.
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rec.take()
	evs = append(evs, Event{ID: "evt_new2", FamilyID: 100, CustomerID: 1, Bytes: 1, At: evs[0].At})
	_, err = e.ApplyBatch(ctx, evs)
	check("noscript", err, []string{
		"evalsha | evalsha | evalsha | evalsha | evalsha | wait 1 50",
		"script",
		"evalsha | evalsha | evalsha | evalsha | evalsha | wait 1 50",
	})

	// Every batch was applied although not acknowledged.
	got, err := plain.ApplyBatch(ctx, evs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		if !r.Duplicate {
			t.Errorf("event %d was not applied: %+v", i, r)
		}
	}
	if len(infos) != 4 {
		t.Fatalf("OnApply called %d times, want 4", len(infos))
	}
	for i, info := range infos {
		if info.Replicas != 0 || !errors.Is(info.Err, ErrNotReplicated) {
			t.Errorf("OnApply %d: got %+v, want Replicas 0 and ErrNotReplicated", i, info)
		}
	}
}

// A Redis that fails mid-pipeline fails the batch, not with ErrNotReplicated.
func TestReplicaAckRedisDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	e, err := New(rdb, WithReplicaAck(1, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.ApplyBatch(context.Background(), ackEvents(t, 2))
	if err == nil || errors.Is(err, ErrNotReplicated) || errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v, want a connection error", err)
	}
}

// ackedEngine is an engine asking for replicas acknowledgements on a
// miniredis whose WAIT replies hook rewrites; family 100 and 101 are
// provisioned with member 1.
func ackedEngine(t *testing.T, replicas int, hook *faultHook, opts ...Option) (*miniredis.Miniredis, *Engine, *[]ApplyInfo) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	infos := &[]ApplyInfo{}
	e, err := New(rdb, append([]Option{WithReplicaAck(replicas, 50*time.Millisecond),
		WithHooks(Hooks{OnApply: func(i ApplyInfo) { *infos = append(*infos, i) }})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	// Provisioned without acks: hook answers only the test's WAITs.
	plain, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	provision(t, plain, 100, 101)
	if err := e.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(hook)
	return m, e, infos
}

// When enough replicas acknowledge, ApplyBatch returns the results and
// reports the acknowledgements; a batch of replays writes a barrier for
// WAIT to cover. Fewer than asked for is a NotReplicatedError.
func TestReplicaAckAcknowledged(t *testing.T) {
	hook := &faultHook{after: ackReplicas(2)}
	m, e, infos := ackedEngine(t, 2, hook)
	ctx := context.Background()
	evs := ackEvents(t, 3)
	rs, err := e.ApplyBatch(ctx, evs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Duplicate || r.Decision != policy.Allowed || r.MonthlyUsed == 0 {
			t.Errorf("event %d: %+v, want allowed and charged", i, r)
		}
	}
	if m.Exists(e.k.replicaAck(100)) {
		t.Error("barrier written although the batch wrote")
	}
	again, err := e.ApplyBatch(ctx, evs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range again {
		if want := rs[i]; !r.Duplicate || r.Remaining != want.Remaining {
			t.Errorf("replay %d: %+v, want the original %+v as a duplicate", i, r, want)
		}
	}
	if !m.Exists(e.k.replicaAck(100)) || m.TTL(e.k.replicaAck(100)) != time.Second {
		t.Errorf("no barrier with a second's TTL after a batch of replays (TTL %v)", m.TTL(e.k.replicaAck(100)))
	}
	hook.after = ackReplicas(1)
	_, err = e.ApplyBatch(ctx, []Event{{ID: "evt_more", FamilyID: 101, CustomerID: 1, Bytes: 1, At: evs[0].At}})
	var nr *NotReplicatedError
	if !errors.As(err, &nr) || nr.Acked != 1 || nr.Want != 2 {
		t.Fatalf("one of two replicas: %v, want a NotReplicatedError", err)
	}
	if want := fmt.Sprintf("quota: 1 of 2 replicas of %s acknowledged the batch within 50ms", m.Addr()); err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	var got []int
	for _, i := range *infos {
		got = append(got, i.Replicas)
	}
	if diff := cmp.Diff([]int{2, 2, 1}, got); diff != "" {
		t.Errorf("OnApply replicas (-want +got):\n%s", diff)
	}
}

// With replica acks, ApplyMarked checks the markers in a round trip of its
// own before judging, and checks them again and advances them after WAIT
// (one guard call): a stale state judges nothing, and a rebuild that
// begins while the batch waits for its replicas makes the batch stale.
func TestReplicaAckMarked(t *testing.T) {
	hook := &faultHook{after: ackReplicas(1)}
	m, e, infos := ackedEngine(t, 1, hook)
	ctx := context.Background()
	evs := ackEvents(t, 2)
	sent := 0 // apply scripts
	hook.before = func(cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "evalsha" && c.Args()[1] == e.apply.Hash() {
				sent++
				if !slices.Contains(names(cmds), "wait") {
					t.Errorf("apply script sent without WAIT: %v", names(cmds))
				}
			}
		}
		return nil
	}
	stale := func(what string, rs []Result, err error, want string) {
		t.Helper()
		var se *StaleError
		if rs != nil || !errors.As(err, &se) || !strings.Contains(se.Reason, want) {
			t.Fatalf("%s: %v, %v; want a StaleError saying %q", what, rs, err, want)
		}
	}
	used := func() int64 {
		t.Helper()
		f, err := e.Family(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		return f.Used
	}

	rs, err := e.ApplyMarked(ctx, "g1", []Mark{{Stream: "usage/0", From: 0, To: 2}}, evs)
	stale("never rebuilt", rs, err, "no state marker")
	if sent != 0 || used() != 0 {
		t.Fatalf("a stale state judged: %d batches sent, %d bytes used", sent, used())
	}

	if _, err := e.BeginRebuild(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	if err := e.FinishRebuild(ctx, "g1", map[string]int64{"usage/0": 0}); err != nil {
		t.Fatal(err)
	}
	rs, err = e.ApplyMarked(ctx, "g1", []Mark{{Stream: "usage/0", From: 0, To: 2}}, evs)
	if err != nil || len(rs) != 2 || rs[0].Decision != policy.Allowed {
		t.Fatalf("ApplyMarked = %+v, %v", rs, err)
	}
	if st, err := e.State(ctx); err != nil || len(st) != 1 || st[0].Watermarks["usage/0"] != 2 || st[0].Generation != "g1" {
		t.Errorf("State after the batch = %+v, %v; want g1 at 2", st, err)
	}
	if last := (*infos)[len(*infos)-1]; last.Replicas != 1 || last.Err != nil || last.Events != 2 {
		t.Errorf("OnApply got %+v", last)
	}

	// A rebuild begins while the batch waits for its replicas.
	rebuilder, err := New(redis.NewClient(&redis.Options{Addr: m.Addr()}))
	if err != nil {
		t.Fatal(err)
	}
	defer rebuilder.rdb.Close()
	hook.after = func(cmds []redis.Cmder) {
		ackReplicas(1)(cmds)
		if slices.Contains(names(cmds), "wait") {
			if _, err := rebuilder.BeginRebuild(ctx, "g2"); err != nil {
				t.Error(err)
			}
		}
	}
	more := []Event{{ID: "evt_late", FamilyID: 100, CustomerID: 1, Bytes: 1, At: evs[0].At}}
	rs, err = e.ApplyMarked(ctx, "g1", []Mark{{Stream: "usage/0", From: 2, To: 3}}, more)
	stale("rebuild during WAIT", rs, err, "state generation is rebuilding:g2, expected g1")
	if st, _ := e.State(ctx); st[0].Watermarks["usage/0"] != 2 {
		t.Errorf("watermark advanced by a stale batch: %+v", st)
	}
}

// Redis failing at the check or at the advance fails the marked batch.
func TestReplicaAckMarkedRedisErrors(t *testing.T) {
	hook := &faultHook{after: ackReplicas(1)}
	m, e, _ := ackedEngine(t, 1, hook)
	ctx := context.Background()
	if err := e.FinishRebuild(ctx, "g1", nil); err != nil {
		t.Fatal(err)
	}
	evs := ackEvents(t, 1)
	marks := []Mark{{Stream: "usage/0", From: 0, To: 1}}

	m.SetError("ERR check down")
	_, err := e.ApplyMarked(ctx, "g1", marks, evs)
	if err == nil || !strings.HasPrefix(err.Error(), "quota: state check: ERR check down") || errors.Is(err, ErrStale) {
		t.Errorf("check failing: %v", err)
	}
	m.SetError("")

	hook.after = func(cmds []redis.Cmder) {
		ackReplicas(1)(cmds)
		if slices.Contains(names(cmds), "wait") {
			m.SetError("ERR advance down")
		}
	}
	_, err = e.ApplyMarked(ctx, "g1", marks, evs)
	if err == nil || !strings.HasPrefix(err.Error(), "quota: state advance: ERR advance down") || errors.Is(err, ErrStale) {
		t.Errorf("advance failing: %v", err)
	}
	m.SetError("")
	hook.after = ackReplicas(1)
	rs, err := e.ApplyMarked(ctx, "g1", marks, evs)
	if err != nil || !rs[0].Duplicate {
		t.Errorf("retry after the failures = %+v, %v; want the event judged once, a duplicate now", rs, err)
	}
}

// With replica acks as without: a family restored by another generation
// refuses the batch, and a corrupt dedupe record fails it.
func TestReplicaAckRefusals(t *testing.T) {
	hook := &faultHook{after: ackReplicas(1)}
	m, e, _ := ackedEngine(t, 1, hook)
	ctx := context.Background()
	if err := e.Restore(ctx, FamilyState{FamilyID: 100, Provisioned: true, Plan: gb, Members: []MemberState{{CustomerID: 1}}, Generation: "g2"}); err != nil {
		t.Fatal(err)
	}
	if err := e.FinishRebuild(ctx, "g1", nil); err != nil {
		t.Fatal(err)
	}
	ev := ackEvents(t, 1)[0]
	_, err := e.ApplyMarked(ctx, "g1", nil, []Event{ev})
	if !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "family 100 was restored by state generation g2, not g1") {
		t.Errorf("family of another generation: %v", err)
	}

	ev.FamilyID = 101
	m.HSet(e.k.events(101, e.bucket(time.Now())), ev.ID, "garbage")
	_, err = e.ApplyBatch(ctx, []Event{ev})
	if err == nil || !strings.HasPrefix(err.Error(), `quota: event 0: malformed stored result "garbage"`) {
		t.Errorf("corrupt record: %v", err)
	}
}

// A Redis that loses its scripts and then fails to load them, or fails the
// batch's second run, or the barrier write, fails the batch with that error.
func TestReplicaAckRetryFailures(t *testing.T) {
	for _, tt := range []struct {
		name    string
		replay  bool
		fail    func(cmds []redis.Cmder, after *bool) bool
		wantErr string
	}{
		{
			name:    "script load",
			fail:    func(cmds []redis.Cmder, _ *bool) bool { return cmds[0].Name() == "script" },
			wantErr: "quota: load script: ERR injected",
		},
		{
			name: "second run",
			fail: func(cmds []redis.Cmder, loaded *bool) bool {
				if cmds[0].Name() == "script" {
					*loaded = true
				}
				return *loaded && cmds[0].Name() == "evalsha"
			},
			wantErr: "quota: apply: ERR injected",
		},
		{
			name:    "barrier",
			replay:  true,
			fail:    func(cmds []redis.Cmder, _ *bool) bool { return cmds[0].Name() == "set" },
			wantErr: "quota: replica ack barrier: ERR injected",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hook := &faultHook{after: ackReplicas(1)}
			_, e, _ := ackedEngine(t, 1, hook)
			ctx := context.Background()
			evs := ackEvents(t, 2)
			if tt.replay {
				if _, err := e.ApplyBatch(ctx, evs); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			var state bool
			hook.before = func(cmds []redis.Cmder) error {
				if tt.fail(cmds, &state) {
					return injected
				}
				return nil
			}
			rs, err := e.ApplyBatch(ctx, evs)
			if rs != nil || err == nil || err.Error() != tt.wantErr || errors.Is(err, ErrNotReplicated) {
				t.Errorf("ApplyBatch = %v, %v; want %q", rs, err, tt.wantErr)
			}
		})
	}
}

// After NOSCRIPT the batch runs twice, each run ending in its own WAIT: the
// batch is acknowledged by the fewer of the two.
func TestReplicaAckAfterNoScript(t *testing.T) {
	for _, tt := range []struct {
		name          string
		first, second int64
	}{
		{"second fewer", 2, 1},
		{"first fewer", 1, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			waits := 0
			hook := &faultHook{after: func(cmds []redis.Cmder) {
				if slices.Contains(names(cmds), "wait") {
					waits++
					n := tt.first
					if waits > 1 {
						n = tt.second
					}
					ackReplicas(n)(cmds)
				}
			}}
			_, e, infos := ackedEngine(t, 2, hook)
			ctx := context.Background()
			if err := e.rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			_, err := e.ApplyBatch(ctx, ackEvents(t, 2))
			var nr *NotReplicatedError
			if !errors.As(err, &nr) || nr.Acked != 1 || nr.Want != 2 {
				t.Errorf("got %v, want 1 of 2 replicas", err)
			}
			if waits != 2 || len(*infos) != 1 || (*infos)[0].Replicas != 1 {
				t.Errorf("%d WAITs, OnApply %+v; want 2 WAITs and Replicas 1", waits, *infos)
			}
		})
	}
}

// With replica acks, a family write (the API's plan, top-up, threshold,
// constraint and membership changes) waits for its replicas as a batch
// does: after the write, a barrier on the family's master and WAIT on the
// same connection (replication is ordered: a replica that has the barrier
// has the write). Fewer than asked for is a *NotReplicatedError; the write
// was made and applying it again is safe. A rebuild's restores are covered
// once, by FinishRebuild's WAIT on every master after its marker.
func TestReplicaAckFamilyWrites(t *testing.T) {
	m, rdb, rec := recordedMiniredis(t)
	hook := &faultHook{}
	rdb.AddHook(hook)
	e, err := New(rdb, WithReplicaAck(1, 50*time.Millisecond), WithClock(func() time.Time { return kst(t, "2026-02-06 14:30") }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	barrier := "set " + e.k.replicaAck(100) + " | wait 1 50"
	writes := []struct {
		name string
		do   func() error
	}{
		{"SetPlan", func() error { _, err := e.SetPlan(ctx, 100, 10*gb); return err }},
		{"AddMember", func() error { return e.AddMember(ctx, 100, 1) }},
		{"TopUp", func() error { _, err := e.TopUp(ctx, 100, gb); return err }},
		{"SetTopUps", func() error { _, err := e.SetTopUps(ctx, 100, "202602", 2*gb); return err }},
		{"SetThresholds", func() error { return e.SetThresholds(ctx, 100, policy.Thresholds{50}) }},
		{"SetConstraints", func() error {
			_, err := e.SetConstraints(ctx, 100, 1, 1, map[string]string{"LIMIT:DATA:DAILY": "1048576"})
			return err
		}},
		{"Enforce", func() error {
			_, err := e.Enforce(ctx, 100, 1, 2, rules(t, map[string]string{"LIMIT:DATA:DAILY": "2097152"}))
			return err
		}},
		{"RemoveMember", func() error { return e.RemoveMember(ctx, 100, 1) }},
	}
	for _, w := range writes {
		hook.after = nil // miniredis answers WAIT with 0
		rec.take()
		err := w.do()
		var nr *NotReplicatedError
		if !errors.As(err, &nr) {
			t.Fatalf("%s without a replica: got %v, want a *NotReplicatedError", w.name, err)
		}
		if want := (NotReplicatedError{Addr: m.Addr(), Acked: 0, Want: 1, Timeout: 50 * time.Millisecond}); *nr != want {
			t.Errorf("%s: error %+v, want %+v", w.name, *nr, want)
		}
		if pipes := rec.take(); len(pipes) == 0 || !slices.Contains(pipes, barrier) {
			t.Errorf("%s: pipelines %q, want the write then %q", w.name, pipes, barrier)
		}
		hook.after = ackReplicas(1)
		if err := w.do(); err != nil {
			t.Errorf("%s with its replica: %v", w.name, err)
		}
	}
	// The writes were made, acknowledged or not.
	fam, err := e.Family(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if fam.Total != 12*gb || len(fam.Members) != 0 {
		t.Errorf("family after the writes: total %d, %d members; want %d and none (removed)", fam.Total, len(fam.Members), 12*gb)
	}

	// A rebuild: restores, then FinishRebuild's marker and WAIT.
	hook.after = nil
	if _, err := e.BeginRebuild(ctx, "g2"); err != nil {
		t.Fatal(err)
	}
	if err := e.Restore(ctx, FamilyState{FamilyID: 100, Provisioned: true, Plan: gb}); err != nil {
		t.Fatal(err)
	}
	rec.take()
	err = e.FinishRebuild(ctx, "g2", nil)
	if !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("FinishRebuild without a replica: got %v, want ErrNotReplicated", err)
	}
	if want := "set " + e.k.state("state") + ":replica-ack | wait 1 50"; !slices.Contains(rec.take(), want) {
		t.Errorf("FinishRebuild sent no %q", want)
	}
	hook.after = ackReplicas(1)
	if err := e.FinishRebuild(ctx, "g2", nil); err != nil {
		t.Errorf("FinishRebuild with its replica: %v", err)
	}
}
