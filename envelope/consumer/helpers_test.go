package consumer

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/internal/testenv"
)

const (
	topic = "events"
	group = "g"
)

// newCluster starts a one-broker kfake cluster with topic (partitions
// partitions) and its dead-letter topic.
func newCluster(tb testing.TB, partitions int32, topics ...string) *kfake.Cluster {
	tb.Helper()
	opts := []kfake.Opt{kfake.SeedTopics(partitions, topic), kfake.SeedTopics(1, topic+".DLT")}
	for _, t := range topics {
		opts = append(opts, kfake.SeedTopics(1, t))
	}
	return testenv.KafkaOf(tb, opts...)
}

func clientOpts(c *kfake.Cluster) []kgo.Opt {
	return append(testenv.ConsumerOpts(c), kgo.ProducerLinger(0))
}

// producer writes to the partition each record names.
func producer(tb testing.TB, c *kfake.Cluster) *kgo.Client {
	tb.Helper()
	return testenv.Producer(tb, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
}

// produce sends n records to partitions 0…parts−1 round robin (value
// "<prefix><i>" to partition i mod parts, keyed "k<partition>") and returns
// the values.
func produce(tb testing.TB, cl *kgo.Client, prefix string, n, parts int) []string {
	tb.Helper()
	rs := make([]*kgo.Record, n)
	vals := make([]string, n)
	for i := range n {
		vals[i] = prefix + strconv.Itoa(i)
		rs[i] = &kgo.Record{Topic: topic, Partition: int32(i % parts), Key: []byte("k" + strconv.Itoa(i%parts)),
			Value: []byte(vals[i]), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}}
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		tb.Fatal(err)
	}
	return vals
}

func newConsumer(tb testing.TB, c *kfake.Cluster, h Handler, opts ...Option) *Consumer {
	tb.Helper()
	all := append([]Option{WithGroup(group), WithTopics(topic), WithBackoff(10*time.Millisecond, 40*time.Millisecond, 0)}, opts...)
	cs, err := New(h, clientOpts(c), all...)
	if err != nil {
		tb.Fatal(err)
	}
	return cs
}

// start runs cs; stop closes it (bounded) and returns Close's error, once.
func start(tb testing.TB, cs *Consumer) (stop func() error) {
	tb.Helper()
	done := make(chan error, 1)
	go func() { done <- cs.Run(context.Background()) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = cs.Close(ctx)
			if rerr := <-done; rerr != err {
				tb.Errorf("Run returned %v, Close %v", rerr, err)
			}
		})
		return err
	}
	tb.Cleanup(func() { _ = stop() })
	return stop
}

// committed returns the group's committed offsets of topic, per partition.
func committed(tb testing.TB, c *kfake.Cluster, group string) map[int32]int64 {
	tb.Helper()
	return testenv.Committed(tb, c, group, topic)
}

func total(m map[int32]int64) int64 {
	var n int64
	for _, o := range m {
		n += o
	}
	return n
}

// noneLeft waits until no goroutine runs the consumer's code: Close stops
// every goroutine the consumer starts.
func noneLeft(tb testing.TB) {
	tb.Helper()
	testenv.Eventually(tb, "the consumer's goroutines to end", 20*time.Second, func() bool {
		buf := make([]byte, 1<<20)
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "envelope/consumer.(*Consumer)")
	})
}

// recorder is a handler that records what it was given and fails on demand.
type recorder struct {
	mu      sync.Mutex
	batches []seen
	ok      map[string]int // value → times handled successfully
	fail    func(b *Batch) error
}

type seen struct {
	b       *Batch
	attempt int
	reason  string
	values  []string
	err     error
}

func (r *recorder) Handle(_ context.Context, b *Batch) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var err error
	if r.fail != nil {
		err = r.fail(b)
	}
	s := seen{b: b, attempt: b.Attempt(), reason: b.Reason(), err: err}
	for _, rec := range b.Records {
		s.values = append(s.values, string(rec.Value))
	}
	r.batches = append(r.batches, s)
	if err == nil {
		if r.ok == nil {
			r.ok = map[string]int{}
		}
		for _, v := range s.values {
			r.ok[v]++
		}
	}
	return err
}

func (r *recorder) handled() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ok)
}

func (r *recorder) seen() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// missing returns the values not handled successfully.
func (r *recorder) missing(vals []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, v := range vals {
		if r.ok[v] == 0 {
			out = append(out, v)
		}
	}
	return out
}

// hookLog collects hook events.
type hookLog struct {
	mu       sync.Mutex
	batches  []BatchInfo
	retries  []RetryInfo
	commits  []CommitInfo
	dead     []DeadLetterInfo
	pauses   []string
	revoked  []PartitionsInfo
	lost     []PartitionsInfo
	assigned []PartitionsInfo
}

func (l *hookLog) hooks() Hooks {
	lock := func(f func()) { l.mu.Lock(); f(); l.mu.Unlock() }
	return Hooks{
		OnBatch:      func(i BatchInfo) { lock(func() { l.batches = append(l.batches, i) }) },
		OnRetry:      func(i RetryInfo) { lock(func() { l.retries = append(l.retries, i) }) },
		OnCommit:     func(i CommitInfo) { lock(func() { l.commits = append(l.commits, i) }) },
		OnDeadLetter: func(i DeadLetterInfo) { lock(func() { l.dead = append(l.dead, i) }) },
		OnPause:      func(i PauseInfo) { lock(func() { l.pauses = append(l.pauses, fmt.Sprint("pause ", i.Topics)) }) },
		OnResume:     func(i PauseInfo) { lock(func() { l.pauses = append(l.pauses, fmt.Sprint("resume ", i.Topics)) }) },
		OnAssigned:   func(i PartitionsInfo) { lock(func() { l.assigned = append(l.assigned, i) }) },
		OnRevoked:    func(i PartitionsInfo) { lock(func() { l.revoked = append(l.revoked, i) }) },
		OnLost:       func(i PartitionsInfo) { lock(func() { l.lost = append(l.lost, i) }) },
	}
}

// partitions counts the partitions named by the events.
func partitionCount(is []PartitionsInfo) int {
	n := 0
	for _, i := range is {
		for _, ps := range i.Partitions {
			n += len(ps)
		}
	}
	return n
}

func (l *hookLog) committedRecords() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.commits {
		if c.Err == nil {
			n += c.Records
		}
	}
	return n
}

func (l *hookLog) snapshot() hookLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	return hookLog{batches: slices.Clone(l.batches), retries: slices.Clone(l.retries), commits: slices.Clone(l.commits),
		dead: slices.Clone(l.dead), pauses: slices.Clone(l.pauses), revoked: slices.Clone(l.revoked),
		lost: slices.Clone(l.lost), assigned: slices.Clone(l.assigned)}
}
