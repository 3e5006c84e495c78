package writebehind

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	_ "modernc.org/sqlite"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
)

// memWriter records every successful batch and fails on demand.
type memWriter[T comparable] struct {
	mu      sync.Mutex
	batches [][]T
	calls   int
	fail    func(call int, batch []T) error // nil: succeed
	block   chan struct{}                   // non-nil: Write waits for it
}

func (w *memWriter[T]) Write(ctx context.Context, batch []T) error {
	if w.block != nil {
		select {
		case <-w.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls++
	if w.fail != nil {
		if err := w.fail(w.calls, batch); err != nil {
			return err
		}
	}
	w.batches = append(w.batches, append([]T{}, batch...))
	return nil
}

func (w *memWriter[T]) all() []T {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []T
	for _, b := range w.batches {
		out = append(out, b...)
	}
	return out
}

func (w *memWriter[T]) sizes() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int
	for _, b := range w.batches {
		out = append(out, len(b))
	}
	return out
}

func openSQLite(tb testing.TB) *sql.DB {
	tb.Helper()
	dsn := "file:" + filepath.Join(tb.TempDir(), "wb.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

func newFake(tb testing.TB, topics ...string) *kfake.Cluster {
	tb.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(10, envelope.TopicUsagePersist), kfake.SeedTopics(1, envelope.DLT(envelope.TopicUsagePersist))}
	for _, t := range topics {
		opts = append(opts, kfake.SeedTopics(10, t))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

func clientOpts(c *kfake.Cluster) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.SessionTimeout(3 * time.Second),
		kgo.FetchMaxWait(100 * time.Millisecond),
	}
}

func producer(tb testing.TB, c *kfake.Cluster) *kgo.Client {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

var t0 = time.Date(2026, 2, 6, 14, 30, 0, 0, time.UTC)

// persistRecord is the usage-persist record of usage event origin.
func persistRecord(tb testing.TB, origin string, family int64) *kgo.Record {
	tb.Helper()
	p := envelope.UsagePersistPayload{OriginEventID: origin, FamilyID: family, CustomerID: family*10 + 1,
		BytesUsed: 1024, AppID: "com.youtube.app", ProcessResult: "ALLOWED", RemainingAfter: 1 << 30, EventTime: t0}
	e := envelope.New(envelope.DerivedID(envelope.PrefixPersist, origin, "persist"), t0, p)
	r, err := kafkarecord.New(envelope.TopicUsagePersist, e)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// committed returns the group's committed offsets of topic, per partition.
func committed(tb testing.TB, c *kfake.Cluster, group, topic string) map[int32]int64 {
	tb.Helper()
	cl := producer(tb, c)
	out := map[int32]int64{}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group = group
	gt := kmsg.NewOffsetFetchRequestGroupTopic()
	gt.Topic = topic
	for p := range int32(10) {
		rt.Partitions = append(rt.Partitions, p)
		gt.Partitions = append(gt.Partitions, p)
	}
	req.Topics = append(req.Topics, rt)
	g.Topics = append(g.Topics, gt)
	req.Groups = append(req.Groups, g)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		tb.Fatal(err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.Offset >= 0 {
				out[p.Partition] = p.Offset
			}
		}
	}
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				if p.Offset >= 0 {
					out[p.Partition] = p.Offset
				}
			}
		}
	}
	return out
}

func waitFor(tb testing.TB, what string, d time.Duration, cond func() bool) {
	tb.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
