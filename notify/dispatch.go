package notify

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// job is one delivery to one channel.
type job struct {
	n   Notification
	rec *kgo.Record // the notification-events record, for the dead letter
	// span is the notifier's span of rec, the parent of each attempt's.
	span    trace.SpanContext
	attempt int // attempts made so far
}

// dispatcher runs one channel's deliveries with its own workers, so a slow
// or failing channel never holds up the consumer or other channels, and
// keeps the families apart within the channel (doc/architecture.md,
// Notifications): each family has its own queue, the workers take the
// families in turn, one delivery of a family at a time, and a delivery
// waiting to retry waits off the workers. A family whose deliveries hang
// or fail therefore holds at most one worker, and its notifications beyond
// its share (familyLimit) are dead-lettered while other families' are
// still taken.
type dispatcher struct {
	name  string
	ch    Channel
	kinds map[string]bool
	n     *Notifier
	// queueLimit bounds the jobs waiting for a worker, all families
	// together; familyLimit the jobs one family holds (waiting, in flight or
	// waiting to retry).
	queueLimit, familyLimit int

	mu       sync.Mutex
	cond     *sync.Cond // ready gained a family, or the last job finished after close
	closed   bool
	families map[int64]*familyJobs // families holding jobs
	// ready are the families with jobs waiting and none in flight, in the
	// order the workers take them.
	ready   []int64
	waiting int // jobs waiting for a worker
	held    int // jobs accepted and not finished

	ctx    context.Context // cancelled when close gives up waiting
	cancel context.CancelFunc
	wg     sync.WaitGroup // the workers and the retry waits
}

// familyJobs are one family's jobs in a dispatcher.
type familyJobs struct {
	queue []job
	busy  bool // a delivery is in flight
	held  int  // queued, in flight or waiting to retry
}

func newDispatcher(n *Notifier, c channelCfg) *dispatcher {
	ctx, cancel := context.WithCancel(context.Background())
	d := &dispatcher{name: c.name, ch: c.ch, kinds: map[string]bool{}, n: n, queueLimit: n.cfg.queue,
		familyLimit: n.cfg.familyLimit, families: map[int64]*familyJobs{}, ctx: ctx, cancel: cancel}
	d.cond = sync.NewCond(&d.mu)
	for _, k := range c.kinds {
		d.kinds[string(k)] = true
	}
	return d
}

func (d *dispatcher) start(workers int) {
	for range workers {
		d.wg.Add(1)
		go func() { // ends when the dispatcher is closed and holds no job
			defer d.wg.Done()
			for {
				fid, j, ok := d.next()
				if !ok {
					return
				}
				d.attempt(fid, j)
			}
		}()
	}
}

// enqueue never blocks: a notification that finds the queue, or its
// family's share, full is dead-lettered.
func (d *dispatcher) enqueue(j job) {
	fid := j.n.FamilyID
	d.mu.Lock()
	f := d.families[fid]
	var reason string
	switch {
	case d.closed || d.waiting >= d.queueLimit:
		reason = fmt.Sprintf("channel %s: queue full, not delivered", d.name)
	case f != nil && f.held >= d.familyLimit:
		reason = fmt.Sprintf("channel %s: family %d's queue full (%d held), not delivered", d.name, fid, f.held)
	default:
		if f == nil {
			f = &familyJobs{}
			d.families[fid] = f
		}
		f.held++
		d.held++
		d.push(fid, f, j, false)
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	d.n.deadLetterAsync(j.rec, d.name, reason)
}

// push queues j for family fid (first: ahead of the family's other jobs, a
// retry), making the family ready if it was idle. d.mu is held.
func (d *dispatcher) push(fid int64, f *familyJobs, j job, first bool) {
	if first {
		f.queue = append([]job{j}, f.queue...)
	} else {
		f.queue = append(f.queue, j)
	}
	d.waiting++
	if !f.busy && len(f.queue) == 1 {
		d.ready = append(d.ready, fid)
		d.cond.Signal()
	}
}

// next waits for a ready family and takes its first job; ok is false once
// the dispatcher is closed and holds no job.
func (d *dispatcher) next() (fid int64, j job, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for len(d.ready) == 0 {
		if d.closed && d.held == 0 {
			return 0, job{}, false
		}
		d.cond.Wait()
	}
	fid = d.ready[0]
	d.ready = d.ready[1:]
	f := d.families[fid]
	j = f.queue[0]
	f.queue = f.queue[1:]
	f.busy = true
	d.waiting--
	return fid, j, true
}

// attempt makes one attempt of j, then finishes it, dead-letters it or sets
// it waiting to retry, and lets its family's next job go.
func (d *dispatcher) attempt(fid int64, j job) {
	j.attempt++
	err := d.send(j)
	sched := d.n.cfg.schedule
	retry := err != nil && !errors.Is(err, ErrPermanent) && j.attempt <= len(sched)
	if err != nil && !retry {
		d.n.deadLetterSync(j.rec, d.name, fmt.Sprintf("channel %s: %d attempts failed: %v", d.name, j.attempt, err))
	}
	d.mu.Lock()
	f := d.families[fid]
	f.busy = false
	if len(f.queue) > 0 {
		d.ready = append(d.ready, fid)
		d.cond.Signal()
	}
	if retry {
		d.wg.Add(1)
		go d.retryAfter(fid, j, sched[j.attempt-1], err) // ends when the wait does
	} else {
		d.done(fid, f)
	}
	d.mu.Unlock()
}

// send is one attempt, traced and reported to Hooks.OnSend.
func (d *dispatcher) send(j job) error {
	actx, span := d.n.cfg.tracer.Start(trace.ContextWithSpanContext(d.ctx, j.span), "notify channel send",
		trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("dpcs.channel", d.name), attribute.Int("dpcs.attempt", j.attempt),
			attribute.String("dpcs.event_id", j.n.EventID))
	}
	sctx, cancel := context.WithTimeout(actx, d.n.cfg.sendTimeout)
	start := time.Now()
	err := d.ch.Send(sctx, j.n)
	cancel()
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	if h := d.n.cfg.hooks.OnSend; h != nil {
		h(SendInfo{Channel: d.name, EventID: j.n.EventID, Attempt: j.attempt, Duration: time.Since(start), Err: err})
	}
	return err
}

// retryAfter waits wait, off the workers, then queues j again ahead of its
// family's other jobs; when the dispatcher gives up waiting (close), j is
// dead-lettered instead.
func (d *dispatcher) retryAfter(fid int64, j job, wait time.Duration, last error) {
	defer d.wg.Done()
	if err := d.n.cfg.sleep(d.ctx, wait); err != nil {
		d.n.deadLetterSync(j.rec, d.name, fmt.Sprintf("channel %s: shut down after %d failed attempts: %v", d.name, j.attempt, last))
		d.mu.Lock()
		d.done(fid, d.families[fid])
		d.mu.Unlock()
		return
	}
	d.mu.Lock()
	d.push(fid, d.families[fid], j, true)
	d.mu.Unlock()
}

// done forgets a finished job. d.mu is held.
func (d *dispatcher) done(fid int64, f *familyJobs) {
	f.held--
	d.held--
	if f.held == 0 {
		delete(d.families, fid)
	}
	if d.closed && d.held == 0 {
		d.cond.Broadcast() // the idle workers end
	}
}

// close stops accepting, lets the workers finish what the dispatcher holds
// (retries included) until ctx ends, then cancels them: what they still hold
// is dead-lettered.
func (d *dispatcher) close(ctx context.Context) error {
	d.mu.Lock()
	d.closed = true
	d.cond.Broadcast()
	d.mu.Unlock()
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }() // ends when the workers and the retry waits do
	select {
	case <-done:
		d.cancel()
		return nil
	case <-ctx.Done():
		d.cancel()
		<-done
		return ctx.Err()
	}
}
