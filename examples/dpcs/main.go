// Command dpcs is the whole DPCS in one process — `make run`.
//
// With no DPCS_* infrastructure variables it starts an in-process Kafka
// (kfake, on 127.0.0.1:9092, its log in DPCS_DATA_DIR), an in-process Redis
// (miniredis, rebuilt from SQL at every start) and a SQLite file
// (DPCS_DATA_DIR/dpcs.db), seeds a demo population, and runs the simulator,
// the processor, the write-behind, the notifier and the outbox relay. With
// DPCS_KAFKA_BROKERS, DPCS_REDIS_ADDR (or DPCS_REDIS_CLUSTER) and
// DPCS_MYSQL_DSN it uses real infrastructure instead. Restarting it keeps
// the data.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "dpcs:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := service.LoadSystemConfig(getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	fmt.Fprintln(stdout, "starting DPCS…")
	s, err := service.StartSystem(ctx, cfg, log)
	if err != nil {
		return err
	}
	banner(stdout, cfg, s)
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			progress(stdout, s)
		}
	}
	fmt.Fprintln(stdout, "stopping: flushing the simulator, draining the write-behind…")
	shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Close(shutdown); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "stopped")
	return nil
}

func banner(w io.Writer, cfg service.SystemConfig, s *service.System) {
	infra := func(embedded bool, what, real string) string {
		if embedded {
			return what + " (embedded)"
		}
		return real
	}
	fmt.Fprintf(w, `
DPCS is running.
  Kafka      %s   watch decisions: kcat -C -b %s -t usage-persist -X topic.partitioner=murmur2_random
  Redis      %s
  SQL        %s
  health     curl http://%s/healthz   ·   curl http://%s/readyz   ·   curl http://%s/metrics
  simulator  curl http://%s/simulator/stats
             curl -X PUT http://%s/simulator/rate -H 'Content-Type: application/json' -d '{"rate":500}'
             docs at http://%s/docs
  demo       family %d ("Last 10 MB": owners %d and %d, children %d and %d, 10 MB pool), password %q
  data       %s (delete it to start over)
Ctrl-C stops it.

`,
		strings.Join(s.Brokers, ","), strings.Join(s.Brokers, ","),
		infra(cfg.RedisAddr == "" && len(cfg.RedisCluster) == 0, "miniredis", cfg.RedisAddr+strings.Join(cfg.RedisCluster, ",")),
		infra(cfg.MySQLDSN == "", "sqlite "+cfg.SQLitePath, "mysql"),
		s.HTTPAddr, s.HTTPAddr, s.HTTPAddr,
		s.SimulatorAddr, s.SimulatorAddr, s.SimulatorAddr,
		service.DemoFamilyID, service.DemoFamilyID*10, service.DemoFamilyID*10+1, service.DemoFamilyID*10+2, service.DemoFamilyID*10+3,
		service.DemoPassword, cfg.DataDir)
}

func progress(w io.Writer, s *service.System) {
	d := s.Metrics.Decisions()
	var blocked uint64
	for k, n := range d {
		if k != policy.Allowed {
			blocked += n
		}
	}
	st := s.Simulator.Stats()
	fmt.Fprintf(w, "simulated=%d judged: allowed=%d blocked=%d (quota=%d limit=%d time=%d app=%d)\n",
		st.Produced, d[policy.Allowed], blocked, d[policy.BlockedFamilyQuota],
		d[policy.BlockedLimitDaily]+d[policy.BlockedLimitMonthly], d[policy.BlockedTime], d[policy.BlockedApp])
}
