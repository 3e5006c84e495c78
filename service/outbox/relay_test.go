package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/internal/testenv/storetest"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/outbox"
	"github.com/dabom/dpcs/service/store"
)

// fakeProducer records what it publishes; fail decides per record whether
// it fails (function-field fake). Like kgo's idempotent producer, once a
// record of a key (partition) fails, the later records of that key in the
// same call fail too.
type fakeProducer struct {
	mu   sync.Mutex
	got  []*kgo.Record
	fail func(r *kgo.Record) error
}

func (p *fakeProducer) ProduceSync(_ context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(kgo.ProduceResults, len(rs))
	failed := map[string]error{}
	for i, r := range rs {
		err := failed[string(r.Key)]
		if err == nil && p.fail != nil {
			err = p.fail(r)
		}
		if err != nil {
			failed[string(r.Key)] = err
		}
		if err == nil {
			p.got = append(p.got, r)
		}
		out[i] = kgo.ProduceResult{Record: r, Err: err}
	}
	return out
}

// versions returns "family/member@version" of every published record.
func (p *fakeProducer) versions(t *testing.T) []string {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, r := range p.got {
		ev, err := envelope.DecodeAs[envelope.PolicyUpdatedPayload](r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Key) != strconv.FormatInt(ev.Payload.FamilyID, 10) || r.Topic != envelope.TopicPolicyUpdated {
			t.Errorf("record key %s topic %s", r.Key, r.Topic)
		}
		out = append(out, strconv.FormatInt(ev.Payload.FamilyID, 10)+"/"+strconv.FormatInt(ev.Payload.TargetCustomerID, 10)+"@"+strconv.FormatInt(ev.Payload.Version, 10))
	}
	return out
}

func (e *env) change(t *testing.T, fid, cid int64, limit int) {
	t.Helper()
	if _, err := e.S.UpdatePolicy(e.Ctx, store.PolicyChange{FamilyID: fid, CustomerID: cid,
		Set: map[string]string{"LIMIT:DATA:DAILY": strconv.Itoa(limit)}, By: owner}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) relay(t *testing.T, p outbox.Producer, opts ...outbox.Option) *outbox.Relay {
	t.Helper()
	r, err := outbox.New(e.DB, p, append([]outbox.Option{outbox.WithClock(e.Clock.Now)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func poll(t *testing.T, r *outbox.Relay) outbox.PollResult {
	t.Helper()
	res, err := r.Poll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func testRelay(t *testing.T, e *env) {
	e.Family(t, 1)
	e.Family(t, 2)
	e.change(t, 1, 12, 100) // 1/12@1
	e.change(t, 2, 22, 100) // 2/22@1
	e.change(t, 1, 12, 200) // 1/12@2
	e.change(t, 1, 11, 300) // 1/11@1
	failures := 2
	var hooked []outbox.FailedInfo
	var published []int64
	p := &fakeProducer{fail: func(r *kgo.Record) error {
		ev, _ := envelope.DecodeAs[envelope.PolicyUpdatedPayload](r.Value)
		if ev.Payload.TargetCustomerID == 22 && failures > 0 {
			failures--
			return errors.New("broker down")
		}
		return nil
	}}
	r := e.relay(t, p, outbox.WithBatchSize(3), outbox.WithRetryBackoff(time.Second, 4*time.Second),
		outbox.WithHooks(outbox.Hooks{
			OnFailed:    func(f outbox.FailedInfo) { hooked = append(hooked, f) },
			OnPublished: func(i outbox.PublishedInfo) { published = append(published, i.OutboxID) },
		}))

	// Row 2 fails: row 1 is published, rows 2.. wait (head of line).
	if res := poll(t, r); res != (outbox.PollResult{Published: 1, Retrying: 1}) {
		t.Errorf("poll 1 = %+v", res)
	}
	if res := poll(t, r); res != (outbox.PollResult{}) {
		t.Errorf("poll before retry time = %+v", res)
	}
	e.Clock.Add(time.Second)
	if res := poll(t, r); res != (outbox.PollResult{Retrying: 1}) {
		t.Errorf("poll 3 = %+v", res)
	}
	e.Clock.Add(time.Second) // backoff doubled: not yet
	if res := poll(t, r); res != (outbox.PollResult{}) {
		t.Errorf("poll before doubled backoff = %+v", res)
	}
	e.Clock.Add(time.Second)
	if res := poll(t, r); res != (outbox.PollResult{Published: 3, More: true}) {
		t.Errorf("poll 5 = %+v", res)
	}
	if res := poll(t, r); res != (outbox.PollResult{}) {
		t.Errorf("idle poll = %+v", res)
	}
	// Rows behind the failed one were sent in the same batch and are sent
	// again after it (at least once); each family's records stay in order.
	want := []string{"1/12@1", "1/12@2", "1/12@2", "1/11@1", "2/22@1", "1/12@2", "1/11@1"}
	if diff := cmp.Diff(want, p.versions(t)); diff != "" {
		t.Errorf("published (-want +got):\n%s", diff)
	}
	if len(hooked) != 2 || hooked[0].Attempts != 1 || hooked[1].Attempts != 2 || hooked[0].Expired ||
		!hooked[1].NextRetryAt.Equal(storetest.Start.Add(3*time.Second)) {
		t.Errorf("failure hooks = %+v", hooked)
	}
	if !cmp.Equal(published, []int64{1, 2, 3, 4}) {
		t.Errorf("published hooks = %v", published)
	}
	var unpublished, attempts int
	if err := e.DB.QueryRow(`SELECT COUNT(*) FROM outbox WHERE published_at IS NULL`).Scan(&unpublished); err != nil || unpublished != 0 {
		t.Errorf("unpublished rows = %d, %v", unpublished, err)
	}
	if err := e.DB.QueryRow(`SELECT attempts FROM outbox WHERE id = 2`).Scan(&attempts); err != nil || attempts != 2 {
		t.Errorf("attempts of row 2 = %d, %v", attempts, err)
	}
	// A full batch reports More.
	for i := range 3 {
		e.change(t, 1, 12, 1000+i)
	}
	if res := poll(t, r); !res.More || res.Published != 3 {
		t.Errorf("full batch = %+v", res)
	}
}

func testRelayExpiry(t *testing.T, e *env) {
	e.Family(t, 1)
	e.change(t, 1, 12, 100)
	e.change(t, 1, 11, 100)
	down := true
	p := &fakeProducer{fail: func(r *kgo.Record) error {
		if down {
			return errors.New("unreachable")
		}
		return nil
	}}
	r := e.relay(t, p, outbox.WithMaxAge(time.Minute), outbox.WithRetryBackoff(10*time.Second, 10*time.Second))
	for range 6 { // 0 s … 50 s: retried, never expired
		if res := poll(t, r); res.Retrying != 1 || res.Failed != 0 {
			t.Fatalf("poll = %+v", res)
		}
		e.Clock.Add(10 * time.Second)
	}
	// At 60 s the next failure finds both rows too old: both move to outbox_failed.
	if res := poll(t, r); res != (outbox.PollResult{Failed: 2}) {
		t.Errorf("expiry poll = %+v", res)
	}
	if n := e.Count(t, "outbox_failed"); n != 2 {
		t.Errorf("outbox_failed rows = %d", n)
	}
	var attempts int
	var msg string
	if err := e.DB.QueryRow(`SELECT attempts, error_message FROM outbox_failed WHERE id = 1`).Scan(&attempts, &msg); err != nil || attempts != 7 || msg != "unreachable" {
		t.Errorf("failed row: %d %q %v", attempts, msg, err)
	}
	// The cursor moved on: new rows flow again.
	down = false
	e.change(t, 1, 12, 200)
	if res := poll(t, r); res != (outbox.PollResult{Published: 1}) {
		t.Errorf("after expiry = %+v", res)
	}
	if diff := cmp.Diff([]string{"1/12@2"}, p.versions(t)); diff != "" {
		t.Errorf("published (-want +got):\n%s", diff)
	}
}

func testRelayLease(t *testing.T, e *env) {
	e.Family(t, 1)
	e.change(t, 1, 12, 100)
	p1, p2 := &fakeProducer{}, &fakeProducer{}
	r1 := e.relay(t, p1, outbox.WithOwner("one"), outbox.WithLease(30*time.Second))
	r2 := e.relay(t, p2, outbox.WithOwner("two"), outbox.WithLease(30*time.Second))
	if res := poll(t, r1); res.Published != 1 {
		t.Errorf("r1 = %+v", res)
	}
	e.change(t, 1, 12, 200)
	if _, err := r2.Poll(e.Ctx); !errors.Is(err, outbox.ErrNotLeader) {
		t.Errorf("r2 while r1 holds the lease: %v", err)
	}
	// Both poll concurrently many times: only r1 publishes, each row once.
	var wg sync.WaitGroup
	for _, r := range []*outbox.Relay{r1, r2} {
		wg.Go(func() {
			for range 5 {
				if _, err := r.Poll(e.Ctx); err != nil && !errors.Is(err, outbox.ErrNotLeader) {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if len(p2.versions(t)) != 0 || !cmp.Equal(p1.versions(t), []string{"1/12@1", "1/12@2"}) {
		t.Errorf("r1 published %v, r2 %v", p1.versions(t), p2.versions(t))
	}
	// r1 stops renewing: after the lease lapses r2 takes over from the cursor.
	e.Clock.Add(31 * time.Second)
	e.change(t, 1, 12, 300)
	if res := poll(t, r2); res.Published != 1 {
		t.Errorf("r2 after takeover = %+v", res)
	}
	if _, err := r1.Poll(e.Ctx); !errors.Is(err, outbox.ErrNotLeader) {
		t.Errorf("r1 after losing the lease: %v", err)
	}
	// Close gives the lease up at once.
	if err := r2.Close(e.Ctx); err != nil {
		t.Fatal(err)
	}
	e.change(t, 1, 12, 400)
	if res := poll(t, r1); res.Published != 1 {
		t.Errorf("r1 after r2 closed = %+v", res)
	}
	if !cmp.Equal(p2.versions(t), []string{"1/12@3"}) || !cmp.Equal(p1.versions(t), []string{"1/12@1", "1/12@2", "1/12@4"}) {
		t.Errorf("r1 published %v, r2 %v", p1.versions(t), p2.versions(t))
	}
	if err := r2.Run(e.Ctx); !errors.Is(err, outbox.ErrInvalid) {
		t.Errorf("Run after Close: %v", err)
	}
}

func testRelayRun(t *testing.T, e *env) {
	e.Family(t, 1)
	published := make(chan int64, 10)
	r := e.relay(t, &fakeProducer{}, outbox.WithPollInterval(time.Hour),
		outbox.WithHooks(outbox.Hooks{OnPublished: func(i outbox.PublishedInfo) { published <- i.OutboxID }}))
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	e.change(t, 1, 12, 100)
	r.Wake()
	select {
	case id := <-published:
		if id != 1 {
			t.Errorf("published %d", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wake did not publish")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	if err := r.Close(ctx); err != nil { // idempotent
		t.Errorf("second Close: %v", err)
	}
}

func TestRelayOptions(t *testing.T) {
	db := testenv.SQLite(t)
	p := &fakeProducer{}
	for name, o := range map[string]outbox.Option{
		"clock":   outbox.WithClock(nil),
		"batch":   outbox.WithBatchSize(0),
		"poll":    outbox.WithPollInterval(0),
		"backoff": outbox.WithRetryBackoff(2, 1),
		"maxAge":  outbox.WithMaxAge(0),
		"send":    outbox.WithSendTimeout(0),
		"lease":   outbox.WithLease(time.Second), // not above the 5 s send timeout
		"owner":   outbox.WithOwner(""),
		"logger":  outbox.WithLogger(nil),
		"dialect": outbox.WithDialect("pg"),
	} {
		if _, err := outbox.New(db, p, o); !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := outbox.New(nil, p); !errors.Is(err, outbox.ErrInvalid) {
		t.Errorf("nil db: %v", err)
	}
	if _, err := outbox.New(db, p, outbox.WithDialect("sqlite"), outbox.WithLogger(discard())); err != nil {
		t.Error(err)
	}
}

// env is a store test environment (internal/testenv).
type env struct{ *storetest.Env }

var owner = store.Actor{ID: 1, Role: policy.RoleOwner}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// runRelay runs the relay tests on databases from open.
func runRelay(t *testing.T, open func(testing.TB) *sql.DB) {
	for name, fn := range map[string]func(*testing.T, *env){
		"Relay":       testRelay,
		"RelayExpiry": testRelayExpiry,
		"RelayLease":  testRelayLease,
		"RelayRun":    testRelayRun,
		"Spool":       testSpool,
	} {
		t.Run(name, func(t *testing.T) { fn(t, &env{storetest.New(t, open(t))}) })
	}
}

func TestRelaySQLite(t *testing.T) { runRelay(t, testenv.SQLite) }
