package judge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv"
)

// A processor stopped while Kafka has not yet taken a poll's outputs
// delivers them and commits the poll in its drain, once Kafka takes records
// again. Found in `make bench-peers` logs: every stop of the processor
// deployable retried "kafka produce" with "context canceled" until the
// drain timed out, leaving its last polls uncommitted. kgo keeps the context
// a record was first produced with (kgo.Record.Context) and fails the record
// at every later try once that context is done; the outputs were produced
// with the poll's context, which a stop cancels, and retried as the same
// records. Before the fix the group's committed offset stayed at 0 here and
// Run took the whole drain timeout.
func TestProcessorStopDeliversOutputs(t *testing.T) {
	h := newHarness(t)
	h.Family(100, 1000*mb, 1)
	var down atomic.Bool
	down.Store(true)
	// Kafka refuses (retriably) what the processor produces, and takes the
	// test's usage events.
	refuseOutputs(h, down.Load)
	var judged atomic.Int64
	var mu sync.Mutex
	var retries []RetryInfo
	// kgo retries a refused batch after a metadata refresh, at most every
	// MetadataMinAge (5 s by default, the drain's timeout).
	kopts := append(h.KafkaOpts(), kgo.MetadataMinAge(50*time.Millisecond))
	cancel, done := startStopping(h, kopts, ProcessorHooks{
		OnApply: func(a ApplyInfo) { judged.Add(int64(a.Events)) },
		OnRetry: func(r RetryInfo) {
			mu.Lock()
			defer mu.Unlock()
			retries = append(retries, r)
		},
	})

	const n = 5
	for i := range n {
		h.Produce(h.Usage(fmt.Sprintf("evt_stop_%d", i), 100, 1, 1, "com.kakao.talk", h.Now))
	}
	testenv.Eventually(t, "every event judged", 20*time.Second, func() bool { return judged.Load() == n })
	cancel() // the outputs are still refused: the drain has them to deliver
	down.Store(false)
	stopped := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		t.Logf("Run returned %v after its context ended", time.Since(stopped).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return 30 s after its context ended")
	}

	offs, err := kadm.NewClient(h.Prod).FetchOffsets(h.Ctx, ProcessorGroup)
	if err != nil {
		t.Fatal(err)
	}
	var at int64
	for _, o := range offs[envelope.TopicUsageEvents] {
		at += max(o.At, 0)
	}
	if at != n {
		t.Errorf("the group committed %d of the %d events it judged before it stopped", at, n)
	}
	if got := h.produced(envelope.TopicUsagePersist); got < n {
		t.Errorf("%d usage-persist records for %d judged events", got, n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, r := range retries {
		if r.What == "kafka produce" && errors.Is(r.Err, context.Canceled) {
			t.Errorf("retried a produce failed by the stopped poll's context: attempt %d, %v", r.Attempt, r.Err)
			break
		}
	}
}

// A stop still ends a poll whose outputs wait for room in kgo's buffer
// while Kafka refuses them: the outputs keep a context the stop does not
// end, but handing them over does not. Found in review of the fix above,
// which first produced them with that context and so could hang a stop
// for as long as Kafka refused records.
func TestProcessorStopsWithKafkaBufferFull(t *testing.T) {
	h := newHarness(t)
	h.Family(100, 1000*mb, 1)
	refuseOutputs(h, nil)
	var judged atomic.Int64
	kopts := append(h.KafkaOpts(), kgo.MaxBufferedRecords(2))
	cancel, done := startStopping(h, kopts, ProcessorHooks{OnApply: func(a ApplyInfo) { judged.Add(int64(a.Events)) }})
	for i := range 10 {
		h.Produce(h.Usage(fmt.Sprintf("evt_full_%d", i), 100, 1, 1, "com.kakao.talk", h.Now))
	}
	// Each event has one output (usage-persist: no threshold is crossed),
	// so the third judged event's waits for room: kgo holds two.
	testenv.Eventually(t, "three events judged", 20*time.Second, func() bool { return judged.Load() >= 3 })
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return 30 s after its context ended, Kafka refusing its records")
	}
}

// startStopping runs a processor with kopts and hooks, the harness's
// clock and short retries; cancel ends its Run, whose result done gives.
func startStopping(h *harness, kopts []kgo.Opt, hooks ProcessorHooks) (cancel context.CancelFunc, done <-chan error) {
	h.t.Helper()
	p, err := NewProcessor(mustState(h.t, h.Engine), kopts, WithClock(func() time.Time { return h.Now }),
		WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond), WithProcessorHooks(hooks))
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.Ctx)
	result := make(chan error, 1)
	go func() { result <- p.Run(ctx) }()
	h.t.Cleanup(func() { cancel(); p.Close(context.Background()) })
	return cancel, result
}

// refuseOutputs makes Kafka refuse (retriably) every produce but to
// usage-events while down reports true (nil: always): the processor's
// outputs wait in kgo, the test's events are taken.
func refuseOutputs(h *harness, down func() bool) {
	h.t.Helper()
	topics, err := kadm.NewClient(h.Prod).ListTopics(h.Ctx, envelope.TopicUsageEvents)
	if err != nil {
		h.t.Fatal(err)
	}
	usageEvents := topics[envelope.TopicUsageEvents].ID // produce v13 names topics by id
	testenv.RefuseProducesIf(h.Kafka, kerr.NotEnoughReplicas.Code, func(pr *kmsg.ProduceRequest) bool {
		if len(pr.Topics) == 0 || pr.Topics[0].Topic == envelope.TopicUsageEvents || pr.Topics[0].TopicID == usageEvents {
			return false
		}
		return down == nil || down()
	})
}
