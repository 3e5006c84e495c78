package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/dabom/dpcs/internal/testenv"
)

func TestRunNeedsBrokersWithRealRedis(t *testing.T) {
	err := run(context.Background(), func(k string) string { return map[string]string{"DPCS_REDIS_ADDR": "127.0.0.1:1"}[k] })
	if err == nil || !strings.Contains(err.Error(), "DPCS_KAFKA_BROKERS") {
		t.Fatalf("err %v", err)
	}
}

func TestRunRejectsBadSessionTimeout(t *testing.T) {
	env := map[string]string{"DPCS_KAFKA_BROKERS": "127.0.0.1:1", "DPCS_REDIS_ADDR": "127.0.0.1:1",
		"DPCS_KAFKA_SESSION_TIMEOUT": "10"}
	err := run(context.Background(), func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), "DPCS_KAFKA_SESSION_TIMEOUT") {
		t.Fatalf("err %v", err)
	}
}

// With no infrastructure given it runs embedded (ready on its HTTP port)
// and stops cleanly. It waits for readiness, however slow the machine, rather
// than guessing how long a start takes.
func TestRunEmbedded(t *testing.T) {
	addr, admin := testenv.FreeAddr(t), testenv.FreeAddr(t)
	env := map[string]string{"DPCS_DATA_DIR": t.TempDir(), "DPCS_EMBEDDED_KAFKA_PORT": "0",
		"DPCS_HTTP_ADDR": addr, "DPCS_ADMIN_ADDR": admin, "DPCS_LOG_LEVEL": "warn"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(k string) string { return env[k] }) }()
	for ready := false; !ready; {
		select {
		case err := <-done:
			t.Fatalf("run ended before it was ready: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
			ready = resp.StatusCode == http.StatusOK
			resp.Body.Close()
		}
	}
	if m := testenv.Get(t, "http://"+admin+"/metrics"); !strings.Contains(m, "# TYPE dpcs_decision_latency_seconds histogram") {
		t.Errorf("admin /metrics has no latency histogram:\n%s", m)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The deployable starts against a broker, Redis and SQLite, creates its
// topics, serves its admin endpoints (ready once the workers run; metrics
// with histograms, the Kafka clients' and the runtime's), and stops cleanly
// on cancel.
func TestRunStartsAndStops(t *testing.T) {
	c := testenv.KafkaOf(t)
	mr := miniredis.RunT(t)
	env := map[string]string{
		"DPCS_KAFKA_BROKERS": strings.Join(c.ListenAddrs(), ","),
		"DPCS_REDIS_ADDR":    mr.Addr(),
		"DPCS_SQLITE_PATH":   filepath.Join(t.TempDir(), "dpcs.db"),
		"DPCS_LOG_LEVEL":     "warn",
		"DPCS_ADMIN_ADDR":    testenv.FreeAddr(t),
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(k string) string { return env[k] }) }()
	admin := "http://" + env["DPCS_ADMIN_ADDR"]
	var last string
	for deadline := time.Now().Add(60 * time.Second); ; {
		select {
		case err := <-done:
			t.Fatalf("run ended before it was ready: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if resp, err := http.Get(admin + "/readyz"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("admin /readyz not ready after 60 s; last answer: %s", last)
		}
	}
	if got := testenv.Get(t, admin+"/healthz"); got != "ok\n" {
		t.Errorf("healthz %q", got)
	}
	// The processor's Kafka client connects with its first fetch, which
	// may come after the workers are ready: wait for its counter.
	const connects = `dpcs_kafka_connects_total{client="processor"`
	m := testenv.Get(t, admin+"/metrics")
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(m, connects) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		m = testenv.Get(t, admin+"/metrics")
	}
	for _, want := range []string{
		"# TYPE dpcs_decision_latency_seconds histogram", "# TYPE dpcs_script_seconds histogram",
		"# TYPE dpcs_writebehind_flush_seconds histogram", connects,
		`dpcs_decisions_total{decision="ALLOWED"} 0`, "go_goroutines", "process_resident_memory_bytes",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("admin /metrics lacks %q", want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Started while Redis is down, the deployable waits for it and then runs.
func TestRunWaitsForRedisAtStart(t *testing.T) {
	c := testenv.KafkaOf(t)
	mr := miniredis.NewMiniRedis()
	addr := testenv.FreeAddr(t)
	env := map[string]string{
		"DPCS_KAFKA_BROKERS": strings.Join(c.ListenAddrs(), ","),
		"DPCS_REDIS_ADDR":    addr,
		"DPCS_SQLITE_PATH":   filepath.Join(t.TempDir(), "dpcs.db"),
		"DPCS_LOG_LEVEL":     "error",
		"DPCS_ADMIN_ADDR":    "off",
	}
	go func() {
		time.Sleep(1200 * time.Millisecond)
		if err := mr.StartAddr(addr); err != nil {
			t.Error(err)
		}
	}()
	defer mr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	start := time.Now()
	if err := run(ctx, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < time.Second {
		t.Errorf("returned after %s, before Redis was there", time.Since(start))
	}
	// And gives up after DPCS_START_TIMEOUT when it never comes.
	env["DPCS_REDIS_ADDR"], env["DPCS_START_TIMEOUT"] = "127.0.0.1:1", "1s"
	if err := run(context.Background(), func(k string) string { return env[k] }); err == nil ||
		!strings.Contains(err.Error(), "redis not reachable") {
		t.Errorf("err %v", err)
	}
}
