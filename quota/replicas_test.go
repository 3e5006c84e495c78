package quota

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
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
	provision(t, e, 100, 101)
	ctx := context.Background()
	if err := e.Load(ctx); err != nil {
		t.Fatal(err)
	}
	evs := ackEvents(t, 3)
	plain, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
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
