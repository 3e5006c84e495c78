package writebehind

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope/consumer"
	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/internal/testenv"
)

// newRunner is a Runner of items consuming testTopic (opts may name another)
// on c, written with w.
func newRunner(tb testing.TB, c interface{ ListenAddrs() []string }, w Writer[item], opts ...Option) *Runner[item] {
	tb.Helper()
	kopts := []kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.FetchMaxWait(100 * time.Millisecond),
	}
	r, err := NewRunner(decodeItem, w, kopts, append([]Option{WithConsumer(consumer.WithTopics(testTopic))}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func start(tb testing.TB, r *Runner[item]) (stop func() error) {
	tb.Helper()
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = r.Close(ctx)
			if rerr := <-done; err == nil {
				err = rerr
			}
		})
		return err
	}
	tb.Cleanup(func() { _ = stop() })
	return stop
}

// uniqueWriter: like a UNIQUE key, counts distinct item ids.
type uniqueWriter struct {
	mu   sync.Mutex
	seen map[string]int
	fail atomic.Bool
	n    atomic.Int64
}

func (w *uniqueWriter) Write(_ context.Context, b []item) error {
	if w.fail.Load() {
		return errors.New("database down")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen == nil {
		w.seen = map[string]int{}
	}
	for _, it := range b {
		w.seen[it.ID]++
	}
	w.n.Add(int64(len(b)))
	return nil
}

func (w *uniqueWriter) distinct() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.seen)
}

func produce(tb testing.TB, cl *kgo.Client, rs ...*kgo.Record) {
	tb.Helper()
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		tb.Fatal(err)
	}
}

func TestRunnerWritesAndCommits(t *testing.T) {
	c := newFake(t)
	p := testenv.Producer(t, c)
	var rs []*kgo.Record
	for i := range 250 {
		rs = append(rs, itemRecord(t, fmt.Sprintf("item_%d", i), int64(i%20+1)))
	}
	produce(t, p, rs...)
	w := &uniqueWriter{}
	var commits atomic.Int64
	r := newRunner(t, c, w, WithBatchSize(50), WithInterval(50*time.Millisecond),
		WithHooks(Hooks{OnCommit: func(ci CommitInfo) {
			if ci.Err != nil {
				t.Errorf("commit: %v", ci.Err)
			}
			commits.Add(int64(ci.Records))
		}}))
	stop := start(t, r)
	testenv.Eventually(t, "250 records written", 20*time.Second, func() bool { return w.distinct() == 250 })
	testenv.Eventually(t, "250 records committed", 5*time.Second, func() bool { return commits.Load() == 250 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, o := range testenv.Committed(t, c, DefaultGroup, testTopic) {
		total += o
	}
	if total != 250 {
		t.Errorf("committed offsets sum to %d, want 250", total)
	}
}

// Undecodable records go to the DLT with a reason; the records around them
// are written and committed.
func TestRunnerDeadLetters(t *testing.T) {
	c := newFake(t)
	p := testenv.Producer(t, c)
	good1 := itemRecord(t, "item_good1", 7)
	good2 := itemRecord(t, "item_good2", 7)
	junk := &kgo.Record{Topic: testTopic, Key: []byte("7"), Value: []byte("{not json")}
	noID := &kgo.Record{Topic: testTopic, Key: []byte("7"), Value: []byte(`{"family":7,"n":1}`)}
	produce(t, p, good1, junk, noID, good2) // same key: one partition, this order
	w := &uniqueWriter{}
	var rejects atomic.Int64
	r := newRunner(t, c, w, WithBatchSize(10), WithInterval(50*time.Millisecond),
		WithHooks(Hooks{OnReject: func(ri RejectInfo) {
			if ri.Record == nil || ri.Reason == nil {
				t.Errorf("RejectInfo %+v", ri)
			}
			rejects.Add(1)
		}}))
	stop := start(t, r)
	testenv.Eventually(t, "good records", 20*time.Second, func() bool { return w.distinct() == 2 })

	got := deadLetters(t, c, 2)
	for i, want := range []struct{ value, reason string }{{"{not json", "malformed"}, {string(noID.Value), "id required"}} {
		h := headers(got[i])
		if string(got[i].Value) != want.value || string(got[i].Key) != "7" {
			t.Errorf("DLT record %d: key %q value %q", i, got[i].Key, got[i].Value)
		}
		if !strings.Contains(h[HeaderDLTReason], want.reason) || h[HeaderDLTTopic] != testTopic || h[HeaderDLTOffset] != fmt.Sprint(i+1) {
			t.Errorf("DLT record %d headers: %v", i, h)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, o := range testenv.Committed(t, c, DefaultGroup, testTopic) {
		total += o
	}
	if total != 4 || rejects.Load() != 2 {
		t.Errorf("committed %d (want 4), rejected %d (want 2)", total, rejects.Load())
	}
}

// deadLetters reads n records of testTopic's dead-letter topic.
func deadLetters(tb testing.TB, c *kfake.Cluster, n int) []*kgo.Record {
	tb.Helper()
	dl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(testTopic+".DLT"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		tb.Fatal(err)
	}
	defer dl.Close()
	var got []*kgo.Record
	for len(got) < n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		fs := dl.PollFetches(ctx)
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			tb.Fatalf("DLT: got %d records, want %d", len(got), n)
		}
		got = append(got, fs.Records()...)
	}
	return got
}

// headers returns r's headers by key.
func headers(r *kgo.Record) map[string]string {
	h := map[string]string{}
	for _, x := range r.Headers {
		h[x.Key] = string(x.Value)
	}
	return h
}

// The runner on kfake into SQLite through the SQL writer: redelivered
// records are written once (the insert-ignore), an item the writer refuses
// (*ItemError) and one the database refuses (a permanent error, bisected
// down to it) go to the DLT with their reasons, everything else is written
// and every offset committed.
func TestRunnerIntoSQLite(t *testing.T) {
	c := newFake(t)
	p := testenv.Producer(t, c)
	db := openSQLite(t)
	createItems(t, db, sqldialect.SQLite)
	w := newItemWriter(t, db)
	want := items(120, 0)
	var rs []*kgo.Record
	for i, it := range want {
		rs = append(rs, record(t, it))
		if i%10 == 9 {
			rs = append(rs, record(t, want[i-5])) // a redelivery
		}
	}
	negative, poison := item{ID: "item_negative", Family: 3, N: -1, At: t0}, item{ID: "item_poison", Family: 3, N: 5, At: t0, Note: "poison"}
	rs = append(rs, record(t, negative), record(t, poison))
	produce(t, p, rs...)
	var rejects atomic.Int64
	r := newRunner(t, c, w, WithBatchSize(25), WithInterval(50*time.Millisecond),
		WithHooks(Hooks{OnReject: func(RejectInfo) { rejects.Add(1) }}))
	stop := start(t, r)
	got := deadLetters(t, c, 2)
	byID := map[string]map[string]string{}
	for _, dl := range got {
		it, err := decodeItem(dl)
		if err != nil {
			t.Fatalf("dead letter %q: %v", dl.Value, err)
		}
		byID[it.ID] = headers(dl)
	}
	if h := byID["item_negative"]; h == nil || !strings.Contains(h[HeaderDLTReason], "n: must be ≥ 0") || h[HeaderDLTTopic] != testTopic {
		t.Errorf("item the writer refuses: headers %v", h)
	}
	if h := byID["item_poison"]; h == nil || !strings.Contains(h[HeaderDLTReason], "cannot store TEXT value in INTEGER column") {
		t.Errorf("item the database refuses: headers %v", h)
	}
	testenv.Eventually(t, "every offset committed", 20*time.Second, func() bool {
		var total int64
		for _, o := range testenv.Committed(t, c, DefaultGroup, testTopic) {
			total += o
		}
		return total == int64(len(rs))
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(want, func(a, b item) int { return strings.Compare(a.ID, b.ID) })
	if diff := cmp.Diff(want, readItems(t, db)); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if w.Inserted() != int64(len(want)) || rejects.Load() != 2 {
		t.Errorf("inserted %d (want %d), rejected %d (want 2)", w.Inserted(), len(want), rejects.Load())
	}
}

// While the database fails: fetching pauses, nothing is committed, the batch
// is retried; afterwards everything is written and committed, and fetching
// resumes.
func TestRunnerPausesWhileFailing(t *testing.T) {
	c := newFake(t)
	p := testenv.Producer(t, c)
	for i := range 30 {
		produce(t, p, itemRecord(t, fmt.Sprintf("item_a%d", i), int64(i%5+1)))
	}
	w := &uniqueWriter{}
	w.fail.Store(true)
	var pauses, resumes, errs atomic.Int64
	r := newRunner(t, c, w, WithBatchSize(10), WithInterval(20*time.Millisecond),
		WithBackoff(20*time.Millisecond, 50*time.Millisecond),
		WithHooks(Hooks{
			OnPause:  func(pi PauseInfo) { pauses.Add(1) },
			OnResume: func(PauseInfo) { resumes.Add(1) },
			OnError:  func(ErrorInfo) { errs.Add(1) },
		}))
	stop := start(t, r)
	testenv.Eventually(t, "failing writes", 20*time.Second, func() bool { return errs.Load() >= 5 })
	if n := len(testenv.Committed(t, c, DefaultGroup, testTopic)); n != 0 {
		t.Fatalf("%d partitions committed while the database was down", n)
	}
	if pauses.Load() != 1 {
		t.Errorf("paused %d times, want 1", pauses.Load())
	}
	buffered := r.c.Pending()
	if buffered > 10 {
		t.Errorf("%d records buffered while paused, batch is 10", buffered)
	}
	w.fail.Store(false)
	for i := range 20 {
		produce(t, p, itemRecord(t, fmt.Sprintf("item_b%d", i), int64(i%5+1)))
	}
	testenv.Eventually(t, "all 50 written", 20*time.Second, func() bool { return w.distinct() == 50 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if resumes.Load() != 1 {
		t.Errorf("resumed %d times, want 1", resumes.Load())
	}
	var total int64
	for _, o := range testenv.Committed(t, c, DefaultGroup, testTopic) {
		total += o
	}
	if total != 50 {
		t.Errorf("committed %d, want 50", total)
	}
}

// A second runner joining the group takes partitions over: every record is
// written (duplicates allowed, none lost), and all offsets end committed.
func TestRunnerRebalance(t *testing.T) {
	c := newFake(t)
	p := testenv.Producer(t, c)
	w := &uniqueWriter{}
	r1 := newRunner(t, c, w, WithBatchSize(20), WithInterval(20*time.Millisecond))
	stop1 := start(t, r1)
	const n = 2000
	go func() {
		for i := range n {
			p.Produce(context.Background(), itemRecord(t, fmt.Sprintf("item_%d", i), int64(i%50+1)), nil)
			if i%200 == 0 {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	time.Sleep(150 * time.Millisecond)
	r2 := newRunner(t, c, w, WithBatchSize(20), WithInterval(20*time.Millisecond))
	stop2 := start(t, r2)
	testenv.Eventually(t, "all written", 30*time.Second, func() bool { return w.distinct() == n })
	if err := stop1(); err != nil {
		t.Error(err)
	}
	if err := stop2(); err != nil {
		t.Error(err)
	}
	var total int64
	for _, o := range testenv.Committed(t, c, DefaultGroup, testTopic) {
		total += o
	}
	if total != n {
		t.Errorf("committed %d, want %d", total, n)
	}
}

// Run's context ending drains like Close; Close without Run closes the
// client; Run twice is an error.
func TestRunnerLifecycle(t *testing.T) {
	c := newFake(t)
	produce(t, testenv.Producer(t, c), itemRecord(t, "item_1", 1))
	w := &uniqueWriter{}
	r := newRunner(t, c, w, WithInterval(time.Hour), WithConsumer(consumer.WithDrainTimeout(5*time.Second)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	testenv.Eventually(t, "record buffered", 10*time.Second, func() bool { return r.c.Pending() == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if w.distinct() != 1 {
		t.Errorf("drain wrote %d records", w.distinct())
	}
	if err := r.Run(context.Background()); !errors.Is(err, ErrInvalid) {
		t.Errorf("second Run: %v", err)
	}

	r2 := newRunner(t, c, w)
	if err := r2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r2.Run(context.Background()); !errors.Is(err, ErrInvalid) {
		t.Errorf("Run after Close: %v", err)
	}

	// A drain that cannot finish reports what it left uncommitted.
	produce(t, testenv.Producer(t, c), itemRecord(t, "item_2", 1))
	bad := &uniqueWriter{}
	bad.fail.Store(true)
	r3 := newRunner(t, c, bad, WithConsumer(consumer.WithGroup("other")), WithInterval(time.Hour), WithBackoff(time.Millisecond, 5*time.Millisecond))
	go func() { done <- r3.Run(context.Background()) }()
	testenv.Eventually(t, "records buffered", 10*time.Second, func() bool { return r3.c.Pending() == 2 })
	cctx, ccancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer ccancel()
	_ = r3.Close(cctx)
	if err := <-done; !errors.Is(err, ErrNotWritten) {
		t.Errorf("failed drain: %v", err)
	}
	if _, err := NewRunner[item](nil, w, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil decoder: %v", err)
	}
	if _, err := NewRunner(decodeItem, w, nil, WithBatchSize(-1)); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad option: %v", err)
	}
	for name, o := range map[string]consumer.Option{
		"topic": consumer.WithTopics(""),
		"group": consumer.WithGroup(""),
		"dlt":   consumer.WithDLT(""),
		"drain": consumer.WithDrainTimeout(0),
	} {
		if _, err := NewRunner(decodeItem, w, nil, WithConsumer(o)); !errors.Is(err, ErrInvalid) {
			t.Errorf("consumer option %s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := NewRunner(decodeItem, w, []kgo.Opt{kgo.ProducerBatchMaxBytes(0)}); err == nil || errors.Is(err, ErrInvalid) {
		t.Errorf("bad kgo option: %v", err)
	}
}

// A commit the broker refuses is retried: the rows are written, so the
// records need not be written again, but until their offsets are committed
// nothing can tell they are in SQL (a Redis recovery waits for exactly that:
// the write-behind group committed to the end of usage-persist). Before, a
// failed commit was only logged, and the partitions stayed uncommitted until
// the next rebalance (seen in CI as a recovery that never finished).
func TestRunnerRetriesFailedCommit(t *testing.T) {
	c := newFake(t)
	var refused atomic.Int64
	testenv.RefuseCommits(c, func() bool {
		if refused.Load() >= 2 {
			return false
		}
		refused.Add(1)
		return true
	})
	p := testenv.Producer(t, c)
	var rs []*kgo.Record
	for i := range 40 {
		rs = append(rs, itemRecord(t, fmt.Sprintf("item_%d", i), int64(i%20+1)))
	}
	produce(t, p, rs...)
	w := &uniqueWriter{}
	r := newRunner(t, c, w, WithBatchSize(100), WithInterval(50*time.Millisecond))
	stop := start(t, r)
	defer stop()
	testenv.Eventually(t, "40 records written", 20*time.Second, func() bool { return w.distinct() == 40 })
	var total int64
	testenv.Eventually(t, "40 records committed after the refused commits", 20*time.Second, func() bool {
		total = 0
		for _, o := range testenv.Committed(t, c, DefaultGroup, testTopic) {
			total += o
		}
		return total == 40
	})
	if refused.Load() < 1 {
		t.Error("no commit was refused: the test did not test anything")
	}
}

// A Runner's fetches wait up to 250 ms for 256 KiB by default, and
// WithConsumer(consumer.WithFetchWait) changes that on its Kafka client.
func TestRunnerFetchWait(t *testing.T) {
	c := newFake(t)
	for _, tt := range []struct {
		opts  []Option
		wait  time.Duration
		bytes int32
	}{
		{nil, 250 * time.Millisecond, 256 << 10},
		{[]Option{WithConsumer(consumer.WithFetchWait(20*time.Millisecond, 1))}, 20 * time.Millisecond, 1},
	} {
		r := newRunner(t, c, &uniqueWriter{}, tt.opts...)
		cl := r.c.Client()
		if w, b := cl.OptValue(kgo.FetchMaxWait), cl.OptValue(kgo.FetchMinBytes); w != tt.wait || b != tt.bytes {
			t.Errorf("fetch wait %v, min bytes %v; want %v, %v", w, b, tt.wait, tt.bytes)
		}
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
