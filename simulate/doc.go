// Package simulate is DPCS's traffic simulator: a realistic carrier-scale
// population, a usage-event generator, a rate-controlled pump whose rate can
// be changed while it runs (in code or over HTTP), the Kafka publisher, and
// the scripted acceptance stories (doc/testing.md).
//
// # Population
//
// NewPopulation builds 250,000 families with 1,000,000 members (2–10 per
// family, mean exactly 4) from a seed. Nothing is stored per family: every
// attribute is computed from the seed and the id, so the population costs a
// few hundred bytes and any family can be looked up in O(1). Ids are derived,
// not stored: families are numbered from 1 (WithFirstFamilyID), and member i
// of family f is customer f*10+i (CustomerID, FamilyOf). Services provision
// the same population by iterating it:
//
//	pop, _ := simulate.NewPopulation(42)
//	for f := range pop.Families() {
//		eng.SetPlan(ctx, f.ID, f.PlanBytes)
//		for _, m := range f.Members {
//			eng.AddMember(ctx, f.ID, m.CustomerID) // m.Role: OWNER for members 0 and 1
//		}
//	}
//
// Members are Heavy, Normal or Light (15/55/30 %), with relative event rates
// 6/2/0.5 and event sizes 2/1/0.5× the category median; families belong to
// activity tiers (rates 0.3/1/3/10) so a few families make much of the
// traffic. doc/simulator.md lists every distribution and parameter.
//
// # Events
//
// A Generator draws DATA_USAGE envelopes from a population: a member in
// proportion to its rate, an app of policy.DefaultApps by category share, a
// log-normal size, the member's device and a network type; the id is "evt_"
// plus a time-ordered UUID v7 (envelope.NewID). The same seed gives the same events
// (WithSeededIDs makes the ids reproducible too, with a fixed clock:
// WithNow, WithDay). WithDay spreads timestamps
// over one day following the hour-of-day Curve, for backfills.
//
// # Rate control
//
// A Simulator pumps events from a Source (the Generator) to a Sink (the
// Publisher) through a token bucket (golang.org/x/time/rate):
//
//	sim, _ := simulate.New(gen, pub, simulate.WithRate(5000))
//	sim.Start()
//	sim.SetRate(20000)   // from any goroutine, effective at once
//	sim.Burst(100000)    // extra events on top of the rate
//	st := sim.Stats()    // sent, produced, errors, per-second history
//	sim.Stop(ctx)        // waits for every event in flight
//
// NewHandler (or RegisterAPI on an existing huma API) serves the control API:
// GET/PUT /simulator/rate, POST /simulator/burst, GET /simulator/stats, with
// OpenAPI at /openapi.json and docs at /docs.
//
// # Publishing
//
// Publisher produces to usage-events through a caller-owned *kgo.Client,
// keyed by familyId; ProducerOptions returns the seed's settings (linger
// 5 ms, 64 KiB batches, lz4, configurable acks, murmur2 partitioning like
// Kafka's Java client). It bounds the records in flight and counts
// failures.
//
// # Scenarios
//
// Scenarios returns acceptance stories 1–4 of doc/testing.md (Last 10 MB,
// limit cut while over, night block, thresholds) as data: a family to
// provision, steps (usage events, policy updates, replays) with their times,
// and the decision, remaining pool, threshold crossings and notifications each
// step must produce. Scenario.Run plays one against any Target and reports
// every mismatch; Scenario.Records gives the Kafka records to play it through
// the real pipeline.
package simulate
