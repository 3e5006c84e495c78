package chaos

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
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/simulate"
)

// Traffic is a simulate.Sink that delivers every event several times, as
// separate records with identical key, value and headers (a producer retry
// or an upstream replay looks like that): the first copies at once, the
// last one a delay later, so copies of one event straddle polls, rebalances
// and faults. It remembers the ids of the events it produced.
type Traffic struct {
	pub    *simulate.Publisher
	copies int
	delay  time.Duration
	// ctx is every record's: not the simulator's, which Stop cancels while
	// copies may still be buffered. Close cancels it if flushing times out.
	ctx    context.Context
	cancel context.CancelFunc

	later   chan delayed
	stopped chan struct{}
	loop    sync.WaitGroup

	records atomic.Int64 // copies acknowledged by Kafka
	failed  atomic.Int64 // copies Kafka did not take
	mu      sync.Mutex
	ids     map[string]struct{} // events with at least one copy acknowledged
	lastErr error
}

type delayed struct {
	due time.Time
	id  string
	rec *kgo.Record
}

// NewTraffic returns a sink producing copies (≥ 1) records per event
// through pub, the last one delay after the others (when copies ≥ 2). Close
// it to flush.
func NewTraffic(pub *simulate.Publisher, copies int, delay time.Duration) (*Traffic, error) {
	if pub == nil || copies < 1 || delay < 0 {
		return nil, errors.New("chaos: traffic needs a publisher, copies ≥ 1 and delay ≥ 0")
	}
	t := &Traffic{pub: pub, copies: copies, delay: delay, ids: map[string]struct{}{},
		later: make(chan delayed, 1<<17), stopped: make(chan struct{})}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.loop.Add(1)
	go t.replays()
	return t, nil
}

var _ simulate.Sink = (*Traffic)(nil)

// Send implements simulate.Sink: done gets the outcome of the first copy.
// ctx bounds only the wait to queue the delayed copy.
func (t *Traffic) Send(ctx context.Context, ev simulate.Event, done func(error)) {
	rec, err := kafkarecord.New(envelope.TopicUsageEvents, ev)
	if err != nil {
		t.fail(err)
		done(err)
		return
	}
	id := ev.EventID
	now := t.copies
	if t.copies > 1 {
		now--
	}
	for i := range now {
		cb := func(err error) { t.acked(id, err) }
		if i == 0 {
			cb = func(err error) { t.acked(id, err); done(err) }
		}
		t.pub.SendRecord(t.ctx, clone(rec), cb)
	}
	if t.copies > 1 {
		select {
		case t.later <- delayed{due: time.Now().Add(t.delay), id: id, rec: clone(rec)}:
		case <-ctx.Done():
			t.acked(id, ctx.Err())
		}
	}
}

// clone is a new record with the same topic, key, value and headers: kgo
// owns a record until its produce finished, so a record is never sent twice.
func clone(r *kgo.Record) *kgo.Record {
	return &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: slices.Clone(r.Headers)}
}

func (t *Traffic) replays() {
	defer t.loop.Done()
	for {
		var d delayed
		select {
		case d = <-t.later:
		case <-t.stopped:
			select { // drain what is queued, then end
			case d = <-t.later:
			default:
				return
			}
		}
		if w := time.Until(d.due); w > 0 {
			time.Sleep(w)
		}
		t.pub.SendRecord(t.ctx, d.rec, func(err error) { t.acked(d.id, err) })
	}
}

func (t *Traffic) acked(id string, err error) {
	if err != nil {
		t.fail(err)
		return
	}
	t.records.Add(1)
	t.mu.Lock()
	t.ids[id] = struct{}{}
	t.mu.Unlock()
}

func (t *Traffic) fail(err error) {
	t.failed.Add(1)
	t.mu.Lock()
	t.lastErr = err
	t.mu.Unlock()
}

// Close sends the delayed copies still queued (at their time) and waits
// until Kafka acknowledged every record, within ctx. Send must not be
// called any more.
func (t *Traffic) Close(ctx context.Context) error {
	close(t.stopped)
	done := make(chan struct{})
	go func() { t.loop.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.cancel() // fails what is still buffered
		return fmt.Errorf("chaos: delayed copies not sent: %w", ctx.Err())
	}
	defer t.cancel()
	return t.pub.Flush(ctx)
}

// TrafficStats counts what was produced.
type TrafficStats struct {
	Records  int64 // records acknowledged (every copy counts)
	Failed   int64 // records that failed
	Distinct int   // events with at least one acknowledged copy
	LastErr  error
}

// Stats returns the counts so far.
func (t *Traffic) Stats() TrafficStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return TrafficStats{Records: t.records.Load(), Failed: t.failed.Load(), Distinct: len(t.ids), LastErr: t.lastErr}
}

// IDs returns the ids of the events produced (at least one copy
// acknowledged).
func (t *Traffic) IDs() map[string]struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]struct{}, len(t.ids))
	for id := range t.ids {
		out[id] = struct{}{}
	}
	return out
}
