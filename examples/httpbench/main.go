// Command httpbench measures the synchronous decision endpoint (POST
// /decisions, issue #16 part 4) on a real Redis: a closed-loop step (c
// callers back to back), a fixed-rate step, and, for comparison in the same
// run, a plain EVALSHA of a trivial debit script over the same connection
// count. The API, SyncDecisions and an embedded Kafka run in this process.
//
//	go run ./examples/httpbench -redis 127.0.0.1:6379 -families 250000 -c 50 -rate 5000
//
// The Redis server is flushed first. -doc FILE writes the table into FILE's
// httpbench section (make bench: doc/benchmarks.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/internal/bench/pipebench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "httpbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("httpbench", flag.ContinueOnError)
	addr := fs.String("redis", "", "Redis host:port (required; flushed)")
	families := fs.Int("families", 250_000, "families provisioned")
	c := fs.Int("c", 50, "callers of the closed-loop step and of the EVALSHA baseline")
	rate := fs.Float64("rate", 5000, "decisions/s of the fixed-rate step")
	batch := fs.Int("batch", 10, "events per request of the batched closed-loop step (1: no such step)")
	dur := fs.Duration("duration", 20*time.Second, "measured time of each step")
	warm := fs.Duration("warmup", 3*time.Second, "warmup of each step")
	linger := fs.Duration("linger", 0, "group-commit linger (0: the default, 200µs)")
	maxBatch := fs.Int("max-batch", 0, "group-commit batch bound (0: the default)")
	guarded := fs.Bool("guarded", false, "judge under a state generation and the decisions' watermarks, as the server does")
	doc := fs.String("doc", "", "markdown file whose httpbench section receives the table")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (server and load) to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *addr == "" {
		return fmt.Errorf("-redis is required")
	}
	rdb := redis.NewClient(&redis.Options{Addr: *addr, PoolSize: 4 * *c})
	defer rdb.Close()
	rep, err := pipebench.RunHTTP(ctx, pipebench.HTTPConfig{Redis: rdb, Families: *families, Concurrency: *c, Rate: *rate, Batch: *batch,
		Duration: *dur, Warmup: *warm, Linger: *linger, MaxBatch: *maxBatch, Guarded: *guarded, Progress: os.Stderr})
	if err != nil {
		return err
	}
	table := rep.Markdown()
	fmt.Print(table)
	if *doc != "" {
		cmd := "go run ./examples/httpbench " + strings.Join(args, " ")
		body := fmt.Sprintf("Measured %s with `%s`.\n\n%s", time.Now().UTC().Format("2006-01-02"), cmd, table)
		return pipebench.ReplaceSection(*doc, "<!-- httpbench:begin -->", "<!-- httpbench:end -->", body)
	}
	return nil
}
