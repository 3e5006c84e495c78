// Command simulator pumps realistic usage events into Kafka's usage-events
// topic at a rate that can be changed while it runs, or plays one of the
// scripted scenarios (doc/simulator.md, "Scenarios").
//
//	go run ./examples/simulator                        # embedded Kafka, 1000 events/s, until Ctrl-C
//	curl -X PUT localhost:8081/simulator/rate -d '{"rate":5000}'
//	DPCS_KAFKA_BROKERS=k1:9092 DPCS_SIMULATOR_RATE=5000 DPCS_SIMULATOR_DURATION=10m go run ./examples/simulator
//	go run ./examples/simulator -scenario last-10mb    # publish a scenario's events and print its expectations
//	DPCS_SIMULATOR_CHARGING_URL=http://127.0.0.1:8090 DPCS_SIMULATOR_CHARGING_TOKEN=… go run ./examples/simulator
//	                                                    # simulated SMFs (PDU sessions) against a charging interface
//
// /healthz, /readyz (Kafka answers) and /metrics (Prometheus: the producer's
// kprom metrics and dpcs_simulator_*) are served on DPCS_ADMIN_ADDR (default
// 127.0.0.1:9093; off: none).
//
// Configuration is read from DPCS_* environment variables (run with -h for
// the list); flags override the most common ones. Without DPCS_KAFKA_BROKERS
// an in-process Kafka (kfake) is started with 10-partition usage-events and
// policy-updated topics, so the command works alone.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/buildinfo"
	"github.com/dabom/dpcs/internal/httpserver"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service"
	"github.com/dabom/dpcs/service/charging/smfsim"
	"github.com/dabom/dpcs/simulate"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := service.CheckEnv(os.Environ())
	if err == nil {
		err = run(ctx, os.Args, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "simulator:", err)
		os.Exit(1)
	}
}

// config is read from the DPCS_* variables (doc/configuration.md).
type config = service.SimulatorConfig

func loadConfig(args []string, stdout io.Writer) (config, error) {
	cfg, err := service.LoadSimulatorConfig(os.Getenv)
	if err != nil {
		return cfg, err
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "events per second (DPCS_SIMULATOR_RATE)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long to run, 0 = forever (DPCS_SIMULATOR_DURATION)")
	fs.StringVar(&cfg.Scenario, "scenario", cfg.Scenario, "play a scenario, or \"list\" (DPCS_SIMULATOR_SCENARIO)")
	fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(stdout, "usage: %s [flags]\n", args[0])
		fs.PrintDefaults()
		fmt.Fprintln(stdout, "\nEnvironment (doc/configuration.md):")
		tw := tabwriter.NewWriter(stdout, 1, 0, 2, ' ', 0)
		envconfig.Usagef(service.EnvPrefix, &config{}, tw, envconfig.DefaultTableFormat)
		envconfig.Usagef(service.EnvPrefix, &service.TracingConfig{}, tw, "{{range .}}{{usage_key .}}\t{{usage_type .}}\t{{usage_default .}}\t{{usage_required .}}\t{{usage_description .}}\n{{end}}")
		tw.Flush()
	}
	return cfg, fs.Parse(args[1:])
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if buildinfo.Asked(args[1:]) {
		return buildinfo.Print(stdout, "dpcs simulator")
	}
	cfg, err := loadConfig(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if cfg.Scenario == "list" {
		for _, n := range simulate.ScenarioNames() {
			fmt.Fprintln(stdout, n)
		}
		return nil
	}
	if cfg.ChargingURL != "" {
		return runSMFs(ctx, cfg, stdout)
	}
	loc, err := policy.LoadZone(cfg.Timezone)
	if err != nil {
		return err
	}
	acks, err := simulate.ParseAcks(cfg.KafkaAcks)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tcfg := cfg.Tracing
	tcfg.ServiceName = "dpcs-simulator"
	tp, shutdownTracing, err := service.Tracing(ctx, tcfg)
	if err != nil {
		return err
	}
	defer func() { // after the client closed: its publish spans have ended
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(sctx); err != nil {
			log.Warn("flushing traces", "err", err)
		}
	}()

	brokers := cfg.KafkaBrokers
	if len(brokers) == 0 {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1),
			kfake.SeedTopics(cfg.KafkaPartitions, envelope.TopicUsageEvents, envelope.TopicPolicyUpdated))
		if err != nil {
			return fmt.Errorf("embedded kafka: %w", err)
		}
		defer cluster.Close()
		brokers = cluster.ListenAddrs()
		fmt.Fprintf(stdout, "embedded Kafka (kfake) at %s, topics %s and %s with %d partitions\n",
			brokers[0], envelope.TopicUsageEvents, envelope.TopicPolicyUpdated, cfg.KafkaPartitions)
	}
	kopts := cfg.KafkaOptions() // with TLS and SASL when configured
	if len(cfg.KafkaBrokers) == 0 {
		kopts = []kgo.Opt{kgo.SeedBrokers(brokers...)}
	}
	reg := service.NewRegistry()
	// Each usage event begins a trace (its publish span) when tracing is on.
	client, err := kgo.NewClient(slices.Concat(simulate.ProducerOptions(acks), kopts,
		service.KafkaHooks(reg, "simulator"), service.TracingKafkaOpts(tp))...)
	if err != nil {
		return err
	}
	defer client.Close()
	if cfg.AdminAddr != "off" {
		// Ready while Kafka answers.
		adm, err := service.StartAdmin(cfg.AdminAddr, service.AdminHandler(reg, client.Ping), log)
		if err != nil {
			return fmt.Errorf("DPCS_ADMIN_ADDR: %w", err)
		}
		defer adm.Close(context.Background())
		fmt.Fprintf(stdout, "admin on http://%s (/healthz, /readyz, /metrics)\n", adm.Addr)
	}
	pub, err := simulate.NewPublisher(client, simulate.WithPublisherLogger(log))
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
		defer cancel()
		if err := pub.Close(sctx); err != nil {
			fmt.Fprintln(stdout, "flush:", err)
		}
	}()

	if cfg.Scenario != "" {
		return playScenario(ctx, cfg, loc, pub, stdout)
	}
	return pump(ctx, cfg, loc, pub, reg, log, stdout)
}

func pump(ctx context.Context, cfg config, loc *time.Location, pub *simulate.Publisher, reg prometheus.Registerer, log *slog.Logger, stdout io.Writer) error {
	pop, err := simulate.NewPopulation(cfg.Seed, simulate.WithFamilies(cfg.Families))
	if err != nil {
		return err
	}
	gen, err := simulate.NewGenerator(pop, simulate.WithLocation(loc))
	if err != nil {
		return err
	}
	opts := []simulate.Option{simulate.WithRate(cfg.Rate), simulate.WithLogger(log)}
	if cfg.Diurnal {
		opts = append(opts, simulate.WithHourlyCurve(simulate.DefaultCurve(), loc))
	}
	sim, err := simulate.New(gen, pub, opts...)
	if err != nil {
		return err
	}
	if err := service.RegisterSimulator(reg, sim); err != nil {
		return err
	}

	var srv *http.Server
	if cfg.Addr != "" {
		ln, err := net.Listen("tcp", cfg.Addr)
		if err != nil {
			return fmt.Errorf("control API: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/", simulate.NewHandler(sim))
		mux.Handle("GET /version", buildinfo.Handler())
		srv = httpserver.New(mux, httpserver.Config{Logger: log})
		go srv.Serve(ln) // ends with Shutdown below
		fmt.Fprintf(stdout, "control API on http://%s (docs at /docs, OpenAPI at /openapi.json)\n", ln.Addr())
	}
	fmt.Fprintf(stdout, "simulating %d families / %d members at %g events/s\n", pop.NumFamilies(), pop.NumMembers(), cfg.Rate)
	if err := sim.Start(); err != nil {
		return err
	}

	every(ctx, cfg, func() { progress(stdout, sim.Stats()) })

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if srv != nil {
		srv.Shutdown(sctx)
	}
	err = sim.Stop(sctx)
	if ferr := pub.Flush(sctx); err == nil {
		err = ferr
	}
	st := sim.Stats()
	fmt.Fprintf(stdout, "stopped: sent=%d produced=%d errors=%d\n", st.Sent, st.Produced, st.Errors)
	return err
}

// runSMFs runs simulated SMFs against the charging interface at
// cfg.ChargingURL until ctx ends or cfg.Duration passes, printing their
// progress; at the end every session still open is released.
func runSMFs(ctx context.Context, cfg config, stdout io.Writer) error {
	subs := cfg.Subscribers
	if len(subs) == 0 {
		var err error
		if subs, err = service.DemoSubscribers(cfg.DemoFamilies); err != nil {
			return err
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sim, err := smfsim.New(smfsim.Config{URL: cfg.ChargingURL, Token: cfg.ChargingToken, Subscribers: subs,
		Sessions: cfg.SMFSessions, NotifyAddr: "127.0.0.1:0", Seed: cfg.Seed, Logger: log})
	if err != nil {
		return err
	}
	if err := sim.Start(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "simulating %d SMF sessions for %d subscribers against %s (notifications at %s)\n",
		cfg.SMFSessions, len(subs), cfg.ChargingURL, sim.NotifyURL())
	every(ctx, cfg, func() { smfProgress(stdout, "", sim.Stats()) })
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	err = sim.Close(sctx)
	smfProgress(stdout, "stopped: ", sim.Stats())
	return err
}

// every calls tick every cfg.Progress until ctx ends or cfg.Duration (when
// set) has passed.
func every(ctx context.Context, cfg config, tick func()) {
	var done <-chan time.Time
	if cfg.Duration > 0 {
		done = time.After(cfg.Duration)
	}
	t := time.NewTicker(cfg.Progress)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-t.C:
			tick()
		}
	}
}

func smfProgress(w io.Writer, prefix string, st smfsim.Stats) {
	fmt.Fprintf(w, "%sopen=%d creates=%d updates=%d releases=%d granted=%d used=%d refused=%d final=%d notifications=%d errors=%d\n",
		prefix, st.Open, st.Creates, st.Updates, st.Releases, st.GrantedBytes, st.UsedBytes, st.Refused, st.Final, st.Notifications, st.Errors)
}

func progress(w io.Writer, st simulate.Stats) {
	last := st.LastSecond()
	line := fmt.Sprintf("rate=%g/s achieved=%d/s total=%d errors=%d inflight=%d", st.EffectiveRate, last.Produced, st.Produced, st.Errors, st.InFlight)
	if st.BurstPending > 0 {
		line += fmt.Sprintf(" burst-pending=%d", st.BurstPending)
	}
	if st.LastError != "" {
		line += " last-error=" + fmt.Sprintf("%q", st.LastError)
	}
	fmt.Fprintln(w, line)
}

// playScenario publishes a scenario's records in order, waiting for each
// acknowledgement, and prints the scenario (with its expectations) as JSON
// first so a harness or a person can check the decisions.
func playScenario(ctx context.Context, cfg config, loc *time.Location, pub *simulate.Publisher, stdout io.Writer) error {
	s, err := simulate.ScenarioByName(cfg.Scenario, simulate.ScenarioConfig{Location: loc})
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return err
	}
	recs, err := s.Records()
	if err != nil {
		return err
	}
	for i, r := range recs {
		st := s.Steps[i]
		ch := make(chan error, 1)
		pub.SendRecord(ctx, r, func(err error) { ch <- err })
		if err := <-ch; err != nil {
			return fmt.Errorf("step %d: %w", i, err)
		}
		fmt.Fprintf(stdout, "step %d %s %s → %s/%d (%s): expect %s\n", i, st.Kind, st.Note, r.Topic, r.Partition, st.EventID, st.Expect.Decision)
		if cfg.StepDelay > 0 && i < len(recs)-1 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(cfg.StepDelay):
			}
		}
	}
	fmt.Fprintf(stdout, "scenario %s: published %d records for family %d\n", s.Name, len(recs), s.Setup.FamilyID)
	return nil
}
