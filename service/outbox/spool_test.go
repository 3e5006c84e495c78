package outbox_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/service/outbox"
)

// usageRecord is the usage-persist record of event id.
func usageRecord(t *testing.T, id string, fid int64) *kgo.Record {
	t.Helper()
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	r, err := kafkarecord.New(envelope.TopicUsagePersist, envelope.New("up_"+id, at, envelope.UsagePersistPayload{
		OriginEventID: id, FamilyID: fid, CustomerID: fid*10 + 1, AppID: "com.youtube.app", BytesUsed: 1024,
		ProcessResult: "ALLOWED", RemainingAfter: 1 << 30, EventTime: at}))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// testSpool: spooled records become outbox rows in order, a record spooled
// again is skipped, Pending counts what the relay has yet to publish, and a
// kept topic's rows are retried past the max age, then published in order.
func testSpool(t *testing.T, e *env) {
	woke := 0
	sp, err := outbox.NewSpool(e.DB, sqldialect.Unknown, func() { woke++ })
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := usageRecord(t, "a", 1), usageRecord(t, "b", 2), usageRecord(t, "c", 1)
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	blocked := func(id string) *kgo.Record {
		t.Helper()
		r, err := kafkarecord.New(envelope.TopicNotificationEvents, envelope.New(id, at, envelope.CustomerBlocked{
			FamilyID: 1, CustomerID: 11, BlockReason: "LIMIT:DATA:DAILY", BlockedAt: at}))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// A notification first: it is not a kept topic.
	if err := sp.Spool(e.Ctx, []*kgo.Record{blocked("ntf_a")}); err != nil {
		t.Fatal(err)
	}
	if err := sp.Spool(e.Ctx, []*kgo.Record{a, b}); err != nil {
		t.Fatal(err)
	}
	if err := sp.Spool(e.Ctx, []*kgo.Record{b, c}); err != nil { // b again: same id, skipped
		t.Fatal(err)
	}
	if woke != 3 {
		t.Errorf("woke the relay %d times, want 3", woke)
	}
	pending := func() int64 {
		t.Helper()
		n, err := outbox.Pending(e.Ctx, e.DB, envelope.TopicUsagePersist)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := pending(); n != 3 {
		t.Fatalf("pending %d, want 3", n)
	}
	if n, err := outbox.Pending(e.Ctx, e.DB, envelope.TopicPolicyUpdated); err != nil || n != 0 {
		t.Errorf("pending policy-updated %d, %v", n, err)
	}
	// A record that is not a DPCS envelope writes nothing.
	bad := &kgo.Record{Topic: envelope.TopicUsagePersist, Key: []byte("1"), Value: []byte(`{}`)}
	if err := sp.Spool(e.Ctx, []*kgo.Record{usageRecord(t, "d", 1), bad}); !errors.Is(err, outbox.ErrInvalid) {
		t.Errorf("bad record: %v", err)
	}
	if n := pending(); n != 3 {
		t.Errorf("pending %d after a refused spool, want 3", n)
	}

	// On the real clock with a max age of 1 ms: the notification (not a
	// kept topic) expires at its first failure; the usage-persist rows are
	// retried, however old, until published.
	down := true
	p := &fakeProducer{fail: func(*kgo.Record) error {
		if down {
			return errors.New("unreachable")
		}
		return nil
	}}
	r := e.relay(t, p, outbox.WithClock(time.Now), outbox.WithMaxAge(time.Millisecond),
		outbox.WithRetryBackoff(time.Millisecond, time.Millisecond), outbox.WithKeep(envelope.TopicUsagePersist))
	time.Sleep(2 * time.Millisecond) // every row older than the max age
	expired, retried := 0, 0
	for retried < 3 {
		res := poll(t, r)
		expired += res.Failed
		if res.Retrying > 0 {
			retried++
		}
		if res.Published > 0 || expired > 1 {
			t.Fatalf("poll = %+v (%d expired)", res, expired)
		}
	}
	if n := e.Count(t, "outbox_failed"); n != 1 || expired != 1 {
		t.Errorf("outbox_failed rows = %d, expired %d; want the notification only", n, expired)
	}
	down = false
	// The head row's retry time (1 ms of backoff, on the real clock) may not
	// have come at the first poll: poll until it has.
	if n := pollPublished(t, r, 3); n != 3 {
		t.Errorf("%d published, want 3", n)
	}
	if n := pending(); n != 0 {
		t.Errorf("pending %d after publishing, want 0", n)
	}
	var got []string
	for _, rec := range p.got {
		ev, err := envelope.DecodeAs[envelope.UsagePersistPayload](rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Topic != envelope.TopicUsagePersist || string(rec.Key) != strconv.FormatInt(ev.Payload.FamilyID, 10) {
			t.Errorf("record topic %s key %s", rec.Topic, rec.Key)
		}
		got = append(got, ev.Payload.OriginEventID)
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, got); diff != "" {
		t.Errorf("published (-want +got):\n%s", diff)
	}
	// A spooled notification is published with the headers kafkarecord.New
	// gave it (eventType and subType).
	ntf := blocked("ntf_b")
	if err := sp.Spool(e.Ctx, []*kgo.Record{ntf}); err != nil {
		t.Fatal(err)
	}
	if n := pollPublished(t, r, 1); n != 1 {
		t.Fatalf("%d published, want the notification", n)
	}
	last := p.got[len(p.got)-1]
	if last.Topic != envelope.TopicNotificationEvents || !cmp.Equal(last.Headers, ntf.Headers) || len(ntf.Headers) != 2 {
		t.Errorf("published %s with headers %v, want %v", last.Topic, last.Headers, ntf.Headers)
	}
}

// pollPublished polls r until it published want rows in all (5 s at
// most) and returns how many it published.
func pollPublished(t *testing.T, r *outbox.Relay, want int) int {
	t.Helper()
	n := 0
	for deadline := time.Now().Add(5 * time.Second); n < want && time.Now().Before(deadline); {
		res := poll(t, r)
		if res.Failed > 0 {
			t.Fatalf("poll = %+v: a row failed", res)
		}
		n += res.Published
	}
	return n
}

func TestSpoolOptions(t *testing.T) {
	if _, err := outbox.NewSpool(nil, sqldialect.SQLite, nil); !errors.Is(err, outbox.ErrInvalid) {
		t.Errorf("nil db: %v", err)
	}
	p := &fakeProducer{}
	if _, err := outbox.New(nil, p, outbox.WithKeep("")); !errors.Is(err, outbox.ErrInvalid) {
		t.Errorf("empty kept topic: %v", err)
	}
}
