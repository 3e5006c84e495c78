#!/usr/bin/env bash
# make bench: per-package benchmarks. The quota engine is measured on a real
# redis-server started here on a loopback port, beside a trivial EVALSHA baseline.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/servers.sh
trap dpcs_stop_servers EXIT

dpcs_install
dpcs_start_redis
dpcs_start_mariadb
go test -run '^$' -bench . -benchmem -count=1 -tags integration -timeout 30m ${BENCHFLAGS:-} ./...
