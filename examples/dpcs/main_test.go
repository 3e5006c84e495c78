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

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/service"
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
	testenv.SkipShort(t, "the all-in-one with the demo, started twice")
	dir := t.TempDir()
	env := map[string]string{
		"DPCS_DATA_DIR": dir, "DPCS_EMBEDDED_KAFKA_PORT": "0", "DPCS_HTTP_ADDR": "127.0.0.1:0",
		"DPCS_SIMULATOR_ADDR": "127.0.0.1:0", "DPCS_DEMO_FAMILIES": "20", "DPCS_SIMULATOR_RATE": "200",
		"DPCS_LOG_LEVEL": "warn", "DPCS_ADMIN_ADDR": "127.0.0.1:0", "DPCS_CHARGING_ADDR": "127.0.0.1:0",
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
		// The banner's demo login works.
		if code := login(t, out.String(), "1000", service.DemoPassword); code != http.StatusOK {
			t.Errorf("round %d: the banner's demo login: %d", round, code)
		}
		// The banner's front-end links serve their pages.
		for _, re := range []string{`family app +(http://\S+/app/)`, `console +(http://\S+/console/)`} {
			m := regexp.MustCompile(re).FindStringSubmatch(out.String())
			if m == nil {
				cancel()
				t.Fatalf("round %d: no %s line:\n%s", round, re, out.String())
			}
			resp, err := http.Get(m[1])
			if err != nil {
				t.Fatal(err)
			}
			page, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "<html") {
				t.Errorf("round %d: %s: %d %.200s", round, m[1], resp.StatusCode, page)
			}
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
		// The metrics are on the admin address only: the banner's health
		// line names the API address's probes and no /metrics, which the
		// API address does not serve.
		health := regexp.MustCompile(`health +curl (http://\S+)/healthz(.*)`).FindStringSubmatch(out.String())
		if health == nil || strings.Contains(health[2], "metrics") {
			t.Errorf("round %d: the health line: %q", round, health)
		} else if resp, err := http.Get(health[1] + "/metrics"); err != nil {
			t.Error(err)
		} else if resp.Body.Close(); resp.StatusCode != http.StatusNotFound {
			t.Errorf("round %d: GET /metrics on the API address: %s, want 404", round, resp.Status)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("round %d: %v\n%s", round, err, out.String())
		}
		for _, want := range []string{"DPCS is running", "/healthz", "/simulator/rate", "family 100", `"password":"dpcs-demo"`, "stopped"} {
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

// login posts the credentials to the API the banner names and returns the
// status.
func login(t *testing.T, banner, login, password string) int {
	t.Helper()
	m := regexp.MustCompile(`API +http://(\S+)`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("no API address in the banner:\n%s", banner)
	}
	resp, err := http.Post("http://"+m[1]+"/auth/token", "application/json",
		strings.NewReader(`{"login":"`+login+`","password":"`+password+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// With DPCS_DEMO=0 nothing is seeded: the banner prints no password and
// says how to create the first admin, and the demo logins do not work.
func TestRunWithoutDemo(t *testing.T) {
	env := map[string]string{
		"DPCS_DATA_DIR": t.TempDir(), "DPCS_EMBEDDED_KAFKA_PORT": "0", "DPCS_HTTP_ADDR": "127.0.0.1:0",
		"DPCS_SIMULATOR_ADDR": "127.0.0.1:0", "DPCS_DEMO": "0", "DPCS_LOG_LEVEL": "warn", "DPCS_ADMIN_ADDR": "127.0.0.1:0", "DPCS_CHARGING_ADDR": "127.0.0.1:0",
	}
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(k string) string { return env[k] }, &out, &out) }()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "Ctrl-C stops it") {
		select {
		case err := <-done:
			t.Fatalf("run ended before its banner: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no banner after 60 s:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range []string{"1", "1000"} {
		if code := login(t, out.String(), id, service.DemoPassword); code != http.StatusUnauthorized {
			t.Errorf("demo login %s without the demo: %d", id, code)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "admin create") || strings.Contains(out.String(), service.DemoPassword) {
		t.Errorf("banner without the demo:\n%s", out.String())
	}
}
