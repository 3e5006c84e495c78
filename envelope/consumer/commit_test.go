package consumer

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dabom/dpcs/internal/testenv"
)

// With WithCommitEvery, a batch done within the interval of the last commit
// keeps its offsets; the close commits them, each record counted once by
// OnCommit.
func TestCommitEveryKeepsUntilClose(t *testing.T) {
	c := newCluster(t, 3)
	p := producer(t, c)
	rec := &recorder{}
	var log hookLog
	cs := newConsumer(t, c, rec, WithCommitEvery(time.Minute), WithHooks(log.hooks()))
	// The records the first commit must carry are there before the consumer
	// starts, so its first poll holds them all. A producer without linger
	// may send them in several requests; a poll between two would commit
	// the first part and keep the rest for the whole interval (as
	// TestCommitEveryRevoke once met on a busy CI machine).
	first := produce(t, p, "a", 30, 3)
	stop := start(t, cs)
	testenv.Eventually(t, "the first records committed", 20*time.Second, func() bool { return total(committed(t, c, group)) == 30 })
	second := produce(t, p, "b", 30, 3)
	testenv.Eventually(t, "the second records handled", 20*time.Second, func() bool { return rec.handled() == 60 })
	testenv.Eventually(t, "nothing pending", 20*time.Second, func() bool { return cs.Pending() == 0 })
	if n := total(committed(t, c, group)); n != 30 {
		t.Errorf("committed %d records within the interval, want the first 30", n)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := total(committed(t, c, group)); n != 60 {
		t.Errorf("committed %d after the close, want 60", n)
	}
	if n := log.committedRecords(); n != 60 {
		t.Errorf("OnCommit counted %d records, want 60", n)
	}
	if m := rec.missing(append(first, second...)); len(m) != 0 {
		t.Errorf("never handled: %v", m)
	}
}

// Kept offsets are committed when the interval is up with nothing more to
// read, and as soon as a later batch fails (a recovery's drain waits for
// the processors' commits to stop moving).
func TestCommitEveryCommitsWhenDue(t *testing.T) {
	c := newCluster(t, 2)
	p := producer(t, c)
	var down atomic.Bool
	down.Store(true)
	fail := func(b *Batch) error {
		for _, r := range b.Records {
			if down.Load() && strings.HasPrefix(string(r.Value), "c") {
				return errors.New("down")
			}
		}
		return nil
	}
	rec := &recorder{fail: fail}
	var log hookLog
	cs := newConsumer(t, c, rec, WithCommitEvery(300*time.Millisecond), WithHooks(log.hooks()))
	produce(t, p, "a", 10, 2)
	stop := start(t, cs)
	testenv.Eventually(t, "the first records committed", 20*time.Second, func() bool { return total(committed(t, c, group)) == 10 })
	produce(t, p, "b", 10, 2)
	testenv.Eventually(t, "the kept records committed", 20*time.Second, func() bool { return total(committed(t, c, group)) == 20 })
	produce(t, p, "c", 10, 2)
	testenv.Eventually(t, "the failing batch retried", 20*time.Second, func() bool { return len(log.snapshot().retries) >= 2 })
	if n := total(committed(t, c, group)); n != 20 {
		t.Errorf("committed %d while the third batch fails, want 20", n)
	}
	// A batch done just before the failing one keeps its offsets, which
	// the failure commits at once, however long the interval.
	rec2 := &recorder{fail: fail}
	c2 := newCluster(t, 1)
	p2 := producer(t, c2)
	cs2 := newConsumer(t, c2, rec2, WithCommitEvery(time.Minute))
	produce(t, p2, "a", 5, 1)
	stop2 := start(t, cs2)
	testenv.Eventually(t, "the first records committed", 20*time.Second, func() bool { return total(committed(t, c2, group)) == 5 })
	produce(t, p2, "b", 5, 1)
	testenv.Eventually(t, "the second records handled", 20*time.Second, func() bool { return rec2.handled() == 10 })
	produce(t, p2, "c", 5, 1)
	testenv.Eventually(t, "the third batch failing", 20*time.Second, func() bool { return len(rec2.seen()) >= 4 })
	testenv.Eventually(t, "the kept records committed while failing", 20*time.Second, func() bool { return total(committed(t, c2, group)) == 10 })
	down.Store(false)
	testenv.Eventually(t, "every record handled", 20*time.Second, func() bool { return rec.handled() == 30 && rec2.handled() == 15 })
	for _, stop := range []func() error{stop, stop2} {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}
	if a, b := total(committed(t, c, group)), total(committed(t, c2, group)); a != 30 || b != 15 {
		t.Errorf("committed %d and %d after the close, want 30 and 15", a, b)
	}
}

// A revoke commits what was kept of the revoked partitions: the next owner
// reads none of it again.
func TestCommitEveryRevoke(t *testing.T) {
	c := newCluster(t, 4)
	p := producer(t, c)
	rec := &recorder{}
	var log1 hookLog
	c1 := newConsumer(t, c, rec, WithCommitEvery(time.Minute), WithHooks(log1.hooks()))
	first := produce(t, p, "a", 40, 4)
	stop1 := start(t, c1)
	testenv.Eventually(t, "the first records committed", 20*time.Second, func() bool { return total(committed(t, c, group)) == 40 })
	second := produce(t, p, "b", 40, 4)
	testenv.Eventually(t, "the second records handled", 20*time.Second, func() bool { return rec.handled() == 80 })
	if n := total(committed(t, c, group)); n != 40 {
		t.Fatalf("committed %d within the interval, want 40", n)
	}
	c2 := newConsumer(t, c, rec, WithCommitEvery(time.Minute))
	stop2 := start(t, c2)
	testenv.Eventually(t, "partitions revoked from member 1", 20*time.Second, func() bool { return partitionCount(log1.snapshot().revoked) > 0 })
	third := produce(t, p, "c", 40, 4)
	testenv.Eventually(t, "every record handled", 20*time.Second, func() bool { return rec.handled() == 120 })
	if err := stop2(); err != nil {
		t.Error(err)
	}
	if err := stop1(); err != nil {
		t.Error(err)
	}
	if n := total(committed(t, c, group)); n != 120 {
		t.Errorf("committed %d, want 120", n)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, v := range append(append(first, second...), third...) {
		if rec.ok[v] != 1 {
			t.Errorf("%s handled %d times: kept offsets lost at the revoke", v, rec.ok[v])
		}
	}
}

func TestCommitEveryOption(t *testing.T) {
	for _, d := range []time.Duration{-time.Millisecond, 2 * time.Minute} {
		if _, err := New(HandlerFunc(func(context.Context, *Batch) error { return nil }), nil,
			WithGroup(group), WithTopics(topic), WithCommitEvery(d)); !errors.Is(err, ErrInvalid) {
			t.Errorf("WithCommitEvery(%s): %v, want ErrInvalid", d, err)
		}
	}
}

// levelLog keeps the messages logged at Warn or above.
type levelLog struct {
	mu     sync.Mutex
	warns  []string
	onWarn func() // called (under mu) with each warning, when set
}

func (l *levelLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *levelLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		l.mu.Lock()
		l.warns = append(l.warns, r.Message)
		if l.onWarn != nil {
			l.onWarn()
		}
		l.mu.Unlock()
	}
	return nil
}
func (l *levelLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *levelLog) WithGroup(string) slog.Handler      { return l }

// A stop that ends a finish step's commit is no refused commit: the drain
// commits the batch, and nothing is logged as a warning. Seen in the
// processor deployable's log at every stop under load ("commit refused;
// retrying" with "context canceled", from the notifier and the
// write-behind) before the fix.
func TestStopCutCommitIsNoWarning(t *testing.T) {
	c := newCluster(t, 1)
	produce(t, producer(t, c), "v", 5, 1)
	finishing := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	h := HandlerFunc(func(_ context.Context, b *Batch) error {
		b.Finish(func(context.Context) error {
			once.Do(func() { close(finishing) })
			<-release
			return nil
		})
		return nil
	})
	log := &levelLog{}
	cs := newConsumer(t, c, h, WithLogger(slog.New(log)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cs.Run(ctx) }()
	t.Cleanup(func() { _ = cs.Close(context.Background()) })
	select {
	case <-finishing:
	case <-time.After(20 * time.Second):
		t.Fatal("no finish step began")
	}
	cancel() // the finish step's commit then runs with the loop's ended context
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := total(committed(t, c, group)); got != 5 {
		t.Errorf("committed %d of 5 records", got)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, w := range log.warns {
		t.Errorf("warned at a stop: %q", w)
	}
}

// A commit the drain itself cannot make (the coordinator does not answer
// it before Close's deadline) still warns: only the loop's commits that a
// stop cuts short are quiet, since the drain commits those. Found in
// review of the change above, which first quieted every commit that failed
// with its own context's error, the drain's too, so a stop that left
// offsets uncommitted said nothing.
func TestDrainCommitFailureWarns(t *testing.T) {
	c := newCluster(t, 1)
	produce(t, producer(t, c), "v", 5, 1)
	// The coordinator takes no commit: each waits unanswered until a
	// warning is logged or the test ends.
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	c.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	var handled atomic.Int64
	h := HandlerFunc(func(_ context.Context, b *Batch) error {
		handled.Add(int64(len(b.Records)))
		return nil
	})
	log := &levelLog{onWarn: free}
	cs := newConsumer(t, c, h, WithLogger(slog.New(log)))
	done := make(chan error, 1)
	go func() { done <- cs.Run(context.Background()) }()
	testenv.Eventually(t, "the records handled", 20*time.Second, func() bool { return handled.Load() == 5 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = cs.Close(ctx)
	<-done
	log.mu.Lock()
	defer log.mu.Unlock()
	if !slices.ContainsFunc(log.warns, func(w string) bool { return strings.Contains(w, "commit refused") }) {
		t.Errorf("a drain that could not commit warned %q; want a refused commit", log.warns)
	}
}
