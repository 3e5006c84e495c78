#!/usr/bin/env bash
# beside-run.sh CMD... -- runs CMD while the all-in-one of `make run` serves on
# its default addresses (API 127.0.0.1:8080, simulator 127.0.0.1:8081, Kafka
# 127.0.0.1:9092, admin 127.0.0.1:9094), as on a developer's machine: a test
# that binds a fixed port fails here instead of on theirs. The all-in-one
# keeps its data in a temporary directory and is stopped afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
pid=
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
trap cleanup EXIT
# healthy: GET /healthz of the API answers 200 (bash's /dev/tcp: no curl needed).
healthy() {
	exec 3<>/dev/tcp/127.0.0.1/8080 || return 1
	printf 'GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
	local status
	read -r _ status _ <&3 || status=
	exec 3<&-
	[ "$status" = 200 ]
}
go build -o "$dir/dpcs" ./examples/dpcs
DPCS_DATA_DIR="$dir/data" "$dir/dpcs" >"$dir/run.log" 2>&1 &
pid=$!
# Wait on progress: the API answers once everything started.
for _ in $(seq 1 600); do
	if healthy 2>/dev/null; then
		break
	fi
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "beside-run: the all-in-one exited before serving:" >&2
		cat "$dir/run.log" >&2
		exit 1
	fi
	sleep 0.5
done
healthy 2>/dev/null || { echo "beside-run: the all-in-one did not serve within 5 min" >&2; tail -50 "$dir/run.log" >&2; exit 1; }
echo "beside-run: make run's all-in-one serves on 127.0.0.1:8080 (pid $pid); running: $*"
"$@"
