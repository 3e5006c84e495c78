package simulate

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func call(t *testing.T, srv *httptest.Server, method, path, body string) (int, string, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	json.Unmarshal(data, &m)
	return resp.StatusCode, resp.Header.Get("Content-Type"), m
}

func TestControlAPI(t *testing.T) {
	clk := newFakeClock()
	sim := mustSimulator(t, &counterSource{}, SinkFunc(func(_ context.Context, _ Event, done func(error)) { done(nil) }),
		WithRate(250), WithClock(clk))
	srv := httptest.NewServer(NewHandler(sim))
	defer srv.Close()

	code, _, m := call(t, srv, "GET", "/simulator/rate", "")
	if code != 200 || m["rate"] != 250.0 || m["running"] != false {
		t.Fatalf("GET rate: %d %v", code, m)
	}
	code, _, m = call(t, srv, "PUT", "/simulator/rate", `{"rate": 5000}`)
	if code != 200 || m["rate"] != 5000.0 || sim.Rate() != 5000 {
		t.Fatalf("PUT rate: %d %v", code, m)
	}
	// Validation errors are RFC 9457 problems naming the field.
	for _, body := range []string{`{"rate": -1}`, `{"rate": 1e9}`, `{"rate": "fast"}`, `{}`, `{"rate": 5, "extra": 1}`} {
		code, ctype, m := call(t, srv, "PUT", "/simulator/rate", body)
		if code != 422 && code != 400 || ctype != "application/problem+json" {
			t.Errorf("PUT %s: %d %s", body, code, ctype)
		}
		errs, _ := json.Marshal(m["errors"])
		if !strings.Contains(string(errs), "body") {
			t.Errorf("PUT %s: errors %s do not name the field", body, errs)
		}
	}
	code, _, m = call(t, srv, "PUT", "/simulator/rate", `{"rate": -1}`)
	if errs, _ := json.Marshal(m["errors"]); code != 422 || !strings.Contains(string(errs), "body.rate") {
		t.Errorf("PUT rate -1: %d %s", code, errs)
	}
	if sim.Rate() != 5000 {
		t.Errorf("rate changed by a bad request: %v", sim.Rate())
	}

	code, _, m = call(t, srv, "POST", "/simulator/burst", `{"events": 1000}`)
	if code != 202 || m["accepted"] != 1000.0 || m["pending"] != 1000.0 {
		t.Fatalf("POST burst: %d %v", code, m)
	}
	if code, _, _ := call(t, srv, "POST", "/simulator/burst", `{"events": 0}`); code != 422 {
		t.Errorf("burst 0: %d", code)
	}

	sim.Start()
	for sim.Stats().Sent < 1000 {
		time.Sleep(time.Millisecond)
	}
	stop(t, sim)
	clk.After(2 * time.Second)
	code, _, m = call(t, srv, "GET", "/simulator/stats", "")
	if code != 200 || m["sent"].(float64) < 1000 || m["produced"] != m["sent"] || m["errors"] != 0.0 || m["rate"] != 5000.0 {
		t.Fatalf("GET stats: %d %v", code, m)
	}
	if h, ok := m["history"].([]any); !ok || len(h) == 0 {
		t.Errorf("history %v", m["history"])
	}

	code, _, m = call(t, srv, "GET", "/openapi.json", "")
	paths, _ := m["paths"].(map[string]any)
	if code != 200 || paths["/simulator/rate"] == nil || paths["/simulator/burst"] == nil || paths["/simulator/stats"] == nil {
		t.Errorf("openapi: %d %v", code, paths)
	}
	if code, _, _ := call(t, srv, "GET", "/docs", ""); code != 200 {
		t.Errorf("docs: %d", code)
	}
}

func TestProblemMapping(t *testing.T) {
	if err := problem(invalidf("x"), "body.rate", 1); !strings.Contains(err.Error(), "validation") {
		t.Errorf("invalid: %v", err)
	}
	if err := problem(errors.New("boom"), "body.rate", 1); !strings.Contains(err.Error(), "simulator error") {
		t.Errorf("other: %v", err)
	}
}

// TestControlAPIEchoesNothing: a refused request's problem names the field
// and says what it takes, and never repeats what was sent — neither a value
// (huma's details carry it by default) nor a malformed body's literal
// (encoding/json's texts quote it).
func TestControlAPIEchoesNothing(t *testing.T) {
	sim := mustSimulator(t, &counterSource{}, SinkFunc(func(_ context.Context, _ Event, done func(error)) { done(nil) }))
	srv := httptest.NewServer(NewHandler(sim))
	defer srv.Close()
	for _, c := range []struct{ method, path, body, sent string }{
		{"PUT", "/simulator/rate", `{"rate": -98765.4321}`, "98765"},
		{"PUT", "/simulator/rate", `{"rate": "ECHO<b>1"}`, "ECHO"},
		{"PUT", "/simulator/rate", `{"rate": 12345678901}`, "12345678901"},
		{"PUT", "/simulator/rate", `{"rate": ECHO2}`, "ECHO"},
		{"PUT", "/simulator/rate", `{"rate": 5} ECHO3`, "ECHO"},
		{"POST", "/simulator/burst", `{"events": "ECHO4"}`, "ECHO"},
		{"POST", "/simulator/burst", `{"events": 1.5e99}`, "1.5e"},
		{"POST", "/simulator/burst", `{"events": -424242}`, "424242"},
	} {
		req, err := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 400 || resp.StatusCode >= 500 {
			t.Errorf("%s %s: status %d", c.method, c.body, resp.StatusCode)
		}
		if strings.Contains(string(data), c.sent) {
			t.Errorf("%s %s: the answer repeats what was sent: %s", c.method, c.body, data)
		}
		if !strings.Contains(string(data), `"location":"body`) {
			t.Errorf("%s %s: the answer names no field: %s", c.method, c.body, data)
		}
	}
}
