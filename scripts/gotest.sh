#!/usr/bin/env bash
# gotest.sh [go test flags...] -- runs `go test` on every package, passing
# -rapid.checks=$RAPID_CHECKS only to the packages whose tests import rapid (a
# test binary without rapid rejects the flag). Pass -tags via GOTEST_TAGS, and
# GOTEST_SKIP (an awk regex on import paths) to leave packages out.
set -euo pipefail
cd "$(dirname "$0")/.."
checks=${RAPID_CHECKS:-1000}
tags=${GOTEST_TAGS:-}
skip=${GOTEST_SKIP:-^$}
list() {
	go list ${tags:+-tags "$tags"} -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... | awk -v want="$1" -v skip="$skip" '
		$1 ~ skip { next }
		{ has = 0; for (i = 2; i <= NF; i++) if ($i == "pgregory.net/rapid") has = 1 }
		(want == "rapid" && has) || (want == "plain" && !has) { print $1 }'
}
mapfile -t rapid_pkgs < <(list rapid)
mapfile -t plain_pkgs < <(list plain)
# The two sets run side by side: one go test each, so neither waits for the
# other's longest package with a core idle. The rapid set's output is held
# and printed after the plain set's, so no two packages' lines interleave.
status=0
rapid_out=$(mktemp)
trap 'rm -f "$rapid_out"' EXIT
rapid_pid=
if [ ${#rapid_pkgs[@]} -gt 0 ]; then
	go test ${tags:+-tags "$tags"} "$@" "${rapid_pkgs[@]}" -args -rapid.checks="$checks" >"$rapid_out" 2>&1 &
	rapid_pid=$!
fi
if [ ${#plain_pkgs[@]} -gt 0 ]; then
	go test ${tags:+-tags "$tags"} "$@" "${plain_pkgs[@]}" || status=$?
fi
if [ -n "$rapid_pid" ]; then
	wait "$rapid_pid" || status=$?
	cat "$rapid_out"
fi
exit $status
