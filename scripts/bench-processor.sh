#!/usr/bin/env bash
# The processor deployable's two pipeline steps (5,000 events/s and as fast
# as it judges) alone, `bench/peers -only pipeline`, for the processor built
# from the working tree and from a git revision, alternated in one run on
# one redis-server and MariaDB (doc/benchmarks.md, "The processor at 5,000
# events/s"):
#
#   scripts/bench-processor.sh [BEFORE_REV] [ROUNDS]
#
#   BEFORE_REV   the revision to compare with (default: none, the working
#                tree alone); ROUNDS pairs (default 2)
#   DPCS_REDIS_PORT, DPCS_MYSQL_PORT   the servers' ports (scripts/servers.sh)
#   PEERS_FLAGS  extra flags for bench/peers (default: -families 20000
#                -warmup 3s -duration 10s); the profiles and logs of each
#                round go to $OUT (default: a temporary directory)
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:-}
rounds=${2:-2}
source scripts/servers.sh
trap dpcs_stop_servers EXIT
out=${OUT:-$(mktemp -d /tmp/bench-processor.XXXXXX)}
mkdir -p "$out"

go build -o "$DPCS_TMP/server" ./examples/server
go build -o "$DPCS_TMP/recoverybench" ./examples/recoverybench
go build -o "$DPCS_TMP/after" ./examples/processor
(cd bench/peers && go build -o "$DPCS_TMP/peers" .)
if [[ -n $before ]]; then
	mkdir -p "$DPCS_TMP/src"
	git archive "$before" | tar -x -C "$DPCS_TMP/src"
	(cd "$DPCS_TMP/src" && go build -o "$DPCS_TMP/before" ./examples/processor)
fi
dpcs_start_redis
dpcs_start_mariadb

seed=true
for round in $(seq 1 "$rounds"); do
	for which in before after; do
		[[ -x $DPCS_TMP/$which ]] || continue
		printf '=== %s %d, %s UTC, load average %s\n' "$which" "$round" "$(date -u +%T)" "$(cut -d' ' -f1-3 /proc/loadavg)"
		mkdir -p "$out/$which-$round"
		# shellcheck disable=SC2086 # PEERS_FLAGS is a list of flags
		"$DPCS_TMP/peers" -redis "$DPCS_TEST_REDIS_ADDR" -mysql "$DPCS_TEST_MYSQL_DSN" \
			-server "$DPCS_TMP/server" -recoverybench "$DPCS_TMP/recoverybench" -processor "$DPCS_TMP/$which" \
			-only pipeline -seed=$seed -dir "$out/$which-$round/run" -profile "$out/$which-$round" \
			${PEERS_FLAGS:--families 20000 -warmup 3s -duration 10s} 2>&1 | grep -E '^\[peers'
		seed=false
	done
done
echo "profiles and logs: $out"
