package writebehind

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope/kafkarecord"
)

// Headers a Runner adds to a dead-lettered record (kafkarecord.DeadLetter: the
// original key, value and headers are kept).
const (
	HeaderDLTReason    = kafkarecord.HeaderDLTReason    // why the record can never be written
	HeaderDLTTopic     = kafkarecord.HeaderDLTTopic     // the topic it was consumed from
	HeaderDLTPartition = kafkarecord.HeaderDLTPartition // its partition, decimal
	HeaderDLTOffset    = kafkarecord.HeaderDLTOffset    // its offset, decimal
)

// Decoder turns a consumed record into the item to write. An error means the
// record can never be written: it goes to the dead-letter topic.
type Decoder[T any] func(*kgo.Record) (T, error)

type entry[T any] struct {
	slot[T]
	rec *kgo.Record
}

// Runner consumes a topic in a consumer group, decodes each record, writes
// the items in batches with a Writer, and commits offsets only after the
// batch was written: at least once, nothing lost.
//
//   - Batches: the batch size (WithBatchSize, 100) or the interval since the
//     oldest buffered record (WithInterval, 5 s), whichever comes first.
//   - Database failing: fetching of every assigned partition is paused
//     (PauseFetchPartitions), nothing is committed, and the same batch is
//     retried with exponential backoff (WithBackoff, 100 ms … 30 s) for as long
//     as it takes; after a successful retry the batch is committed and
//     fetching resumes. The group membership stays alive meanwhile.
//   - A record that can never be written, because it does not decode or
//     because the writer rejects it (see Writer), goes to the dead-letter
//     topic (WithDLT, "<topic>.DLT") with a dlt-reason header; the rest of
//     its batch is written and committed normally.
//   - Rebalances: the client blocks rebalances while a batch is in flight
//     (BlockRebalanceOnPoll); on revoke the runner tries once more to write
//     and commit what it holds, and otherwise leaves it uncommitted for the
//     partition's next owner.
//   - A commit the broker refuses (the batch is written) is retried after a
//     backoff and with every later commit, without writing again, until it
//     succeeds or the partition is revoked: a consumer of the committed
//     offsets (a Redis recovery waiting for the write-behind) sees the end.
//
// The writer must tolerate the same items again (insert-ignore on a unique
// key): records written but not yet committed before a crash or a failed
// commit are delivered again.
type Runner[T any] struct {
	cl     *kgo.Client
	decode Decoder[T]
	w      Writer[T]
	cfg    config

	mu       sync.Mutex // guards everything below; held while a batch is written
	buf      []*entry[T]
	firstAt  time.Time // when the oldest buffered record arrived
	failing  bool
	attempt  int
	failedAt time.Time
	retryAt  time.Time
	assigned map[string]map[int32]bool
	paused   map[string][]int32
	// unacked holds, per partition, the last record written whose offset
	// the broker refused to commit; the commit is retried at commitAt (and
	// with every later commit) until it succeeds or the partition goes.
	unacked  map[topicPartition]*kgo.Record
	commitAt time.Time
	stopping bool
	drainCtx context.Context

	started   bool
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	runErr    error
}

// NewRunner returns a runner writing the records of the topic (WithTopic,
// usage-persist) with w, decoded by decode. kopts configure the Kafka client
// (kgo.SeedBrokers and whatever else the deployment needs); the runner adds
// the consumer group (WithGroup), kgo.DisableAutoCommit,
// kgo.BlockRebalanceOnPoll and its partition callbacks, which must not be
// overridden. The client is created here; Run starts consuming.
func NewRunner[T any](decode Decoder[T], w Writer[T], kopts []kgo.Opt, opts ...Option) (*Runner[T], error) {
	if decode == nil || w == nil {
		return nil, fmt.Errorf("%w: nil decoder or writer", ErrInvalid)
	}
	cfg := defaults()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	r := &Runner[T]{
		decode:   decode,
		w:        w,
		cfg:      cfg,
		assigned: map[string]map[int32]bool{},
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	all := append(append([]kgo.Opt{}, kopts...),
		kgo.ConsumeTopics(cfg.topic),
		kgo.ConsumerGroup(cfg.group),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(r.onAssigned),
		kgo.OnPartitionsRevoked(r.onRevoked),
		kgo.OnPartitionsLost(r.onLost),
	)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("writebehind: kafka client: %w", err)
	}
	r.cl = cl
	return r, nil
}

// Run consumes until ctx ends or Close is called, then drains: it keeps
// trying to write and commit what it holds (bounded by Close's context, or
// by WithDrainTimeout after ctx ended), leaves the group and closes the
// client. It returns nil after a complete drain; an error wrapping
// ErrNotWritten if records were left uncommitted (they are redelivered to
// the group). Run may be called once.
func (r *Runner[T]) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return fmt.Errorf("%w: Run called twice", ErrInvalid)
	}
	r.started = true
	r.mu.Unlock()
	defer close(r.done)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped := make(chan struct{})
	defer close(stopped)
	go func() { // ends with Run
		select {
		case <-r.stop:
			cancel()
		case <-stopped:
		}
	}()

	r.consume(runCtx)

	r.mu.Lock()
	dctx := r.drainCtx
	r.mu.Unlock()
	if dctx == nil {
		var dcancel context.CancelFunc
		dctx, dcancel = context.WithTimeout(context.WithoutCancel(ctx), r.cfg.drainTimeout)
		defer dcancel()
	}
	r.runErr = r.drain(dctx)
	r.cl.AllowRebalance()
	r.cl.Close()
	return r.runErr
}

// Close stops Run and waits until it has drained (bounded by ctx) and
// closed the client. Without Run, it closes the client.
func (r *Runner[T]) Close(ctx context.Context) error {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.drainCtx = ctx
		started := r.started
		r.started = true // a later Run returns at once
		r.mu.Unlock()
		close(r.stop)
		if !started {
			r.cl.Close()
			close(r.done)
		}
	})
	select {
	case <-r.done:
		return r.runErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Runner[T]) consume(ctx context.Context) {
	for ctx.Err() == nil {
		r.mu.Lock()
		now := time.Now()
		var wait time.Duration
		reason := ""
		switch {
		case r.failing:
			wait, reason = r.retryAt.Sub(now), "retry"
		case len(r.buf) > 0:
			wait, reason = r.firstAt.Add(r.cfg.interval).Sub(now), "interval"
		}
		// A refused commit is retried after the next poll, while that poll
		// holds rebalances off (BlockRebalanceOnPoll), as flushes are: a
		// commit racing a rebalance would wait for onRevoked, which waits
		// for r.mu.
		if w := r.commitAt.Sub(now); len(r.unacked) > 0 && !r.failing && (reason == "" || w < wait) {
			wait, reason = max(w, 0), "commit"
		}
		if reason != "" && reason != "commit" && wait <= 0 {
			r.flushLocked(ctx, reason)
			r.mu.Unlock()
			continue
		}
		failing := r.failing
		room := r.cfg.batchSize - len(r.buf)
		r.mu.Unlock()

		if failing { // fetching is paused: wait for the retry without holding a poll
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			continue
		}
		pctx, pcancel := ctx, context.CancelFunc(func() {})
		if reason != "" {
			pctx, pcancel = context.WithTimeout(ctx, wait)
		}
		fs := r.cl.PollRecords(pctx, room)
		pcancel()
		if fs.IsClientClosed() {
			return
		}
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				r.cfg.log.Warn("writebehind: fetch error", "topic", topic, "partition", p, "err", err)
			}
		})
		r.mu.Lock()
		fs.EachRecord(r.addLocked)
		if len(r.buf) >= r.cfg.batchSize {
			r.flushLocked(ctx, "size")
		}
		r.retryCommitLocked(ctx)
		r.mu.Unlock()
		r.cl.AllowRebalance()
	}
}

func (r *Runner[T]) addLocked(rec *kgo.Record) {
	e := &entry[T]{rec: rec}
	item, err := r.decode(rec)
	if err != nil {
		e.state, e.reason = rejected, err
	} else {
		e.item = item
	}
	if len(r.buf) == 0 {
		r.firstAt = time.Now()
	}
	r.buf = append(r.buf, e)
}

// flushLocked makes one attempt to finish the buffered batch: write,
// dead-letter, commit. On a transient failure it pauses fetching and
// schedules the retry.
func (r *Runner[T]) flushLocked(ctx context.Context, reason string) bool {
	if len(r.buf) == 0 {
		return true
	}
	ss := make([]*slot[T], len(r.buf))
	for i, e := range r.buf {
		ss[i] = &e.slot
	}
	if r.attempt == 0 {
		r.failedAt = time.Now()
	}
	r.attempt++
	if r.attempt > 1 && r.cfg.hooks.OnRetry != nil {
		r.cfg.hooks.OnRetry(RetryInfo{Items: count(ss, pending) + count(ss, rejected), Attempt: r.attempt})
	}
	err := writeOnce(ctx, r.w, ss, true)
	if err == nil {
		err = r.deadLetterLocked(ctx)
	}
	if err != nil {
		left := count(ss, pending) + count(ss, rejected)
		d := r.cfg.backoff(r.attempt)
		r.retryAt = time.Now().Add(d)
		r.cfg.log.Warn("writebehind: write failed; fetching paused, retrying", "items", left, "attempt", r.attempt, "backoff", d, "err", err)
		if r.cfg.hooks.OnError != nil {
			r.cfg.hooks.OnError(ErrorInfo{Items: left, Attempt: r.attempt, Err: err, Backoff: d})
		}
		if !r.failing {
			r.failing = true
			r.pauseLocked()
		}
		return false
	}
	recs := make([]*kgo.Record, len(r.buf))
	for i, e := range r.buf {
		recs[i] = e.rec
	}
	cerr := r.commitLocked(ctx, recs)
	if r.cfg.hooks.OnCommit != nil {
		r.cfg.hooks.OnCommit(CommitInfo{Records: len(recs), Err: cerr})
	}
	if r.cfg.hooks.OnFlush != nil {
		r.cfg.hooks.OnFlush(FlushInfo{Items: count(ss, written), Rejected: count(ss, handled),
			Attempts: r.attempt, Duration: time.Since(r.failedAt), Reason: reason})
	}
	r.buf = r.buf[:0]
	r.attempt = 0
	if r.failing {
		r.failing = false
		r.resumeLocked()
	}
	return true
}

func (r *Runner[T]) deadLetterLocked(ctx context.Context) error {
	var out []*kgo.Record
	var es []*entry[T]
	for _, e := range r.buf {
		if e.state != rejected {
			continue
		}
		out = append(out, kafkarecord.DeadLetter(e.rec, r.cfg.dlt, e.reason.Error()))
		es = append(es, e)
	}
	if len(out) == 0 {
		return nil
	}
	if err := r.cl.ProduceSync(ctx, out...).FirstErr(); err != nil {
		return fmt.Errorf("writebehind: dead-letter to %s: %w", r.cfg.dlt, err)
	}
	for _, e := range es {
		e.state = handled
		if r.cfg.hooks.OnReject != nil {
			r.cfg.hooks.OnReject(RejectInfo{Reason: e.reason, Record: e.rec})
		}
	}
	return nil
}

func (r *Runner[T]) assignedLocked() map[string][]int32 {
	out := map[string][]int32{}
	for t, ps := range r.assigned {
		for p := range ps {
			out[t] = append(out[t], p)
		}
	}
	return out
}

func (r *Runner[T]) pauseLocked() {
	ps := r.assignedLocked()
	if len(ps) == 0 {
		return
	}
	r.cl.PauseFetchPartitions(ps)
	r.paused = ps
	if r.cfg.hooks.OnPause != nil {
		r.cfg.hooks.OnPause(PauseInfo{Partitions: ps})
	}
}

func (r *Runner[T]) resumeLocked() {
	if len(r.paused) == 0 {
		return
	}
	ps := r.paused
	r.paused = nil
	r.cl.ResumeFetchPartitions(ps)
	if r.cfg.hooks.OnResume != nil {
		r.cfg.hooks.OnResume(PauseInfo{Partitions: ps})
	}
}

func (r *Runner[T]) onAssigned(_ context.Context, cl *kgo.Client, ps map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, parts := range ps {
		if r.assigned[t] == nil {
			r.assigned[t] = map[int32]bool{}
		}
		for _, p := range parts {
			r.assigned[t][p] = true
		}
	}
	if r.failing { // keep new partitions paused too until the database is back
		cl.PauseFetchPartitions(ps)
		if r.paused == nil {
			r.paused = map[string][]int32{}
		}
		for t, parts := range ps {
			r.paused[t] = append(r.paused[t], parts...)
		}
	}
}

// onRevoked commits on revoke: one more attempt to finish the batch (bounded
// by the interval, at most 5 s); what is still unwritten for the revoked
// partitions is dropped uncommitted, for their next owner to read again.
func (r *Runner[T]) onRevoked(ctx context.Context, _ *kgo.Client, ps map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if (len(r.buf) > 0 || len(r.unacked) > 0) && !r.stopping {
		fctx, cancel := context.WithTimeout(ctx, min(r.cfg.interval, 5*time.Second))
		if len(r.buf) > 0 {
			r.flushLocked(fctx, "revoke")
		} else {
			r.commitLocked(fctx, nil) // a refused commit: one more try before the partitions go
		}
		cancel()
	}
	r.forgetLocked(ps)
}

// onLost drops what it holds for the lost partitions, uncommitted.
func (r *Runner[T]) onLost(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetLocked(ps)
}

type topicPartition struct {
	topic     string
	partition int32
}

// commitLocked commits recs together with any earlier commit the broker
// refused (the last record per partition). On failure the rows exist but
// nothing outside can tell (a Redis recovery waits for this group's commits
// to reach the end of usage-persist): the commit is kept and retried after
// a backoff (retryCommitLocked), and with every later commit.
func (r *Runner[T]) commitLocked(ctx context.Context, recs []*kgo.Record) error {
	last := make(map[topicPartition]*kgo.Record, len(r.unacked)+len(recs))
	for tp, rec := range r.unacked {
		last[tp] = rec
	}
	for _, rec := range recs {
		tp := topicPartition{rec.Topic, rec.Partition}
		if prev, ok := last[tp]; !ok || rec.Offset > prev.Offset {
			last[tp] = rec
		}
	}
	if len(last) == 0 {
		return nil
	}
	all := make([]*kgo.Record, 0, len(last))
	for _, rec := range last {
		all = append(all, rec)
	}
	err := r.cl.CommitRecords(ctx, all...)
	if err == nil {
		r.unacked = nil
		return nil
	}
	// The rows exist: the records are not written again, only committed.
	r.unacked = last
	r.commitAt = time.Now().Add(r.cfg.backoff(1))
	r.cfg.log.Warn("writebehind: commit refused; retrying", "partitions", len(last), "retryIn", r.cfg.backoff(1), "err", err)
	return err
}

// retryCommitLocked retries a refused commit once it is due.
func (r *Runner[T]) retryCommitLocked(ctx context.Context) {
	if len(r.unacked) == 0 || time.Now().Before(r.commitAt) {
		return
	}
	err := r.commitLocked(ctx, nil)
	if r.cfg.hooks.OnCommit != nil {
		r.cfg.hooks.OnCommit(CommitInfo{Records: 0, Err: err})
	}
}

func (r *Runner[T]) forgetLocked(ps map[string][]int32) {
	gone := map[string]map[int32]bool{}
	for t, parts := range ps {
		gone[t] = map[int32]bool{}
		for _, p := range parts {
			gone[t][p] = true
			delete(r.assigned[t], p)
			delete(r.unacked, topicPartition{t, p})
		}
	}
	kept := r.buf[:0]
	for _, e := range r.buf {
		if !gone[e.rec.Topic][e.rec.Partition] {
			kept = append(kept, e)
		}
	}
	clear(r.buf[len(kept):])
	r.buf = kept
	r.cl.ResumeFetchPartitions(ps) // a partition assigned again later must not stay paused
	if len(r.buf) == 0 && r.failing {
		r.failing, r.attempt = false, 0
		r.resumeLocked()
	}
	for t, parts := range r.paused {
		var keep []int32
		for _, p := range parts {
			if !gone[t][p] {
				keep = append(keep, p)
			}
		}
		r.paused[t] = keep
	}
}

// drain keeps finishing the batch until it is committed or ctx ends.
func (r *Runner[T]) drain(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer func() { r.stopping = true }()
	for len(r.buf) > 0 {
		if r.failing {
			t := time.NewTimer(time.Until(r.retryAt))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %d records left uncommitted: %w", ErrNotWritten, len(r.buf), context.Cause(ctx))
		}
		r.flushLocked(ctx, "close")
	}
	if len(r.unacked) > 0 && ctx.Err() == nil {
		// Written but refused: one more try; if it fails too, the records
		// come again to the next owner, whose writer ignores them.
		r.commitLocked(ctx, nil)
	}
	return nil
}
