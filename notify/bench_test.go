package notify

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/idempotency"
	"github.com/dabom/dpcs/internal/testenv"
)

// benchRecords returns n notification records shaped like the processor's
// output: mostly QUOTA_UPDATED (one per allowed usage event), with a
// CUSTOMER_BLOCKED every 20th and a THRESHOLD_ALERT every 20th, spread over
// 1,000 families.
func benchRecords(tb testing.TB, n int) []*kgo.Record {
	tb.Helper()
	out := make([]*kgo.Record, n)
	for i := range n {
		family := int64(i%1000 + 1)
		id := fmt.Sprintf("ntf_bench_%d", i)
		switch i % 20 {
		case 7:
			out[i] = blockedRec(tb, id, family, family*10)
		case 13:
			out[i] = thresholdRec(tb, id, family, 10+i%3*20, fmt.Sprintf("p%d", i))
		default:
			out[i] = quotaRec(tb, id, family, family*10)
		}
	}
	return out
}

// BenchmarkNotifier measures events/s through a whole notifier: kfake, an
// idempotency guard on the redis-server at DPCS_TEST_REDIS_ADDR (else on
// miniredis, whose Lua interpreter then bounds the rate near 2k claims/s), a file SQLite inbox (WAL) and a hub with
// one reading subscriber per family (so every QUOTA_UPDATED is read, none
// skipped as unwatched). The records are produced before the clock starts;
// the clock stops when the last one was handled.
func BenchmarkNotifier(b *testing.B) {
	for _, bc := range benchCases {
		b.Run(bc.name, func(b *testing.B) {
			c := newFake(b)
			inbox := newInbox(b, openSQLite(b))
			hub, err := NewHub(WithBuffer(1 << 10))
			if err != nil {
				b.Fatal(err)
			}
			defer hub.Close(context.Background())
			for f := range int64(1000) {
				sub, err := hub.Subscribe(f+1, Filter{Role: RoleAdmin})
				if err != nil {
					b.Fatal(err)
				}
				go func() { // ends when the hub closes the subscription
					for range sub.C {
					}
				}()
			}
			recs := benchRecords(b, b.N)
			p := testenv.Producer(b, c)
			for i := 0; i < len(recs); i += 5000 {
				produce(b, p, recs[i:min(i+5000, len(recs))]...)
			}
			var handled atomic.Int64
			done := make(chan struct{})
			opts := append([]Option{WithGuard(benchGuard(b)), WithHooks(Hooks{OnNotify: func(NotifyInfo) {
				if handled.Add(1) == int64(b.N) {
					close(done)
				}
			}})}, bc.opts...)
			n, err := New(inbox, hub, testenv.ConsumerOpts(c), opts...)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			errc := make(chan error, 1)
			go func() { errc <- n.Run(context.Background()) }()
			select {
			case <-done:
			case <-time.After(10 * time.Minute):
				b.Fatalf("handled %d of %d records in 10 minutes", handled.Load(), b.N)
			}
			el := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/el.Seconds(), "events/s")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := n.Close(ctx); err != nil {
				b.Error(err)
			}
			if err := <-errc; err != nil {
				b.Error(err)
			}
		})
	}
}

var benchCases = []struct {
	name string
	opts []Option
}{
	{"store-quota", []Option{WithStoreQuotaUpdated(true)}}, // every event stored, as before the option
	{"live-quota", nil}, // the default: QUOTA_UPDATED pushed, not stored
}

func benchGuard(tb testing.TB) *idempotency.Guard {
	tb.Helper()
	addr := os.Getenv("DPCS_TEST_REDIS_ADDR")
	if addr == "" {
		return newGuard(tb)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() { rdb.Close() })
	st, err := idempotency.NewRedisStore(rdb, idempotency.WithKeyPrefix(fmt.Sprintf("bench:%d:", time.Now().UnixNano())))
	if err != nil {
		tb.Fatal(err)
	}
	g, err := idempotency.New(st)
	if err != nil {
		tb.Fatal(err)
	}
	return g
}
