// Package backoffice is the HTTP API's back office for operators
// (doc/architecture.md, "Back-office API"): policy templates, their drift
// and re-apply, family search, provisioning and plans, family usage
// reports, the audit log, the dead-letter browser (over DeadLetters) and the
// operations view (metrics from prometheus.Gatherers, MetricsScraper for
// remote processes, and KafkaStats).
//
// Register adds the routes to the API's huma.API, each secured by the
// access token and tagged Tag. What only the API knows comes in Config as
// functions — who the caller is (Admin), its one error mapping (Problem),
// its policy view (PolicyView) and report periods (Period) — so the
// package does not import service/api, which imports it. Family changes
// go to service/family, reads to service/store.
package backoffice
