// Package e2e is DPCS's end-to-end acceptance suite: the acceptance stories
// of doc/testing.md played against the whole system, the way a carrier and a
// family see it.
//
// Usage events are produced into Kafka, judged by the processor with the Lua
// quota engine in Redis, persisted by the write-behind into SQL, turned into
// notifications by the notifier (inbox and SSE), and read back through the
// HTTP API wherever a story says a member is "reported" or asks for a
// status. Stories 1–4 are the simulator's scenarios (simulate.Scenarios),
// played step by step through a simulate.Target that drives the running
// system; story 5 delivers every event three times; story 6 kills the
// processor mid-stream and takes Redis and SQL away for a while. After every
// story the suite checks that the SQL history equals Redis
// (service.CheckInvariants) and that every threshold alert was announced
// once (CheckThresholdAlertsOnce).
//
// The suite runs in two forms from the same story code:
//
//   - go test ./e2e (part of make test): service.StartSystem on embedded
//     infrastructure — kfake, miniredis and SQLite — on free ports.
//   - go test -tags integration ./e2e (make integration): the same stories on
//     a real redis-server (DPCS_TEST_REDIS_ADDR) and a 3-node Redis Cluster
//     (DPCS_TEST_REDIS_CLUSTER) with MariaDB (DPCS_TEST_MYSQL_DSN) and kfake;
//     outages go through internal/outageproxy.
//
// Every wait in the suite waits on progress (Wait): it goes on while what
// it watches advances — offsets committed, rows written, records read — and
// fails only after DefaultStall without progress, saying what it awaited and
// what it saw last. A single slow request is retried, never fatal.
//
// The package's API is what other harnesses (chaos runs, benchmarks) use
// too: the inbox check they run after theirs, and Wait.
package e2e
