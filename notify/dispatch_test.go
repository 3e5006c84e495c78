package notify

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/pushtest"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/writebehind"
)

// familySubs is a SubscriptionStore over several families: every
// subscription of a family receives every push of it.
type familySubs map[int64][]PushSubscription

func (f familySubs) PushRecipients(_ context.Context, family, _ int64) ([]PushSubscription, error) {
	return f[family], nil
}

func (f familySubs) RemovePushSubscription(context.Context, string) error { return nil }

// The abuse the penetration test found: one family's 40 push endpoints
// (4 members × 10) that accept connections and never answer held all the
// channel's workers, one endpoint at a time for 10 s each, and another
// family's push waited 224.8 s behind them. Now a family has one delivery
// in flight at a time and its endpoints are pushed in parallel with a short
// deadline each: with family 100's pushes still hanging, family 200's arrives
// at once. Default workers (4); a push and an attempt may take a minute
// here, so that a family 200 waiting behind even one of family 100's
// attempts would wait far beyond the bound.
func TestSlowFamilyDoesNotDelayAnother(t *testing.T) {
	keys := newVAPID(t)
	fast := pushtest.New(t, keys.Public)
	var hanging atomic.Int32
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hanging.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) }) // first: Close waits for the handlers
	subs := familySubs{200: {subscribe(fast, 2001, "/family-200")}}
	for i := range 40 {
		s := subscribe(fast, 1001+int64(i/10), fmt.Sprintf("/slow-%d", i))
		s.Endpoint = slow.URL + fmt.Sprintf("/slow-%d", i)
		subs[100] = append(subs[100], s)
	}
	wp, err := NewWebPush(subs, keys, "mailto:ops@dpcs.example", WithPushLoopback(), WithPushTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	c := newFake(t)
	hub, _ := newHubSub(t, 100, Filter{MemberID: 1001, Role: RoleOwner})
	n, errc := startNotifier(t, c, newInbox(t, openSQLite(t)), hub, WithChannel("webpush", wp, DefaultWebPushKinds()...),
		WithSendTimeout(time.Minute))
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		n.Close(ctx) // family 100's pushes are still hanging: dead-lettered
		<-errc
	}()
	p := testenv.Producer(t, c)
	for i := range 8 {
		produce(t, p, blockedRec(t, fmt.Sprintf("ntf_slow_%d", i), 100, 1001+int64(i%4)))
	}
	testenv.Eventually(t, "family 100's pushes hanging", 20*time.Second, func() bool { return hanging.Load() >= 1 })

	start := time.Now()
	produce(t, p, blockedRec(t, "ntf_other", 200, 2001))
	// Behind family 100's pushes it would wait a minute per attempt; at
	// once it takes milliseconds. The bound leaves a loaded machine room.
	const bound = 5 * time.Second
	for {
		got, bad := fast.Deliveries()
		if len(bad) > 0 {
			t.Fatalf("push service refused: %q", bad)
		}
		if len(got) == 1 {
			break
		}
		if time.Since(start) > bound {
			t.Fatalf("family 200's push not delivered %s after it was produced, with family 100's %d pushes hanging", bound, hanging.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("family 200's push delivered %s after it was produced, %d of family 100's pushes hanging", time.Since(start), hanging.Load())
}

// A family cannot fill a channel's queue: a flood of its notifications
// (more than the whole queue, 1024) while its deliveries hang is
// dead-lettered beyond its own share (64 held at once), and another
// family's notification is still taken and delivered.
func TestFamilyCannotFillChannelQueue(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var delivered []string
	ch := ChannelFunc(func(ctx context.Context, n Notification) error {
		if n.FamilyID == 100 {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		}
		mu.Lock()
		delivered = append(delivered, n.EventID)
		mu.Unlock()
		return nil
	})
	c := newFake(t)
	hub, _ := newHubSub(t, 100, Filter{MemberID: 1, Role: RoleOwner})
	var full atomic.Int32
	n, errc := startNotifier(t, c, newInbox(t, openSQLite(t)), hub, WithChannel("hook", ch),
		WithHooks(Hooks{OnDeadLetter: func(i DeadLetterInfo) {
			if strings.Contains(i.Reason, "queue full") {
				full.Add(1)
			}
		}}))
	p := testenv.Producer(t, c)
	const flood = 1100
	recs := make([]*kgo.Record, flood)
	for i := range recs {
		recs[i] = blockedRec(t, fmt.Sprintf("ntf_flood_%d", i), 100, 1)
	}
	produce(t, p, recs...)
	produce(t, p, blockedRec(t, "ntf_other", 200, 2))
	testenv.Eventually(t, "family 200's notification delivered", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(delivered) == 1
	})
	testenv.Eventually(t, "the flood beyond family 100's share dead-lettered", 20*time.Second, func() bool { return full.Load() == flood-64 })
	close(release)
	stopNotifier(t, n, errc)
	for _, r := range testenv.Read(t, c, dlt, flood-64) {
		if reason := header(r, writebehind.HeaderDLTReason); !strings.Contains(reason, "family 100") {
			t.Fatalf("dead letter %q", reason)
		}
	}
}

// Within one family too: a notification's pushes go to its endpoints in
// parallel, each with its own short deadline (WithPushTimeout), so 40
// endpoints that never answer neither keep the one good endpoint from its
// push nor hold the send for more than about one deadline. One at a time
// they would hold it for 40 deadlines, 20 at a time for 3; the bound is 3,
// the 2 deadlines above the 1 it takes leaving a loaded machine's stalls
// (CI runs packages side by side on 2 cores) room.
func TestWebPushEndpointsInParallelWithDeadlines(t *testing.T) {
	keys := newVAPID(t)
	fast := pushtest.New(t, keys.Public)
	var hanging atomic.Int32
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hanging.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })
	var subs []PushSubscription
	for i := range 40 {
		s := subscribe(fast, 1001+int64(i/10), fmt.Sprintf("/slow-%d", i))
		s.Endpoint = slow.URL + fmt.Sprintf("/slow-%d", i)
		subs = append(subs, s)
	}
	subs = append(subs, subscribe(fast, 1005, "/good"))
	const deadline = time.Second
	wp, err := NewWebPush(familySubs{100: subs}, keys, "mailto:ops@dpcs.example", WithPushLoopback(), WithPushTimeout(deadline))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	err = wp.Send(ctx, Notification{EventID: "e1", FamilyID: 100, Kind: envelope.SubCustomerBlocked})
	took := time.Since(start)
	if err == nil || errors.Is(err, ErrPermanent) || !strings.Contains(err.Error(), "40 of 41") {
		t.Errorf("Send = %v, want a retryable failure of 40 of 41", err)
	}
	if got, bad := fast.Deliveries(); len(got) != 1 || len(bad) != 0 {
		t.Errorf("the good endpoint: %d delivered, %q refused", len(got), bad)
	}
	if took > 3*deadline {
		t.Errorf("Send took %s (deadline %s per endpoint) and reached %d of the 40 hanging endpoints", took, deadline, hanging.Load())
	}
	t.Logf("Send to 40 hanging endpoints and 1 good one took %s; %d of them reached", took, hanging.Load())
	for _, bad := range []time.Duration{0, -time.Second, 2 * time.Minute} {
		if _, err := NewWebPush(familySubs{}, keys, "mailto:ops@dpcs.example", WithPushTimeout(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("WithPushTimeout(%s): %v", bad, err)
		}
	}
}

// A delivery waiting to retry holds no worker: with one worker, family
// 100's failed delivery waits for its retry (a wait that ends only when the
// notifier closes) while family 200's is delivered.
func TestRetryWaitHoldsNoWorker(t *testing.T) {
	waiting := make(chan time.Duration, 1)
	sleep := func(ctx context.Context, d time.Duration) error {
		waiting <- d
		<-ctx.Done()
		return ctx.Err()
	}
	var mu sync.Mutex
	var delivered []string
	ch := ChannelFunc(func(ctx context.Context, n Notification) error {
		if n.FamilyID == 100 {
			return errors.New("push service unavailable")
		}
		mu.Lock()
		delivered = append(delivered, n.EventID)
		mu.Unlock()
		return nil
	})
	c := newFake(t)
	hub, _ := newHubSub(t, 100, Filter{MemberID: 1, Role: RoleOwner})
	n, errc := startNotifier(t, c, newInbox(t, openSQLite(t)), hub, WithChannel("hook", ch), WithChannelWorkers(1), WithSleep(sleep))
	p := testenv.Producer(t, c)
	produce(t, p, blockedRec(t, "ntf_failing", 100, 1))
	if d := <-waiting; d != time.Second {
		t.Errorf("first retry wait %s, want 1s", d)
	}
	produce(t, p, blockedRec(t, "ntf_other", 200, 2))
	testenv.Eventually(t, "family 200's notification delivered", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(delivered) == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := n.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want the retry wait cut short", err)
	}
	<-errc
	dl := testenv.Read(t, c, dlt, 1)
	if r := header(dl[0], writebehind.HeaderDLTReason); !strings.Contains(r, "shut down after 1 failed attempts") {
		t.Errorf("dead letter %q", r)
	}
}
