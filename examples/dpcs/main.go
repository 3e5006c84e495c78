// Command dpcs is the whole DPCS in one process — `make run`.
//
// With no DPCS_* infrastructure variables it starts an in-process Kafka
// (kfake, on 127.0.0.1:9092, its log in DPCS_DATA_DIR), an in-process Redis
// (miniredis, rebuilt from SQL at every start) and a SQLite file
// (DPCS_DATA_DIR/dpcs.db), seeds a demo population, and runs the simulator,
// the processor, the write-behind, the notifier and the outbox relay. With
// DPCS_KAFKA_BROKERS, DPCS_REDIS_ADDR (or DPCS_REDIS_CLUSTER) and
// DPCS_MYSQL_DSN it uses real infrastructure instead. Restarting it keeps
// the data. /healthz and /readyz are served on the API address and on
// DPCS_ADMIN_ADDR (default 127.0.0.1:9094; off: none), /metrics only on the
// latter: the metrics are the operator's, not the public's.
//
// The demo's members and admin share a published password
// (service.DemoPassword), so the demo is seeded only on embedded SQL, or
// with DPCS_DEMO=1; with DPCS_MYSQL_DSN (or DPCS_DEMO=0) nothing is seeded
// and the first admin is created with `go run ./examples/server admin
// create`.
//
// DPCS_OTLP_ENDPOINT (or the standard OTEL_EXPORTER_OTLP_ENDPOINT) turns
// OpenTelemetry tracing on (doc/observability.md, Tracing).
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

	"github.com/dabom/dpcs/internal/buildinfo"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service"
	"github.com/dabom/dpcs/service/charging"
)

func main() {
	if buildinfo.Asked(os.Args[1:]) {
		buildinfo.Print(os.Stdout, "dpcs")
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := service.CheckEnv(os.Environ())
	if err == nil {
		err = run(ctx, os.Getenv, os.Stdout, os.Stderr)
	}
	if err != nil {
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
	cfg.AdminAddr = cfg.AdminAddress(service.DefaultAllInOneAdminAddr)
	cfg.Charging.Addr = cfg.Charging.Address(service.DefaultAllInOneChargingAddr)
	cfg.Tracing.ServiceName = "dpcs"
	fmt.Fprintln(stdout, "starting DPCS…")
	s, err := service.StartSystem(ctx, cfg, log)
	if err != nil {
		return err
	}
	var token string
	if cfg.Demo {
		tok, err := s.API.IssueTokens(ctx, service.DemoFamilyID*10)
		if err != nil {
			s.Close(context.Background())
			return fmt.Errorf("demo token: %w", err)
		}
		token = tok.AccessToken
	}
	banner(stdout, cfg, s, token)
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

func banner(w io.Writer, cfg service.SystemConfig, s *service.System, token string) {
	api, owner, fam, child := s.HTTPAddr, service.DemoFamilyID*10, service.DemoFamilyID, service.DemoFamilyID*10+2
	redis := "miniredis (embedded, rebuilt from SQL at start)"
	if cfg.RedisAddr != "" || len(cfg.RedisCluster) > 0 {
		redis = cfg.RedisAddr + strings.Join(cfg.RedisCluster, ",")
	}
	sql := "sqlite " + cfg.SQLitePath + " (embedded)"
	if cfg.MySQLDSN != "" {
		sql = "mysql"
	}
	brokers := strings.Join(s.Brokers, ",")
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("\nDPCS is running.")
	p("  API        http://%s   docs: http://%s/docs   OpenAPI: http://%s/openapi.json", api, api, api)
	if cfg.Demo {
		p("  family app http://%s/app/       log in as owner %d (or phone 010-0000-0100), child %d; password %q", api, owner, child, service.DemoPassword)
		p("  console    http://%s/console/   log in as admin %d (or phone 010-0000-0001), care agent %d (read only); password %q",
			api, service.DemoAdminID, service.DemoAgentID, service.DemoPassword)
	} else {
		p("  family app http://%s/app/   ·   console http://%s/console/", api, api)
	}
	if cfg.Demo {
		p("  token      TOKEN=%s", token)
		p("             owner %d of family %d, 30 min; log in again:", owner, fam)
		p(`             curl -X POST http://%s/auth/token -H 'Content-Type: application/json' -d '{"login":"%d","password":"%s"}'`, api, owner, service.DemoPassword)
		p(`  dashboard  curl -H "Authorization: Bearer $TOKEN" http://%s/families/%d`, api, fam)
		p(`  limit      curl -X PATCH -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d '{"set":{"LIMIT:DATA:MONTHLY":"1048576"}}' http://%s/families/%d/members/%d/policies`, api, fam, child)
		p(`  live       curl -N -H "Authorization: Bearer $TOKEN" http://%s/families/%d/notifications/stream`, api, fam)
	}
	p("  gateway    GATEWAY=%s   (synchronous decisions; DPCS_GATEWAY_TOKENS sets your own)", s.GatewayToken)
	p(`             curl -X POST -H "Authorization: Bearer $GATEWAY" -H 'Content-Type: application/json' -d '{"events":[{"eventId":"evt_demo_1","timestamp":"'$(date -u +%%FT%%TZ)'","familyId":%d,"customerId":%d,"appId":"com.youtube.app","bytesUsed":1048576}]}' http://%s/decisions`, fam, child, api)
	switch {
	case s.Charging != nil:
		sub := "msisdn-821000000100" // the demo owner's phone, 010-0000-0100
		if !cfg.Demo {
			sub = "msisdn-<a member's phone, e.g. 8210…>"
		}
		p("  charging   SMF=%s   (Nchf_ConvergedCharging for SMFs, HTTP/2; DPCS_CHARGING_TOKENS sets your own)", s.Charging.Token)
		p(`             curl -i --http2-prior-knowledge -X POST -H "Authorization: Bearer $SMF" -H 'Content-Type: application/json' -d '{"subscriberIdentifier":"%s","nfConsumerIdentification":{"nodeFunctionality":"SMF"},"invocationTimeStamp":"'$(date -u +%%FT%%TZ)'","invocationSequenceNumber":0,"multipleUnitUsage":[{"ratingGroup":10,"requestedUnit":{"totalVolume":10485760}}]}' http://%s%s/chargingdata`,
			sub, s.Charging.Addr, charging.BasePath)
	default:
		p("  charging   off (DPCS_CHARGING_ADDR=off)")
	}
	p("  health     curl http://%s/healthz   ·   /readyz", api)
	if s.AdminAddr != "" {
		p("  admin      curl http://%s/metrics   (also /healthz, /readyz; Grafana: doc/grafana-dashboard.json)", s.AdminAddr)
	} else {
		p("  admin      off (DPCS_ADMIN_ADDR=off): no /metrics")
	}
	p("  simulator  curl http://%s/simulator/stats   (docs at http://%s/docs)", s.SimulatorAddr, s.SimulatorAddr)
	p(`             curl -X PUT http://%s/simulator/rate -H 'Content-Type: application/json' -d '{"rate":500}'`, s.SimulatorAddr)
	p("  Kafka      %s   watch decisions: kcat -C -b %s -t usage-persist -X topic.partitioner=murmur2_random", brokers, brokers)
	p("  Redis      %s", redis)
	p("  SQL        %s", sql)
	if cfg.Demo {
		p("  demo       family %d \"Last 10 MB\": owners %d and %d, children %d and %d, a 10 MB pool; admin %d; password %q",
			fam, owner, owner+1, child, child+1, service.DemoAdminID, service.DemoPassword)
	} else {
		p("  no demo    nothing seeded, no known password (DPCS_DEMO=1 seeds the demo); create the first admin with the same DPCS_* settings:")
		p("             go run ./examples/server admin create --name NAME --phone PHONE   (password on stdin)")
	}
	p("  data       %s (delete it to start over)", cfg.DataDir)
	p("Ctrl-C stops it.\n")
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
	sessions := ""
	if s.SMFs != nil {
		c := s.SMFs.Stats()
		sessions = fmt.Sprintf(" · SMF sessions open=%d created=%d updates=%d released=%d granted=%dMiB", c.Open, c.Creates, c.Updates,
			c.Releases, c.GrantedBytes>>20)
	}
	fmt.Fprintf(w, "simulated=%d judged: allowed=%d blocked=%d (quota=%d limit=%d time=%d app=%d)%s\n",
		st.Produced, d[policy.Allowed], blocked, d[policy.BlockedFamilyQuota],
		d[policy.BlockedLimitDaily]+d[policy.BlockedLimitMonthly], d[policy.BlockedTime], d[policy.BlockedApp], sessions)
}
