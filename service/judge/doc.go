// Package judge is the door to the quota state and the judges that decide
// through it (doc/architecture.md, "One door to the quota state").
//
// State is the one type through which every write DPCS makes to the quota
// state in Redis goes: the judgements below, the family changes of
// service/family, the restores of service/recovery. A deployable with SQL
// builds it with recovery.NewDoor, which makes it safe beside a rebuild
// (marks, re-arms, restore on touch); judge.NewState alone trusts Redis.
//
// Two judges decide usage events through it:
//
//   - Processor consumes usage-events and policy-updated from Kafka, judges
//     each poll in concurrent groups of partitions and produces
//     usage-persist and notification-events before committing (at least
//     once delivered, exactly once in effect: the engine dedupes by id).
//   - Decisions answers gateways that ask before granting (POST /decisions):
//     callers are group-committed into one engine pipeline, and answered
//     once their records are in Kafka (or, with WithSpool, the SQL outbox).
//
// Options are typed per component, as franz-go's: an Opt configures both
// (WithLogger, WithClock, WithStateGuard, …), a ProcessorOpt only the
// processor, a DecisionsOpt only the decisions; each states its default.
// With a StateGuard (service/recovery's Guard) the judges judge only from a
// state SQL vouches for and bring Redis back when it is stale.
//
// The package links no SQL driver, no database/sql, no HTTP and not the
// notifier (internal/sdkdeps holds the rule): the mark store, the re-arm
// store, the family source and the spool are interfaces its caller fills.
package judge
