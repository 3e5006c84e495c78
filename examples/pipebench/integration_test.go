//go:build integration

package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A short run on the real servers writes the marked section and the chart.
func TestPipebenchOnRealServers(t *testing.T) {
	addr, dsn := os.Getenv("DPCS_TEST_REDIS_ADDR"), os.Getenv("DPCS_TEST_MYSQL_DSN")
	if addr == "" || dsn == "" {
		t.Fatal("DPCS_TEST_REDIS_ADDR and DPCS_TEST_MYSQL_DSN must be set (make integration sets them)")
	}
	dir := t.TempDir()
	doc, svg := filepath.Join(dir, "b.md"), filepath.Join(dir, "c.svg")
	if err := os.WriteFile(doc, []byte("# Benchmarks\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// -keep and a family range of its own: the servers are shared with the
	// other integration tests.
	first := strconv.FormatInt(700_000_000+time.Now().UnixNano()%1_000_000*100, 10)
	err := run(context.Background(), []string{"-redis", addr, "-mysql", dsn, "-keep", "-first-family", first,
		"-families", "300", "-rates", "300", "-duration", "1s", "-warmup", "200ms",
		"-compare-families", "50", "-scale", "", "-doc", doc, "-svg", svg, "-profile-step", "300", "-profile-dir", dir})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(doc)
	for _, want := range []string{"<!-- pipeline:begin -->", "| 300 | 300 |", "judgements/s", "**pass**", "<!-- pipeline:end -->"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("doc lacks %q:\n%s", want, b)
		}
	}
	if c, err := os.ReadFile(svg); err != nil || !strings.Contains(string(c), "<svg") {
		t.Errorf("chart: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "pipebench-cpu.pprof")); err != nil {
		t.Errorf("no CPU profile: %v", err)
	}
}
