package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/envoyproxy/ratelimit/src/service_cmd/runner"
	"github.com/envoyproxy/ratelimit/src/settings"
	"github.com/gubernator-io/gubernator/v2"
	"github.com/twmb/franz-go/pkg/kfake"
)

// serveKafka runs an embedded Kafka (kfake) until ctx ends: DPCS's server
// produces every decision's records to it before answering. It prints
// "ready <addr>" once listening.
func serveKafka(ctx context.Context, stdout io.Writer) error {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintln(stdout, "ready", strings.Join(c.ListenAddrs(), ","))
	<-ctx.Done()
	return nil
}

// serveGubernator runs one gubernator instance (no peers, in memory) until
// ctx ends, printing "ready <grpc addr>".
func serveGubernator(ctx context.Context, stdout io.Writer, args []string) error {
	fs := flag.NewFlagSet("gubernator", flag.ContinueOnError)
	cache := fs.Int("cache", 1_000_000, "rate limits kept (gubernator's LRU cache size)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	d, err := gubernator.SpawnDaemon(ctx, gubernator.DaemonConfig{
		GRPCListenAddress: "127.0.0.1:0",
		HTTPListenAddress: "127.0.0.1:0",
		PeerDiscoveryType: "none",
		CacheSize:         *cache,
	})
	if err != nil {
		return err
	}
	defer d.Close()
	if len(d.GRPCListeners) == 0 {
		return errors.New("gubernator listens on no gRPC address")
	}
	// Alone: it owns every rate limit.
	d.SetPeers([]gubernator.PeerInfo{d.PeerInfo})
	fmt.Fprintln(stdout, "ready", d.GRPCListeners[0].Addr().String())
	<-ctx.Done()
	return nil
}

// serveEnvoyRatelimit runs envoy's ratelimit service as its own command does,
// configured by the environment the run gives it (envoyEnv). It returns only
// by exiting the process.
func serveEnvoyRatelimit() {
	r := runner.NewRunner(settings.NewSettings())
	r.Run()
}

// envoyDomain is the ratelimit domain of the benchmark's descriptors: one
// limit per member, counted in requests per day.
const envoyDomain = "dpcs"

// envoyEnv writes envoy ratelimit's configuration under dir and returns its
// environment: the Redis at redisAddr, gRPC on grpcPort, its HTTP and debug
// ports elsewhere, no statsd.
func envoyEnv(dir, redisAddr string, grpcPort, httpPort, debugPort int) ([]string, error) {
	conf := filepath.Join(dir, "envoy", "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		return nil, err
	}
	yaml := "domain: " + envoyDomain + "\ndescriptors:\n  - key: member\n    rate_limit:\n      unit: day\n      requests_per_unit: 4000000000\n"
	if err := os.WriteFile(filepath.Join(conf, "dpcs.yaml"), []byte(yaml), 0o644); err != nil {
		return nil, err
	}
	return []string{
		"RUNTIME_ROOT=" + filepath.Join(dir, "envoy"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"USE_STATSD=false", "LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
		"HOST=127.0.0.1", fmt.Sprintf("PORT=%d", httpPort),
		"DEBUG_HOST=127.0.0.1", fmt.Sprintf("DEBUG_PORT=%d", debugPort),
		"GRPC_HOST=127.0.0.1", fmt.Sprintf("GRPC_PORT=%d", grpcPort),
	}, nil
}

// freePort returns a loopback port free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitReady reads r until a line "ready <addr>" and returns addr; the rest
// of r is copied to log.
func waitReady(r io.Reader, log io.Writer, within time.Duration) (string, error) {
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(r)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			if addr, ok := strings.CutPrefix(line, "ready "); ok && !sent {
				sent = true
				lines <- addr
				continue
			}
			fmt.Fprintln(log, line)
		}
		if !sent {
			close(lines)
		}
	}()
	select {
	case addr, ok := <-lines:
		if !ok {
			return "", errors.New("the process ended before it was ready")
		}
		return addr, nil
	case <-time.After(within):
		return "", fmt.Errorf("not ready within %s", within)
	}
}
