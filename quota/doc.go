// Package quota is DPCS's Lua quota engine on Redis: one atomic script per
// usage event that dedupes it, checks the member's constraints, checks and
// deducts the family pool and the member's day and month counters (all or
// nothing), and detects threshold crossings.
//
// # Use
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}) // or a ClusterClient
//	eng, err := quota.New(rdb, // Asia/Seoul, 24 h dedupe window, 50/30/10 % alerts
//		quota.WithCatalog(policy.NewCatalog(policy.DefaultApps()))) // app id → category
//	eng.SetPlan(ctx, 100, 10<<20)         // family 100 gets 10 MB a month
//	eng.AddMember(ctx, 100, 1)            // and a member
//	res, err := eng.Apply(ctx, quota.Event{ID: "evt_…", FamilyID: 100, CustomerID: 1,
//		Bytes: 5 << 20, AppID: "com.youtube.app", At: eventTime})
//	// res.Decision == policy.Allowed, res.Remaining == 5 MB, res.Crossed == [50]
//
// An event's Category decides BLOCK:CATEGORY constraints. An event that
// names only its app gets its category from the engine's catalog
// (WithCatalog); without a catalog an empty Category means "no category", and
// category blocks do not apply to that event.
//
// ApplyBatch sends many events in one pipeline and keeps their order (events of
// one family share a Redis Cluster slot, so they keep it on a cluster too).
//
// # Guarantees
//
//   - Never overspends: the check and the deduction are one script; concurrent
//     applies to one family serialise in Redis.
//   - Never counts twice: the script remembers every event id and its result for
//     the dedupe window (WithDedupeTTL, 24 h); a replay returns the original
//     result with Duplicate set and changes nothing. Consumers must reject events
//     older than the window.
//   - Same semantics as policy.Evaluate, proven by a property test that drives the
//     script and an in-memory model built on the evaluator with the same random
//     operation sequences (miniredis, a real redis-server and a 3-node cluster).
//   - No cron: the pool of a month lives in family:{f}:pool:YYYYMM; a new month
//     starts full with every threshold re-armed. Day and month counters are
//     period-stamped keys with TTLs.
//   - Thresholds fire once per family and month; a top-up or a larger plan that
//     lifts the pool above a fired threshold re-arms it.
//
// # Grants
//
// A network that asks for units per session instead of per chunk holds a
// grant: Grant (GrantMarked under the state guard; JudgeMarked with events
// in one pipeline) judges one step of it — create, update, release — in
// one script: the grant's reservation returned and its reported use
// charged to the reservation's day and month, then (unless a release) a
// new reservation sized by policy.SizeGrant (the request, the limits and
// the pool net of the other reservations, the fair share among the
// family's open grants) and valid until policy.NextChange:
//
//	rs, err := eng.Grant(ctx, []quota.GrantOp{{ID: "chg_…/1", GrantID: "ref-7/32",
//		FamilyID: 100, CustomerID: 1, AppID: "com.youtube.app", Requested: 50 << 20, At: now}})
//	// rs[0].Granted, rs[0].Final, rs[0].ValidUntil
//
// Events are judged beside the reservations: at every instant used +
// reserved stays within the plan and each member period. A step id is
// deduped with the events' ids. Restore brings open grants back
// (FamilyState.Grants). See doc/architecture.md, "Grants".
//
// # Replication
//
// Redis replicates asynchronously: a failover to a replica that missed the
// last writes would lose decisions already announced. WithReplicaAck(n,
// timeout) makes ApplyBatch end each master's pipeline with WAIT n timeout, on
// the connection that ran the batch's scripts, and return a
// *NotReplicatedError (ErrNotReplicated) unless n replicas acknowledged — the
// writes stay on the master, and a retry returns their stored results once the
// replicas have them. The family writes (SetPlan, TopUp, SetTopUps,
// SetThresholds, SetConstraints, Enforce, AddMember, RemoveMember) then wait
// the same way, after a barrier key on the family's master, and so does
// FinishRebuild on every master: each returns a *NotReplicatedError with its
// write made (applying it again is safe, except TopUp's delta). Off by default.
//
// Status is the dry run (blocked now, and why); Enforce applies a versioned
// policy update and reports the member's standing at once (retroactive
// enforcement). Keys are described in doc/redis-keys.md.
package quota
