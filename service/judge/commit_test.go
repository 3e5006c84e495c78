package judge

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv"
)

// The processor commits its offsets at most every 100 ms (WithCommitEvery's
// default, issue #40): events arriving one poll at a time make a commit per
// interval, not one per poll, and the last offset is committed once they
// stop; every event is judged once.
func TestProcessorCommitsEvery(t *testing.T) {
	h := newHarness(t)
	h.Family(100, 1000*mb, 1)
	var commits atomic.Int64
	h.Kafka.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.Kafka.KeepControl()
		if req.(*kmsg.OffsetCommitRequest).Group == ProcessorGroup {
			commits.Add(1)
		}
		return nil, nil, false
	})
	var events atomic.Int64
	h.start(h.Engine, WithProcessorHooks(ProcessorHooks{OnBatch: func(b BatchInfo) { events.Add(int64(b.Usage)) }}))
	const n = 40
	start := time.Now()
	for i := range n {
		h.Produce(h.Usage(fmt.Sprintf("evt_%d", i), 100, 1, 1, "com.kakao.talk", h.Now))
		testenv.Eventually(t, "the event judged", 20*time.Second, func() bool { return events.Load() == int64(i+1) })
	}
	took := time.Since(start)
	// One commit at the first poll, then at most one per 100 ms begun.
	if got, most := commits.Load(), int64(took/(100*time.Millisecond))+2; got > most {
		t.Errorf("%d commits for %d polls in %s, want at most %d", got, n, took, most)
	}
	t.Logf("%d commits for %d polls in %s", commits.Load(), n, took)
	testenv.Eventually(t, "every offset committed", 20*time.Second, func() bool {
		offs, err := kadm.NewClient(h.Prod).FetchOffsets(h.Ctx, ProcessorGroup)
		if err != nil {
			return false
		}
		var at int64
		for _, o := range offs[envelope.TopicUsageEvents] {
			at += o.At
		}
		return at == n
	})
	if got := h.produced(envelope.TopicUsagePersist); got != n {
		t.Errorf("%d usage-persist records for %d events", got, n)
	}
}
