package notify

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

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/consumer"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/idempotency"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/writebehind"
)

func startNotifier(t *testing.T, c *kfake.Cluster, store Store, hub *Hub, opts ...Option) (*Notifier, chan error) {
	t.Helper()
	n, err := New(store, hub, testenv.ConsumerOpts(c), opts...)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- n.Run(context.Background()) }()
	return n, errc
}

func stopNotifier(t *testing.T, n *Notifier, errc chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-errc; err != nil {
		t.Errorf("Run: %v", err)
	}
}

func newHubSub(t *testing.T, family int64, f Filter) (*Hub, *Subscription) {
	t.Helper()
	hub, err := NewHub(WithBuffer(1000))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := hub.Subscribe(family, f)
	if err != nil {
		t.Fatal(err)
	}
	return hub, sub
}

// Story 5 at the notifier: every notification delivered 3 times is stored
// once and pushed once; QUOTA_UPDATED is stored only when asked to
// (WithStoreQuotaUpdated), pushed live either way.
func TestStory5DuplicatesStoredAndPushedOnce(t *testing.T) {
	for _, tc := range []struct {
		name       string
		storeQuota bool
		kinds      []envelope.SubType // of the inbox rows, oldest first
	}{
		{"live-only quota", false, []envelope.SubType{envelope.SubCustomerBlocked, envelope.SubThresholdAlert}},
		{"stored quota", true, []envelope.SubType{envelope.SubCustomerBlocked, envelope.SubQuotaUpdated, envelope.SubThresholdAlert}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newFake(t)
			inbox := newInbox(t, openSQLite(t))
			hub, sub := newHubSub(t, 100, Filter{MemberID: 1, Role: RoleOwner})
			var delivered, dups atomic.Int32
			n, errc := startNotifier(t, c, inbox, hub, WithGuard(newGuard(t)), WithStoreQuotaUpdated(tc.storeQuota),
				WithHooks(Hooks{OnNotify: func(i NotifyInfo) {
					if i.Outcome == Delivered {
						delivered.Add(1)
					} else {
						dups.Add(1)
					}
				}}))
			recs := []*kgo.Record{
				blockedRec(t, envelope.DerivedID("ntf_", "evt_a", "customer-blocked"), 100, 3),
				quotaRec(t, envelope.DerivedID("ntf_", "evt_b", "quota-updated"), 100, 1),
				thresholdRec(t, envelope.DerivedID("ntf_", "evt_b", "threshold:10"), 100, 10, "2026-02"),
			}
			p := testenv.Producer(t, c)
			for range 3 {
				produce(t, p, recs...)
			}
			testenv.Eventually(t, "9 records handled", 20*time.Second, func() bool { return delivered.Load()+dups.Load() == 9 })
			stopNotifier(t, n, errc)
			var kinds []envelope.SubType
			got := rows(t, inbox, 100)
			for i := range got {
				kinds = append(kinds, got[len(got)-1-i].Kind)
			}
			if diff := cmp.Diff(tc.kinds, kinds); diff != "" {
				t.Errorf("inbox rows (-want +got):\n%s", diff)
			}
			var pushed []envelope.SubType
			for _, m := range drainSub(sub) {
				pushed = append(pushed, m.Data.Kind)
				if (m.ID == 0) != (m.Data.Kind == envelope.SubQuotaUpdated && !tc.storeQuota) {
					t.Errorf("pushed %s with SSE id %d", m.Data.Kind, m.ID)
				}
			}
			want := []envelope.SubType{envelope.SubCustomerBlocked, envelope.SubQuotaUpdated, envelope.SubThresholdAlert}
			if diff := cmp.Diff(want, pushed); diff != "" {
				t.Errorf("pushed (-want +got):\n%s", diff)
			}
			if delivered.Load() != 3 || dups.Load() != 6 {
				t.Errorf("delivered %d, duplicates %d; want 3, 6", delivered.Load(), dups.Load())
			}
		})
	}
}

// Story 4 at the notifier: 50/30/10 % once each per period, even when
// replayed and when re-sent under new event ids; a new period alerts again.
func TestStory4ThresholdsOncePerPeriod(t *testing.T) {
	for _, guard := range []bool{false, true} {
		t.Run(map[bool]string{false: "inbox-only", true: "guard"}[guard], func(t *testing.T) {
			c := newFake(t)
			inbox := newInbox(t, openSQLite(t))
			hub, sub := newHubSub(t, 100, Filter{MemberID: 7, Role: RoleMember})
			var handled atomic.Int32
			opts := []Option{WithHooks(Hooks{OnNotify: func(NotifyInfo) { handled.Add(1) }})}
			if guard {
				opts = append(opts, WithGuard(newGuard(t)))
			}
			n, errc := startNotifier(t, c, inbox, hub, opts...)
			p := testenv.Producer(t, c)
			var recs []*kgo.Record
			for i, pct := range []int{50, 30, 10} {
				id := envelope.DerivedID("ntf_", "evt_"+string(rune('a'+i)), "threshold")
				r := thresholdRec(t, id, 100, pct, "2026-02")
				recs = append(recs, r, r) // replayed
				// The pool hovers: the engine re-arms and fires again under a new id.
				recs = append(recs, thresholdRec(t, envelope.NewID("ntf_"), 100, pct, "2026-02"))
			}
			recs = append(recs, thresholdRec(t, "ntf_march", 100, 50, "2026-03"))
			produce(t, p, recs...)
			testenv.Eventually(t, "all handled", 20*time.Second, func() bool { return int(handled.Load()) == len(recs) })
			stopNotifier(t, n, errc)

			var got []string
			for _, m := range drainSub(sub) {
				got = append(got, m.Data.DedupeKey+" "+m.Data.Body)
			}
			want := []string{
				"threshold:100:50:2026-02 가족 데이터가 50% 미만입니다! 데이터를 충전해주세요.",
				"threshold:100:30:2026-02 가족 데이터가 30% 미만입니다! 데이터를 충전해주세요.",
				"threshold:100:10:2026-02 가족 데이터가 10% 미만입니다! 데이터를 충전해주세요.",
				"threshold:100:50:2026-03 가족 데이터가 50% 미만입니다! 데이터를 충전해주세요.",
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("pushed (-want +got):\n%s", diff)
			}
			if n := len(rows(t, inbox, 100)); n != 4 {
				t.Errorf("inbox rows = %d, want 4", n)
			}
		})
	}
}

func TestMalformedToDLTAndFlowContinues(t *testing.T) {
	c := newFake(t)
	inbox := newInbox(t, openSQLite(t))
	hub, sub := newHubSub(t, 100, Filter{MemberID: 1, Role: RoleOwner})
	n, errc := startNotifier(t, c, inbox, hub)
	p := testenv.Producer(t, c)
	usage, err := kafkarecord.New(envelope.TopicNotificationEvents, envelope.New("evt_u", t0,
		envelope.UsagePayload{FamilyID: 100, CustomerID: 1, AppID: "a", BytesUsed: 1}))
	if err != nil {
		t.Fatal(err)
	}
	bad := &kgo.Record{Topic: envelope.TopicNotificationEvents, Key: []byte("100"), Value: []byte(`{"eventId":`)}
	produce(t, p, bad, usage, blockedRec(t, "ntf_ok", 100, 2))
	dl := testenv.Read(t, c, dlt, 2)
	testenv.Eventually(t, "the good record", 20*time.Second, func() bool { return len(rows(t, inbox, 100)) == 1 })
	stopNotifier(t, n, errc)
	reasons := []string{header(dl[0], writebehind.HeaderDLTReason), header(dl[1], writebehind.HeaderDLTReason)}
	slices.Sort(reasons)
	if !strings.Contains(reasons[0], "malformed") || !strings.Contains(reasons[1], "unexpected DATA_USAGE") {
		t.Errorf("reasons = %q", reasons)
	}
	for _, r := range dl {
		if header(r, writebehind.HeaderDLTTopic) != envelope.TopicNotificationEvents || header(r, writebehind.HeaderDLTOffset) == "" {
			t.Errorf("headers = %v", r.Headers)
		}
	}
	if got := drainSub(sub); len(got) != 1 || got[0].Data.EventID != "ntf_ok" {
		t.Errorf("pushed %+v", got)
	}
}

// flakyStore fails Add and MarkDelivered while failing is set.
type flakyStore struct {
	Store
	failAdd, failMark atomic.Int32 // calls left to fail
}

var errDown = errors.New("database down")

func (f *flakyStore) Add(ctx context.Context, n Notification) (Notification, bool, error) {
	if f.failAdd.Add(-1) >= 0 {
		return Notification{}, false, errDown
	}
	return f.Store.Add(ctx, n)
}

func (f *flakyStore) MarkDelivered(ctx context.Context, id int64, at time.Time) error {
	if f.failMark.Add(-1) >= 0 {
		return errDown
	}
	return f.Store.MarkDelivered(ctx, id, at)
}

// A failing inbox pauses and retries with backoff; nothing is lost, nothing
// pushed twice (MarkDelivered failing after the push is retried without a
// second push).
func TestStoreFailurePausesAndRetries(t *testing.T) {
	c := newFake(t)
	inbox := newInbox(t, openSQLite(t))
	st := &flakyStore{Store: inbox}
	st.failAdd.Store(3)
	st.failMark.Store(2)
	hub, sub := newHubSub(t, 100, Filter{MemberID: 1, Role: RoleOwner})
	var mu sync.Mutex
	var retries []RetryInfo
	n, errc := startNotifier(t, c, st, hub, WithConsumer(consumer.WithBackoff(100*time.Millisecond, 250*time.Millisecond, 0)),
		WithGuard(newGuard(t)), WithHooks(Hooks{OnRetry: func(i RetryInfo) { mu.Lock(); retries = append(retries, i); mu.Unlock() }}))
	// From before the produce: the notifier can fetch the record (and fail
	// its first attempt) before the producer has its acknowledgement.
	start := time.Now()
	produce(t, testenv.Producer(t, c), blockedRec(t, "ntf_1", 100, 2))
	testenv.Eventually(t, "delivered", 20*time.Second, func() bool {
		r := rows(t, inbox, 100)
		return len(r) == 1 && r[0].DeliveredAt != nil
	})
	elapsed := time.Since(start)
	stopNotifier(t, n, errc)
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 250 * time.Millisecond, 250 * time.Millisecond, 250 * time.Millisecond}
	var waits []time.Duration
	var sum time.Duration
	for _, r := range retries {
		waits = append(waits, r.Wait)
		sum += r.Wait
	}
	if diff := cmp.Diff(want, waits); diff != "" {
		t.Errorf("backoff (-want +got):\n%s", diff)
	}
	if elapsed < sum {
		t.Errorf("delivered after %v, before the %v of backoff", elapsed, sum)
	}
	if len(retries) != 5 || retries[0].What != "inbox" || !errors.Is(retries[0].Err, errDown) {
		t.Errorf("retries = %+v", retries)
	}
	if got := drainSub(sub); len(got) != 1 {
		t.Errorf("pushed %d, want 1", len(got))
	}
}

// stopAtMark stops the notifier (cancels Run's context) while it marks a
// notification delivered: the worst moment, the work done but not yet
// recorded in the guard.
type stopAtMark struct {
	Store
	stop func()
}

func (s *stopAtMark) MarkDelivered(ctx context.Context, id int64, at time.Time) error {
	s.stop()
	return s.Store.MarkDelivered(context.WithoutCancel(ctx), id, at)
}

// A notifier stopped right after delivering still completes its claim, so
// the next notifier in the group sees the notification done instead of
// waiting out the stopped one's lease.
func TestStoppedAfterDeliveryCompletesClaim(t *testing.T) {
	c := newFake(t)
	inbox := newInbox(t, openSQLite(t))
	g := newGuard(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hub, sub := newHubSub(t, 100, Filter{MemberID: 1, Role: RoleOwner})
	n, err := New(&stopAtMark{Store: inbox, stop: cancel}, hub, testenv.ConsumerOpts(c), WithGuard(g))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- n.Run(ctx) }()
	produce(t, testenv.Producer(t, c), blockedRec(t, "ntf_1", 100, 2))
	if err := <-errc; err != nil {
		t.Errorf("Run: %v", err)
	}
	closeCtx, done := context.WithTimeout(context.Background(), 20*time.Second)
	defer done()
	if err := n.Close(closeCtx); err != nil {
		t.Errorf("Close: %v", err)
	}
	if r := rows(t, inbox, 100); len(r) != 1 || r[0].DeliveredAt == nil {
		t.Fatalf("inbox = %+v, want ntf_1 delivered", r)
	}
	cl, err := g.Claim(context.Background(), idempotency.Key(DefaultGroup, "ntf_1"))
	if err != nil {
		t.Fatal(err)
	}
	if cl.Outcome != idempotency.Done {
		t.Errorf("claim after the stop: %v, want done (a lease left behind holds up the next notifier)", cl.Outcome)
	}
	if got := drainSub(sub); len(got) != 1 {
		t.Errorf("pushed %d, want 1", len(got))
	}
}

// Restart from committed offsets: a second notifier in the group handles
// only what the first did not commit, and replays are deduped.
func TestRestartFromCommittedOffsets(t *testing.T) {
	c := newFake(t)
	inbox := newInbox(t, openSQLite(t))
	p := testenv.Producer(t, c)
	var first []*kgo.Record
	for i := range 20 {
		first = append(first, blockedRec(t, envelope.DerivedID("ntf_", "evt_1", string(rune('a'+i))), 100+int64(i%5), 2))
	}
	produce(t, p, first...)

	hub1, err := NewHub(WithBuffer(1000))
	if err != nil {
		t.Fatal(err)
	}
	var h1, c1 atomic.Int32
	n1, errc1 := startNotifier(t, c, inbox, hub1, WithHooks(Hooks{
		OnNotify: func(NotifyInfo) { h1.Add(1) },
		OnCommit: func(i CommitInfo) {
			if i.Err == nil {
				c1.Add(int32(i.Records))
			}
		},
	}))
	testenv.Eventually(t, "first batch committed", 20*time.Second, func() bool { return h1.Load() == 20 && c1.Load() == 20 })
	stopNotifier(t, n1, errc1)

	var second []*kgo.Record
	for i := range 10 {
		second = append(second, blockedRec(t, envelope.DerivedID("ntf_", "evt_2", string(rune('a'+i))), 100+int64(i%5), 3))
	}
	produce(t, p, second...)
	produce(t, p, first[:5]...) // the processor replays some
	hub2, sub2 := newHubSub(t, 100, Filter{MemberID: 1, Role: RoleOwner})
	var delivered, dups atomic.Int32
	n2, errc2 := startNotifier(t, c, inbox, hub2, WithHooks(Hooks{OnNotify: func(i NotifyInfo) {
		if i.Outcome == Delivered {
			delivered.Add(1)
		} else {
			dups.Add(1)
		}
	}}))
	testenv.Eventually(t, "second batch", 20*time.Second, func() bool { return delivered.Load()+dups.Load() == 15 })
	stopNotifier(t, n2, errc2)
	if delivered.Load() != 10 || dups.Load() != 5 {
		t.Errorf("second run: delivered %d, duplicates %d; want 10, 5 (nothing of the first run again)", delivered.Load(), dups.Load())
	}
	total := 0
	for f := int64(100); f < 105; f++ {
		total += len(rows(t, inbox, f))
	}
	if total != 30 {
		t.Errorf("inbox rows = %d, want 30", total)
	}
	if got := drainSub(sub2); len(got) != 2 { // family 100: second[0], second[5]
		t.Errorf("family 100 pushed %d in run 2, want 2", len(got))
	}
}

// A failing channel is retried after 1 s, 5 s and 30 s, then dead-lettered
// with the reason; a permanent failure is dead-lettered at once; a good
// channel and the inbox/hub path are not held up.
func TestChannelRetryScheduleAndDLT(t *testing.T) {
	c := newFake(t)
	inbox := newInbox(t, openSQLite(t))
	hub, sub := newHubSub(t, 100, Filter{MemberID: 1, Role: RoleOwner})
	sl := &fakeSleep{}
	var mu sync.Mutex
	var good []string
	var sends []SendInfo
	failing := ChannelFunc(func(ctx context.Context, n Notification) error {
		if n.Kind == envelope.SubThresholdAlert {
			return Permanent(errors.New("410 gone"))
		}
		return errors.New("push service unavailable")
	})
	okCh := ChannelFunc(func(ctx context.Context, n Notification) error {
		mu.Lock()
		good = append(good, n.EventID)
		mu.Unlock()
		return nil
	})
	n, errc := startNotifier(t, c, inbox, hub, WithSleep(sl.sleep), WithChannelWorkers(1),
		WithChannel("push", failing), WithChannel("hook", okCh, envelope.SubCustomerBlocked, envelope.SubQuotaUpdated),
		WithHooks(Hooks{OnSend: func(i SendInfo) { mu.Lock(); sends = append(sends, i); mu.Unlock() }}))
	produce(t, testenv.Producer(t, c), blockedRec(t, "ntf_b", 100, 2), quotaRec(t, "ntf_q", 100, 2),
		thresholdRec(t, "ntf_t", 100, 50, "2026-02"))
	dl := testenv.Read(t, c, dlt, 2)
	testenv.Eventually(t, "good channel", 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(good) == 2 })
	stopNotifier(t, n, errc)

	if diff := cmp.Diff([]time.Duration{time.Second, 5 * time.Second, 30 * time.Second}, sl.got()); diff != "" {
		t.Errorf("retry waits (-want +got):\n%s", diff)
	}
	byID := map[string]*kgo.Record{}
	for _, r := range dl {
		ev, err := kafkarecord.Decode(r)
		if err != nil {
			t.Fatal(err)
		}
		byID[ev.EventID] = r
		if header(r, HeaderDLTChannel) != "push" {
			t.Errorf("dlt-channel = %q", header(r, HeaderDLTChannel))
		}
	}
	if r := byID["ntf_b"]; r == nil || !strings.Contains(header(r, writebehind.HeaderDLTReason), "4 attempts failed: push service unavailable") {
		t.Errorf("blocked DLT: %v", r)
	}
	if r := byID["ntf_t"]; r == nil || !strings.Contains(header(r, writebehind.HeaderDLTReason), "1 attempts failed: 410 gone") {
		t.Errorf("threshold DLT: %v", r)
	}
	slices.Sort(good)
	if diff := cmp.Diff([]string{"ntf_b", "ntf_q"}, good); diff != "" {
		t.Errorf("good channel (-want +got):\n%s", diff)
	}
	if got := drainSub(sub); len(got) != 3 {
		t.Errorf("hub got %d, want 3", len(got))
	}
	pushAttempts := 0
	for _, s := range sends {
		if s.Channel == "push" {
			pushAttempts++
		}
	}
	if pushAttempts != 5 {
		t.Errorf("push attempts = %d, want 4 + 1", pushAttempts)
	}
}

// namesFunc is a Names from a func.
type namesFunc func(ctx context.Context, ids []int64) (map[int64]string, error)

func (f namesFunc) MemberNames(ctx context.Context, ids []int64) (map[int64]string, error) {
	return f(ctx, ids)
}

// WithNames: a block's and a request's texts name their member, looked up
// once per poll for the members named; a member the lookup does not know,
// or a lookup that fails, leaves the id in the text. The hub and the inbox
// get the same texts.
func TestNotifierNamesMembers(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail=%v", fail), func(t *testing.T) {
			c := newFake(t)
			inbox := newInbox(t, openSQLite(t))
			hub, sub := newHubSub(t, 100, Filter{MemberID: 1, Role: RoleOwner})
			var mu sync.Mutex
			var asked [][]int64
			names := namesFunc(func(_ context.Context, ids []int64) (map[int64]string, error) {
				mu.Lock()
				asked = append(asked, slices.Clone(ids))
				mu.Unlock()
				if fail {
					return nil, errors.New("db down")
				}
				return map[int64]string{3: "민지"}, nil
			})
			var handled atomic.Int32
			n, errc := startNotifier(t, c, inbox, hub, WithNames(names),
				WithHooks(Hooks{OnNotify: func(NotifyInfo) { handled.Add(1) }}))
			produce(t, testenv.Producer(t, c),
				blockedRec(t, "ntf_b3", 100, 3),
				blockedRec(t, "ntf_b4", 100, 4),
				record(t, "ntf_r3", t0, envelope.DataRequested{FamilyID: 100, CustomerID: 3, RequestID: 7, AmountBytes: 100 << 20, RequestedAt: t0}),
				quotaRec(t, "ntf_q3", 100, 3))
			testenv.Eventually(t, "4 records handled", 20*time.Second, func() bool { return handled.Load() == 4 })
			stopNotifier(t, n, errc)
			want := map[string]string{"ntf_b3": "민지님 데이터 차단", "ntf_b4": "데이터 차단", "ntf_r3": "데이터 추가 요청"}
			wantBody := "민지님이 데이터 100.0 MB 추가를 요청했습니다."
			if fail {
				want["ntf_b3"], wantBody = "데이터 차단", "구성원 3님이 데이터 100.0 MB 추가를 요청했습니다."
			}
			for _, r := range rows(t, inbox, 100) {
				if w, ok := want[r.EventID]; ok && r.Title != w {
					t.Errorf("inbox %s titled %q, want %q", r.EventID, r.Title, w)
				}
				if r.EventID == "ntf_r3" && r.Body != wantBody {
					t.Errorf("inbox request body %q, want %q", r.Body, wantBody)
				}
			}
			for _, m := range drainSub(sub) {
				if w, ok := want[m.Data.EventID]; ok && m.Data.Title != w {
					t.Errorf("pushed %s titled %q, want %q", m.Data.EventID, m.Data.Title, w)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			// Each poll asks once for its named members (3 and 4, never
			// for the quota update's), each once.
			var all []int64
			for _, a := range asked {
				sorted := slices.Sorted(slices.Values(a))
				if len(slices.Compact(slices.Clone(sorted))) != len(a) {
					t.Errorf("one lookup asked for %v: a member twice", a)
				}
				all = append(all, a...)
			}
			slices.Sort(all)
			if got := slices.Compact(all); !slices.Equal(got, []int64{3, 4}) {
				t.Errorf("asked for names %v, want members 3 and 4", asked)
			}
		})
	}
}

// A live-only QUOTA_UPDATED of a family no one here watches is not read
// (Unwatched, nothing pushed, nothing stored); the same record of a watched
// family is pushed, and so is every kind that is stored whoever watches.
// Stored (WithStoreQuotaUpdated) or taken by a channel, a QUOTA_UPDATED is
// read watched or not; so is one without the headers that say what it is.
func TestUnwatchedQuotaUpdatesNotRead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []Option
		skipped bool // unwatched QUOTA_UPDATED records skipped unread
	}{
		{"live-only", nil, true},
		{"stored", []Option{WithStoreQuotaUpdated(true)}, false},
		{"a channel takes it", []Option{WithChannel("hook", ChannelFunc(func(context.Context, Notification) error { return nil }),
			envelope.SubQuotaUpdated)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newFake(t)
			inbox := newInbox(t, openSQLite(t))
			hub, sub := newHubSub(t, 100, Filter{MemberID: 1, Role: RoleOwner})
			var mu sync.Mutex
			outcomes := map[string]int{}
			n, errc := startNotifier(t, c, inbox, hub, append(tc.opts,
				WithHooks(Hooks{OnNotify: func(i NotifyInfo) {
					mu.Lock()
					defer mu.Unlock()
					outcomes[fmt.Sprintf("%d %s %s", i.FamilyID, i.Kind, i.Outcome)]++
				}}))...)
			// A record of an unwatched family whose value is not even an
			// envelope: unread, so not dead-lettered either, when skipped.
			garbled := quotaRec(t, "ntf_q3", 300, 1)
			garbled.Value = []byte(`{"eventId":`)
			// Without its headers a record is read whoever watches.
			bare := quotaRec(t, "ntf_q4", 400, 1)
			bare.Headers = nil
			produce(t, testenv.Producer(t, c), quotaRec(t, "ntf_q1", 100, 1), quotaRec(t, "ntf_q2", 200, 1), garbled, bare,
				blockedRec(t, "ntf_b2", 200, 3))
			want := map[string]int{
				"100 QUOTA_UPDATED delivered":    1,
				"200 QUOTA_UPDATED delivered":    1,
				"400 QUOTA_UPDATED delivered":    1,
				"200 CUSTOMER_BLOCKED delivered": 1,
			}
			if tc.skipped {
				delete(want, "200 QUOTA_UPDATED delivered")
				want["200 QUOTA_UPDATED unwatched"], want["300 QUOTA_UPDATED unwatched"] = 1, 1
			} else {
				testenv.Read(t, c, dlt, 1) // the garbled one, read and refused
			}
			testenv.Eventually(t, "every record handled", 20*time.Second, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(outcomes) == len(want)
			})
			stopNotifier(t, n, errc)
			if diff := cmp.Diff(want, outcomes); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
			if got := drainSub(sub); len(got) != 1 || got[0].Data.EventID != "ntf_q1" {
				t.Errorf("pushed to family 100: %+v", got)
			}
		})
	}
}
