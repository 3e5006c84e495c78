#!/usr/bin/env bash
# make integration: real redis-server (single, primary + replica, 3-node cluster), MariaDB and kcat
# on loopback ports; runs every test built with the `integration` tag. Stops what
# it started, even on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/servers.sh
trap dpcs_stop_servers EXIT

dpcs_install
dpcs_install_browser
dpcs_start_redis
dpcs_start_replica
# A replica per cluster master, for the replica-acknowledgement tests.
[ -n "${DPCS_CLUSTER_REPLICA_PORTS:-}" ] || dpcs_pick DPCS_CLUSTER_REPLICA_PORTS 27004 3 bus
dpcs_start_cluster
dpcs_start_mariadb
export DPCS_TEST_KCAT=$(command -v kcat)

# The e2e stories run on their own in `make e2e` (CI runs both).
GOTEST_SKIP=${GOTEST_SKIP:-/e2e$} GOTEST_TAGS=integration bash scripts/gotest.sh -race -count=1 -timeout 40m ${TESTFLAGS:-}
