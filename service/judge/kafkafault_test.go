package judge

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/quota"
)

// Suspected in issue #36 (item 6): the /decisions producer never recovers
// after a Kafka fault longer than the decision timeout — the caller
// unanswered 20 s after Kafka is back. Kafka answers every produce with a
// retriable error (NOT_ENOUGH_REPLICAS, as while a partition has too few
// in-sync replicas) for three decision timeouts; the batch's caller waits
// (no spool), and once Kafka takes records again it is answered, and the
// next caller is judged, within a few seconds. Confirmed: before, the
// caller was unanswered 15 s after Kafka was back — the retried copies kept
// the first try's timestamp, which kgo's delivery timeout is counted from,
// so every retry failed at once (copies).
func TestDecisionsRecoverAfterLongKafkaFault(t *testing.T) {
	h := newHarness(t)
	var down atomic.Bool
	down.Store(true)
	testenv.RefuseProduces(h.Kafka, kerr.NotEnoughReplicas.Code, down.Load)
	const gen = "t:kafkafault"
	if _, err := h.Engine.BeginRebuild(h.Ctx, gen); err != nil {
		t.Fatal(err)
	}
	if err := h.Engine.FinishRebuild(h.Ctx, gen, nil); err != nil {
		t.Fatal(err)
	}
	if err := h.Engine.Restore(h.Ctx, quota.FamilyState{FamilyID: 100, Provisioned: true, Plan: 20 * mb,
		Members: []quota.MemberState{{CustomerID: 1}}, Generation: gen}); err != nil {
		t.Fatal(err)
	}
	const timeout = time.Second // it bounds the judging too: not less on a busy -race run
	dec, err := NewDecisions(mustState(t, h.Engine), h.KafkaOpts(), WithClock(h.Clock), WithGenerations(fixedGeneration(gen)),
		WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dec.Close(h.Ctx) })
	ask := func(id string) chan error {
		ch := make(chan error, 1)
		go func() {
			_, err := dec.Decide(h.Ctx, []envelope.Envelope[envelope.UsagePayload]{envelope.New(id, h.Now,
				envelope.UsagePayload{FamilyID: 100, CustomerID: 1, AppID: "com.kakao.talk", BytesUsed: mb})})
			ch <- err
		}()
		return ch
	}
	first := ask("evt_first")
	waitStuck(t, dec, first)
	time.Sleep(3 * timeout) // the fault outlasts the decision timeout
	down.Store(false)
	back := time.Now()
	select {
	case err := <-first:
		if err != nil {
			t.Fatalf("the waiting caller: %v", err)
		}
		t.Logf("the waiting caller answered %v after Kafka was back", time.Since(back).Round(time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting caller is unanswered 15 s after Kafka is back")
	}
	select {
	case err := <-ask("evt_next"):
		if err != nil {
			t.Errorf("the next caller: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the next caller is unanswered 15 s after Kafka is back")
	}
}
