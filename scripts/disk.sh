#!/usr/bin/env bash
# disk.sh [need-GiB] -- makes room for a CI run. A full run (race builds of
# every package, the integration and e2e binaries, two servers' data) wrote
# about 4 GiB into Go's build cache and the temporary directory from an
# empty cache (2026-11-28, 53 min on 2 cores). A machine
# that was used before may have far less free: a stop's CI once failed with
# "no space left on device" while linking test binaries. When less than
# need-GiB is free where Go builds, this empties Go's build cache (a fresh
# machine has none either; the run only rebuilds) and removes build
# directories of Go commands that are no longer running, then says what is free.
set -euo pipefail
need=${1:-16}
cache=$(go env GOCACHE)
tmp=${TMPDIR:-/tmp}
free_gib() { df -P -k "$1" | awk 'NR == 2 { printf "%d", $4 / 1048576 }'; }
report() { echo "disk: $(free_gib "$cache") GiB free for Go's cache ($cache), $(free_gib "$tmp") GiB in $tmp"; }
report
if [ "$(free_gib "$cache")" -ge "$need" ] && [ "$(free_gib "$tmp")" -ge "$need" ]; then
	exit 0
fi
echo "disk: under $need GiB free: emptying Go's build cache and stale build directories"
go clean -cache
# A go-build directory lives as long as the go command that made it; one an
# hour old belongs to a command that was killed.
find "$tmp" -maxdepth 1 -name 'go-build*' -type d -mmin +60 -exec rm -rf {} + 2>/dev/null || true
report
if [ "$(free_gib "$cache")" -lt 4 ] || [ "$(free_gib "$tmp")" -lt 4 ]; then
	echo "disk: under 4 GiB free even so; the run would fail midway on a full disk" >&2
	df -h "$cache" "$tmp" >&2
	exit 1
fi
