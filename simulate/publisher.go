package simulate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
)

// ErrClosed is the outcome of a Send on a closed Publisher.
var ErrClosed = errors.New("simulate: publisher closed")

// ProducerOptions returns the seed's producer settings (doc/simulator.md,
// "Publisher") as kgo client options, for kgo.NewClient together with the seed
// brokers: linger 5 ms, 64 KiB batches, lz4, a 64 MiB buffer, the given acks
// (the seed uses kgo.LeaderAck(); idempotent writes, which need all acks, are
// disabled for the others), usage-events as the default topic, and kgo's
// sticky key partitioner, which hashes keys with murmur2 exactly like Kafka's
// Java client so records co-partition with Java producers.
func ProducerOptions(acks kgo.Acks) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.DefaultProduceTopic(envelope.TopicUsageEvents),
		kgo.ProducerLinger(5 * time.Millisecond),
		kgo.ProducerBatchMaxBytes(64 << 10),
		kgo.ProducerBatchCompression(kgo.Lz4Compression()),
		kgo.MaxBufferedBytes(64 << 20),
		kgo.RequiredAcks(acks),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
	}
	if acks != kgo.AllISRAcks() {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	return opts
}

// ParseAcks parses an acks setting as Kafka spells it: "all" or "-1"
// (every in-sync replica), "1" or "leader", "0" or "none".
func ParseAcks(s string) (kgo.Acks, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "all", "-1":
		return kgo.AllISRAcks(), nil
	case "1", "leader":
		return kgo.LeaderAck(), nil
	case "0", "none":
		return kgo.NoAck(), nil
	}
	return kgo.Acks{}, invalidf("acks must be all, -1, 1, leader, 0 or none, got %q", s)
}

// PublishError describes a record that could not be produced.
type PublishError struct {
	Topic string
	Key   string // the familyId
	Err   error
}

func (e *PublishError) Error() string {
	return fmt.Sprintf("produce to %s (key %s): %v", e.Topic, e.Key, e.Err)
}

func (e *PublishError) Unwrap() error { return e.Err }

// PublisherHooks are optional callbacks; nil funcs are skipped. They run on
// kgo's promise goroutine and must not block.
type PublisherHooks struct {
	// OnError is called for every record that failed.
	OnError func(*PublishError)
}

// PublisherStats is a snapshot of a Publisher.
type PublisherStats struct {
	Produced  uint64 // records acknowledged
	Errors    uint64 // records failed
	InFlight  int64  // records handed to kgo and not yet acknowledged or failed
	LastError string // the most recent failure, "" if none
}

// PublisherOption configures a Publisher.
type PublisherOption func(*Publisher) error

// WithTopic sets the topic of usage events. Default: usage-events.
func WithTopic(topic string) PublisherOption {
	return func(p *Publisher) error {
		if topic == "" {
			return invalidf("empty topic")
		}
		p.topic = topic
		return nil
	}
}

// WithMaxInFlight bounds the records handed to kgo and not yet acknowledged;
// Send blocks while the bound is reached. Default: 16384.
func WithMaxInFlight(n int) PublisherOption {
	return func(p *Publisher) error {
		if n < 1 {
			return invalidf("max in flight must be positive, got %d", n)
		}
		p.sem = make(chan struct{}, n)
		return nil
	}
}

// WithPublisherHooks sets the hooks. Default: none.
func WithPublisherHooks(h PublisherHooks) PublisherOption {
	return func(p *Publisher) error { p.hooks = h; return nil }
}

// WithPublisherLogger sets the logger for produce failures (at most one
// line per second). Default: a discard logger.
func WithPublisherLogger(l *slog.Logger) PublisherOption {
	return func(p *Publisher) error {
		if l == nil {
			return invalidf("nil logger")
		}
		p.log = l
		return nil
	}
}

// Publisher produces usage events to Kafka through a caller-owned
// *kgo.Client (build it with ProducerOptions): each event becomes a record
// keyed by its familyId (kafkarecord.New), so one family's events stay in
// order on one partition. It bounds the records in flight, counts
// acknowledgements and failures, and reports each outcome to the caller. It is
// the Kafka Sink of a Simulator and safe for concurrent use.
type Publisher struct {
	client *kgo.Client
	topic  string
	sem    chan struct{}
	hooks  PublisherHooks
	log    *slog.Logger

	closed   atomic.Bool
	produced atomic.Uint64
	errs     atomic.Uint64
	inflight atomic.Int64
	lastLog  atomic.Int64 // unix nanos of the last error logged
	mu       sync.Mutex
	lastErr  string
}

var _ Sink = (*Publisher)(nil)

// NewPublisher returns a publisher producing through client. Closing the
// publisher does not close the client.
func NewPublisher(client *kgo.Client, opts ...PublisherOption) (*Publisher, error) {
	if client == nil {
		return nil, invalidf("nil kgo client")
	}
	p := &Publisher{client: client, topic: envelope.TopicUsageEvents, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(p); err != nil {
			return nil, err
		}
	}
	if p.sem == nil {
		p.sem = make(chan struct{}, 16384)
	}
	return p, nil
}

// Send encodes ev and produces it; done receives the outcome. It blocks
// while the in-flight bound is reached, until ctx is done. Records keep ctx:
// cancelling it fails the records still buffered (see kgo.Client.Produce).
func (p *Publisher) Send(ctx context.Context, ev Event, done func(error)) {
	r, err := kafkarecord.New(p.topic, ev)
	if err != nil {
		p.fail(&PublishError{Topic: p.topic, Key: fmt.Sprint(ev.Payload.FamilyID), Err: err}, done)
		return
	}
	p.SendRecord(ctx, r, done)
}

// SendRecord produces an already built record (any topic, e.g. a
// POLICY_UPDATED envelope from kafkarecord.New); done, when not nil,
// receives the outcome.
func (p *Publisher) SendRecord(ctx context.Context, r *kgo.Record, done func(error)) {
	if p.closed.Load() {
		p.fail(&PublishError{Topic: r.Topic, Key: string(r.Key), Err: ErrClosed}, done)
		return
	}
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		p.fail(&PublishError{Topic: r.Topic, Key: string(r.Key), Err: ctx.Err()}, done)
		return
	}
	p.inflight.Add(1)
	p.client.Produce(ctx, r, func(r *kgo.Record, err error) {
		<-p.sem
		p.inflight.Add(-1)
		if err != nil {
			p.fail(&PublishError{Topic: r.Topic, Key: string(r.Key), Err: err}, done)
			return
		}
		p.produced.Add(1)
		if done != nil {
			done(nil)
		}
	})
}

// Publish produces ev and waits for the outcome.
func (p *Publisher) Publish(ctx context.Context, ev Event) error {
	ch := make(chan error, 1)
	p.Send(ctx, ev, func(err error) { ch <- err })
	return <-ch
}

func (p *Publisher) fail(e *PublishError, done func(error)) {
	p.errs.Add(1)
	p.mu.Lock()
	p.lastErr = e.Error()
	p.mu.Unlock()
	if now, last := time.Now().UnixNano(), p.lastLog.Load(); now-last >= int64(time.Second) && p.lastLog.CompareAndSwap(last, now) {
		p.log.Warn("produce failed", "topic", e.Topic, "key", e.Key, "err", e.Err, "errors", p.errs.Load())
	}
	if p.hooks.OnError != nil {
		p.hooks.OnError(e)
	}
	if done != nil {
		done(e)
	}
}

// Stats returns a snapshot.
func (p *Publisher) Stats() PublisherStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PublisherStats{Produced: p.produced.Load(), Errors: p.errs.Load(), InFlight: p.inflight.Load(), LastError: p.lastErr}
}

// Flush waits until every record sent so far is acknowledged or failed.
func (p *Publisher) Flush(ctx context.Context) error {
	if err := p.client.Flush(ctx); err != nil {
		return err
	}
	for p.inflight.Load() > 0 { // promises may still be running
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// Close rejects further sends (their outcome is ErrClosed) and flushes. It
// does not close the client. Close is idempotent.
func (p *Publisher) Close(ctx context.Context) error {
	p.closed.Store(true)
	return p.Flush(ctx)
}
