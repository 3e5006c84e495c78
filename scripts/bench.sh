#!/usr/bin/env bash
# make bench: per-package benchmarks, then the full-pipeline benchmark
# (examples/pipebench) on a real redis-server, a 3-node Redis Cluster and
# MariaDB started here on loopback ports, then the recovery benchmark
# (examples/recoverybench: Redis rebuilt from SQL at 100,000 families). The
# pipeline and recovery results are written into doc/benchmarks.md (marked
# sections) and doc/pipeline.svg.
#
#   BENCH_PACKAGES=0   skip the per-package benchmarks
#   BENCH_PIPELINE=0   skip the pipeline benchmark
#   BENCH_RECOVERY=0   skip the recovery benchmark
#   BENCH_HTTP=0       skip the synchronous endpoint benchmark (examples/httpbench)
#   HTTPBENCH_FLAGS    extra flags for it (e.g. -families 20000 -duration 8s)
#   PIPEBENCH_FLAGS    extra flags for the single-Redis pipeline run
#   RECOVERYBENCH_FLAGS extra flags for the recovery run (e.g. -families 10000)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/servers.sh
trap dpcs_stop_servers EXIT

dpcs_install
# usage_record grows by millions of rows per run: give InnoDB room for its
# indexes, as a production server would have.
export DPCS_MYSQL_BUFFER_POOL=${DPCS_MYSQL_BUFFER_POOL:-2G}
dpcs_start_redis
dpcs_start_replica
dpcs_start_mariadb
if [ "${BENCH_PACKAGES:-1}" != 0 ]; then
	go test -run '^$' -bench . -benchmem -count=1 -tags integration -timeout 30m ${BENCHFLAGS:-} ./...
fi
if [ "${BENCH_PIPELINE:-1}" != 0 ]; then
	dpcs_start_cluster
	go build -o "$DPCS_TMP/pipebench" ./examples/pipebench
	# Rate ladder, 1k vs 250k families, 1/2/3 processors, ceiling: single Redis.
	"$DPCS_TMP/pipebench" -redis "$DPCS_TEST_REDIS_ADDR" -mysql "$DPCS_TEST_MYSQL_DSN" \
		-doc doc/benchmarks.md -svg doc/pipeline.svg -profile-dir "${PROFILE_DIR:-$DPCS_TMP}" ${PIPEBENCH_FLAGS:-}
	# The same max-rate step on the 3-node cluster (scaling note).
	"$DPCS_TMP/pipebench" -redis-cluster "$DPCS_TEST_REDIS_CLUSTER" -mysql "$DPCS_TEST_MYSQL_DSN" \
		-rates max -compare-families 0 -scale "" -profile-step "" -doc doc/benchmarks.md -section pipeline-cluster \
		${PIPEBENCH_CLUSTER_FLAGS:-}
fi
if [ "${BENCH_RECOVERY:-1}" != 0 ]; then
	go build -o "$DPCS_TMP/recoverybench" ./examples/recoverybench
	# Seeds its own database dpcs_recoverybench; empties the Redis server.
	"$DPCS_TMP/recoverybench" -redis "$DPCS_TEST_REDIS_ADDR" -mysql "$DPCS_TEST_MYSQL_DSN" \
		-doc doc/benchmarks.md ${RECOVERYBENCH_FLAGS:-}
fi
if [ "${BENCH_HTTP:-1}" != 0 ]; then
	go build -o "$DPCS_TMP/httpbench" ./examples/httpbench
	# POST /decisions: closed loop c=50 and 5k/s at 250k families, beside a
	# trivial EVALSHA debit over the same connections; empties the Redis server.
	"$DPCS_TMP/httpbench" -redis "$DPCS_TEST_REDIS_ADDR" -families 250000 -c 50 -rate 5000 \
		-doc doc/benchmarks.md ${HTTPBENCH_FLAGS:-}
fi
