package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/backoff"
)

// Errors of the package.
var (
	// ErrInvalid: a bad option, a nil handler, or Run called twice or after
	// Close.
	ErrInvalid = errors.New("consumer: invalid")
	// ErrUncommitted: Run stopped (its context ended, or Close's) before it
	// could finish and commit every record it held; they are read again by
	// the partitions' next owner.
	ErrUncommitted = errors.New("consumer: records left uncommitted")
)

// Permanent marks err, returned by a Handler or a finish step, as one that
// retrying cannot fix: Run stops and returns it, and nothing of the batch or
// after it is committed. errors.Is and errors.As see through it.
func Permanent(err error) error { return backoff.Permanent(err) }

// Handler handles batches of records. An error means the batch could not be
// handled now (a dependency failed): fetching pauses, and the same batch is
// handed to Handle again after a backoff, for as long as it takes; nothing
// of it, and nothing after it, is committed meanwhile. An error marked
// Permanent stops Run instead.
//
// Handle is never called concurrently with itself. It must honour ctx: a
// cancelled ctx means the consumer is stopping (it drains with a fresh
// context). It must not modify b.Records.
type Handler interface {
	Handle(ctx context.Context, b *Batch) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, b *Batch) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, b *Batch) error { return f(ctx, b) }

// Consumer runs one consumer group's lifecycle over a Handler: poll, hand
// batches to the handler, dead-letter what it rejects, commit after
// success, pause and back off while it fails, finish what it can before a
// revoke, drain on Close. See the package documentation.
type Consumer struct {
	cl  *kgo.Client
	h   Handler
	cfg config

	// work is held by whoever handles or commits the held batch: the loop
	// (and its drain) or a rebalance callback. Polls already keep them
	// apart (kgo.BlockRebalanceOnPoll: callbacks run only once the loop
	// allowed rebalances, and the loop works only while it holds a poll);
	// work makes that explicit.
	work sync.Mutex

	// mu guards the fields below; it is never held across a call that
	// waits for Kafka or a handler.
	mu       sync.Mutex
	pend     *Batch        // records accumulating, or the batch being retried
	firstAt  time.Time     // when pend's first record arrived
	held     []*kgo.Record // records polled while pend was being retried
	heldLag  int64
	failing  bool      // pend failed; retried at retryAt, fetching paused
	failures int       // pend's consecutive failures
	retryAt  time.Time //
	tailN    int       // records of the outstanding finish step's batch
	// unacked holds, per partition, the last record of a commit the broker
	// refused, or of batches whose commit waits (WithCommitEvery); it is
	// committed at commitAt and with every later commit, until it succeeds
	// or the partition goes. kept counts the waiting batches' records;
	// lastCommit is when the last commit was sent.
	unacked        map[topicPartition]*kgo.Record
	commitFailures int
	commitAt       time.Time
	kept           map[topicPartition]int
	lastCommit     time.Time
	pauses         int  // pause references (the loop's retry, finish steps)
	stopping       bool // drained: callbacks only forget
	draining       bool // the drain commits: a commit it cannot make is no stop's

	pending atomic.Int64

	// Loop-only state (Run's goroutine).
	tail       *tail
	unfinished *Batch // a finish step's batch the context interrupted
	fatal      bool   // a permanent failure: nothing after it is committed
	lastAllow  time.Time

	life      sync.Mutex // guards started and closeCtx
	started   bool
	closeCtx  context.Context
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	runErr    error // set before done is closed
}

// tail is a batch whose finish step, dead letters and commit run while the
// loop polls on.
type tail struct {
	b    *Batch
	done chan struct{}
	over context.Context // cancelled when the tail ends: a poll waiting with it returns
	err  error           // set before done is closed
}

// New returns a consumer handing batches to h. kopts configure the Kafka
// client (kgo.SeedBrokers, TLS/SASL, tuning, producer settings for the dead
// letters and for whatever the handler produces through Client); the
// consumer adds its group, its topics, kgo.DisableAutoCommit,
// kgo.BlockRebalanceOnPoll, its partition callbacks, with
// WithReadCommitted the isolation level, which must not be overridden, and
// with WithFetchWait the fetch wait and minimum bytes, which win over
// kopts'.
// WithGroup and WithTopics are required. The client is created here; Run
// starts consuming.
func New(h Handler, kopts []kgo.Opt, opts ...Option) (*Consumer, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: nil handler", ErrInvalid)
	}
	cfg := defaults()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	c := &Consumer{h: h, cfg: cfg, stop: make(chan struct{}), done: make(chan struct{})}
	all := append(slices.Clip(kopts),
		kgo.ConsumerGroup(cfg.group),
		kgo.ConsumeTopics(cfg.topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(c.onAssigned),
		kgo.OnPartitionsRevoked(c.onRevoked),
		kgo.OnPartitionsLost(c.onLost),
	)
	if cfg.readCommitted {
		all = append(all, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	if cfg.fetchWait > 0 {
		all = append(all, kgo.FetchMaxWait(cfg.fetchWait), kgo.FetchMinBytes(cfg.fetchMinBytes))
	}
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("consumer: kafka client: %w", err)
	}
	c.cl = cl
	return c, nil
}

// Client returns the consumer's Kafka client, to produce through (a
// handler's outputs, dead letters of its own) and for metrics. Do not poll,
// commit, pause or close it.
func (c *Consumer) Client() *kgo.Client { return c.cl }

// Group returns the consumer group.
func (c *Consumer) Group() string { return c.cfg.group }

// DeadLetterTopic returns the topic where records of topic are
// dead-lettered (WithDLT).
func (c *Consumer) DeadLetterTopic(topic string) string {
	if c.cfg.dlt != "" {
		return c.cfg.dlt
	}
	return envelope.DLT(topic)
}

// Pending returns how many polled records the consumer holds uncommitted:
// accumulating, being handled or retried, or finishing.
func (c *Consumer) Pending() int { return int(c.pending.Load()) }

// Run consumes until ctx ends or Close is called, then drains: it finishes
// and commits what it holds (bounded by Close's context, or by
// WithDrainTimeout after ctx ended), runs the WithBeforeClose functions,
// flushes, leaves the group and closes the client. It returns nil after a
// complete drain; an error wrapping ErrUncommitted if records were left
// uncommitted (they are redelivered to the group); a handler's Permanent
// error. Run may be called once.
func (c *Consumer) Run(ctx context.Context) error {
	c.life.Lock()
	if c.started {
		c.life.Unlock()
		return fmt.Errorf("%w: Run called twice or after Close", ErrInvalid)
	}
	c.started = true
	c.life.Unlock()
	defer close(c.done)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped := make(chan struct{})
	go func() { // ends with the loop
		select {
		case <-c.stop:
			cancel()
		case <-stopped:
		}
	}()
	loopErr := c.loop(runCtx)
	close(stopped)

	dctx, dcancel := c.drainContext(ctx)
	defer dcancel()
	c.hold()
	drainErr := c.drain(dctx)
	closeErr := c.shutdown(dctx)
	c.runErr = errors.Join(loopErr, drainErr, closeErr)
	return c.runErr
}

// Close stops Run and waits until it has drained (bounded by ctx) and closed
// the client; it returns what Run returned. Without Run, it runs the
// WithBeforeClose functions and closes the client. Close is idempotent. It
// must not be called from a Handler, a finish step or a hook: it waits for
// them.
func (c *Consumer) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		c.life.Lock()
		c.closeCtx = ctx
		started := c.started
		c.started = true // a later Run refuses
		c.life.Unlock()
		close(c.stop)
		if !started {
			c.runErr = c.shutdown(ctx)
			close(c.done)
		}
	})
	<-c.done
	return c.runErr
}

// drainContext is the context of the drain: Close's, or the drain timeout
// after ctx ended, cut short by a Close during the drain.
func (c *Consumer) drainContext(ctx context.Context) (context.Context, context.CancelFunc) {
	c.life.Lock()
	cctx := c.closeCtx
	c.life.Unlock()
	if cctx != nil {
		return context.WithCancel(cctx)
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.drainTimeout)
	over := make(chan struct{})
	go func() { // ends with the drain
		select {
		case <-c.stop:
			c.life.Lock()
			cctx := c.closeCtx
			c.life.Unlock()
			select {
			case <-cctx.Done():
				cancel()
			case <-over:
			}
		case <-over:
		}
	}()
	return dctx, func() { close(over); cancel() }
}

// shutdown runs the before-close functions, flushes, leaves the group and
// closes the client.
func (c *Consumer) shutdown(ctx context.Context) error {
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
	var errs []error
	for _, f := range c.cfg.beforeClose {
		if err := f(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	_ = c.cl.Flush(ctx) // records produced through Client: their promises report failures
	c.cl.AllowRebalance()
	c.cl.Close()
	return errors.Join(errs...)
}

// hold keeps rebalances off, as a poll does, until the next AllowRebalance:
// a poll with a cancelled context returns at once (once a running
// rebalance is done) holding them.
func (c *Consumer) hold() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.cl.PollRecords(ctx, 1)
}

// errStopped: the context ended before an outstanding finish step's batch
// was committed; the loop stops and the drain completes it.
var errStopped = errors.New("consumer: stopped")

// loop polls and handles until ctx ends or a step fails permanently. Every
// wait happens in a poll, with a deadline when something is due (a retry,
// a batch's interval, a refused commit), so rebalances run only while the
// loop waits; between a non-empty poll and AllowRebalance the loop holds
// rebalances off and works.
func (c *Consumer) loop(ctx context.Context) error {
	c.lastAllow = time.Now()
	for ctx.Err() == nil {
		pctx, pcancel := c.pollContext(ctx)
		fs := c.cl.PollRecords(pctx, c.room())
		pcancel()
		if fs.IsClientClosed() {
			return nil
		}
		if len(fs) == 0 {
			continue // nothing came and nothing is held: no poll to work under
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				c.cfg.log.Warn("consumer: fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		if ctx.Err() != nil {
			c.work.Lock()
			c.add(fs) // the drain handles them
			c.work.Unlock()
			return nil
		}
		if err := c.iterate(ctx, fs); err != nil {
			if errors.Is(err, errStopped) {
				return nil
			}
			return err
		}
		if ctx.Err() != nil {
			return nil // the drain holds this poll
		}
		if c.tail == nil {
			c.cl.AllowRebalance()
			c.lastAllow = time.Now()
		}
	}
	return nil
}

// pollContext bounds the next poll by what is due next, and by the end of
// the outstanding finish step (an idle poll then returns to let the
// rebalances in).
func (c *Consumer) pollContext(ctx context.Context) (context.Context, context.CancelFunc) {
	base := ctx
	if c.tail != nil {
		base = c.tail.over
	}
	c.mu.Lock()
	var wake time.Time
	switch {
	case c.failing:
		wake = c.retryAt
	case c.pend != nil && c.cfg.batchSize > 0:
		wake = c.firstAt.Add(c.cfg.interval)
	case c.pend != nil:
		wake = time.Now() // records held back while a batch was retried: due now
	}
	if len(c.unacked) > 0 && (!c.failing || c.commitFailures == 0) && c.tail == nil && (wake.IsZero() || c.commitAt.Before(wake)) {
		wake = c.commitAt
	}
	c.mu.Unlock()
	if wake.IsZero() {
		return base, func() {}
	}
	return context.WithDeadline(base, wake)
}

// room is how many records the next poll may take.
func (c *Consumer) room() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg.batchSize == 0 {
		return c.cfg.maxPoll
	}
	n := c.cfg.batchSize
	if c.pend != nil && !c.failing {
		n -= len(c.pend.Records)
	}
	return max(1, min(c.cfg.maxPoll, n))
}

// iterate works under the poll just returned: it takes its records, handles
// the batch if it is due, and retries a refused commit if that is due.
func (c *Consumer) iterate(ctx context.Context, fs kgo.Fetches) error {
	c.work.Lock()
	defer c.work.Unlock()
	if err := c.reapTail(); err != nil {
		return err
	}
	c.add(fs)
	now := time.Now()
	c.mu.Lock()
	b := c.pend
	reason := ""
	switch {
	case b == nil:
	case c.failing:
		if !now.Before(c.retryAt) {
			reason = "retry"
		}
	case c.cfg.batchSize == 0:
		reason = "poll"
	case len(b.Records) >= c.cfg.batchSize:
		reason = "size"
	case !now.Before(c.firstAt.Add(c.cfg.interval)):
		reason = "interval"
	}
	c.mu.Unlock()
	if reason != "" {
		if err := c.process(ctx, b, reason); err != nil {
			return err
		}
	}
	c.mu.Lock()
	// Offsets kept by WithCommitEvery are committed when due also while a
	// later batch is retried: they belong to batches already done.
	due := len(c.unacked) > 0 && (!c.failing || c.commitFailures == 0) && !time.Now().Before(c.commitAt)
	c.mu.Unlock()
	if due && c.tail == nil && ctx.Err() == nil {
		_ = c.commit(ctx, nil, 0)
	}
	return nil
}

// add takes a poll's records: into the batch accumulating, a new batch, or
// aside while the batch is being retried (it never grows between attempts).
func (c *Consumer) add(fs kgo.Fetches) {
	var recs []*kgo.Record
	var lag int64
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if n := len(p.Records); n > 0 {
			recs = append(recs, p.Records...)
			lag += max(p.HighWatermark-p.Records[n-1].Offset-1, 0)
		}
	})
	if len(recs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.pend == nil:
		c.pend, c.firstAt = &Batch{Records: recs, Lag: lag}, time.Now()
	case c.cfg.batchSize > 0 && !c.failing && c.pend.attempts == 0:
		c.pend.Records = append(c.pend.Records, recs...)
		c.pend.Lag = lag
	default:
		c.held = append(c.held, recs...)
		c.heldLag = lag
	}
	c.countLocked()
}

// process makes one attempt at b, the pending batch: the handler, then
// either a finish step started asynchronously or the dead letters and the
// commit. A failure schedules the retry (or, permanent, stops the loop).
func (c *Consumer) process(ctx context.Context, b *Batch, reason string) error {
	b.reason = reason
	err := c.handle(ctx, b)
	if err == nil && b.finish != nil {
		if err := c.waitTail(); err != nil { // batches commit in order
			return err
		}
		c.startTail(ctx, b)
		if time.Since(c.lastAllow) >= c.cfg.rebalanceEvery {
			return c.waitTail() // and the loop lets a rebalance in
		}
		return nil
	}
	if err == nil {
		if err := c.waitTail(); err != nil {
			return err
		}
		err = c.complete(ctx, b)
	}
	if err == nil {
		c.finished(b)
		c.release(b)
		return nil
	}
	return c.failed(ctx, b, err)
}

// handle calls the handler unless b was handled already.
func (c *Consumer) handle(ctx context.Context, b *Batch) error {
	if b.step != stepHandle {
		return nil
	}
	if b.attempts == 0 {
		b.started = time.Now()
	}
	b.attempts++
	b.finish = nil
	if err := c.h.Handle(ctx, b); err != nil {
		b.finish = nil
		return &stepError{StepHandle, err}
	}
	b.step = stepFinish
	return nil
}

// complete runs b's remaining steps in order: handler, finish step, dead
// letters, commit. A refused commit does not fail it (see unacked).
func (c *Consumer) complete(ctx context.Context, b *Batch) error {
	if err := c.handle(ctx, b); err != nil {
		return err
	}
	if b.step == stepFinish {
		if b.finish != nil {
			if err := b.finish(ctx); err != nil {
				return &stepError{StepFinish, err}
			}
		}
		b.step = stepDeadLetter
	}
	if b.step == stepDeadLetter {
		if err := c.deadLetters(ctx, b); err != nil {
			return &stepError{StepDeadLetter, err}
		}
		b.step = stepCommit
	}
	if b.step == stepCommit {
		if !c.keep(b) {
			_ = c.commit(ctx, b.Records, len(b.Records))
		}
		b.step = stepDone
	}
	return nil
}

// stepError names the step that failed.
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

// split returns the failed step and its error.
func split(err error) (string, error) {
	var se *stepError
	if errors.As(err, &se) {
		return se.step, se.err
	}
	return StepHandle, err
}

// failed schedules the retry of the pending batch after a failed attempt.
func (c *Consumer) failed(ctx context.Context, b *Batch, err error) error {
	step, cause := split(err)
	if backoff.IsPermanent(err) {
		c.fatal = true
		return fmt.Errorf("consumer: %s failed permanently on a batch of %d records: %w", step, len(b.Records), cause)
	}
	if ctx.Err() != nil {
		return nil // stopping: the drain retries with its own context
	}
	c.mu.Lock()
	c.failures++
	n := c.failures
	wait := c.cfg.backoff.Delay(n)
	c.retryAt = time.Now().Add(wait)
	first := !c.failing
	c.failing = true
	if c.commitFailures == 0 && len(c.unacked) > 0 {
		// Offsets kept by WithCommitEvery belong to batches already done:
		// committed now, not when the interval is up (a recovery's drain
		// waits for the processors' commits to stop moving).
		c.commitAt = time.Now()
	}
	c.mu.Unlock()
	if first {
		c.pause()
	}
	c.cfg.log.Warn("consumer: batch failed; fetching paused, retrying", "step", step, "records", len(b.Records),
		"attempt", n, "wait", wait, "err", cause)
	c.cfg.hooks.retry(RetryInfo{Step: step, Records: len(b.Records), Attempt: n, Wait: wait, Err: cause})
	return nil
}

// finished reports a committed batch.
func (c *Consumer) finished(b *Batch) {
	dead := 0
	for _, d := range b.dead {
		if d.sent {
			dead++
		}
	}
	c.cfg.hooks.batch(BatchInfo{Records: len(b.Records), DeadLettered: dead, Attempts: b.attempts,
		Duration: time.Since(b.started), Reason: b.reason})
}

// release forgets b, done or handed to a finish step (see nextLocked).
func (c *Consumer) release(b *Batch) {
	c.mu.Lock()
	resume := false
	if c.pend == b {
		c.pend = nil
		resume = c.nextLocked()
	}
	c.countLocked()
	c.mu.Unlock()
	if resume {
		c.resume()
	}
}

// nextLocked follows a pending batch that is gone (done, handed to a finish
// step, or emptied by a revoke): its retries end, and the records held back
// while it was retried become the next batch. It reports whether fetching,
// paused for the retries, must resume.
func (c *Consumer) nextLocked() (resume bool) {
	resume = c.failing
	c.failing, c.failures = false, 0
	if len(c.held) > 0 {
		c.pend, c.firstAt = &Batch{Records: c.held, Lag: c.heldLag}, time.Now()
		c.held, c.heldLag = nil, 0
	}
	return resume
}

func (c *Consumer) countLocked() {
	n := c.tailN + len(c.held)
	if c.pend != nil {
		n += len(c.pend.Records)
	}
	c.pending.Store(int64(n))
}

// startTail runs b's finish step, dead letters and commit while the loop
// polls on.
func (c *Consumer) startTail(ctx context.Context, b *Batch) {
	over, end := context.WithCancel(ctx)
	t := &tail{b: b, done: make(chan struct{}), over: over}
	c.tail = t
	c.mu.Lock()
	c.tailN = len(b.Records)
	c.mu.Unlock()
	c.release(b)
	go func() { // joined by waitTail or the drain
		defer close(t.done)
		defer end()
		t.err = c.retry(ctx, b, func() error { return c.complete(ctx, b) })
		if t.err == nil {
			c.finished(b)
		}
	}()
}

// reapTail joins the finish step if it is over.
func (c *Consumer) reapTail() error {
	if c.tail == nil {
		return nil
	}
	select {
	case <-c.tail.done:
		return c.waitTail()
	default:
		return nil
	}
}

// waitTail waits for the outstanding finish step, if any. It returns its
// permanent error, or errStopped when the context ended before its batch
// was committed (the drain completes it).
func (c *Consumer) waitTail() error {
	t := c.tail
	if t == nil {
		return nil
	}
	<-t.done
	c.tail = nil
	c.mu.Lock()
	c.tailN = 0
	c.countLocked()
	c.mu.Unlock()
	switch {
	case t.err == nil:
		return nil
	case backoff.IsPermanent(t.err):
		c.fatal = true
		step, cause := split(t.err)
		return fmt.Errorf("consumer: %s failed permanently on a batch of %d records: %w", step, len(t.b.Records), cause)
	default:
		c.unfinished = t.b
		c.mu.Lock()
		c.tailN = len(t.b.Records)
		c.countLocked()
		c.mu.Unlock()
		return errStopped
	}
}

// retry runs fn (steps of b) until it succeeds, fails permanently or ctx
// ends, pausing fetching while it waits.
func (c *Consumer) retry(ctx context.Context, b *Batch, fn func() error) error {
	paused := false
	defer func() {
		if paused {
			c.resume()
		}
	}()
	return backoff.Retry(ctx, c.cfg.backoff, fn, func(attempt int, wait time.Duration, err error) {
		if !paused {
			c.pause()
			paused = true
		}
		step, cause := split(err)
		c.cfg.log.Warn("consumer: batch failed; fetching paused, retrying", "step", step, "records", len(b.Records),
			"attempt", attempt, "wait", wait, "err", cause)
		c.cfg.hooks.retry(RetryInfo{Step: step, Records: len(b.Records), Attempt: attempt, Wait: wait, Err: cause})
	})
}

// drain finishes, in order, what the loop left: an interrupted finish
// step's batch, the pending batch, the records held back. It stops at the
// first it cannot finish before ctx ends: nothing after it is committed.
func (c *Consumer) drain(ctx context.Context) error {
	c.work.Lock()
	defer c.work.Unlock()
	if c.tail != nil {
		<-c.tail.done
		if err := c.waitTail(); err != nil && !errors.Is(err, errStopped) {
			return err
		}
	}
	c.mu.Lock()
	c.draining = true
	c.mu.Unlock()
	var queue []*Batch
	if c.unfinished != nil {
		queue = append(queue, c.unfinished)
	}
	c.mu.Lock()
	if !c.fatal {
		if c.pend != nil {
			queue = append(queue, c.pend)
		}
		if len(c.held) > 0 {
			queue = append(queue, &Batch{Records: c.held, Lag: c.heldLag})
			c.held, c.heldLag = nil, 0
		}
	}
	c.mu.Unlock()
	for i, b := range queue {
		if ctx.Err() != nil {
			return uncommitted(queue[i:], context.Cause(ctx))
		}
		b.reason = "close"
		if err := c.retry(ctx, b, func() error { return c.complete(ctx, b) }); err != nil {
			if backoff.IsPermanent(err) {
				step, cause := split(err)
				return errors.Join(fmt.Errorf("consumer: %s failed permanently on a batch of %d records: %w", step, len(b.Records), cause),
					uncommitted(queue[i:], err))
			}
			return uncommitted(queue[i:], err)
		}
		c.finished(b)
		if b == c.unfinished {
			c.unfinished = nil
			c.mu.Lock()
			c.tailN = 0
			c.countLocked()
			c.mu.Unlock()
		} else {
			c.release(b)
		}
	}
	c.mu.Lock()
	refused := len(c.unacked) > 0
	c.mu.Unlock()
	if refused && ctx.Err() == nil {
		// Handled but refused: one more try; if it fails too, the records
		// come again to the next owner.
		_ = c.commit(ctx, nil, 0)
	}
	return nil
}

func uncommitted(bs []*Batch, cause error) error {
	n := 0
	for _, b := range bs {
		n += len(b.Records)
	}
	return fmt.Errorf("%w: %d records: %w", ErrUncommitted, n, cause)
}
