package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// make run's command on free ports: it starts, prints where to look and its
// progress, and stops cleanly; a second start on the same data dir keeps the data.
func TestRunAllInOne(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{
		"DPCS_DATA_DIR": dir, "DPCS_EMBEDDED_KAFKA_PORT": "0", "DPCS_HTTP_ADDR": "127.0.0.1:0",
		"DPCS_SIMULATOR_ADDR": "127.0.0.1:0", "DPCS_DEMO_FAMILIES": "20", "DPCS_SIMULATOR_RATE": "200",
		"DPCS_LOG_LEVEL": "warn", "DPCS_ADMIN_ADDR": "127.0.0.1:0",
	}
	for round := range 2 {
		var out syncBuffer
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- run(ctx, func(k string) string { return env[k] }, &out, &out) }()
		deadline := time.Now().Add(60 * time.Second)
		for !strings.Contains(out.String(), "judged: allowed=") {
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("round %d: no progress line:\n%s", round, out.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The admin address answers while it runs.
		admin := regexp.MustCompile(`admin +curl (http://\S+/metrics)`).FindStringSubmatch(out.String())
		if admin == nil {
			cancel()
			t.Fatalf("round %d: no admin line:\n%s", round, out.String())
		}
		resp, err := http.Get(admin[1])
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "# TYPE dpcs_decision_latency_seconds histogram") {
			t.Errorf("round %d: GET %s: %d\n%s", round, admin[1], resp.StatusCode, body)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("round %d: %v\n%s", round, err, out.String())
		}
		for _, want := range []string{"DPCS is running", "/healthz", "/simulator/rate", "family 100", "stopped"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("round %d: output lacks %q:\n%s", round, want, out.String())
			}
		}
	}
}

func TestRunBadConfig(t *testing.T) {
	err := run(context.Background(), func(k string) string {
		return map[string]string{"DPCS_DEMO_FAMILIES": "many"}[k]
	}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "DPCS_DEMO_FAMILIES") {
		t.Fatalf("err %v", err)
	}
}
