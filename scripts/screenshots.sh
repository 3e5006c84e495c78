#!/usr/bin/env bash
# make screenshots: runs the front-ends' browser stories (web/*_integration_test.go)
# in headless Chromium against the all-in-one and keeps the PNGs of the main
# screens, phone-sized and desktop, in doc/screenshots (shown in the README).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/servers.sh
dpcs_install_browser
out=${DPCS_TEST_SCREENSHOTS:-$PWD/doc/screenshots}
mkdir -p "$out"
DPCS_TEST_SCREENSHOTS=$out go test -tags integration -count=1 -timeout 20m ./web/... "$@"
ls -1 "$out"
