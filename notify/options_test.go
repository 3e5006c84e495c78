package notify

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace/noop"
	"pgregory.net/rapid"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/consumer"
	"github.com/dabom/dpcs/internal/backoff"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/writebehind"
)

func TestNewOptions(t *testing.T) {
	hub, _ := NewHub()
	in := newInbox(t, openSQLite(t))
	kopts := []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}
	if _, err := New(nil, hub, kopts); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil store: %v", err)
	}
	ch := ChannelFunc(func(context.Context, Notification) error { return nil })
	for i, o := range []Option{WithConsumer(consumer.WithGroup("")), WithConsumer(consumer.WithTopics("")),
		WithConsumer(consumer.WithDLT("")), WithGuard(nil), WithChannel("", ch),
		WithChannel("a", nil), WithChannelQueue(0), WithChannelFamilyLimit(0), WithChannelWorkers(0), WithRetrySchedule(-time.Second),
		WithSendTimeout(0), WithSleep(nil), WithConsumer(consumer.WithBackoff(0, 1, 0)), WithConsumer(consumer.WithBackoff(2, 1, 0)),
		WithConsumer(consumer.WithMaxPoll(0)), WithBackoff(0, 1), WithLang("fr"),
		WithLocation(nil), WithClock(nil), WithLogger(nil)} {
		if _, err := New(in, hub, kopts, o); !errors.Is(err, ErrInvalid) {
			t.Errorf("option %d: %v", i, err)
		}
	}
	if _, err := New(in, hub, kopts, WithChannel("a", ch), WithChannel("a", ch)); !errors.Is(err, ErrInvalid) {
		t.Errorf("channel twice: %v", err)
	}
	if _, err := New(in, hub, []kgo.Opt{kgo.ProducerBatchMaxBytes(0)}); err == nil {
		t.Error("bad kgo option accepted")
	}
	n, err := New(in, hub, kopts, WithConsumer(consumer.WithGroup("g"), consumer.WithTopics("t"), consumer.WithDLT("t.dead")),
		WithChannel("a", ch), WithChannelQueue(8), WithChannelFamilyLimit(2), WithChannelWorkers(2), WithRetrySchedule(time.Millisecond),
		WithSendTimeout(time.Second), WithSleep(backoff.Sleep),
		WithConsumer(consumer.WithBackoff(time.Millisecond, time.Second, 0), consumer.WithMaxPoll(10)), WithLang(English),
		WithLocation(time.UTC), WithClock(time.Now), WithLogger(slog.New(slog.DiscardHandler)), WithHooks(Hooks{}))
	if err != nil {
		t.Fatal(err)
	}
	// Close without Run, twice; Run after Close refuses.
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := n.Run(context.Background()); !errors.Is(err, ErrInvalid) {
		t.Errorf("Run after Close: %v", err)
	}
}

// A channel that hangs fills its queue: further notifications are
// dead-lettered at once, and Close dead-letters what is still held when its
// context ends. The inbox and hub path never waits.
func TestChannelQueueFullAndShutdown(t *testing.T) {
	c := newFake(t)
	inbox := newInbox(t, openSQLite(t))
	hub, sub := newHubSub(t, 100, Filter{MemberID: 1, Role: RoleOwner})
	started := make(chan struct{}, 10)
	hang := ChannelFunc(func(ctx context.Context, n Notification) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	var dead atomic.Int32
	n, errc := startNotifier(t, c, inbox, hub, WithChannel("hang", hang), WithChannelWorkers(1), WithChannelQueue(1),
		WithHooks(Hooks{OnDeadLetter: func(DeadLetterInfo) { dead.Add(1) }}))
	p := testenv.Producer(t, c)
	produce(t, p, blockedRec(t, "ntf_1", 100, 2))
	<-started // the worker holds ntf_1
	produce(t, p, blockedRec(t, "ntf_2", 100, 2), blockedRec(t, "ntf_3", 100, 2), blockedRec(t, "ntf_4", 100, 2))
	testenv.Eventually(t, "pushed", 20*time.Second, func() bool { return len(sub.C) == 4 })
	testenv.Eventually(t, "overflow dead-lettered", 20*time.Second, func() bool { return dead.Load() == 2 }) // ntf_2 queued; 3, 4 overflow
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := n.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close: %v", err)
	}
	<-errc
	dl := testenv.Read(t, c, dlt, 4)
	reasons := map[string]int{}
	for _, r := range dl {
		reason := header(r, writebehind.HeaderDLTReason)
		switch {
		case strings.Contains(reason, "queue full"):
			reasons["full"]++
		case strings.Contains(reason, "shut down"):
			reasons["shutdown"]++
		default:
			t.Errorf("reason %q", reason)
		}
	}
	if reasons["full"] != 2 || reasons["shutdown"] != 2 {
		t.Errorf("reasons = %v", reasons)
	}
}

// memStore is an in-memory Store with the SQL inbox's contract.
type memStore struct {
	rows  []Notification
	byKey map[string]int
	byID  map[string]int
}

func (m *memStore) Add(_ context.Context, n Notification) (Notification, bool, error) {
	if i, ok := m.byID[n.EventID]; ok {
		return m.rows[i], false, nil
	}
	if i, ok := m.byKey[n.DedupeKey]; ok {
		return m.rows[i], false, nil
	}
	n.ID = int64(len(m.rows) + 1)
	m.rows = append(m.rows, n)
	m.byID[n.EventID], m.byKey[n.DedupeKey] = len(m.rows)-1, len(m.rows)-1
	return n, true, nil
}

func (m *memStore) MarkDelivered(_ context.Context, id int64, at time.Time) error {
	m.rows[id-1].DeliveredAt = &at
	return nil
}

// Property: whatever order and multiplicity notification events arrive in
// (replays, thresholds re-sent under new ids, with or without a guard, with
// crashes between push and delivered mark), however they fall into polls
// (duplicates within one poll and across polls), each dedupe key is stored once
// under the first event id that reached it and pushed once.
func TestDedupeProperty(t *testing.T) {
	guard := newGuard(t)
	groups := 0
	rapid.Check(t, func(t *rapid.T) {
		groups++
		cfg := defaultConfig()
		cfg.loc = time.UTC
		cfg.group = "g" + strconv.Itoa(groups) // a fresh key space per check
		if rapid.Bool().Draw(t, "guard") {
			cfg.guard = guard
		}
		st := &memStore{byKey: map[string]int{}, byID: map[string]int{}}
		hub, _ := NewHub(WithBuffer(1000))
		sub, _ := hub.Subscribe(1, Filter{Role: RoleAdmin})
		n := &Notifier{store: st, hub: hub, cfg: cfg}
		first := map[string]string{}
		var items []*item
		seen := map[string]*item{}
		poll := func() { // one poll's worth: deduped, stored and pushed as a batch
			if err := n.deliverBatch(context.Background(), items); err != nil {
				t.Fatalf("poll of %d: %v", len(items), err)
			}
			for _, it := range items {
				if !it.done {
					t.Fatalf("%s left undone", it.note.EventID)
				}
			}
			items, seen = nil, map[string]*item{}
		}
		for range rapid.IntRange(1, 30).Draw(t, "events") {
			var p envelope.Notification
			id := "ntf_" + rapid.SampledFrom([]string{"a", "b", "c", "d", "e", "f"}).Draw(t, "id")
			switch id {
			case "ntf_a", "ntf_b", "ntf_c": // three ids for the same threshold
				p = envelope.ThresholdAlert{FamilyID: 1, ThresholdPercent: 50, Message: "m", Period: "2026-02"}
			case "ntf_d":
				p = envelope.ThresholdAlert{FamilyID: 1, ThresholdPercent: 50, Message: "m", Period: "2026-03"}
			default:
				p = envelope.CustomerBlocked{FamilyID: 1, CustomerID: 2, BlockReason: "POOL", BlockedAt: t0}
			}
			note, err := FromEvent(envelope.New(id, t0, p), Korean, time.UTC)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := first[note.DedupeKey]; !ok {
				first[note.DedupeKey] = id
			}
			it := &item{rec: &kgo.Record{}, ctx: context.Background(), span: noop.Span{}}
			n.prepare(it, note, seen)
			items = append(items, it)
			if rapid.Bool().Draw(t, "end poll") {
				poll()
			}
		}
		poll()
		got := map[string]string{}
		for _, m := range drainSub(sub) {
			if _, dup := got[m.Data.DedupeKey]; dup {
				t.Fatalf("%s pushed twice", m.Data.DedupeKey)
			}
			got[m.Data.DedupeKey] = m.Data.EventID
		}
		if len(st.rows) != len(first) || len(got) != len(first) {
			t.Fatalf("rows %d, pushed %d, keys %d", len(st.rows), len(got), len(first))
		}
		for k, id := range first {
			if got[k] != id {
				t.Fatalf("%s pushed as %q, want %q", k, got[k], id)
			}
		}
	})
}

// The notifier's fetches wait up to 100 ms for 64 KiB by default, and
// WithConsumer(consumer.WithFetchWait) changes that on its Kafka client.
func TestNotifierFetchWait(t *testing.T) {
	hub, _ := NewHub()
	in := newInbox(t, openSQLite(t))
	kopts := []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}
	for _, tt := range []struct {
		opts  []Option
		wait  time.Duration
		bytes int32
	}{
		{nil, 100 * time.Millisecond, 64 << 10},
		{[]Option{WithConsumer(consumer.WithFetchWait(time.Second, 1))}, time.Second, 1},
	} {
		n, err := New(in, hub, kopts, tt.opts...)
		if err != nil {
			t.Fatal(err)
		}
		cl := n.c.Client()
		if w, b := cl.OptValue(kgo.FetchMaxWait), cl.OptValue(kgo.FetchMinBytes); w != tt.wait || b != tt.bytes {
			t.Errorf("fetch wait %v, min bytes %v; want %v, %v", w, b, tt.wait, tt.bytes)
		}
		if err := n.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
