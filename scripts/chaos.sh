#!/usr/bin/env bash
# make chaos: the fault-injection run of SPEC §13 story 6 (package chaos,
# build tag chaos). Installs redis-server and mariadb-server when missing;
# the test itself starts kfake, its own redis-server and MariaDB on free
# loopback ports with temporary data directories, runs three processor
# deployables as OS processes, injects faults and checks the invariants. It
# stops every process it started, by PID, even on failure.
#
# Tuning (CI defaults in parentheses): DPCS_CHAOS_DURATION (100s),
# DPCS_CHAOS_MYSQL_DOWN (30s), DPCS_CHAOS_REDIS_DOWN (12s), DPCS_CHAOS_BURST (3s),
# DPCS_CHAOS_DRAIN_TIMEOUT (150s), DPCS_CHAOS_SESSION_TIMEOUT (10s),
# DPCS_CHAOS_REPLAY_DELAY (2s), DPCS_CHAOS_RATE (250 events/s),
# DPCS_CHAOS_FAMILIES (3000), DPCS_CHAOS_COPIES (3), DPCS_CHAOS_SEED (1),
# DPCS_CHAOS_PROCESSOR (a prebuilt examples/processor), DPCS_CHAOS_KEEP=1 (keep
# the work directory of a green run), DPCS_CHAOS_FAULTS (only these steps of the
# schedule, comma-separated, one after another a duration/(steps+1) apart, e.g.
# redis-failover,redis-young-snapshot; the names: chaos/chaos_test.go faultNames).
# A failed run keeps its work directory and prints its path.
# Ports (default: free ones): DPCS_CHAOS_KAFKA_PORT (the first of three kfake
# brokers), DPCS_CHAOS_REDIS_PORT (and the next one, the replica that takes
# over), DPCS_CHAOS_MYSQL_PORT.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/servers.sh
trap dpcs_stop_servers EXIT # starts nothing here; removes servers.sh's temp dir

dpcs_install
go test -tags chaos -run '^TestChaos$' -count=1 -v -timeout "${DPCS_CHAOS_TIMEOUT:-15m}" ./chaos ${TESTFLAGS:-}
