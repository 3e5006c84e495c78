package service

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/dabom/dpcs/policy"
)

// Metrics counts what the workers report through their hooks and serves it
// in the Prometheus text exposition format. Safe for concurrent use.
type Metrics struct {
	mu          sync.Mutex
	decisions   map[policy.Decision]uint64
	batches     uint64
	records     uint64
	duplicates  uint64
	deadLetters uint64
	crossings   uint64
	retries     uint64
	lag         int64
	scriptSum   time.Duration
	scriptCount uint64
	// stale is 1 while judging is paused because Redis cannot be trusted;
	// stalePauses counts such pauses.
	stale       int
	stalePauses uint64
	recoveries  uint64
	recoverySum time.Duration
	lastRecover RecoveryInfo
}

// NewMetrics returns empty metrics.
func NewMetrics() *Metrics { return &Metrics{decisions: map[policy.Decision]uint64{}} }

// ProcessorHooks returns hooks that feed m.
func (m *Metrics) ProcessorHooks() ProcessorHooks {
	return ProcessorHooks{
		OnBatch: func(b BatchInfo) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.batches++
			m.records += uint64(b.Records)
			m.duplicates += uint64(b.Duplicates)
			m.deadLetters += uint64(b.DeadLettered)
			m.crossings += uint64(b.Crossings)
			m.lag = b.Lag
			for d, n := range b.Decisions {
				m.decisions[d] += uint64(n)
			}
			if b.Usage > 0 {
				m.scriptSum += b.ScriptLatency
				m.scriptCount++
			}
		},
		OnRetry: func(RetryInfo) {
			m.mu.Lock()
			m.retries++
			m.mu.Unlock()
		},
		OnStale: func(s StaleInfo) {
			m.mu.Lock()
			defer m.mu.Unlock()
			if s.Stale {
				m.stale = 1
				m.stalePauses++
			} else {
				m.stale = 0
			}
		},
	}
}

// OnRecovered is a RecoveryConfig.OnRecovered that feeds m.
func (m *Metrics) OnRecovered(i RecoveryInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recoveries++
	m.recoverySum += i.Total
	m.lastRecover = i
}

// Decisions returns the count of every decision so far.
func (m *Metrics) Decisions() map[policy.Decision]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[policy.Decision]uint64, len(m.decisions))
	for d, n := range m.decisions {
		out[d] = n
	}
	return out
}

// WriteTo writes the metrics in the Prometheus text format.
func (m *Metrics) WriteTo(w io.Writer) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	p := func(format string, args ...any) {
		k, _ := fmt.Fprintf(w, format, args...)
		n += int64(k)
	}
	p("# HELP dpcs_decisions_total Usage events judged, by decision.\n# TYPE dpcs_decisions_total counter\n")
	for _, d := range policy.Decisions() {
		p("dpcs_decisions_total{decision=%q} %d\n", string(d), m.decisions[d])
	}
	counters := []struct {
		name, help string
		v          uint64
	}{
		{"dpcs_processor_batches_total", "Polls processed.", m.batches},
		{"dpcs_processor_records_total", "Records processed.", m.records},
		{"dpcs_processor_duplicates_total", "Usage events recognised as replays.", m.duplicates},
		{"dpcs_processor_dead_letters_total", "Records sent to a DLT.", m.deadLetters},
		{"dpcs_threshold_crossings_total", "Family pool thresholds crossed.", m.crossings},
		{"dpcs_processor_retries_total", "Retried Redis/Kafka operations.", m.retries},
		{"dpcs_redis_stale_pauses_total", "Times judging paused because the Redis state could not be trusted.", m.stalePauses},
	}
	for _, c := range counters {
		p("# HELP %s %s\n# TYPE %s counter\n%s %d\n", c.name, c.help, c.name, c.name, c.v)
	}
	p("# HELP dpcs_processor_lag Records left in the polled partitions after the last batch.\n# TYPE dpcs_processor_lag gauge\ndpcs_processor_lag %d\n", m.lag)
	p("# HELP dpcs_redis_state_stale 1 while judging is paused because the Redis state cannot be trusted (empty, older than what was committed, or another generation).\n# TYPE dpcs_redis_state_stale gauge\ndpcs_redis_state_stale %d\n", m.stale)
	p("# HELP dpcs_redis_rebuild_seconds Rebuilds of Redis from SQL run by this instance, and their time.\n# TYPE dpcs_redis_rebuild_seconds summary\ndpcs_redis_rebuild_seconds_sum %g\ndpcs_redis_rebuild_seconds_count %d\n",
		m.recoverySum.Seconds(), m.recoveries)
	p("# HELP dpcs_redis_rebuild_last_families Families restored by this instance's last rebuild.\n# TYPE dpcs_redis_rebuild_last_families gauge\ndpcs_redis_rebuild_last_families %d\n", m.lastRecover.Families)
	p("# HELP dpcs_script_seconds Time of one ApplyBatch call.\n# TYPE dpcs_script_seconds summary\ndpcs_script_seconds_sum %g\ndpcs_script_seconds_count %d\n",
		m.scriptSum.Seconds(), m.scriptCount)
	return n, nil
}

// ServeHTTP serves the metrics (GET /metrics).
func (m *Metrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	m.WriteTo(w)
}
