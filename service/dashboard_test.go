package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/simulate"
)

// dashboardMetrics returns every metric name the Grafana dashboard queries.
func dashboardMetrics(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../doc/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("doc/grafana-dashboard.json: %v", err)
	}
	name := regexp.MustCompile(`\b(?:dpcs|go|process)_[a-z0-9_]+\b`)
	var names []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			found := name.FindAllString(tg.Expr, -1)
			if len(found) == 0 {
				t.Errorf("panel %q: query %q names no metric", p.Title, tg.Expr)
			}
			names = append(names, found...)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// exported reports whether the series name (a family, or a histogram's or
// summary's _bucket, _sum or _count) is in g.
func (g gathered) exported(name string) bool {
	if g[name] != nil {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		stem, ok := strings.CutSuffix(name, suffix)
		if mf := g[stem]; ok && mf != nil {
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				return true
			case dto.MetricType_SUMMARY:
				return suffix != "_bucket"
			}
		}
	}
	return false
}

// The all-in-one under traffic exports every metric the Grafana dashboard
// queries, on its admin address, and they move: decisions by code, the
// produce→decision latency histogram, the write-behind, the notifier's
// webhook deliveries, the relay, the API by operation and the Kafka clients.
func TestSystemMetricsAndDashboard(t *testing.T) {
	ctx := context.Background()
	cfg := testSystemConfig(t)
	cfg.AdminAddr = "127.0.0.1:0"
	// No simulated traffic: on a loaded machine (and under -race) the
	// notifier, storing each notification in SQLite, trails a simulator far
	// behind, and the story's notifications would queue behind thousands.
	cfg.SimulatorRate = 0
	cfg.WebhookURL, cfg.WebhookSecret = httptestWebhook(t), "0123456789abcdef"
	s, err := StartSystem(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)

	// Traffic the simulator does not make: an owner logs in and changes a
	// child's limit (an API request, a relay publication), and the seed's
	// "Last 10 MB" story is played on the demo family (two members blocked:
	// CUSTOMER_BLOCKED notifications, webhook deliveries).
	base := "http://" + s.HTTPAddr
	body := do(t, "POST", base+"/auth/token", "", `{"login":"1000","password":"`+DemoPassword+`"}`, http.StatusOK)
	var tok struct{ AccessToken string }
	if err := json.Unmarshal([]byte(body), &tok); err != nil || tok.AccessToken == "" {
		t.Fatalf("login: %s", body)
	}
	do(t, "GET", base+"/families/100", "", "", http.StatusUnauthorized)
	do(t, "PATCH", base+"/families/100/members/1003/policies", tok.AccessToken, `{"set":{"LIMIT:DATA:MONTHLY":"104857600"}}`, http.StatusOK)
	story, err := simulate.ScenarioByName("last-10mb", simulate.ScenarioConfig{Location: cfg.Zone, FamilyID: DemoFamilyID})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := story.Records()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	type progress struct {
		Allowed, Rows, Relayed, Notified float64
		Latency, Sends                   uint64
	}
	var seen progress
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		g := gather(t, s.Registry)
		seen = progress{
			Allowed:  g.value("dpcs_decisions_total", map[string]string{"decision": string(policy.Allowed)}),
			Rows:     g.value("dpcs_writebehind_rows_total", nil),
			Relayed:  g.value("dpcs_relay_published_total", nil),
			Notified: g.value("dpcs_notifier_notifications_total", map[string]string{"kind": "CUSTOMER_BLOCKED"}),
			Latency:  g.count("dpcs_decision_latency_seconds", nil),
			Sends:    g.count("dpcs_notifier_send_seconds", map[string]string{"channel": "webhook", "result": "ok"}),
		}
		if seen.Allowed >= 2 && seen.Rows > 0 && seen.Relayed > 0 && seen.Notified > 0 && seen.Latency >= 4 && seen.Sends > 0 {
			break
		}
		if time.Now().After(deadline) {
			var notes []string
			for _, name := range []string{"dpcs_notifier_notifications_total", "dpcs_notifier_dead_letters_total", "dpcs_notifier_retries_total", "dpcs_processor_dead_letters_total"} {
				for _, m := range g[name].GetMetric() {
					notes = append(notes, fmt.Sprintf("%s%v=%g", name, m.GetLabel(), m.GetCounter().GetValue()))
				}
			}
			t.Fatalf("awaited 2 allowed decisions and 4 latencies, write-behind rows, a relay publication, a CUSTOMER_BLOCKED notification and a webhook delivery; after 60 s saw %+v; notifier: %v", seen, notes)
		}
	}
	g := gather(t, s.Registry)
	for _, name := range dashboardMetrics(t) {
		if !g.exported(name) {
			t.Errorf("the dashboard queries %s; the running system does not export it", name)
		}
	}
	for _, want := range []map[string]string{{"operation": "login", "status": "200"}, {"operation": "get-family", "status": "401"}} {
		if g.count("dpcs_api_request_seconds", want) == 0 {
			var have []string
			for _, m := range g["dpcs_api_request_seconds"].GetMetric() {
				have = append(have, fmt.Sprint(m.GetLabel()))
			}
			t.Errorf("no API request %v measured; measured: %v", want, have)
		}
	}
	for _, client := range []string{"processor", "write-behind", "notifier", "producer"} {
		if len(g.series("dpcs_kafka_connects_total", map[string]string{"client": client})) == 0 {
			t.Errorf("Kafka client %s not measured", client)
		}
	}
	if g["dpcs_simulator_produced_total"] == nil {
		t.Error("the simulator's produced events are not exported")
	}

	// The admin address serves the same registry, with health and readiness.
	if got := testenv.Get(t, "http://"+s.AdminAddr+"/healthz"); got != "ok\n" {
		t.Errorf("admin healthz %q", got)
	}
	if got := testenv.Get(t, "http://"+s.AdminAddr+"/readyz"); got != "ready\n" {
		t.Errorf("admin readyz %q", got)
	}
	m := testenv.Get(t, "http://"+s.AdminAddr+"/metrics")
	for _, want := range []string{"dpcs_decision_latency_seconds_bucket{le=", `dpcs_decisions_total{decision="ALLOWED"}`, "go_goroutines", "process_resident_memory_bytes",
		"# TYPE dpcs_sse_streams gauge"} {
		if !strings.Contains(m, want) {
			t.Errorf("admin /metrics lacks %q", want)
		}
	}
}
