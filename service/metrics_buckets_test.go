package service

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The produce→decision histogram tells the pipeline's 20 ms goal (#40)
// from 16 and 32 ms, and keeps every doubling bound of the others.
func TestDecisionLatencyBuckets(t *testing.T) {
	reg := NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	decided := time.Now()
	m.ProcessorHooks().OnDecided([]*kgo.Record{{Timestamp: decided.Add(-18 * time.Millisecond)}}, decided)
	h := gather(t, reg)["dpcs_decision_latency_seconds"].GetMetric()[0].GetHistogram()
	got := map[float64]uint64{}
	for _, b := range h.GetBucket() {
		got[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	for _, le := range latencyBuckets {
		if _, ok := got[le]; !ok {
			t.Errorf("no bucket le=%g: a doubling bound went", le)
		}
	}
	if got[0.016] != 0 || got[0.020] != 1 {
		t.Errorf("an 18 ms decision: le=0.016 counts %d, le=0.02 %d; want 0 and 1", got[0.016], got[0.020])
	}
	if n := len(h.GetBucket()); n != len(latencyBuckets)+6 {
		t.Errorf("%d buckets, want %d", n, len(latencyBuckets)+6)
	}
}
