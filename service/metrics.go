package service

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/api"
	"github.com/dabom/dpcs/service/charging"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/outbox"
	"github.com/dabom/dpcs/service/recovery"
	"github.com/dabom/dpcs/simulate"
	"github.com/dabom/dpcs/writebehind"
)

// NewRegistry returns a Prometheus registry holding the Go runtime and
// process collectors (go_*, process_*). Each deployable makes one and hands
// it to NewMetrics, KafkaHooks and MetricsHandler; nothing registers
// globally.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// MetricsHandler serves what g gathers in the Prometheus text (or, when
// asked, OpenMetrics) format: GET /metrics.
func MetricsHandler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// Histogram buckets.
var (
	// latencyBuckets: 0.5 ms to 16 s, doubling.
	latencyBuckets = prometheus.ExponentialBuckets(0.0005, 2, 16)
	// fineLatencyBuckets: 100 µs to 3.3 s, doubling.
	fineLatencyBuckets = prometheus.ExponentialBuckets(0.0001, 2, 16)
	// sizeBuckets: 1 to 4096, doubling.
	sizeBuckets = prometheus.ExponentialBuckets(1, 2, 13)
	// rebuildBuckets: 50 ms to about 7 min, doubling.
	rebuildBuckets = prometheus.ExponentialBuckets(0.05, 2, 14)
	// decisionBuckets: latencyBuckets and the bounds around the
	// pipeline's produce→decision goal (p99 ≤ 20 ms at 5,000 events/s,
	// issue #40), which doubling bounds (16, 32 ms) cannot tell: 10, 15,
	// 20, 25, 40 and 50 ms. Every doubling bound stays, so queries on them
	// keep working.
	decisionBuckets = withBounds(latencyBuckets, 0.010, 0.015, 0.020, 0.025, 0.040, 0.050)
)

// withBounds returns buckets with bounds added, in order.
func withBounds(buckets []float64, bounds ...float64) []float64 {
	out := slices.Concat(buckets, bounds)
	slices.Sort(out)
	return slices.Compact(out)
}

// Metrics adapts the hooks of the processor, the write-behind, the notifier
// and its hub, the outbox relay, the recovery and the API to Prometheus
// collectors registered on the registerer given to NewMetrics. The library
// packages know nothing of Prometheus; this is the only place their hooks
// become metrics (doc/observability.md lists them). Safe for concurrent use.
type Metrics struct {
	reg prometheus.Registerer

	decisions                         *prometheus.CounterVec
	batches, records, duplicates      prometheus.Counter
	deadLetters, crossings            prometheus.Counter
	retries                           *prometheus.CounterVec
	lag, stale                        prometheus.Gauge
	stalePauses                       prometheus.Counter
	script, scriptEvents, pollRecords prometheus.Histogram
	pollSeconds, decisionLatency      prometheus.Histogram
	rebuild, rebuildAvailable         prometheus.Histogram
	rebuildFamilies                   prometheus.Gauge
	touched, touchErrs                prometheus.Counter

	wbFlush, wbFlushRows       prometheus.Histogram
	wbRows, wbRejected, wbErrs prometheus.Counter
	wbPaused                   prometheus.Gauge

	notifications  *prometheus.CounterVec
	sends          *prometheus.HistogramVec
	notifyDead     *prometheus.CounterVec
	notifyRetries  *prometheus.CounterVec
	ssePublished   prometheus.Counter
	sseDeliveries  prometheus.Counter
	sseDropped     *prometheus.CounterVec
	relayPublished prometheus.Counter
	relayLag       prometheus.Histogram
	relayFailures  *prometheus.CounterVec

	api *prometheus.HistogramVec

	chargingSteps         *prometheus.HistogramVec
	chargingGranted       prometheus.Counter
	chargingNotifications *prometheus.CounterVec
	chargingNotifyLatency prometheus.Histogram
	chargingSwept         *prometheus.CounterVec
	chargingCongested     *prometheus.CounterVec
	chargingConnRefused   prometheus.Counter

	syncEvents, syncRequests, syncSeconds prometheus.Histogram
	syncRefused                           *prometheus.CounterVec
	syncSpooled                           prometheus.Counter
}

// NewMetrics registers DPCS's collectors on reg (usually NewRegistry's).
// It fails if reg already holds them.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("service: NewMetrics needs a registerer")
	}
	m := &Metrics{reg: reg}
	var cs []prometheus.Collector
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		cs = append(cs, c)
		return c
	}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		cs = append(cs, c)
		return c
	}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		cs = append(cs, g)
		return g
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
		cs = append(cs, h)
		return h
	}
	histogramVec := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
		cs = append(cs, h)
		return h
	}

	// Processor.
	m.decisions = counterVec("dpcs_decisions_total", "Usage events judged, by decision.", "decision")
	m.batches = counter("dpcs_processor_batches_total", "Polls processed.")
	m.records = counter("dpcs_processor_records_total", "Records processed.")
	m.duplicates = counter("dpcs_processor_duplicates_total", "Usage events recognised as replays.")
	m.deadLetters = counter("dpcs_processor_dead_letters_total", "Records sent to a DLT.")
	m.crossings = counter("dpcs_threshold_crossings_total", "Family pool thresholds crossed.")
	m.retries = counterVec("dpcs_processor_retries_total", "Retried Redis/Kafka operations, by operation.", "what")
	m.lag = gauge("dpcs_processor_lag", "Records left in the partitions this instance polled, after its last batch.")
	m.stale = gauge("dpcs_redis_state_stale", "1 while judging is paused because the Redis state cannot be trusted (empty, older than what was committed, or another generation).")
	m.stalePauses = counter("dpcs_redis_stale_pauses_total", "Times judging paused because the Redis state could not be trusted.")
	m.script = histogram("dpcs_script_seconds", "Time of one ApplyBatch call (the quota script on one group of partitions), retries included.", latencyBuckets)
	m.scriptEvents = histogram("dpcs_script_events", "Usage events judged by one ApplyBatch call.", sizeBuckets)
	m.pollRecords = histogram("dpcs_processor_batch_records", "Records per processed poll.", sizeBuckets)
	m.pollSeconds = histogram("dpcs_processor_batch_seconds", "Time from a poll's start to its offsets' commit.", latencyBuckets)
	m.decisionLatency = histogram("dpcs_decision_latency_seconds", "Time from a usage event's Kafka record timestamp (its produce) to its decision.", decisionBuckets)
	m.rebuild = histogram("dpcs_redis_rebuild_seconds", "Rebuilds of Redis from SQL run by this instance, and their time.", rebuildBuckets)
	m.rebuildFamilies = gauge("dpcs_redis_rebuild_last_families", "Families restored by this instance's last rebuild.")
	m.rebuildAvailable = histogram("dpcs_redis_rebuild_available_seconds", "Time from a rebuild's start until judging went on (families restored on touch after that).", rebuildBuckets)
	m.touched = counter("dpcs_redis_restored_on_touch_total", "Families restored from SQL by their first judgement, write or read after a rebuild.")
	m.touchErrs = counter("dpcs_redis_restore_on_touch_errors_total", "Restores on touch that failed (SQL or Redis failed; the events wait or are refused unjudged).")

	// Write-behind.
	m.wbFlush = histogram("dpcs_writebehind_flush_seconds", "Time to write one batch of usage_record rows, from the first attempt to success.", latencyBuckets)
	m.wbFlushRows = histogram("dpcs_writebehind_flush_rows", "Rows per written batch.", sizeBuckets)
	m.wbRows = counter("dpcs_writebehind_rows_total", "usage_record rows written (replays included; the insert ignores them).")
	m.wbRejected = counter("dpcs_writebehind_rejected_total", "usage-persist records that can never be written, sent to the DLT.")
	m.wbErrs = counter("dpcs_writebehind_errors_total", "Failed write attempts (retried).")
	m.wbPaused = gauge("dpcs_writebehind_paused", "1 while the write-behind has paused fetching (its buffer is full or SQL is failing).")

	// Notifier and hub.
	m.notifications = counterVec("dpcs_notifier_notifications_total", "Notification events handled, by kind and outcome (delivered, duplicate, unwatched: a live-only QUOTA_UPDATED no live subscriber of this process watches, not read).", "kind", "outcome")
	m.sends = histogramVec("dpcs_notifier_send_seconds", "Time of one delivery attempt to an external channel, by channel and result (ok, error).", latencyBuckets, "channel", "result")
	m.notifyDead = counterVec("dpcs_notifier_dead_letters_total", "Notification records dead-lettered, by channel (\"\" when the record could not be handled at all).", "channel")
	m.notifyRetries = counterVec("dpcs_notifier_retries_total", "Notifier operations retried, by operation.", "what")
	m.ssePublished = counter("dpcs_sse_published_total", "Notifications published to the live hub.")
	m.sseDeliveries = counter("dpcs_sse_deliveries_total", "Notifications queued for live (SSE) subscribers.")
	m.sseDropped = counterVec("dpcs_sse_dropped_total", "Live subscriptions ended by the hub, by reason (slow, closed).", "reason")

	// Outbox relay.
	m.relayPublished = counter("dpcs_relay_published_total", "Outbox rows published to Kafka (policy-updated, notifications, and the decisions' spooled usage-persist).")
	m.relayLag = histogram("dpcs_relay_lag_seconds", "Time an outbox row waited before it was published.", latencyBuckets)
	m.relayFailures = counterVec("dpcs_relay_failures_total", "Failed outbox publications, by outcome (retry, expired: moved to outbox_failed).", "outcome")

	// Synchronous decisions (POST /decisions).
	m.syncEvents = histogram("dpcs_sync_decision_batch_events", "Events judged together by one group commit of POST /decisions.", sizeBuckets)
	m.syncRequests = histogram("dpcs_sync_decision_batch_requests", "Requests answered together by one group commit of POST /decisions.", sizeBuckets)
	m.syncSeconds = histogram("dpcs_sync_decision_batch_seconds", "Time of one group commit of POST /decisions: judging, then producing its records until Kafka acknowledged them.", fineLatencyBuckets)
	m.syncSpooled = counter("dpcs_sync_decision_spooled_records_total", "Records of POST /decisions written to the SQL outbox because Kafka did not acknowledge them (the relay publishes them).")
	m.syncRefused = counterVec("dpcs_sync_decision_refused_total", "Group commits of POST /decisions refused (503), by reason (kafka: nothing judged while records wait; unrecorded: judged, records not stored; stale; other).", "reason")

	// API.
	m.api = histogramVec("dpcs_api_request_seconds", "API requests by operation (the OpenAPI operation id) and status, and their time; for the SSE stream it is the stream's lifetime.",
		latencyBuckets, "operation", "status")

	// Charging interface (service/charging).
	m.chargingSteps = histogramVec("dpcs_charging_request_seconds", "Nchf_ConvergedCharging requests by operation (create, update, release) and result (ok, retransmit: answered from the stored answer, or the refusal's cause), and their time.",
		fineLatencyBuckets, "op", "result")
	m.chargingGranted = counter("dpcs_charging_granted_bytes_total", "Bytes granted to SMFs (reserved from the pools).")
	m.chargingNotifications = counterVec("dpcs_charging_notifications_total", "Notifications to SMFs ended, by type (REAUTHORIZATION, ABORT_CHARGING) and outcome (delivered, failed, dropped: its destination's queue was full).", "type", "outcome")
	m.chargingNotifyLatency = histogram("dpcs_charging_notify_seconds", "Time from a family change to its REAUTHORIZATION's delivery (or end).", latencyBuckets)
	m.chargingConnRefused = counter("dpcs_charging_connections_refused_total", "Connections to the charging interface closed as soon as they were accepted: DPCS_CHARGING_MAX_CONNECTIONS were open.")
	m.chargingCongested = counterVec("dpcs_charging_congested_total", "Nchf requests refused at once with 503 NF_CONGESTION, by why: full (DPCS_CHARGING_MAX_IN_FLIGHT in flight) or share (the consumer had its fair share of it in flight).", "why")
	m.chargingSwept = counterVec("dpcs_charging_swept_sessions_total", "Sessions the sweep closed after their validity and holding time (closed), or failed to release (failed: tried again).", "outcome")

	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every decision is exported from the start, as 0 until it happens.
	for _, d := range policy.Decisions() {
		m.decisions.WithLabelValues(string(d))
	}
	return m, nil
}

// Registerer is the registerer the metrics are on.
func (m *Metrics) Registerer() prometheus.Registerer { return m.reg }

// WatchStreams exports open (api.Server.OpenStreams) as dpcs_sse_streams:
// how near the instance is to DPCS_STREAMS_MAX.
func (m *Metrics) WatchStreams(open func() int) error {
	return m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "dpcs_sse_streams",
		Help: "Live notification streams (SSE) this API instance holds open (at most DPCS_STREAMS_MAX)."},
		func() float64 { return float64(open()) }))
}

// ProcessorHooks returns hooks that feed m.
func (m *Metrics) ProcessorHooks() judge.ProcessorHooks {
	return judge.ProcessorHooks{
		OnBatch: func(b judge.BatchInfo) {
			m.batches.Inc()
			m.records.Add(float64(b.Records))
			m.duplicates.Add(float64(b.Duplicates))
			m.deadLetters.Add(float64(b.DeadLettered))
			m.crossings.Add(float64(b.Crossings))
			m.lag.Set(float64(b.Lag))
			for d, n := range b.Decisions {
				m.decisions.WithLabelValues(string(d)).Add(float64(n))
			}
			m.pollRecords.Observe(float64(b.Records))
			m.pollSeconds.Observe(b.Duration.Seconds())
		},
		OnApply: func(a judge.ApplyInfo) {
			m.script.Observe(a.Duration.Seconds())
			m.scriptEvents.Observe(float64(a.Events))
		},
		OnDecided: func(recs []*kgo.Record, at time.Time) {
			for _, r := range recs {
				if !r.Timestamp.IsZero() {
					m.decisionLatency.Observe(max(at.Sub(r.Timestamp), 0).Seconds())
				}
			}
		},
		OnRetry: func(r judge.RetryInfo) { m.retries.WithLabelValues(r.What).Inc() },
		OnStale: func(s judge.StaleInfo) {
			if s.Stale {
				m.stale.Set(1)
				m.stalePauses.Inc()
			} else {
				m.stale.Set(0)
			}
		},
	}
}

// DecisionHooks returns SyncDecisions hooks that feed m: the group
// commits' sizes, times and refusals.
func (m *Metrics) DecisionHooks() judge.DecisionHooks {
	return judge.DecisionHooks{OnBatch: func(b judge.DecisionBatchInfo) {
		m.syncEvents.Observe(float64(b.Events))
		m.syncRequests.Observe(float64(b.Requests))
		m.syncSeconds.Observe(b.Duration.Seconds())
		m.syncSpooled.Add(float64(b.Spooled))
		switch {
		case b.Err == nil:
		case errors.Is(b.Err, judge.ErrKafkaUnavailable):
			m.syncRefused.WithLabelValues("kafka").Inc()
		case errors.Is(b.Err, judge.ErrNotRecorded):
			m.syncRefused.WithLabelValues("unrecorded").Inc()
		case errors.Is(b.Err, quota.ErrStale):
			m.syncRefused.WithLabelValues("stale").Inc()
		default:
			m.syncRefused.WithLabelValues("other").Inc()
		}
	}}
}

// OnRecovered is a RecoveryConfig.OnRecovered that feeds m.
func (m *Metrics) OnRecovered(i recovery.Info) {
	m.rebuild.Observe(i.Total.Seconds())
	m.rebuildAvailable.Observe(i.Available.Seconds())
	m.rebuildFamilies.Set(float64(i.Families))
}

// OnTouch is a judge.WithTouchHook that feeds m.
func (m *Metrics) OnTouch(i judge.TouchInfo) {
	m.touched.Add(float64(i.Restored))
	if i.Err != nil {
		m.touchErrs.Inc()
	}
}

// WriteBehindHooks returns write-behind hooks that feed m.
func (m *Metrics) WriteBehindHooks() writebehind.Hooks {
	return writebehind.Hooks{
		OnFlush: func(f writebehind.FlushInfo) {
			m.wbFlush.Observe(f.Duration.Seconds())
			m.wbFlushRows.Observe(float64(f.Items))
			m.wbRows.Add(float64(f.Items))
		},
		OnReject: func(writebehind.RejectInfo) { m.wbRejected.Inc() },
		OnError:  func(writebehind.ErrorInfo) { m.wbErrs.Inc() },
		OnPause:  func(writebehind.PauseInfo) { m.wbPaused.Set(1) },
		OnResume: func(writebehind.PauseInfo) { m.wbPaused.Set(0) },
	}
}

// NotifierHooks returns notifier hooks that feed m.
func (m *Metrics) NotifierHooks() notify.Hooks {
	return notify.Hooks{
		OnNotify: func(n notify.NotifyInfo) {
			m.notifications.WithLabelValues(string(n.Kind), string(n.Outcome)).Inc()
		},
		OnSend: func(s notify.SendInfo) {
			result := "ok"
			if s.Err != nil {
				result = "error"
			}
			m.sends.WithLabelValues(s.Channel, result).Observe(s.Duration.Seconds())
		},
		OnDeadLetter: func(d notify.DeadLetterInfo) { m.notifyDead.WithLabelValues(d.Channel).Inc() },
		OnRetry:      func(r notify.RetryInfo) { m.notifyRetries.WithLabelValues(r.What).Inc() },
	}
}

// HubHooks returns live-hub hooks that feed m.
func (m *Metrics) HubHooks() notify.HubHooks {
	return notify.HubHooks{
		OnPublish: func(p notify.PublishInfo) {
			m.ssePublished.Inc()
			m.sseDeliveries.Add(float64(p.Delivered))
		},
		OnDrop: func(d notify.DropInfo) {
			reason := "closed"
			if errors.Is(d.Reason, notify.ErrSlowSubscriber) {
				reason = "slow"
			}
			m.sseDropped.WithLabelValues(reason).Inc()
		},
	}
}

// RelayHooks returns outbox relay hooks that feed m.
func (m *Metrics) RelayHooks() outbox.Hooks {
	return outbox.Hooks{
		OnPublished: func(p outbox.PublishedInfo) {
			m.relayPublished.Inc()
			m.relayLag.Observe(p.Lag.Seconds())
		},
		OnFailed: func(f outbox.FailedInfo) {
			outcome := "retry"
			if f.Expired {
				outcome = "expired"
			}
			m.relayFailures.WithLabelValues(outcome).Inc()
		},
	}
}

// ChargingHooks returns charging service hooks that feed m.
// ChargingCongested counts a request the charging interface refused for
// congestion (charging.HandlerConfig.OnCongested): share when its consumer
// had its fair share in flight.
func (m *Metrics) ChargingCongested(share bool) {
	why := "full"
	if share {
		why = "share"
	}
	m.chargingCongested.WithLabelValues(why).Inc()
}

// ChargingConnectionRefused counts a connection the charging interface
// closed at once: DPCS_CHARGING_MAX_CONNECTIONS were open
// (charging.LimitConnections).
func (m *Metrics) ChargingConnectionRefused() { m.chargingConnRefused.Inc() }

func (m *Metrics) ChargingHooks() charging.Hooks {
	return charging.Hooks{
		OnStep: func(i charging.StepInfo) {
			result := "ok"
			var p *charging.Problem
			switch {
			case errors.As(i.Err, &p):
				result = p.Cause
				if result == "" {
					result = strconv.Itoa(p.Status)
				}
			case i.Err != nil:
				result = "error"
			case i.Retransmit:
				result = "retransmit"
			}
			m.chargingSteps.WithLabelValues(string(i.Op), result).Observe(i.Took.Seconds())
			if i.Err == nil && !i.Retransmit {
				m.chargingGranted.Add(float64(i.Granted))
			}
		},
		OnNotify: func(i charging.NotifyInfo) {
			outcome := "failed"
			switch {
			case i.Delivered:
				outcome = "delivered"
			case i.Dropped:
				outcome = "dropped"
			}
			m.chargingNotifications.WithLabelValues(i.Type, outcome).Inc()
			if i.Type == charging.NotificationReauthorization {
				m.chargingNotifyLatency.Observe(i.Latency.Seconds())
			}
		},
		OnSweep: func(i charging.SweepInfo) {
			m.chargingSwept.WithLabelValues("closed").Add(float64(i.Closed))
			m.chargingSwept.WithLabelValues("failed").Add(float64(i.Failed))
		},
	}
}

// OnRequest is an api.Config.OnRequest that measures every API operation
// by its OpenAPI operation id (never the raw path, so ids in paths do not
// multiply the series) and status.
func (m *Metrics) OnRequest(r api.RequestInfo) {
	m.api.WithLabelValues(r.Operation, strconv.Itoa(r.Status)).Observe(r.Duration.Seconds())
}

// Decisions returns the count of every decision so far.
func (m *Metrics) Decisions() map[policy.Decision]uint64 {
	out := map[policy.Decision]uint64{}
	for _, d := range policy.Decisions() {
		var pb dto.Metric
		if err := m.decisions.WithLabelValues(string(d)).Write(&pb); err == nil {
			out[d] = uint64(pb.GetCounter().GetValue())
		}
	}
	return out
}

// RegisterSimulator exports sim's statistics on reg: dpcs_simulator_sent_total,
// _produced_total, _errors_total, _in_flight, _rate and _effective_rate.
func RegisterSimulator(reg prometheus.Registerer, sim *simulate.Simulator) error {
	return reg.Register(simulatorCollector{sim})
}

var (
	simSent      = prometheus.NewDesc("dpcs_simulator_sent_total", "Usage events the simulator handed to Kafka.", nil, nil)
	simProduced  = prometheus.NewDesc("dpcs_simulator_produced_total", "Usage events Kafka acknowledged.", nil, nil)
	simErrors    = prometheus.NewDesc("dpcs_simulator_errors_total", "Usage events that failed to be produced.", nil, nil)
	simInFlight  = prometheus.NewDesc("dpcs_simulator_in_flight", "Usage events sent and not yet acknowledged or failed.", nil, nil)
	simRate      = prometheus.NewDesc("dpcs_simulator_rate", "Target rate, events per second.", nil, nil)
	simEffective = prometheus.NewDesc("dpcs_simulator_effective_rate", "Target rate times the hour-of-day factor, events per second.", nil, nil)
)

// simulatorCollector reads one Stats snapshot per scrape.
type simulatorCollector struct{ sim *simulate.Simulator }

func (c simulatorCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{simSent, simProduced, simErrors, simInFlight, simRate, simEffective} {
		ch <- d
	}
}

func (c simulatorCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.sim.Stats()
	ch <- prometheus.MustNewConstMetric(simSent, prometheus.CounterValue, float64(st.Sent))
	ch <- prometheus.MustNewConstMetric(simProduced, prometheus.CounterValue, float64(st.Produced))
	ch <- prometheus.MustNewConstMetric(simErrors, prometheus.CounterValue, float64(st.Errors))
	ch <- prometheus.MustNewConstMetric(simInFlight, prometheus.GaugeValue, float64(st.InFlight))
	ch <- prometheus.MustNewConstMetric(simRate, prometheus.GaugeValue, st.Rate)
	ch <- prometheus.MustNewConstMetric(simEffective, prometheus.GaugeValue, st.EffectiveRate)
}
