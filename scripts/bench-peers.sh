#!/usr/bin/env bash
# make bench-peers: DPCS's POST /decisions beside gubernator, envoy's
# ratelimit service and a trivial Redis script, each a process of its own,
# then the processor deployable fed usage events through Kafka (a process of
# its own too) and the engine's Redis ceiling it is compared with, and Go's
# net/http answering the same requests judging nothing (the floor),
# driven by one load generator in its own process (bench/peers, a Go module
# of its own so the SDK never links its peers), on a real redis-server and
# MariaDB started here on loopback ports. Writes the table into
# doc/benchmarks.md (the peers section).
#
#   PEERS_FLAGS   extra flags for bench/peers (e.g. -families 20000 -duration 5s,
#                 -only dpcs,script, -profile DIR for the server's CPU profiles)
#   PEERS_CGRATES=1  also build CGRateS's cgr-engine v0.10.4 from the module
#                 proxy (a throwaway module in the temporary directory, so no
#                 go.mod of ours names it) and run the grant path's peer,
#                 target cgrates (e.g. -only dpcs,charging,cgrates)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/servers.sh
trap dpcs_stop_servers EXIT

dpcs_install
dpcs_start_redis
dpcs_start_mariadb
go build -o "$DPCS_TMP/server" ./examples/server
go build -o "$DPCS_TMP/recoverybench" ./examples/recoverybench
go build -o "$DPCS_TMP/processor" ./examples/processor
go build -o "$DPCS_TMP/pipebench" ./examples/pipebench
(cd bench/peers && go vet ./... && go test -count=1 ./... && go build -o "$DPCS_TMP/peers" .)
cgr=()
if [[ ${PEERS_CGRATES:-0} == 1 ]]; then
	mkdir -p "$DPCS_TMP/cgrates-build"
	(
		cd "$DPCS_TMP/cgrates-build"
		printf 'module cgratesbuild\n\ngo 1.26\n' >go.mod
		go get github.com/cgrates/cgrates/cmd/cgr-engine@v0.10.4
		go build -o "$DPCS_TMP/cgr-engine" github.com/cgrates/cgrates/cmd/cgr-engine
	)
	cgr=(-cgr-engine "$DPCS_TMP/cgr-engine")
fi
"$DPCS_TMP/peers" -redis "$DPCS_TEST_REDIS_ADDR" -mysql "$DPCS_TEST_MYSQL_DSN" \
	-server "$DPCS_TMP/server" -recoverybench "$DPCS_TMP/recoverybench" -processor "$DPCS_TMP/processor" \
	-pipebench "$DPCS_TMP/pipebench" \
	-dir "$DPCS_TMP/peers-run" \
	-doc doc/benchmarks.md "${cgr[@]}" ${PEERS_FLAGS:-}
