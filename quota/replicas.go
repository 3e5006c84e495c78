package quota

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotReplicated is wrapped by a *NotReplicatedError.
var ErrNotReplicated = errors.New("quota: batch not acknowledged by enough replicas")

// NotReplicatedError reports a batch whose writes fewer replicas acknowledged
// within WithReplicaAck's timeout than it asks for. The writes were made on the
// master: applying the batch again is safe and returns their stored results
// (Duplicate) once enough replicas acknowledge them.
type NotReplicatedError struct {
	// Addr is the address (client option) of the master that lacked
	// acknowledgements: a cluster batch may write to several; this is the one
	// with the fewest.
	Addr string
	// Acked replicas acknowledged in time; Want were asked for.
	Acked, Want int
	Timeout     time.Duration
}

func (e *NotReplicatedError) Error() string {
	return fmt.Sprintf("quota: %d of %d replicas of %s acknowledged the batch within %v", e.Acked, e.Want, e.Addr, e.Timeout)
}

func (e *NotReplicatedError) Unwrap() error { return ErrNotReplicated }

// replicaAck is WithReplicaAck's setting; replicas 0 is off.
type replicaAck struct {
	replicas int
	timeout  time.Duration
}

// WithReplicaAck makes ApplyBatch wait until replicas replicas acknowledged the
// batch's writes (Redis WAIT, sent on the connection that made them, after
// the scripts), for at most timeout. When fewer acknowledge in time, ApplyBatch
// returns a *NotReplicatedError (ErrNotReplicated) instead of the results, so a
// caller that retries produces no decision a failover to a replica could lose;
// the retry returns the stored results, marked Duplicate.
//
// WAIT makes a failover lose no acknowledged batch only when the failover picks
// a replica that acknowledged it (Sentinel and Cluster prefer the replica with
// the largest replication offset); it does not make Redis durable against
// losing the master and every acknowledging replica at once.
//
// It costs one replica round trip per batch (per master written to, in
// parallel, on a Cluster), and a failed batch blocks for timeout. It needs a
// *redis.Client (also from redis.NewFailoverClient) or a *redis.ClusterClient
// (New rejects a Ring), replicas ≥ 1, and 1 ms ≤ timeout < the client's
// ReadTimeout. Default: off (ApplyBatch returns once the master ran the scripts).
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return func(e *Engine) error {
		if replicas < 1 {
			return fmt.Errorf("%w: replica ack needs at least 1 replica, got %d", ErrInvalid, replicas)
		}
		if timeout < time.Millisecond {
			return fmt.Errorf("%w: replica ack timeout must be at least 1ms, got %v", ErrInvalid, timeout)
		}
		e.ack = replicaAck{replicas: replicas, timeout: timeout}
		return nil
	}
}

// check checks that rdb can send WAIT on the connection that wrote,
// and that the client will wait for WAIT's reply.
func (a replicaAck) check(rdb redis.UniversalClient) error {
	if a.replicas == 0 {
		return nil
	}
	var read time.Duration
	switch c := rdb.(type) {
	case *redis.Client:
		read = c.Options().ReadTimeout
	case *redis.ClusterClient:
		read = c.Options().ReadTimeout
	default:
		// A Ring's pipeline spreads over shards with no way to address one
		// shard's connection; WAIT elsewhere would not cover the writes.
		return fmt.Errorf("%w: replica ack needs a *redis.Client or *redis.ClusterClient, got %T", ErrInvalid, rdb)
	}
	if read > 0 && a.timeout >= read {
		return fmt.Errorf("%w: replica ack timeout %v must be below the client's ReadTimeout %v", ErrInvalid, a.timeout, read)
	}
	return nil
}

// replicaAck is the key a batch whose calls were all replays writes before
// WAIT (see runGroup).
func (k keys) replicaAck(fid int64) string { return k.family(fid) + ":replica-ack" }

// ackFamily waits, with WithReplicaAck, until enough replicas of the master
// owning family fid acknowledged what was written to the family: the
// family writes (plan, top-ups, thresholds, constraints, membership) run as
// scripts or transactions on any pooled connection, so WAIT on a connection of
// their own would count nothing; a barrier write and WAIT on one connection
// cover them, replication being ordered. Off, it does nothing.
func (e *Engine) ackFamily(ctx context.Context, fid int64) error {
	if e.ack.replicas == 0 {
		return nil
	}
	return e.ackBarrier(ctx, e.k.replicaAck(fid))
}

// ackBarrier writes key (a second's TTL) on the master owning it and WAITs
// on the same connection; fewer acknowledgements than asked for is a
// *NotReplicatedError.
func (e *Engine) ackBarrier(ctx context.Context, key string) error {
	var node *redis.Client
	switch c := e.rdb.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			return fmt.Errorf("quota: master of %s: %w", key, err)
		}
		node = n
	default:
		return fmt.Errorf("%w: replica ack on %T", ErrInvalid, e.rdb) // New rejects it
	}
	n, err := e.barrier(ctx, node, key)
	if err != nil {
		return e.redirected(ctx, err)
	}
	if n < e.ack.replicas {
		return &NotReplicatedError{Addr: node.Options().Addr, Acked: n, Want: e.ack.replicas, Timeout: e.ack.timeout}
	}
	return nil
}

// barrier writes key (a second's TTL) on node and WAITs on the same
// connection; it returns how many replicas acknowledged. Replication is
// ordered: a replica that has the barrier has every earlier write of node.
func (e *Engine) barrier(ctx context.Context, node *redis.Client, key string) (int, error) {
	var wait *redis.IntCmd
	_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, 1, time.Second)
		wait = e.wait(ctx, p)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("quota: replica ack barrier: %w", err)
	}
	return int(wait.Val()), nil
}

// ackGroup is the part of a batch one master judges, on one connection.
type ackGroup struct {
	rdb *redis.Client
	idx []int // call indices
}

// runAcked is runBatch with WithReplicaAck: the calls are grouped by the
// master that owns their family (one group on a single Redis), each group
// runs as one pipeline that ends in WAIT on that master's connection, and
// the batch is acknowledged when every group's WAIT reached the replicas
// asked for. It returns the fewest acknowledgements of any group; an
// unacknowledged batch is a *NotReplicatedError.
func (e *Engine) runAcked(ctx context.Context, calls []call) ([]*redis.Cmd, int, error) {
	groups, err := e.ackGroups(ctx, calls)
	if err != nil {
		return nil, 0, err
	}
	cmds := make([]*redis.Cmd, len(calls))
	acked := make([]int, len(groups))
	errs := make([]error, len(groups))
	if len(groups) == 1 {
		acked[0], errs[0] = e.runGroup(ctx, groups[0], calls, cmds)
	} else {
		var wg sync.WaitGroup
		for i, g := range groups {
			wg.Go(func() { acked[i], errs[i] = e.runGroup(ctx, g, calls, cmds) })
		}
		wg.Wait()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, 0, e.redirected(ctx, err)
	}
	fewest := 0
	for i, n := range acked {
		if i == 0 || n < acked[fewest] {
			fewest = i
		}
	}
	if n := acked[fewest]; n < e.ack.replicas {
		return nil, n, &NotReplicatedError{Addr: groups[fewest].rdb.Options().Addr, Acked: n, Want: e.ack.replicas, Timeout: e.ack.timeout}
	}
	return cmds, acked[fewest], nil
}

// ackGroups groups the calls by master: one group on a *redis.Client, one per
// master owning a call's family on a *redis.ClusterClient (all keys of a
// call share its family's slot).
func (e *Engine) ackGroups(ctx context.Context, calls []call) ([]ackGroup, error) {
	switch c := e.rdb.(type) {
	case *redis.Client:
		idx := make([]int, len(calls))
		for i := range idx {
			idx[i] = i
		}
		return []ackGroup{{rdb: c, idx: idx}}, nil
	case *redis.ClusterClient:
		var groups []ackGroup
		at := map[*redis.Client]int{}
		for i, cl := range calls {
			node, err := c.MasterForKey(ctx, e.k.family(cl.fid))
			if err != nil {
				return nil, fmt.Errorf("quota: master of family %d: %w", cl.fid, err)
			}
			g, ok := at[node]
			if !ok {
				g = len(groups)
				at[node] = g
				groups = append(groups, ackGroup{rdb: node})
			}
			groups[g].idx = append(groups[g].idx, i)
		}
		return groups, nil
	}
	return nil, fmt.Errorf("%w: replica ack on %T", ErrInvalid, e.rdb) // New rejects it
}

// runGroup runs a group's scripts and WAIT in one pipeline: go-redis sends a
// *redis.Client pipeline on one connection (a retry re-sends all of it on
// another), and WAIT counts the replicas that acknowledged that connection's
// last write. It fills cmds at the group's indices and returns WAIT's count.
//
// A script that judges an event or a step writes its result; a replay
// writes nothing. When every call of the group was a replay, the writes
// WAIT must cover were made earlier, maybe on another connection, so the
// group then writes a short-lived barrier key and WAITs again: replication
// is ordered, so a replica that acknowledged the barrier has every earlier
// write of that master.
func (e *Engine) runGroup(ctx context.Context, g ackGroup, calls []call, cmds []*redis.Cmd) (int, error) {
	run := func(idx []int) (*redis.IntCmd, error) {
		var wait *redis.IntCmd
		_, err := g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range idx {
				c := calls[i]
				cmds[i] = c.script.EvalSha(ctx, p, c.keys, c.args...)
			}
			wait = e.wait(ctx, p)
			return nil
		})
		return wait, err
	}
	wait, err := run(g.idx)
	if err != nil {
		var missing []int
		for _, i := range g.idx {
			if c := cmds[i]; c.Err() != nil && redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
				missing = append(missing, i)
			}
		}
		if len(missing) == 0 || wait.Err() != nil {
			return 0, fmt.Errorf("quota: apply: %w", err)
		}
		var scripts []*redis.Script // those the calls that did not run need
		for _, i := range missing {
			if !slices.Contains(scripts, calls[i].script) {
				scripts = append(scripts, calls[i].script)
			}
		}
		for _, s := range scripts {
			if err := s.Load(ctx, g.rdb).Err(); err != nil {
				return 0, fmt.Errorf("quota: load script: %w", err)
			}
		}
		// The first WAIT covered the calls that ran; this one covers the
		// rest, on its own connection.
		again, err := run(missing)
		if err != nil {
			return 0, fmt.Errorf("quota: apply: %w", err)
		}
		if again.Val() < wait.Val() {
			wait = again
		}
	}
	for _, i := range g.idx {
		if !replayed(cmds[i]) {
			return int(wait.Val()), nil
		}
	}
	return e.barrier(ctx, g.rdb, e.k.replicaAck(calls[g.idx[0]].fid))
}

// wait queues WAIT on p. (Pipeliner has no Wait method.)
func (e *Engine) wait(ctx context.Context, p redis.Pipeliner) *redis.IntCmd {
	cmd := redis.NewIntCmd(ctx, "wait", e.ack.replicas, int64(e.ack.timeout/time.Millisecond))
	_ = p.Process(ctx, cmd) // queued; its reply and error come with Exec
	return cmd
}

// replayed reports a script reply {1, stored}: the event was judged before
// and the script wrote nothing.
func replayed(c *redis.Cmd) bool {
	v, err := c.Slice()
	if err != nil || len(v) == 0 {
		return false
	}
	dup, _ := v[0].(int64)
	return dup == 1
}

// redirected returns err, and on a Cluster reloads the slot map when err
// holds a MOVED or ASK reply: a slot moved between grouping and running. A
// node's own client does not follow redirects; the batch fails and its retry
// is grouped by the new owners.
func (e *Engine) redirected(ctx context.Context, err error) error {
	c, ok := e.rdb.(*redis.ClusterClient)
	if !ok {
		return err
	}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	for _, err := range errs {
		if redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") {
			c.ReloadState(ctx)
			break
		}
	}
	return err
}

// runAckedMarked is runAcked with the state guard: the markers are
// checked before (the guard with every mark's To at its From, a round trip
// of its own, since the acknowledged groups run on their masters' own
// connections: a stale state judges nothing) and guarded after the scripts
// and their replicas' acknowledgement (checked again and advanced in one
// call), so a state that changed in between is reported stale and the
// batch's results are not used. Calls of families to restore first
// (results reads them) were not judged; the others are covered like any
// batch's.
func (e *Engine) runAckedMarked(ctx context.Context, gen string, marks []Mark, markers []string, calls []call, replicas *int) ([]*redis.Cmd, error) {
	if gen != "" {
		at := make([]Mark, len(marks))
		for i, m := range marks {
			at[i] = Mark{Stream: m.Stream, From: m.From, To: m.From, Node: m.Node}
		}
		if err := e.guardOnly(ctx, "check", markers, gen, at); err != nil {
			return nil, err
		}
	}
	cmds, n, err := e.runAcked(ctx, calls)
	*replicas = n
	if err != nil {
		return nil, err
	}
	if gen != "" {
		if err := e.guardOnly(ctx, "advance", markers, gen, marks); err != nil {
			return nil, err
		}
	}
	return cmds, nil
}

// guardOnly runs the state script's guard on every marker and reads it;
// phase names it in errors.
func (e *Engine) guardOnly(ctx context.Context, phase string, markers []string, gen string, marks []Mark) error {
	cmds := make([]*redis.Cmd, len(markers))
	for i, k := range markers {
		cmds[i] = stateScript.Run(ctx, e.rdb, []string{k}, markArgs("guard", gen, k, marks)...)
	}
	return guardResult(phase, cmds)
}
