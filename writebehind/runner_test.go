package writebehind

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/consumer"
	"github.com/dabom/dpcs/envelope/kafkarecord"
)

func newRunner(tb testing.TB, c interface{ ListenAddrs() []string }, w Writer[UsageRecord], opts ...Option) *Runner[UsageRecord] {
	tb.Helper()
	kopts := []kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.FetchMaxWait(100 * time.Millisecond),
	}
	r, err := NewRunner(DecodeUsageRecord, w, kopts, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func start(tb testing.TB, r *Runner[UsageRecord]) (stop func() error) {
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

// dedup writer: like a UNIQUE key, counts distinct event ids.
type uniqueWriter struct {
	mu   sync.Mutex
	seen map[string]int
	fail atomic.Bool
	n    atomic.Int64
}

func (w *uniqueWriter) Write(_ context.Context, b []UsageRecord) error {
	if w.fail.Load() {
		return errors.New("database down")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen == nil {
		w.seen = map[string]int{}
	}
	for _, u := range b {
		w.seen[u.EventID]++
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
	p := producer(t, c)
	var rs []*kgo.Record
	for i := range 250 {
		rs = append(rs, persistRecord(t, fmt.Sprintf("evt_%d", i), int64(i%20+1)))
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
	waitFor(t, "250 records written", 20*time.Second, func() bool { return w.distinct() == 250 })
	waitFor(t, "250 records committed", 5*time.Second, func() bool { return commits.Load() == 250 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, o := range committed(t, c, DefaultGroup, envelope.TopicUsagePersist) {
		total += o
	}
	if total != 250 {
		t.Errorf("committed offsets sum to %d, want 250", total)
	}
}

// Undecodable and invalid records go to the DLT with a reason; the records
// around them are written and committed.
func TestRunnerDeadLetters(t *testing.T) {
	c := newFake(t)
	p := producer(t, c)
	good1 := persistRecord(t, "evt_good1", 7)
	good2 := persistRecord(t, "evt_good2", 7)
	junk := &kgo.Record{Topic: envelope.TopicUsagePersist, Key: []byte("7"), Value: []byte("{not json")}
	usage := envelope.New("evt_u", t0, envelope.UsagePayload{FamilyID: 7, CustomerID: 71, BytesUsed: 1, AppID: "a"})
	wrongType, err := kafkarecord.New(envelope.TopicUsagePersist, usage)
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, good1, junk, wrongType, good2) // same key: one partition, this order
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
	waitFor(t, "good records", 20*time.Second, func() bool { return w.distinct() == 2 })

	dl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(envelope.DLT(envelope.TopicUsagePersist)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	var got []*kgo.Record
	for len(got) < 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		fs := dl.PollFetches(ctx)
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			t.Fatalf("DLT: got %d records", len(got))
		}
		got = append(got, fs.Records()...)
	}
	for i, want := range []struct{ value, reason string }{{"{not json", "malformed"}, {string(wrongType.Value), "eventType"}} {
		h := map[string]string{}
		for _, x := range got[i].Headers {
			h[x.Key] = string(x.Value)
		}
		if string(got[i].Value) != want.value || string(got[i].Key) != "7" {
			t.Errorf("DLT record %d: key %q value %q", i, got[i].Key, got[i].Value)
		}
		if !strings.Contains(h[HeaderDLTReason], want.reason) || h[HeaderDLTTopic] != envelope.TopicUsagePersist || h[HeaderDLTOffset] != fmt.Sprint(i+1) {
			t.Errorf("DLT record %d headers: %v", i, h)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, o := range committed(t, c, DefaultGroup, envelope.TopicUsagePersist) {
		total += o
	}
	if total != 4 || rejects.Load() != 2 {
		t.Errorf("committed %d (want 4), rejected %d (want 2)", total, rejects.Load())
	}
}

// While the database fails: fetching pauses, nothing is committed, the batch
// is retried; afterwards everything is written and committed, and fetching
// resumes.
func TestRunnerPausesWhileFailing(t *testing.T) {
	c := newFake(t)
	p := producer(t, c)
	for i := range 30 {
		produce(t, p, persistRecord(t, fmt.Sprintf("evt_a%d", i), int64(i%5+1)))
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
	waitFor(t, "failing writes", 20*time.Second, func() bool { return errs.Load() >= 5 })
	if n := len(committed(t, c, DefaultGroup, envelope.TopicUsagePersist)); n != 0 {
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
		produce(t, p, persistRecord(t, fmt.Sprintf("evt_b%d", i), int64(i%5+1)))
	}
	waitFor(t, "all 50 written", 20*time.Second, func() bool { return w.distinct() == 50 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if resumes.Load() != 1 {
		t.Errorf("resumed %d times, want 1", resumes.Load())
	}
	var total int64
	for _, o := range committed(t, c, DefaultGroup, envelope.TopicUsagePersist) {
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
	p := producer(t, c)
	w := &uniqueWriter{}
	r1 := newRunner(t, c, w, WithBatchSize(20), WithInterval(20*time.Millisecond))
	stop1 := start(t, r1)
	const n = 2000
	go func() {
		for i := range n {
			p.Produce(context.Background(), persistRecord(t, fmt.Sprintf("evt_%d", i), int64(i%50+1)), nil)
			if i%200 == 0 {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	time.Sleep(150 * time.Millisecond)
	r2 := newRunner(t, c, w, WithBatchSize(20), WithInterval(20*time.Millisecond))
	stop2 := start(t, r2)
	waitFor(t, "all written", 30*time.Second, func() bool { return w.distinct() == n })
	if err := stop1(); err != nil {
		t.Error(err)
	}
	if err := stop2(); err != nil {
		t.Error(err)
	}
	var total int64
	for _, o := range committed(t, c, DefaultGroup, envelope.TopicUsagePersist) {
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
	produce(t, producer(t, c), persistRecord(t, "evt_1", 1))
	w := &uniqueWriter{}
	r := newRunner(t, c, w, WithInterval(time.Hour), WithConsumer(consumer.WithDrainTimeout(5*time.Second)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitFor(t, "record buffered", 10*time.Second, func() bool { return r.c.Pending() == 1 })
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
	produce(t, producer(t, c), persistRecord(t, "evt_2", 1))
	bad := &uniqueWriter{}
	bad.fail.Store(true)
	r3 := newRunner(t, c, bad, WithConsumer(consumer.WithGroup("other")), WithInterval(time.Hour), WithBackoff(time.Millisecond, 5*time.Millisecond))
	go func() { done <- r3.Run(context.Background()) }()
	waitFor(t, "records buffered", 10*time.Second, func() bool { return r3.c.Pending() == 2 })
	cctx, ccancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer ccancel()
	_ = r3.Close(cctx)
	if err := <-done; !errors.Is(err, ErrNotWritten) {
		t.Errorf("failed drain: %v", err)
	}
	if _, err := NewRunner[UsageRecord](nil, w, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil decoder: %v", err)
	}
	if _, err := NewRunner(DecodeUsageRecord, w, nil, WithBatchSize(-1)); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad option: %v", err)
	}
	for name, o := range map[string]consumer.Option{
		"topic": consumer.WithTopics(""),
		"group": consumer.WithGroup(""),
		"dlt":   consumer.WithDLT(""),
		"drain": consumer.WithDrainTimeout(0),
	} {
		if _, err := NewRunner(DecodeUsageRecord, w, nil, WithConsumer(o)); !errors.Is(err, ErrInvalid) {
			t.Errorf("consumer option %s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := NewRunner(DecodeUsageRecord, w, []kgo.Opt{kgo.ProducerBatchMaxBytes(0)}); err == nil || errors.Is(err, ErrInvalid) {
		t.Errorf("bad kgo option: %v", err)
	}
}

func TestDecodeUsageRecord(t *testing.T) {
	r := persistRecord(t, "evt_x", 3)
	got, err := DecodeUsageRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	want := UsageRecord{EventID: "evt_x", FamilyID: 3, CustomerID: 31, AppID: "com.youtube.app", BytesUsed: 1024,
		ProcessResult: "ALLOWED", RemainingAfter: 1 << 30, EventTime: t0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// The engine's result comes along.
	full := envelope.UsagePersistPayload{OriginEventID: "evt_y", FamilyID: 3, CustomerID: 31, BytesUsed: 1024, AppID: "a",
		ProcessResult: "ALLOWED", RemainingAfter: 1 << 30, EventTime: t0, TotalBytes: 10 << 30, DailyUsedBytes: 4096,
		MonthlyUsedBytes: 8192, ThrottleKbps: 512, Crossed: []envelope.Crossing{{Percent: 50, Arm: 1}, {Percent: 30, Arm: 2}}}
	fr, err := kafkarecord.New(envelope.TopicUsagePersist, envelope.New("persist_y", t0, full))
	if err != nil {
		t.Fatal(err)
	}
	if got, err = DecodeUsageRecord(fr); err != nil {
		t.Fatal(err)
	}
	want = UsageRecord{EventID: "evt_y", FamilyID: 3, CustomerID: 31, AppID: "a", BytesUsed: 1024,
		ProcessResult: "ALLOWED", RemainingAfter: 1 << 30, EventTime: t0, TotalBytes: 10 << 30, DailyUsed: 4096,
		MonthlyUsed: 8192, ThrottleKbps: 512, Crossed: []envelope.Crossing{{Percent: 50, Arm: 1}, {Percent: 30, Arm: 2}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("with the result (-want +got):\n%s", diff)
	}
	if _, err := DecodeUsageRecord(nil); !errors.Is(err, envelope.ErrMalformed) {
		t.Errorf("nil record: %v", err)
	}
	long := want
	long.ProcessResult = string(make([]byte, 65))
	long.AppID = "\xff"
	long.FamilyID, long.CustomerID, long.BytesUsed, long.RemainingAfter = 0, 0, -1, -1
	long.EventTime = time.Time{}
	var fe *envelope.FieldError
	if err := long.Validate(); !errors.As(err, &fe) {
		t.Errorf("Validate: %v", err)
	}
	e := envelope.New("persist_1", t0, envelope.UsagePersistPayload{OriginEventID: string(make([]byte, 300)),
		FamilyID: 1, CustomerID: 1, ProcessResult: "ALLOWED", EventTime: t0})
	rec, _ := kafkarecord.New(envelope.TopicUsagePersist, e)
	if _, err := DecodeUsageRecord(rec); !errors.As(err, &fe) || fe.Field != "payload.originEventId" {
		t.Errorf("long id: %v", err)
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
	c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if refused.Load() >= 2 {
			return nil, nil, false
		}
		refused.Add(1)
		r := req.(*kmsg.OffsetCommitRequest)
		resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.OffsetMetadataTooLarge.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	p := producer(t, c)
	var rs []*kgo.Record
	for i := range 40 {
		rs = append(rs, persistRecord(t, fmt.Sprintf("evt_%d", i), int64(i%20+1)))
	}
	produce(t, p, rs...)
	w := &uniqueWriter{}
	r := newRunner(t, c, w, WithBatchSize(100), WithInterval(50*time.Millisecond))
	stop := start(t, r)
	defer stop()
	waitFor(t, "40 records written", 20*time.Second, func() bool { return w.distinct() == 40 })
	var total int64
	waitFor(t, "40 records committed after the refused commits", 20*time.Second, func() bool {
		total = 0
		for _, o := range committed(t, c, DefaultGroup, envelope.TopicUsagePersist) {
			total += o
		}
		return total == 40
	})
	if refused.Load() < 1 {
		t.Error("no commit was refused: the test did not test anything")
	}
}
