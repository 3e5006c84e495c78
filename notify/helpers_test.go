package notify

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	_ "modernc.org/sqlite"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/idempotency"
	"github.com/dabom/dpcs/internal/testenv"
)

var t0 = time.Date(2026, 2, 6, 14, 30, 0, 0, time.UTC)

const dlt = "notification-events.DLT"

func openSQLite(tb testing.TB) *sql.DB {
	tb.Helper()
	return testenv.SQLitePool(tb)
}

func newInbox(tb testing.TB, db *sql.DB) *SQLInbox {
	tb.Helper()
	in, err := NewSQLInbox(db)
	if err != nil {
		tb.Fatal(err)
	}
	if err := in.Migrate(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return in
}

func newGuard(tb testing.TB) *idempotency.Guard {
	tb.Helper()
	m := miniredis.RunT(tb)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	tb.Cleanup(func() { rdb.Close() })
	st, err := idempotency.NewRedisStore(rdb)
	if err != nil {
		tb.Fatal(err)
	}
	g, err := idempotency.New(st)
	if err != nil {
		tb.Fatal(err)
	}
	return g
}

func newFake(tb testing.TB) *kfake.Cluster {
	tb.Helper()
	return testenv.KafkaOf(tb, kfake.SeedTopics(10, envelope.TopicNotificationEvents, envelope.TopicUsagePersist, dlt))
}

func produce(tb testing.TB, cl *kgo.Client, recs ...*kgo.Record) {
	tb.Helper()
	// Copies: a produced record is owned by the client until acknowledged.
	cp := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		cp[i] = &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}
	}
	if err := cl.ProduceSync(context.Background(), cp...).FirstErr(); err != nil {
		tb.Fatal(err)
	}
}

func record[P envelope.Notification](tb testing.TB, id string, at time.Time, p P) *kgo.Record {
	tb.Helper()
	r, err := kafkarecord.New(envelope.TopicNotificationEvents, envelope.New(id, at, p))
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func thresholdRec(tb testing.TB, id string, family int64, pct int, period string) *kgo.Record {
	return record(tb, id, t0, envelope.ThresholdAlert{FamilyID: family, ThresholdPercent: pct,
		Message: fmt.Sprintf("가족 데이터가 %d%% 미만입니다! 데이터를 충전해주세요.", pct), Period: period})
}

func blockedRec(tb testing.TB, id string, family, member int64) *kgo.Record {
	return record(tb, id, t0, envelope.CustomerBlocked{FamilyID: family, CustomerID: member,
		BlockReason: "POOL", BlockedAt: t0, Decision: "BLOCKED_FAMILY_QUOTA"})
}

func quotaRec(tb testing.TB, id string, family, member int64) *kgo.Record {
	return record(tb, id, t0, envelope.QuotaUpdated{FamilyID: family, CustomerID: member,
		FamilyRemainingBytes: 2 << 20, FamilyUsedPercent: 80, CustomerUsedBytesToday: 5 << 20})
}

// fakeSleep records the waits asked for and returns at once.
type fakeSleep struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (f *fakeSleep) sleep(ctx context.Context, d time.Duration) error {
	f.mu.Lock()
	f.waits = append(f.waits, d)
	f.mu.Unlock()
	return ctx.Err()
}

func (f *fakeSleep) got() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.waits...)
}

// drainSub returns what a subscription has buffered.
func drainSub(s *Subscription) []Message {
	var out []Message
	for {
		select {
		case m, ok := <-s.C:
			if !ok {
				return out
			}
			out = append(out, m)
		default:
			return out
		}
	}
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// rows lists every inbox row of family as an owner sees them.
func rows(tb testing.TB, in *SQLInbox, family int64) []Notification {
	tb.Helper()
	got, err := in.List(context.Background(), Query{FamilyID: family, Viewer: Filter{Role: RoleAdmin}, Limit: 1000})
	if err != nil {
		tb.Fatal(err)
	}
	return got
}
