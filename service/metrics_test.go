package service

import (
	"strings"
	"testing"
	"time"

	"github.com/dabom/dpcs/policy"
)

func TestMetricsText(t *testing.T) {
	m := NewMetrics()
	h := m.ProcessorHooks()
	h.OnBatch(BatchInfo{Records: 3, Usage: 2, Duplicates: 1, Decisions: map[policy.Decision]int{policy.Allowed: 2}, ScriptLatency: time.Millisecond})
	h.OnRetry(RetryInfo{})
	h.OnStale(StaleInfo{Stale: true, Reason: "no state marker"})
	var b strings.Builder
	m.WriteTo(&b)
	for _, want := range []string{
		`dpcs_decisions_total{decision="ALLOWED"} 2`, "dpcs_processor_records_total 3", "dpcs_processor_retries_total 1",
		"dpcs_redis_state_stale 1", "dpcs_redis_stale_pauses_total 1", "dpcs_redis_rebuild_seconds_count 0",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, b.String())
		}
	}
	h.OnStale(StaleInfo{Reason: "no state marker", Paused: time.Second})
	m.OnRecovered(RecoveryInfo{Families: 7, Total: 2 * time.Second})
	b.Reset()
	m.WriteTo(&b)
	for _, want := range []string{"dpcs_redis_state_stale 0", "dpcs_redis_rebuild_seconds_sum 2", "dpcs_redis_rebuild_seconds_count 1",
		"dpcs_redis_rebuild_last_families 7"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, b.String())
		}
	}
}
