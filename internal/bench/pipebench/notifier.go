package pipebench

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/idempotency"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/simulate"
)

// notifierBench runs the notifier inside the processor deployables (as the
// processor runs it by default) and measures it: notifications handled per
// second, and the latency of notifications (all kinds, and the alerts
// CUSTOMER_BLOCKED and THRESHOLD_ALERT apart) to a live subscriber of the hub that feeds the SSE streams, from the
// notification's time (the usage event's timestamp, stamped when the
// simulator produced it; so an upper bound of decision → SSE).
type notifierBench struct {
	pops     []*simulate.Population
	families int
	hub      *notify.Hub    // the current deployables'
	wg       sync.WaitGroup // the subscribers' readers
	handled  atomic.Int64

	mu     sync.Mutex
	on     bool
	alerts []int64 // CUSTOMER_BLOCKED and THRESHOLD_ALERT
	all    []int64 // every kind
}

// newNotifierBench measures the notifier with subscribers to the first
// families families of every population.
func newNotifierBench(pops []*simulate.Population, families int) *notifierBench {
	return &notifierBench{pops: pops, families: families}
}

// attach returns a new hub for a new set of processor deployables (closing
// the deployables closes their hub), with the subscribers on it.
func (b *notifierBench) attach() (*notify.Hub, error) {
	hub, err := notify.NewHub(notify.WithBuffer(4096))
	if err != nil {
		return nil, err
	}
	for _, p := range b.pops {
		first, last := p.FamilyIDs()
		for f := first; f <= last && f < first+int64(b.families); f++ {
			s, err := hub.Subscribe(f, notify.Filter{Role: notify.RoleAdmin})
			if err != nil {
				return nil, errors.Join(err, hub.Close(context.Background()))
			}
			b.wg.Add(1)
			go b.read(s)
		}
	}
	b.hub = hub
	return hub, nil
}

func (b *notifierBench) read(s *notify.Subscription) {
	defer b.wg.Done()
	for m := range s.C { // ends when the hub closes
		lat := int64(time.Since(m.Data.CreatedAt))
		b.mu.Lock()
		if b.on {
			b.all = append(b.all, lat)
			if m.Data.Kind != envelope.SubQuotaUpdated {
				b.alerts = append(b.alerts, lat)
			}
		}
		b.mu.Unlock()
	}
}

// options are the notifier's options in every processor deployable: a
// guard on the run's Redis, as service.Config.NotifierOptions builds it,
// and the count of notifications handled.
func (b *notifierBench) options(cfg Config) ([]notify.Option, error) {
	st, err := idempotency.NewRedisStore(cfg.Redis, idempotency.WithKeyPrefix("pipebench:idem:"))
	if err != nil {
		return nil, err
	}
	g, err := idempotency.New(st, idempotency.WithLease(10*time.Second))
	if err != nil {
		return nil, err
	}
	return []notify.Option{notify.WithGuard(g), notify.WithLocation(cfg.Zone),
		notify.WithStoreQuotaUpdated(cfg.StoreQuotaUpdated),
		notify.WithHooks(notify.Hooks{OnNotify: func(notify.NotifyInfo) { b.handled.Add(1) }})}, nil
}

func (b *notifierBench) start() {
	b.mu.Lock()
	b.on, b.alerts, b.all = true, b.alerts[:0], b.all[:0]
	b.mu.Unlock()
}

// stop ends a window and sets the step's latencies.
func (b *notifierBench) stop(st *Step) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.on = false
	st.AlertP50, st.AlertP99, _, _ = percentiles(b.alerts)
	st.LiveP50, st.LiveP99, _, _ = percentiles(b.all)
	st.Alerts, st.Live = len(b.alerts), len(b.all)
}

// close waits for the readers; the deployables closed their hubs.
func (b *notifierBench) close() {
	if b.hub != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.hub.Close(ctx) // already closed by the deployables unless one failed to start
	}
	b.wg.Wait()
}
