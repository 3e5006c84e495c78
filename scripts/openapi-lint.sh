#!/usr/bin/env bash
# Lints the API's served OpenAPI document with Redocly CLI (its recommended
# rules, redocly.yaml): any error fails. Needs Node 20.19+ and npm's registry
# (npx fetches the pinned version once).
set -euo pipefail
cd "$(dirname "$0")/.."
REDOCLY_VERSION=${REDOCLY_VERSION:-2.77.0}
command -v npx >/dev/null || { echo "openapi-lint: npx (Node.js) is needed" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
DPCS_TEST_OPENAPI_OUT="$tmp/openapi.json" go test -count=1 -run '^TestOpenAPIContract$' ./service/api >/dev/null
npx --yes "@redocly/cli@$REDOCLY_VERSION" lint --config redocly.yaml --format=stylish "$tmp/openapi.json"
