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
	if err := sp.Spool(e.Ctx, []*kgo.Record{a, b}); err != nil {
		t.Fatal(err)
	}
	if err := sp.Spool(e.Ctx, []*kgo.Record{b, c}); err != nil { // b again: same id, skipped
		t.Fatal(err)
	}
	if woke != 2 {
		t.Errorf("woke the relay %d times, want 2", woke)
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

	down := true
	p := &fakeProducer{fail: func(*kgo.Record) error {
		if down {
			return errors.New("unreachable")
		}
		return nil
	}}
	r := e.relay(t, p, outbox.WithMaxAge(time.Minute), outbox.WithRetryBackoff(10*time.Second, 10*time.Second),
		outbox.WithKeep(envelope.TopicUsagePersist))
	for range 12 { // 0 s … 110 s: past the max age, still retried
		if res := poll(t, r); res.Retrying != 1 || res.Failed != 0 {
			t.Fatalf("poll = %+v", res)
		}
		e.Clock.Add(10 * time.Second)
	}
	if n := e.Count(t, "outbox_failed"); n != 0 {
		t.Errorf("outbox_failed rows = %d, want 0 (kept topic)", n)
	}
	down = false
	if res := poll(t, r); res.Published != 3 {
		t.Errorf("poll = %+v, want 3 published", res)
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
