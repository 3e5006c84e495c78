// Command peers measures DPCS's POST /decisions beside its peers, all driven
// by this one load generator in its own process, as a gateway calls them
// (issue #25): the DPCS server deployable (examples/server) on a real
// redis-server and MariaDB with Kafka in a process of its own; gubernator
// (github.com/gubernator-io/gubernator/v2, in memory, gRPC); envoy's
// ratelimit service (github.com/envoyproxy/ratelimit, on the same
// redis-server, gRPC); and a trivial Redis script (check a limit, debit it)
// called straight from here. Each is measured closed loop (50 callers), at a
// fixed rate (5,000/s, latency counted from each call's scheduled time) and
// closed loop with 10 decisions per call; for each step it reports
// throughput, p50/p99/p99.9 and the CPU µs per decision of every server
// process, read from /proc. With -processor, the processor deployable
// (examples/processor) is then fed DATA_USAGE records through the same Kafka
// by this process, at a fixed rate and as fast as it judges: events judged
// per second (its consumer group's commits) and CPU µs per event.
//
// It lives in a module of its own so that the SDK never links its peers.
// `make bench-peers` (scripts/bench-peers.sh) starts redis-server and
// MariaDB, builds the binaries and runs it:
//
//	peers -redis 127.0.0.1:6379 -mysql 'dpcs:dpcs@tcp(127.0.0.1:3306)/dpcs?parseTime=true' \
//	  -server ./server -recoverybench ./recoverybench -processor ./processor \
//	  -families 80000 -doc doc/benchmarks.md
//
// With them, the floor: Go's net/http answering the same requests with the
// same answers and judging nothing, over HTTP/1.1 and over HTTP/2 cleartext
// (h2c), what any Go HTTP server pays per call on the machine.
//
// The subcommands kafka, gubernator, envoy-ratelimit and floor are the
// peers' processes, started by the run itself.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	cmd := ""
	if len(os.Args) > 1 {
		cmd = os.Args[1]
	}
	switch cmd {
	case "kafka":
		err = serveKafka(ctx, os.Stdout)
	case "gubernator":
		err = serveGubernator(ctx, os.Stdout, os.Args[2:])
	case "floor":
		err = serveFloor(ctx, os.Stdout, os.Args[2:])
	case "envoy-ratelimit":
		serveEnvoyRatelimit() // exits the process
	default:
		err = run(ctx, os.Args[1:], os.Stderr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}
