// Package chaos is the fault-injection harness behind `make chaos` (acceptance
// story 6, doc/testing.md). It runs the processor deployable as real OS
// processes against real servers and checks afterwards that every event was
// judged exactly once in effect and that the MySQL history equals the Redis
// state.
//
// The scenario itself is the test TestChaos (build tag chaos); it is run by
// scripts/chaos.sh, which installs redis-server and mariadb-server when they
// are missing:
//
//	bash scripts/chaos.sh                       # CI defaults, about 4 minutes
//	DPCS_CHAOS_DURATION=3m DPCS_CHAOS_RATE=800 bash scripts/chaos.sh
//	DPCS_CHAOS_FAULTS=redis-failover,redis-young-snapshot DPCS_CHAOS_DURATION=40s bash scripts/chaos.sh
//
// Phase by phase, TestChaos
//
//  1. builds examples/processor, starts kfake inside the test process, a
//     redis-server (AOF, appendfsync always) and a MariaDB on free loopback
//     ports with their own temporary data directories;
//  2. provisions a simulated population in SQL (small plans so pools run
//     dry and thresholds fire, some monthly and daily limits) and builds
//     Redis from it as the first state generation;
//  3. drives steady traffic from the simulator's generator, producing every
//     event three times as three separate records, with one 10× burst;
//     beside it a server deployable answers a gateway's POST /decisions and
//     owners' top-ups, and serves the charging interface, on which
//     simulated SMFs (service/charging/smfsim) hold 20 PDU sessions on the
//     API families' members (by IMSI) for the whole traffic time — errors
//     during the faults are expected;
//  4. meanwhile rebalances the consumer group (1→3→2→3 processors), kills
//     processors with SIGKILL and restarts them, kills and restarts
//     redis-server on the same port and AOF directory (stale as well: a
//     restart cannot be told from one that lost writes), stops MariaDB for
//     30 s, restarts redis-server empty and then from an RDB snapshot taken
//     seconds earlier, attaches a replica (the master's first: a new
//     replication id, so a rebuild) and has it, detached a second before the
//     master is killed, take its place, restarts it from a snapshot a second
//     old (DPCS_CHAOS_FAULTS: only the steps it names), each
//     time waiting until one processor rebuilt Redis from SQL and the group
//     commits again;
//  5. stops traffic, has the SMFs release every session, waits until every
//     distinct event is in usage_record and every consumer group has caught
//     up, checks that the SMFs were granted bytes and used them and that no
//     family or member holds a reservation in Redis any more (sessions whose
//     answers a fault lost are swept within seconds), and checks
//     recovery.CheckInvariants, one row per produced event or grant step,
//     one QUOTA_UPDATED or CUSTOMER_BLOCKED per event and one QUOTA_UPDATED
//     per grant step that charged bytes, exactly one THRESHOLD_ALERT per
//     threshold the engine fired (in the inbox and, by event id, on
//     notification-events), and from SQL alone (grant charges included)
//     nobody over plan + top-ups, no member over a limit and no
//     BLOCKED_NOT_MEMBER.
//
// This package holds the building blocks the test composes: child processes
// with log files (Process), the servers (Redis, MariaDB), free ports, the
// triplicating traffic driver (Traffic) and the end-of-run checks. They take
// their settings as arguments; only the test reads the environment.
package chaos
