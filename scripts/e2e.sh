#!/usr/bin/env bash
# make e2e: SPEC §13 stories 1–6 against the whole system (package e2e), in
# both forms: embedded (kfake + miniredis + SQLite) and on real servers
# (redis-server single and 3-node Cluster, MariaDB, with kfake) started here on
# loopback ports. Stops what it started, even on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/servers.sh
trap dpcs_stop_servers EXIT

dpcs_install
dpcs_start_redis
dpcs_start_cluster
dpcs_start_mariadb
go test -tags integration -race -count=1 -timeout 20m ${TESTFLAGS:-} ./e2e
