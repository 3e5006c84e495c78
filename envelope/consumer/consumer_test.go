package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Nothing is committed while the handler works on a batch; the batch is
// committed once it returned nil.
func TestCommitsOnlyAfterSuccess(t *testing.T) {
	c := newCluster(t, 3)
	vals := produce(t, producer(t, c), "v", 30, 3)
	entered := make(chan struct{}, 100)
	release := make(chan struct{})
	rec := &recorder{}
	h := HandlerFunc(func(ctx context.Context, b *Batch) error {
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return rec.Handle(ctx, b)
	})
	var log hookLog
	cs := newConsumer(t, c, h, WithHooks(log.hooks()))
	stop := start(t, cs)
	<-entered
	testenv.Eventually(t, "records held", 20*time.Second, func() bool { return cs.Pending() > 0 })
	if got := committed(t, c, group); len(got) != 0 {
		t.Fatalf("committed %v while the handler had not returned", got)
	}
	close(release)
	testenv.Eventually(t, "all handled", 20*time.Second, func() bool { return rec.handled() == len(vals) })
	testenv.Eventually(t, "all committed", 20*time.Second, func() bool { return total(committed(t, c, group)) == int64(len(vals)) })
	testenv.Eventually(t, "nothing pending", 20*time.Second, func() bool { return cs.Pending() == 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	snap := log.snapshot()
	if n := log.committedRecords(); n != len(vals) {
		t.Errorf("OnCommit counted %d records, want %d", n, len(vals))
	}
	for _, b := range snap.batches {
		if b.Reason != "poll" || b.Attempts != 1 || b.DeadLettered != 0 || b.Records == 0 {
			t.Errorf("batch %+v", b)
		}
	}
	if len(snap.retries) != 0 || len(snap.pauses) != 0 {
		t.Errorf("retries %v, pauses %v without a failure", snap.retries, snap.pauses)
	}
}

// A failing dependency: fetching pauses, the same batch is handed again
// after exact backoff waits, nothing is committed meanwhile; afterwards every
// record is handled once per successful batch, nothing lost, nothing
// skipped, each partition in offset order.
func TestTransientFailureRetriesSameBatch(t *testing.T) {
	c := newCluster(t, 2)
	p := producer(t, c)
	vals := produce(t, p, "a", 20, 2)
	var failsLeft atomic.Int32
	failsLeft.Store(4)
	var log hookLog
	var cs *Consumer
	var committedWhileFailing []map[int32]int64
	rec := &recorder{fail: func(b *Batch) error {
		if failsLeft.Add(-1) >= 0 {
			committedWhileFailing = append(committedWhileFailing, committed(t, c, group))
			return fmt.Errorf("database down (attempt %d)", b.Attempt())
		}
		return nil
	}}
	cs = newConsumer(t, c, rec, WithHooks(log.hooks()), WithBackoff(20*time.Millisecond, 50*time.Millisecond, 0))
	stop := start(t, cs)
	testenv.Eventually(t, "first batch handled", 20*time.Second, func() bool { return rec.handled() > 0 })
	more := produce(t, p, "b", 20, 2)
	testenv.Eventually(t, "all handled", 20*time.Second, func() bool { return rec.handled() == 40 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, m := range committedWhileFailing {
		if len(m) != 0 {
			t.Errorf("committed %v while the handler failed", m)
		}
	}
	got := rec.seen()
	// The failing batch was handed again, the same *Batch, the same records.
	first := got[0]
	for i, s := range got[:5] {
		if s.b != first.b || !slices.Equal(s.values, first.values) || s.attempt != i+1 {
			t.Errorf("call %d: batch %p attempt %d values %v; want %p attempt %d %v", i, s.b, s.attempt, s.values, first.b, i+1, first.values)
		}
		if want := map[bool]string{true: "poll", false: "retry"}[i == 0]; s.reason != want {
			t.Errorf("call %d: reason %q, want %q", i, s.reason, want)
		}
	}
	snap := log.snapshot()
	var waits []time.Duration
	for i, r := range snap.retries {
		waits = append(waits, r.Wait)
		if r.Step != StepHandle || r.Attempt != i+1 || r.Records != len(first.values) || !strings.Contains(fmt.Sprint(r.Err), "database down") {
			t.Errorf("retry %d: %+v", i, r)
		}
	}
	want := []time.Duration{20 * time.Millisecond, 40 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond}
	if diff := cmp.Diff(want, waits); diff != "" {
		t.Errorf("waits (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"pause [events]", "resume [events]"}, snap.pauses); diff != "" {
		t.Errorf("pauses (-want +got):\n%s", diff)
	}
	if m := rec.missing(append(vals, more...)); len(m) != 0 {
		t.Errorf("never handled: %v", m)
	}
	// Per partition, the successful batches saw values in order.
	last := map[string]int{}
	for _, s := range got {
		if s.err != nil {
			continue
		}
		for _, v := range s.values {
			i, _ := strconv.Atoi(v[1:])
			k := v[:1] + strconv.Itoa(i%2)
			if prev, ok := last[k]; ok && i != prev+2 {
				t.Errorf("key %s: %s after %d: skipped or reordered", k, v, prev)
			}
			last[k] = i
		}
	}
	if n := total(committed(t, c, group)); n != 40 {
		t.Errorf("committed %d, want 40", n)
	}
}

// Dead letters carry the original key, value and headers plus the dlt-*
// headers and any extra ones; they are produced before the commit, once per
// record even when the handler dead-letters again on a retry.
func TestDeadLetters(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		dlt  string
	}{
		{"default topic", nil, topic + ".DLT"},
		{"WithDLT", []Option{WithDLT("custom.dead")}, "custom.dead"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 1, "custom.dead")
			produce(t, producer(t, c), "v", 6, 1)
			var calls atomic.Int32
			h := HandlerFunc(func(_ context.Context, b *Batch) error {
				for _, r := range b.Records {
					if n, _ := strconv.Atoi(string(r.Value[1:])); n%3 == 1 {
						b.DeadLetter(r, fmt.Errorf("bad value %s", r.Value), kgo.RecordHeader{Key: "x-extra", Value: []byte("1")})
					}
				}
				if calls.Add(1) == 1 {
					return errors.New("fail once after queueing the dead letters")
				}
				return nil
			})
			var log hookLog
			cs := newConsumer(t, c, h, append(tc.opts, WithHooks(log.hooks()))...)
			if cs.DeadLetterTopic(topic) != tc.dlt {
				t.Errorf("DeadLetterTopic = %q, want %q", cs.DeadLetterTopic(topic), tc.dlt)
			}
			stop := start(t, cs)
			testenv.Eventually(t, "committed", 20*time.Second, func() bool { return total(committed(t, c, group)) == 6 })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			dl := testenv.Read(t, c, tc.dlt, 2)
			if end := endOffset(t, c, tc.dlt); end != 2 {
				t.Errorf("%s holds %d records, want 2: a dead letter was produced twice", tc.dlt, end)
			}
			var got []string
			for _, r := range dl {
				h := headers(r)
				got = append(got, strings.Join([]string{string(r.Key), string(r.Value), h["h"], h["dlt-reason"], h["dlt-topic"],
					h["dlt-partition"], h["dlt-offset"], h["x-extra"]}, "|"))
			}
			want := []string{"k0|v1|v|bad value v1|events|0|1|1", "k0|v4|v|bad value v4|events|0|4|1"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("dead letters (-want +got):\n%s", diff)
			}
			snap := log.snapshot()
			if len(snap.dead) != 2 || snap.dead[0].Topic != tc.dlt || string(snap.dead[0].Record.Value) != "v1" ||
				snap.dead[0].Cause == nil || snap.dead[0].Cause.Error() != "bad value v1" {
				t.Errorf("OnDeadLetter: %+v", snap.dead)
			}
			if len(snap.batches) != 1 || snap.batches[0].DeadLettered != 2 || snap.batches[0].Records != 6 || snap.batches[0].Attempts != 2 {
				t.Errorf("OnBatch: %+v", snap.batches)
			}
		})
	}
}

// endOffset returns the end offset of partition 0 of t.
func endOffset(tb testing.TB, c interface{ ListenAddrs() []string }, t string) int64 {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), t)
	if err != nil {
		tb.Fatal(err)
	}
	o, _ := offs.Lookup(t, 0)
	return o.Offset
}

func headers(r *kgo.Record) map[string]string {
	h := map[string]string{}
	for _, x := range r.Headers {
		h[x.Key] = string(x.Value)
	}
	return h
}

// WithBatch: full batches go at once, the rest waits for the interval (or
// the drain).
func TestAccumulateBySize(t *testing.T) {
	c := newCluster(t, 1)
	produce(t, producer(t, c), "v", 25, 1)
	rec := &recorder{}
	var log hookLog
	cs := newConsumer(t, c, rec, WithBatch(10, time.Hour), WithHooks(log.hooks()))
	stop := start(t, cs)
	testenv.Eventually(t, "two full batches", 20*time.Second, func() bool { return rec.handled() == 20 })
	testenv.Eventually(t, "five held", 20*time.Second, func() bool { return cs.Pending() == 5 })
	if n := total(committed(t, c, group)); n != 20 {
		t.Errorf("committed %d before the drain, want 20", n)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var sizes []int
	var reasons []string
	for _, s := range rec.seen() {
		sizes = append(sizes, len(s.values))
		reasons = append(reasons, s.reason)
	}
	if diff := cmp.Diff([]int{10, 10, 5}, sizes); diff != "" {
		t.Errorf("batch sizes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"size", "size", "close"}, reasons); diff != "" {
		t.Errorf("reasons (-want +got):\n%s", diff)
	}
	if n := total(committed(t, c, group)); n != 25 {
		t.Errorf("committed %d after the drain, want 25", n)
	}
}

func TestAccumulateByInterval(t *testing.T) {
	c := newCluster(t, 1)
	p := producer(t, c)
	rec := &recorder{}
	// An interval long beside a busy machine's stalls: a producer without
	// linger may send a produce's records in two requests, and a gap
	// between them longer than the interval would split the batch.
	cs := newConsumer(t, c, rec, WithBatch(1000, time.Second))
	stop := start(t, cs)
	defer stop()
	// From before the produce: the consumer can fetch the records (and
	// start the interval) before the producer has its acknowledgement.
	sent := time.Now()
	produce(t, p, "a", 3, 1)
	testenv.Eventually(t, "first interval batch", 20*time.Second, func() bool { return rec.handled() == 3 })
	if waited := time.Since(sent); waited < time.Second {
		t.Errorf("batch handled after %v, before the 1 s interval", waited)
	}
	produce(t, p, "b", 4, 1)
	testenv.Eventually(t, "second interval batch", 20*time.Second, func() bool { return rec.handled() == 7 })
	var got []string
	for _, s := range rec.seen() {
		got = append(got, fmt.Sprint(s.reason, len(s.values)))
	}
	if diff := cmp.Diff([]string{"interval3", "interval4"}, got); diff != "" {
		t.Errorf("batches (-want +got):\n%s", diff)
	}
	testenv.Eventually(t, "committed", 20*time.Second, func() bool { return total(committed(t, c, group)) == 7 })
}

// A second member joins while the first holds a batch (a long interval):
// the first finishes and commits what it holds of the revoked partitions
// before they go; at the end every record is handled and committed.
func TestRevokeDuringBatchLosesNothing(t *testing.T) {
	c := newCluster(t, 4)
	p := producer(t, c)
	vals := produce(t, p, "a", 200, 4)
	rec := &recorder{}
	var log1, log2 hookLog
	c1 := newConsumer(t, c, rec, WithBatch(100_000, time.Hour), WithHooks(log1.hooks()))
	stop1 := start(t, c1)
	testenv.Eventually(t, "member 1 holds every record", 20*time.Second, func() bool { return c1.Pending() == 200 })
	c2 := newConsumer(t, c, rec, WithBatch(100_000, time.Hour), WithHooks(log2.hooks()))
	stop2 := start(t, c2)
	testenv.Eventually(t, "partitions revoked from member 1", 20*time.Second, func() bool { return partitionCount(log1.snapshot().revoked) > 0 })
	testenv.Eventually(t, "partitions assigned to member 2", 20*time.Second, func() bool { return partitionCount(log2.snapshot().assigned) > 0 })
	more := produce(t, p, "b", 200, 4)
	testenv.Eventually(t, "member 2 holds records", 20*time.Second, func() bool { return c2.Pending() > 0 })
	testenv.Eventually(t, "every record handled or held", 20*time.Second, func() bool { return rec.handled()+c1.Pending()+c2.Pending() == 400 })
	if err := stop1(); err != nil {
		t.Error(err)
	}
	if err := stop2(); err != nil {
		t.Error(err)
	}
	if m := rec.missing(append(vals, more...)); len(m) != 0 {
		t.Errorf("never handled: %v", m)
	}
	if n := total(committed(t, c, group)); n != 400 {
		t.Errorf("committed %d, want 400", n)
	}
	revokes := 0
	for _, s := range rec.seen() {
		if s.reason == "revoke" {
			revokes++
		}
	}
	if revokes == 0 {
		t.Errorf("no batch was finished on revoke: %v", rec.seen())
	}
	for _, r := range log1.snapshot().revoked {
		if r.Dropped != 0 {
			t.Errorf("revoke dropped %d records: the attempt to finish failed", r.Dropped)
		}
	}
}

// Two members with records flowing and batches failing now and then: every
// record is handled and committed by the end, whoever owned it.
func TestRebalanceUnderLoad(t *testing.T) {
	c := newCluster(t, 6)
	p := producer(t, c)
	rec := &recorder{fail: func(b *Batch) error {
		if b.Attempt() == 1 && len(b.Records)%7 == 0 {
			return errors.New("flaky")
		}
		return nil
	}}
	c1 := newConsumer(t, c, rec, WithBatch(20, 20*time.Millisecond))
	stop1 := start(t, c1)
	var vals []string
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 10 {
			vals = append(vals, produce(t, p, fmt.Sprintf("p%d-", i), 100, 6)...)
			time.Sleep(20 * time.Millisecond)
		}
	})
	testenv.Eventually(t, "member 1 working", 20*time.Second, func() bool { return rec.handled() > 0 })
	c2 := newConsumer(t, c, rec, WithBatch(20, 20*time.Millisecond))
	stop2 := start(t, c2)
	wg.Wait()
	testenv.Eventually(t, "all handled", 20*time.Second, func() bool { return rec.handled() == 1000 })
	testenv.Eventually(t, "all committed", 20*time.Second, func() bool { return total(committed(t, c, group)) == 1000 })
	if err := stop1(); err != nil {
		t.Error(err)
	}
	if err := stop2(); err != nil {
		t.Error(err)
	}
	if m := rec.missing(vals); len(m) != 0 {
		t.Errorf("never handled: %v", m)
	}
}

// Close drains what is held; Run's context ending drains too (bounded by
// WithDrainTimeout); a drain that cannot finish says what it left.
func TestCloseDrains(t *testing.T) {
	down := func(*Batch) error { return errors.New("down") }
	for _, tc := range []struct {
		name      string
		fail      func(*Batch) error
		stop      func(t *testing.T, cs *Consumer, cancelRun context.CancelFunc) error // returns Close's error
		wantErr   func(error) bool
		committed int64
		calls     func(int) bool
	}{
		{"Close", nil,
			func(_ *testing.T, cs *Consumer, _ context.CancelFunc) error { return cs.Close(context.Background()) },
			func(err error) bool { return err == nil }, 10, func(n int) bool { return n == 1 }},
		{"Run's context", nil,
			func(t *testing.T, cs *Consumer, cancelRun context.CancelFunc) error {
				cancelRun()
				testenv.Eventually(t, "drained", 20*time.Second, func() bool { return cs.Pending() == 0 })
				return cs.Close(context.Background()) // after Run: what Run returned
			},
			func(err error) bool { return err == nil }, 10, func(n int) bool { return n == 1 }},
		{"failing", down,
			func(_ *testing.T, cs *Consumer, _ context.CancelFunc) error {
				// Long enough for two handler calls on a busy machine.
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				return cs.Close(ctx)
			},
			func(err error) bool {
				return errors.Is(err, ErrUncommitted) && errors.Is(err, context.DeadlineExceeded) && strings.Contains(err.Error(), "10 records")
			}, 0, func(n int) bool { return n >= 2 }}, // the drain retried
		{"cancelled Close", nil,
			func(_ *testing.T, cs *Consumer, _ context.CancelFunc) error {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return cs.Close(ctx)
			},
			func(err error) bool { return errors.Is(err, ErrUncommitted) }, 0, func(n int) bool { return n == 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 2)
			produce(t, producer(t, c), "v", 10, 2)
			rec := &recorder{fail: tc.fail}
			cs := newConsumer(t, c, rec, WithBatch(1000, time.Hour), WithDrainTimeout(5*time.Second))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- cs.Run(ctx) }()
			testenv.Eventually(t, "held", 20*time.Second, func() bool { return cs.Pending() == 10 })
			err := tc.stop(t, cs, cancel)
			if !tc.wantErr(err) {
				t.Errorf("Close: %v", err)
			}
			if rerr := <-done; rerr != err {
				t.Errorf("Run: %v, Close: %v", rerr, err)
			}
			if n := len(rec.seen()); !tc.calls(n) {
				t.Errorf("handler called %d times", n)
			}
			if n := total(committed(t, c, group)); n != tc.committed {
				t.Errorf("committed %d, want %d", n, tc.committed)
			}
			if again := cs.Close(context.Background()); again != err {
				t.Errorf("second Close: %v, first %v", again, err)
			}
			noneLeft(t)
		})
	}
}

// Finish steps overlap the next batch's handling; batches are committed in
// poll order, each after its finish step returned — also when the broker
// refuses commits (as a busy machine's timed-out commit is).
func TestOverlappedCommitsInOrder(t *testing.T) {
	for _, refuse := range []int{0, 2} {
		t.Run(fmt.Sprintf("refused=%d", refuse), func(t *testing.T) { testOverlappedCommitsInOrder(t, refuse) })
	}
}

// testOverlappedCommitsInOrder refuses the commit requests 3 to 2+refuse.
func testOverlappedCommitsInOrder(t *testing.T, refuse int) {
	c := newCluster(t, 1)
	var requests atomic.Int32
	testenv.RefuseCommits(c, func() bool { n := requests.Add(1); return n >= 3 && n < 3+int32(refuse) })
	p := producer(t, c)
	vals := produce(t, p, "v", 60, 1)
	var mu sync.Mutex
	var handled []int64 // first offset of each batch, in handling order
	finished := map[int64]bool{}
	var overlapped atomic.Int32
	var log hookLog
	var commitsOK atomic.Bool
	commitsOK.Store(true)
	var last int64 = -1
	h := HandlerFunc(func(_ context.Context, b *Batch) error {
		first := b.Records[0].Offset
		mu.Lock()
		if len(handled) > 0 && !finished[handled[len(handled)-1]] {
			overlapped.Add(1) // the previous batch's finish step is still running
		}
		handled = append(handled, first)
		mu.Unlock()
		b.Finish(func(ctx context.Context) error {
			// Wait until the next batch is being handled (or a while), as
			// a producer's acknowledgements take a round trip.
			deadline := time.Now().Add(200 * time.Millisecond)
			for time.Now().Before(deadline) {
				mu.Lock()
				next := handled[len(handled)-1] != first
				mu.Unlock()
				if next {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
			mu.Lock()
			finished[first] = true
			mu.Unlock()
			return nil
		})
		return nil
	})
	hooks := log.hooks()
	onCommit := hooks.OnCommit
	attempted := 0 // records whose batch's commit was attempted
	hooks.OnCommit = func(i CommitInfo) {
		mu.Lock()
		off := i.Offsets[topic][0]
		// The commit of the batch starting at off−len must follow its
		// finish step. A commit the broker refused (a busy machine: the
		// commit timed out) is attempted again, alone (Records 0, the same
		// offset) or with the next batch's.
		ok := (off > last || off == last && i.Records == 0) && finished[lastFirst(handled, off)]
		last = off
		attempted += i.Records
		mu.Unlock()
		if !ok {
			commitsOK.Store(false)
		}
		onCommit(i)
	}
	cs := newConsumer(t, c, h, WithMaxPoll(5), WithRebalanceInterval(time.Hour), WithHooks(hooks))
	stop := start(t, cs)
	testenv.Eventually(t, "all committed", 20*time.Second, func() bool { return total(committed(t, c, group)) == int64(len(vals)) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	noneLeft(t)
	if !commitsOK.Load() {
		t.Error("a commit went backwards or before its batch's finish step")
	}
	if overlapped.Load() == 0 {
		t.Error("no batch was handled while the previous one finished")
	}
	mu.Lock()
	defer mu.Unlock()
	if attempted != len(vals) {
		t.Errorf("commits attempted for %d records, want %d", attempted, len(vals))
	}
}

// lastFirst returns the first offset of the batch that ends before next.
func lastFirst(firsts []int64, next int64) int64 {
	var best int64 = -1
	for _, f := range firsts {
		if f < next && f > best {
			best = f
		}
	}
	return best
}

// A finish step that fails is retried (Step "finish"); one that fails
// permanently stops Run with its error, and nothing from its batch on is
// committed.
func TestFinishFailures(t *testing.T) {
	t.Run("transient", func(t *testing.T) {
		c := newCluster(t, 1)
		produce(t, producer(t, c), "v", 5, 1)
		var fails atomic.Int32
		fails.Store(2)
		var log hookLog
		h := HandlerFunc(func(_ context.Context, b *Batch) error {
			b.Finish(func(context.Context) error {
				if fails.Add(-1) >= 0 {
					return errors.New("acks lost")
				}
				return nil
			})
			return nil
		})
		cs := newConsumer(t, c, h, WithHooks(log.hooks()))
		stop := start(t, cs)
		testenv.Eventually(t, "committed", 20*time.Second, func() bool { return total(committed(t, c, group)) == 5 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		snap := log.snapshot()
		if len(snap.retries) != 2 || snap.retries[0].Step != StepFinish || snap.retries[1].Attempt != 2 {
			t.Errorf("retries %+v", snap.retries)
		}
		if diff := cmp.Diff([]string{"pause [events]", "resume [events]"}, snap.pauses); diff != "" {
			t.Errorf("pauses (-want +got):\n%s", diff)
		}
	})
	t.Run("permanent", func(t *testing.T) {
		c := newCluster(t, 1)
		p := producer(t, c)
		produce(t, p, "v", 3, 1)
		bug := errors.New("cannot build outputs")
		var batches atomic.Int32
		h := HandlerFunc(func(_ context.Context, b *Batch) error {
			n := batches.Add(1)
			b.Finish(func(context.Context) error {
				if n == 2 {
					return Permanent(bug)
				}
				return nil
			})
			return nil
		})
		cs := newConsumer(t, c, h)
		done := make(chan error, 1)
		go func() { done <- cs.Run(context.Background()) }()
		testenv.Eventually(t, "first committed", 20*time.Second, func() bool { return total(committed(t, c, group)) == 3 })
		produce(t, p, "w", 3, 1)
		var err error
		select {
		case err = <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("Run did not stop")
		}
		if !errors.Is(err, bug) || !strings.Contains(err.Error(), "finish") {
			t.Errorf("Run: %v", err)
		}
		if n := total(committed(t, c, group)); n != 3 {
			t.Errorf("committed %d, want 3 (nothing of the failed batch)", n)
		}
		if err := cs.Close(context.Background()); !errors.Is(err, bug) {
			t.Errorf("Close: %v", err)
		}
	})
}

// A handler's Permanent error stops Run without committing its batch; the
// batches before it are committed.
func TestPermanentHandlerError(t *testing.T) {
	c := newCluster(t, 1)
	p := producer(t, c)
	produce(t, p, "v", 3, 1)
	bad := errors.New("poison")
	var calls atomic.Int32
	h := HandlerFunc(func(_ context.Context, b *Batch) error {
		if calls.Add(1) == 2 {
			return fmt.Errorf("judging: %w", Permanent(bad))
		}
		return nil
	})
	cs := newConsumer(t, c, h)
	done := make(chan error, 1)
	go func() { done <- cs.Run(context.Background()) }()
	testenv.Eventually(t, "first committed", 20*time.Second, func() bool { return total(committed(t, c, group)) == 3 })
	produce(t, p, "w", 3, 1)
	if err := <-done; !errors.Is(err, bad) {
		t.Errorf("Run: %v", err)
	}
	if n := total(committed(t, c, group)); n != 3 {
		t.Errorf("committed %d, want 3", n)
	}
}

// A refused commit is retried after a backoff, without handling again,
// until the offsets are committed.
func TestRefusedCommitRetried(t *testing.T) {
	c := newCluster(t, 2)
	var refused atomic.Int64
	refuseFirst(c, 2, &refused)
	produce(t, producer(t, c), "v", 20, 2)
	rec := &recorder{}
	var log hookLog
	cs := newConsumer(t, c, rec, WithHooks(log.hooks()))
	stop := start(t, cs)
	testenv.Eventually(t, "committed after refusals", 20*time.Second, func() bool { return total(committed(t, c, group)) == 20 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if refused.Load() != 2 {
		t.Errorf("refused %d commits, want 2", refused.Load())
	}
	if n := len(rec.seen()); n > 2 { // one batch per partition at most
		t.Errorf("handler called %d times: handled again after a refused commit?", n)
	}
	refusals := 0
	for _, ci := range log.snapshot().commits {
		switch {
		case errors.Is(ci.Err, kerr.OffsetMetadataTooLarge):
			refusals++
		case ci.Err != nil: // not the broker's refusal: retried all the same
			t.Logf("commit of %d records failed: %v", ci.Records, ci.Err)
		}
	}
	if refusals != 2 {
		t.Errorf("OnCommit reported %d refusals, want 2", refusals)
	}
}

// WithReadCommitted skips records of aborted transactions.
func TestReadCommitted(t *testing.T) {
	c := newCluster(t, 1)
	ctx := context.Background()
	// One transactional producer per transaction: kfake answered the second
	// transaction of one producer after an abort with
	// OUT_OF_ORDER_SEQUENCE_NUMBER once on a busy CI machine.
	for _, commit := range []kgo.TransactionEndTry{kgo.TryAbort, kgo.TryCommit} {
		tx, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID(fmt.Sprint("tx-", commit)), kgo.ProducerLinger(0))
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Close()
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		val := map[kgo.TransactionEndTry]string{kgo.TryAbort: "aborted", kgo.TryCommit: "committed"}[commit]
		if err := tx.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(val)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := tx.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	rec := &recorder{}
	cs := newConsumer(t, c, rec, WithReadCommitted())
	stop := start(t, cs)
	// A read-committed fetch sees the record once kfake has moved the
	// partition's last stable offset past both transactions, which a busy
	// machine (the integration run's -race packages beside the servers)
	// once took longer than the other tests' 20 s.
	testenv.Eventually(t, "the committed record", time.Minute, func() bool { return rec.handled() == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if m := rec.missing([]string{"committed"}); len(m) != 0 || rec.handled() != 1 {
		t.Errorf("handled %v", rec.seen())
	}
}

func TestNewAndLifecycle(t *testing.T) {
	c := newCluster(t, 1)
	h := HandlerFunc(func(context.Context, *Batch) error { return nil })
	if _, err := New(nil, clientOpts(c), WithGroup("g"), WithTopics("t")); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil handler: %v", err)
	}
	for name, opts := range map[string][]Option{
		"no group":      {WithTopics("t")},
		"no topics":     {WithGroup("g")},
		"empty group":   {WithGroup(""), WithTopics("t")},
		"empty topics":  {WithGroup("g"), WithTopics()},
		"empty topic":   {WithGroup("g"), WithTopics("t", "")},
		"empty dlt":     {WithGroup("g"), WithTopics("t"), WithDLT("")},
		"max poll":      {WithGroup("g"), WithTopics("t"), WithMaxPoll(0)},
		"batch size":    {WithGroup("g"), WithTopics("t"), WithBatch(0, time.Second)},
		"batch int":     {WithGroup("g"), WithTopics("t"), WithBatch(1, 0)},
		"backoff":       {WithGroup("g"), WithTopics("t"), WithBackoff(time.Second, time.Millisecond, 0)},
		"jitter":        {WithGroup("g"), WithTopics("t"), WithBackoff(time.Millisecond, time.Second, 2)},
		"drain":         {WithGroup("g"), WithTopics("t"), WithDrainTimeout(0)},
		"rebalance":     {WithGroup("g"), WithTopics("t"), WithRebalanceInterval(0)},
		"logger":        {WithGroup("g"), WithTopics("t"), WithLogger(nil)},
		"before close":  {WithGroup("g"), WithTopics("t"), WithBeforeClose(nil)},
		"batch too big": {nil, WithGroup("g"), WithTopics("t"), WithBatch(1_000_001, time.Second)},
		"fetch wait":    {WithGroup("g"), WithTopics("t"), WithFetchWait(MinFetchWait-time.Millisecond, 1)},
		"fetch wait 1h": {WithGroup("g"), WithTopics("t"), WithFetchWait(time.Hour, 1)},
		"fetch bytes":   {WithGroup("g"), WithTopics("t"), WithFetchWait(time.Second, 0)},
	} {
		if _, err := New(h, clientOpts(c), opts...); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := New(h, []kgo.Opt{kgo.ProducerBatchMaxBytes(0)}, WithGroup("g"), WithTopics("t")); err == nil || errors.Is(err, ErrInvalid) {
		t.Errorf("bad kgo option: %v", err)
	}

	// Close without Run runs the before-close functions and closes the
	// client; Run after Close refuses.
	var closed []string
	cs, err := New(h, clientOpts(c), WithGroup("g"), WithTopics(topic), WithLogger(slog.New(slog.DiscardHandler)),
		WithBeforeClose(func(context.Context) error { closed = append(closed, "a"); return nil }),
		WithBeforeClose(func(context.Context) error { closed = append(closed, "b"); return errors.New("b failed") }))
	if err != nil {
		t.Fatal(err)
	}
	if cs.Group() != "g" || cs.Client() == nil || cs.Pending() != 0 {
		t.Errorf("Group %q, Client %v, Pending %d", cs.Group(), cs.Client(), cs.Pending())
	}
	if err := cs.Close(context.Background()); err == nil || err.Error() != "b failed" {
		t.Errorf("Close: %v", err)
	}
	if diff := cmp.Diff([]string{"a", "b"}, closed); diff != "" {
		t.Errorf("before-close order (-want +got):\n%s", diff)
	}
	if err := cs.Run(context.Background()); !errors.Is(err, ErrInvalid) {
		t.Errorf("Run after Close: %v", err)
	}

	// Run twice.
	cs = newConsumer(t, c, h)
	stop := start(t, cs)
	testenv.Eventually(t, "running", 20*time.Second, func() bool { cs.life.Lock(); defer cs.life.Unlock(); return cs.started })
	if err := cs.Run(context.Background()); !errors.Is(err, ErrInvalid) {
		t.Errorf("second Run: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// The partition callbacks: a lost partition's records are dropped at once,
// uncommitted, and a retried batch emptied by it stops pausing fetching.
func TestLostPartitionsDropped(t *testing.T) {
	c := newCluster(t, 2)
	produce(t, producer(t, c), "v", 10, 2)
	var failing atomic.Bool
	failing.Store(true)
	rec := &recorder{fail: func(*Batch) error {
		if failing.Load() {
			return errors.New("down")
		}
		return nil
	}}
	var log hookLog
	cs := newConsumer(t, c, rec, WithBatch(10, time.Hour), WithHooks(log.hooks()))
	stop := start(t, cs)
	defer stop()
	testenv.Eventually(t, "failing", 20*time.Second, func() bool { return len(log.snapshot().retries) > 0 })
	// What kgo does on a fatal group error, called as it would: with the
	// loop waiting in a poll.
	cs.onLost(context.Background(), cs.cl, map[string][]int32{topic: {0, 1}})
	snap := log.snapshot()
	if len(snap.lost) != 1 || snap.lost[0].Dropped != 10 || cs.Pending() != 0 {
		t.Errorf("lost %+v, pending %d", snap.lost, cs.Pending())
	}
	if diff := cmp.Diff([]string{"pause [events]", "resume [events]"}, snap.pauses); diff != "" {
		t.Errorf("pauses (-want +got):\n%s", diff)
	}
	failing.Store(false)
	if n := total(committed(t, c, group)); n != 0 {
		t.Errorf("committed %d after a loss", n)
	}
}

// The processor's shape: the handler produces its outputs through the
// consumer's client without waiting, and its finish step flushes and waits
// for their acknowledgements (producing the failed ones again) while the
// next poll is handled. Every committed record's output is in Kafka.
func TestOutputsAcknowledgedBeforeCommit(t *testing.T) {
	c := newCluster(t, 3, "out")
	vals := produce(t, producer(t, c), "v", 300, 3)
	var cs *Consumer
	h := HandlerFunc(func(ctx context.Context, b *Batch) error {
		var mu sync.Mutex
		var wg sync.WaitGroup
		var failed []*kgo.Record
		send := func(rs []*kgo.Record) {
			wg.Add(len(rs))
			for _, r := range rs {
				cs.Client().Produce(ctx, r, func(r *kgo.Record, err error) {
					if err != nil {
						mu.Lock()
						failed = append(failed, r)
						mu.Unlock()
					}
					wg.Done()
				})
			}
		}
		outs := make([]*kgo.Record, len(b.Records))
		for i, r := range b.Records {
			outs[i] = &kgo.Record{Topic: "out", Value: r.Value}
		}
		send(outs)
		b.Finish(func(ctx context.Context) error {
			if err := cs.Client().Flush(ctx); err != nil {
				return err
			}
			wg.Wait()
			mu.Lock()
			again := failed
			failed = nil
			mu.Unlock()
			if len(again) > 0 {
				send(again)
				return fmt.Errorf("%d outputs failed", len(again))
			}
			return nil
		})
		return nil
	})
	cs = newConsumer(t, c, h, WithMaxPoll(20))
	stop := start(t, cs)
	testenv.Eventually(t, "all committed", 20*time.Second, func() bool { return total(committed(t, c, group)) == int64(len(vals)) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := endOffset(t, c, "out"); n < int64(len(vals)) {
		t.Errorf("%d outputs in Kafka for %d committed records", n, len(vals))
	}
}

// refuseFirst makes the broker refuse the first n offset commits.
func refuseFirst(c *kfake.Cluster, n int64, refused *atomic.Int64) {
	testenv.RefuseCommits(c, func() bool {
		if refused.Load() >= n {
			return false
		}
		refused.Add(1)
		return true
	})
}

// WithFetchWait reaches the Kafka client (over kopts' own values; without
// it they stay), and a fetch short of the minimum bytes still returns once
// the wait has passed: nothing waits for more records than come.
func TestFetchWait(t *testing.T) {
	c := newCluster(t, 1)
	h := HandlerFunc(func(context.Context, *Batch) error { return nil })
	plain := newConsumer(t, c, h)
	if w, b := plain.Client().OptValue(kgo.FetchMaxWait), plain.Client().OptValue(kgo.FetchMinBytes); w != 100*time.Millisecond || b != int32(1) {
		t.Errorf("without WithFetchWait: wait %v, min bytes %v; want kopts' 100ms and kgo's 1", w, b)
	}
	// Its client joined the group: it leaves before the one that consumes.
	if err := plain.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	cs := newConsumer(t, c, rec, WithFetchWait(200*time.Millisecond, 1<<20))
	if w, b := cs.Client().OptValue(kgo.FetchMaxWait), cs.Client().OptValue(kgo.FetchMinBytes); w != 200*time.Millisecond || b != int32(1<<20) {
		t.Errorf("WithFetchWait(200ms, 1 MiB): wait %v, min bytes %v", w, b)
	}
	stop := start(t, cs)
	vals := produce(t, producer(t, c), "v", 5, 1)
	testenv.Eventually(t, "all handled", 20*time.Second, func() bool { return rec.handled() == len(vals) })
	testenv.Eventually(t, "all committed", 20*time.Second, func() bool { return total(committed(t, c, group)) == int64(len(vals)) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
