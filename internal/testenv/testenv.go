// Package testenv is the one place tests set up what they run against: an
// embedded Kafka (kfake) with DPCS's topics, an embedded Redis (miniredis),
// a migrated-or-not SQLite database in the test's temporary directory, free
// loopback addresses and plain GETs of admin endpoints. Every helper takes
// a testing.TB, fails the test on error and registers its own cleanup.
//
// Only tests import it: it links kfake, miniredis and the SQLite driver,
// which no SDK package and no door package may link (internal/sdkdeps).
package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	_ "modernc.org/sqlite" // the driver SQLite opens

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
)

// Kafka starts an embedded single-broker Kafka on a free loopback port
// with every DPCS topic (envelope.Topics, envelope.DefaultPartitions
// partitions each) and closes it when the test ends.
func Kafka(tb testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	tb.Helper()
	return KafkaOf(tb, append([]kfake.Opt{kfake.SeedTopics(envelope.DefaultPartitions, envelope.Topics()...)}, opts...)...)
}

// KafkaOf starts an embedded single-broker Kafka on a free loopback port
// with only what opts seed (kfake.SeedTopics: the SDK's Kafka pieces test on
// topics of their own) and closes it when the test ends.
func KafkaOf(tb testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	tb.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// ConsumerOpts are KafkaOpts for a consumer that reads c's topics from
// their start and is not kept waiting for fetches (100 ms at most).
func ConsumerOpts(c *kfake.Cluster) []kgo.Opt {
	return append(KafkaOpts(c), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
}

// Producer is a client on c that produces at once (no linger), with opts
// added, closed when the test ends.
func Producer(tb testing.TB, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	tb.Helper()
	return Client(tb, c, append([]kgo.Opt{kgo.ProducerLinger(0)}, opts...)...)
}

// Committed returns group's committed offsets of topic on c, per partition
// (none when the group committed nothing).
func Committed(tb testing.TB, c *kfake.Cluster, group, topic string) map[int32]int64 {
	tb.Helper()
	cl := Client(tb, c)
	offs, err := kadm.NewClient(cl).FetchOffsets(context.Background(), group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[int32]int64{}
	}
	if err != nil {
		tb.Fatal(err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

// SkipShort skips tb under -short (`make test`, the quick run): what tb
// runs is long — the whole system for minutes, the acceptance stories —
// and `make check`, `make integration` and CI run it in full. what names it.
func SkipShort(tb testing.TB, what string) {
	tb.Helper()
	if testing.Short() {
		tb.Skipf("-short: %s (make check runs it)", what)
	}
}

// Eventually waits until cond holds, checking every 5 ms, and fails the
// test when it does not within d: a bound on progress, never a guess at
// how long something takes (set it generously; doc/testing.md).
func Eventually(tb testing.TB, what string, d time.Duration, cond func() bool) {
	tb.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// KafkaOpts are a client's options for c: its brokers and a 100 ms group
// heartbeat, so rebalances in tests take a tenth of the default. With
// DPCS_TEST_KAFKA_DEBUG set the client logs to stderr.
func KafkaOpts(c *kfake.Cluster) []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.HeartbeatInterval(100 * time.Millisecond)}
	if os.Getenv("DPCS_TEST_KAFKA_DEBUG") != "" {
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)))
	}
	return opts
}

// Client is a Kafka client on c with opts added, closed when the test ends.
func Client(tb testing.TB, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	tb.Helper()
	cl, err := kgo.NewClient(append(KafkaOpts(c), opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

// Collect reads topic on c from its start until n records arrived (20 s at
// most) and fails the test if more or fewer arrive.
func Collect(tb testing.TB, c *kfake.Cluster, topic string, n int) []*kgo.Record {
	tb.Helper()
	out := Read(tb, c, topic, n)
	if len(out) > n {
		tb.Fatalf("%s: got %d records, want %d", topic, len(out), n)
	}
	return out
}

// Read reads topic on c from its start until at least n records arrived
// (20 s at most, else it fails the test) and returns every record the
// fetches brought.
func Read(tb testing.TB, c *kfake.Cluster, topic string, n int) []*kgo.Record {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := contextWithTimeout(tb, 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		f := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			tb.Fatalf("%s: got %d records, want %d", topic, len(out), n)
		}
		out = append(out, f.Records()...)
	}
	return out
}

// Redis starts an embedded Redis and returns it with a client on it; both
// close when the test ends.
func Redis(tb testing.TB) (*miniredis.Miniredis, redis.UniversalClient) {
	tb.Helper()
	mr := miniredis.RunT(tb)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	tb.Cleanup(func() { rdb.Close() })
	return mr, rdb
}

// SQLite opens a new SQLite database in the test's temporary directory, in
// WAL mode with a 5 s busy timeout and one connection (as the embedded
// store opens it), closed when the test ends. Nothing is migrated.
func SQLite(tb testing.TB) *sql.DB {
	tb.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(tb.TempDir(), "dpcs.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		tb.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	tb.Cleanup(func() { db.Close() })
	return db
}

// SQLitePool opens a new SQLite database in the test's temporary directory
// in WAL mode with a 10 s busy timeout and database/sql's default pool:
// for tests of concurrent writers (a store that takes several connections).
func SQLitePool(tb testing.TB) *sql.DB {
	tb.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(tb.TempDir(), "dpcs.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// FreeAddr is a loopback address with a port free when it was asked for.
// Prefer listening on 127.0.0.1:0 and reading the address back; this is for
// programs that take an address to listen on.
//
// The port is drawn from 10000–19999, below Linux's ephemeral range
// (32768–60999 by default), not from 127.0.0.1:0: between its return and
// the program's listen, a port of the ephemeral range can be taken by any
// connection another test package opens beside it, while one below is only
// ever taken by an explicit listen. None of the servers `make integration`
// starts uses one (scripts/servers.sh).
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	for range 100 {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", freeAddrLow+rand.IntN(freeAddrSpan)))
		if err != nil {
			continue // in use
		}
		addr := l.Addr().String()
		l.Close()
		return addr
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// FreeAddr's ports: 10000 up to, not including, 20000.
const freeAddrLow, freeAddrSpan = 10000, 10000

// Get GETs url, wants 200 and returns the body.
func Get(tb testing.TB, url string) string {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

// Header is the value of a record's header key ("" when absent).
func Header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// RefuseCommits makes c's broker refuse every offset commit (each partition
// answered OFFSET_METADATA_TOO_LARGE, an error the client does not retry by
// itself) for which refuse returns true; other commits go through.
func RefuseCommits(c *kfake.Cluster, refuse func() bool) {
	c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !refuse() {
			return nil, nil, false
		}
		r := req.(*kmsg.OffsetCommitRequest)
		resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.OffsetMetadataTooLarge.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// RaceSlowdown is how much slower -race makes the code a latency check
// measures; the race detector's documentation gives 2–20× for CPU and memory,
// and the all-in-one's request paths measure about 3–4× on this machine.
const RaceSlowdown = 3

// LatencyBound is goal when the binary is built without -race and
// goal × RaceSlowdown with it, times Busy's factor when the machine runs
// more than it has cores for; t is told which one applies.
func LatencyBound(t testing.TB, goal time.Duration) time.Duration {
	t.Helper()
	bound := goal
	if Race {
		t.Logf("built with -race: checking against %v × %d (the goal itself is %v)", goal, RaceSlowdown, goal)
		bound *= RaceSlowdown
	}
	if f := Busy(); f > 1 {
		t.Logf("the machine is busy (load average %.1f on %d cores): the bound is %.1f× %v", f*float64(runtime.NumCPU()), runtime.NumCPU(), f, bound)
		bound = time.Duration(float64(bound) * f)
	}
	return bound
}

// Busy is the last minute's load average per core when above 1 (a
// latency measured then waited for a core that long), else 1; 1 where
// /proc/loadavg cannot be read.
func Busy() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 1
	}
	load, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 1
	}
	return max(1, load/float64(runtime.NumCPU()))
}

// RedisSnapshot is every key of a Redis, as an RDB snapshot would hold it:
// strings and hashes, all the quota engine writes (miniredis's DUMP knows
// strings only). RollBack writes it back, for a Redis that came back from an
// older snapshot or failed over to a replica that missed the last writes.
type RedisSnapshot map[string]any

// Snapshot copies every key of rdb; a key of another type fails tb.
func Snapshot(tb testing.TB, rdb redis.UniversalClient) RedisSnapshot {
	tb.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		tb.Fatal(err)
	}
	snap := RedisSnapshot{}
	for _, k := range keys {
		switch typ := rdb.Type(ctx, k).Val(); typ {
		case "string":
			snap[k] = rdb.Get(ctx, k).Val()
		case "hash":
			snap[k] = rdb.HGetAll(ctx, k).Val()
		default:
			tb.Fatalf("snapshot: key %s of type %s", k, typ)
		}
	}
	return snap
}

// RollBack replaces everything in rdb with snap.
func (snap RedisSnapshot) RollBack(tb testing.TB, rdb redis.UniversalClient) {
	tb.Helper()
	ctx := context.Background()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		tb.Fatal(err)
	}
	for k, v := range snap {
		var err error
		switch v := v.(type) {
		case string:
			err = rdb.Set(ctx, k, v, 0).Err()
		case map[string]string:
			err = rdb.HSet(ctx, k, v).Err()
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// AwayFromMidnight returns once midnight in the service zone
// (policy.DefaultZone) is more than five minutes away: at once, or after
// waiting for the coming midnight to pass. A test on the real clock whose
// counts hold for one day (a day's or a month's counters, the event stamped
// now and the decision a moment later) and that takes well under five
// minutes calls it first, so that it does not see two days.
func AwayFromMidnight(tb testing.TB) {
	tb.Helper()
	AwayFromMidnightFor(tb, 5*time.Minute)
}

// AwayFromMidnightFor is AwayFromMidnight for a test that may take up to
// margin (a browser story on a busy machine).
func AwayFromMidnightFor(tb testing.TB, margin time.Duration) {
	tb.Helper()
	zone, err := policy.LoadZone(policy.DefaultZone)
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now().In(zone)
	next := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, zone)
	if d := next.Sub(now); d < margin {
		tb.Logf("waiting %s for midnight in %s to pass", d.Round(time.Millisecond), zone)
		time.Sleep(d + time.Second)
	}
}

// RefuseProduces makes c answer every produce with the error code (a kerr
// code: InvalidRecord, which clients do not retry, or NotEnoughReplicas,
// which they do) while down reports true, nil meaning always: Kafka
// refusing records while it still answers everything else.
func RefuseProduces(c *kfake.Cluster, code int16, down func() bool) {
	RefuseProducesIf(c, code, func(*kmsg.ProduceRequest) bool { return down == nil || down() })
}

// RefuseProducesIf is RefuseProduces for the produce requests refuse
// reports true for (nil meaning all): e.g. a consumer's outputs, while
// the test's own records are taken.
func RefuseProducesIf(c *kfake.Cluster, code int16, refuse func(*kmsg.ProduceRequest) bool) {
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		if refuse != nil && !refuse(pr) {
			return nil, nil, false
		}
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		resp.Version = pr.Version
		for _, tp := range pr.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = tp.Topic, tp.TopicID
			for _, p := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
}
