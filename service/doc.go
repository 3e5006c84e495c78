// Package service is DPCS's composition root: it turns configuration
// (Config, read from DPCS_* variables by LoadConfig; doc/configuration.md)
// into the running pieces and wires them together, so that the mains in
// examples/ stay thin.
//
//   - System (StartSystem) is the all-in-one: an embedded Kafka, Redis and
//     SQLite unless real ones are configured, the HTTP API, the processor,
//     the write-behind, the notifier and the simulator in one process.
//   - Workers (NewWorkers) are the processor deployable's consumers: the
//     processor (service/judge), the write-behind and the notifier.
//   - Config's methods give each package its options (EngineOptions,
//     NotifierOptions, StoreOptions, KafkaOptions, DecisionOptions, …);
//     the SDK packages read no environment.
//   - Metrics turns every package's hooks into Prometheus metrics
//     (doc/observability.md), AdminHandler and StartAdmin serve them with
//     health, readiness and pprof, Tracing sets up OpenTelemetry.
//
// With the mains and the harnesses, this is the only code that links the
// embedded servers (kfake, miniredis) and the SQL drivers
// (internal/sdkdeps holds the rule). The pieces it composes — the door
// (service/judge, built by recovery.NewDoor), the store, the outbox, the
// application layer (service/family), the HTTP API (service/api) — are
// described in doc/architecture.md.
package service
