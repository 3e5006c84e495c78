package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/service"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/simulate"
	"github.com/dabom/dpcs/writebehind"
)

// closeTimeout bounds closing a system or a deployable, which drains what
// it holds; generous, because the machine may be shared and -race is slow.
// Waits for work have no such bound: they wait on progress (Wait).
const closeTimeout = DefaultStall

// stack is one whole DPCS (service.StartSystem) on a backend, as its users
// see it: the HTTP API, Kafka to publish events into and to watch, and SQL
// and Redis behind it for the invariants.
type stack struct {
	t     *testing.T
	sys   *service.System
	zone  *time.Location
	api   *apiClient
	ops   *apiClient // the admin address: /metrics, which the API address does not serve
	admin string     // the seeded back-office admin's access token
	pub   *simulate.Publisher
	watch *watcher
	// base is the first of 100 family ids of this stack's stories.
	base int64
	// replays orders the stories, which run in parallel, around the
	// processor's replay counter: a step that redelivers an event holds it
	// exclusively, so the counter's change is that step's; other steps share it.
	replays sync.RWMutex
}

func startStack(t *testing.T, b backend) *stack {
	t.Helper()
	ctx := context.Background()
	vars := map[string]string{
		"DPCS_DATA_DIR": t.TempDir(), "DPCS_EMBEDDED_KAFKA_PORT": "0", "DPCS_HTTP_ADDR": "127.0.0.1:0",
		"DPCS_SIMULATOR_ADDR": "127.0.0.1:0", "DPCS_DEMO_FAMILIES": "0", "DPCS_SIMULATOR_RATE": "0",
		"DPCS_ADMIN_ADDR": "127.0.0.1:0",
		// Night-block events are up to 24 h old; the processor accepts events
		// up to the dedupe window minus an hour.
		"DPCS_DEDUPE_WINDOW": "48h",
		// The stories log in as the seeded admin, on MariaDB too.
		"DPCS_DEMO": "1",
		// The checks hold the inbox to one QUOTA_UPDATED per allowed event
		// (exactly once across replays and faults), so QUOTA_UPDATED is
		// stored, not only pushed live (the default; notify's tests cover it).
		"DPCS_NOTIFIER_STORE_QUOTA_UPDATED": "true",
	}
	for k, v := range b.env(t) {
		vars[k] = v
	}
	cfg, err := service.LoadSystemConfig(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	cfg.Zone = storyZone(time.Now())
	start := time.Now()
	sys, err := service.StartSystem(ctx, cfg, logger())
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{t: t, sys: sys, zone: cfg.Zone, api: newAPIClient(sys.HTTPAddr), ops: newAPIClient(sys.AdminAddr), base: familyBase()}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(ctx, closeTimeout)
		defer cancel()
		start := time.Now()
		if err := sys.Close(cctx); err != nil {
			t.Errorf("close the system: %v", err)
		}
		t.Logf("%s: system closed in %v", b.name, time.Since(start).Round(time.Millisecond))
	})
	// Events go in the way the simulator sends them: its publisher with the
	// seed's producer settings, keyed by family.
	prod, err := kgo.NewClient(append(simulate.ProducerOptions(kgo.AllISRAcks()), kgo.SeedBrokers(sys.Brokers...))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	if s.pub, err = simulate.NewPublisher(prod); err != nil {
		t.Fatal(err)
	}
	s.watch = newWatcher(t, sys.Brokers)
	if s.admin, err = s.api.login(ctx, service.DemoAdminID, service.DemoPassword); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: system up in %v (zone %s, families from %d)", b.name, time.Since(start).Round(time.Millisecond), s.zone, s.base)
	return s
}

// settle waits until the processor judged everything produced so far and
// the notifier stored everything it emitted (and, with persisted, the
// write-behind wrote every decision to SQL), and the watcher read it all.
func (s *stack) settle(ctx context.Context, persisted bool) error {
	groups := []string{judge.ProcessorGroup, notify.DefaultGroup}
	if persisted {
		groups = append(groups, writebehind.DefaultGroup)
	}
	return s.watch.caughtUp(ctx, groups...)
}

// duplicates is the processor's count of replays recognised, from /metrics.
func (s *stack) duplicates(ctx context.Context) (int64, error) {
	return s.ops.metric(ctx, "dpcs_processor_duplicates_total")
}

// publish sends events through the simulator's publisher in one burst (a
// fresh Kafka record for each) and waits for the acknowledgements.
func (s *stack) publish(ctx context.Context, evs ...simulate.Event) error {
	errs := make(chan error, len(evs))
	for _, ev := range evs {
		s.pub.Send(ctx, ev, func(err error) { errs <- err })
	}
	for range evs {
		if err := <-errs; err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	return nil
}
