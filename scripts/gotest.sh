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
status=0
if [ ${#plain_pkgs[@]} -gt 0 ]; then
	go test ${tags:+-tags "$tags"} "$@" "${plain_pkgs[@]}" || status=$?
fi
if [ ${#rapid_pkgs[@]} -gt 0 ]; then
	go test ${tags:+-tags "$tags"} "$@" "${rapid_pkgs[@]}" -args -rapid.checks="$checks" || status=$?
fi
exit $status
