package simulate

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv"
)

const testPartitions = 10

func newCluster(tb testing.TB, topics ...string) *kfake.Cluster {
	tb.Helper()
	c := testenv.KafkaOf(tb, kfake.SeedTopics(testPartitions, topics...))
	return c
}

func newProducer(tb testing.TB, c *kfake.Cluster, extra ...kgo.Opt) *kgo.Client {
	tb.Helper()
	cl, err := kgo.NewClient(append(append(ProducerOptions(kgo.LeaderAck()), kgo.SeedBrokers(c.ListenAddrs()...)), extra...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

// javaPartition is Kafka's Java default partitioner for a keyed record:
// toPositive(murmur2(key)) % n.
func javaPartition(key []byte, n int) int {
	const m, r = 0x5bd1e995, 24
	h := uint32(0x9747b28c) ^ uint32(len(key))
	i := 0
	for ; len(key)-i >= 4; i += 4 {
		k := uint32(key[i]) | uint32(key[i+1])<<8 | uint32(key[i+2])<<16 | uint32(key[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(key) - i {
	case 3:
		h ^= uint32(key[i+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(key[i+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(key[i])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int(int32(h)&0x7fffffff) % n
}

// Generated events reach usage-events keyed by familyId, on the partition
// kgo's default partitioner and Kafka's Java client pick, and decode back.
func TestPublisherKeysAndPartitions(t *testing.T) {
	c := newCluster(t, envelope.TopicUsageEvents)
	pub, err := NewPublisher(newProducer(t, c))
	if err != nil {
		t.Fatal(err)
	}
	g := mustGenerator(t, mustPopulation(t, 9, WithFamilies(5000)), WithSeededIDs())
	const n = 2000
	ctx := context.Background()
	sent := map[string]Event{}
	for range n {
		ev := g.Next()
		sent[ev.EventID] = ev
		pub.Send(ctx, ev, func(err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}
	if err := pub.Publish(ctx, g.Next()); err != nil {
		t.Fatal(err)
	}
	if err := pub.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := pub.Stats(); st.Produced != n+1 || st.Errors != 0 || st.InFlight != 0 {
		t.Fatalf("stats %+v", st)
	}
	kgoPart := kgo.StickyKeyPartitioner(nil).ForTopic(envelope.TopicUsageEvents)
	used := map[int32]bool{}
	for _, r := range testenv.Read(t, c, envelope.TopicUsageEvents, n+1) {
		ev, err := envelope.DecodeAs[envelope.UsagePayload](r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if want, ok := sent[ev.EventID]; ok && want.Payload.CustomerID != ev.Payload.CustomerID {
			t.Fatalf("event %s changed", ev.EventID)
		}
		if string(r.Key) != strconv.FormatInt(ev.Payload.FamilyID, 10) {
			t.Fatalf("key %q for family %d", r.Key, ev.Payload.FamilyID)
		}
		if want := kgoPart.Partition(r, testPartitions); int(r.Partition) != want {
			t.Fatalf("family %s on partition %d, kgo picks %d", r.Key, r.Partition, want)
		}
		if want := javaPartition(r.Key, testPartitions); int(r.Partition) != want {
			t.Fatalf("family %s on partition %d, Java picks %d", r.Key, r.Partition, want)
		}
		used[r.Partition] = true
	}
	if len(used) != testPartitions {
		t.Errorf("only partitions %v used", used)
	}
	// After Close, sends fail with ErrClosed.
	if err := pub.Publish(ctx, g.Next()); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

func TestJavaPartitionKnownValues(t *testing.T) {
	// murmur2 values from Kafka's own test suite (UtilsTest.testMurmur2).
	for key, want := range map[string]int32{"21": -973932308, "foobar": -790332482, "a-little-bit-long-string": -985981536,
		"a-little-bit-longer-string": -1486304829, "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, "abc": 479470107} {
		if got := javaPartition([]byte(key), 1<<31-1); int32(got) != want&0x7fffffff%(1<<31-1) {
			t.Errorf("murmur2(%q) → %d, want %d", key, got, want&0x7fffffff)
		}
	}
}

// Broker failures are counted, reported to hooks and to the simulator.
func TestPublisherErrors(t *testing.T) {
	c := newCluster(t, envelope.TopicUsageEvents)
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		resp.Version = pr.Version
		for _, tp := range pr.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = tp.Topic, tp.TopicID
			for _, p := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.InvalidRecord.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	var (
		mu     sync.Mutex
		hooked []*PublishError
	)
	pub, err := NewPublisher(newProducer(t, c), WithMaxInFlight(4), WithTopic(envelope.TopicUsageEvents),
		WithPublisherHooks(PublisherHooks{OnError: func(e *PublishError) { mu.Lock(); hooked = append(hooked, e); mu.Unlock() }}),
		WithPublisherLogger(discardLogger()))
	if err != nil {
		t.Fatal(err)
	}
	sim := mustSimulator(t, mustGenerator(t, mustPopulation(t, 1, WithFamilies(100))), pub, WithRate(200))
	sim.Start()
	for sim.Stats().Errors < 5 {
		time.Sleep(5 * time.Millisecond)
	}
	stop(t, sim)
	pub.Close(context.Background())
	mu.Lock()
	st, pst := sim.Stats(), pub.Stats()
	if st.Errors != st.Sent || pst.Errors != st.Errors || uint64(len(hooked)) != pst.Errors || st.Produced != 0 {
		t.Errorf("simulator %+v, publisher %+v, %d hooked", st, pst, len(hooked))
	}
	if !errors.Is(hooked[0], kerr.InvalidRecord) || hooked[0].Topic != envelope.TopicUsageEvents || hooked[0].Key == "" || pst.LastError == "" {
		t.Errorf("error %v", hooked[0])
	}
	mu.Unlock()
	// An event that does not encode fails before Kafka, with the field named.
	bad := envelope.New("", time.Now(), envelope.UsagePayload{FamilyID: 1})
	if err := pub.Publish(context.Background(), bad); err == nil {
		t.Error("invalid event published")
	}
}

func TestPublisherBackPressureHonoursContext(t *testing.T) {
	c := newCluster(t, envelope.TopicUsageEvents)
	release := make(chan struct{})
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		<-release // hold every produce request
		return nil, nil, false
	})
	pub, _ := NewPublisher(newProducer(t, c), WithMaxInFlight(1))
	ev := envelope.New("evt_1", time.Now(), envelope.UsagePayload{FamilyID: 1, CustomerID: 10, AppID: "a"})
	first := make(chan error, 1)
	pub.Send(context.Background(), ev, func(err error) { first <- err })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := pub.Publish(ctx, ev); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("second send with the bound reached: %v", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Errorf("first send: %v", err)
	}
	if err := pub.Flush(context.Background()); err != nil {
		t.Error(err)
	}
}

func TestProducerOptionsAndAcks(t *testing.T) {
	for s, want := range map[string]kgo.Acks{"all": kgo.AllISRAcks(), "-1": kgo.AllISRAcks(), "1": kgo.LeaderAck(),
		"Leader": kgo.LeaderAck(), "0": kgo.NoAck(), "none": kgo.NoAck()} {
		if got, err := ParseAcks(s); err != nil || got != want {
			t.Errorf("ParseAcks(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseAcks("2"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseAcks(2): %v", err)
	}
	if n, m := len(ProducerOptions(kgo.AllISRAcks())), len(ProducerOptions(kgo.LeaderAck())); m != n+1 {
		t.Errorf("leader acks should add DisableIdempotentWrite: %d vs %d options", m, n)
	}
	// All-ISR acks work against kfake too (idempotent writes).
	c := newCluster(t, envelope.TopicUsageEvents)
	cl, err := kgo.NewClient(append(ProducerOptions(kgo.AllISRAcks()), kgo.SeedBrokers(c.ListenAddrs()...))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pub, _ := NewPublisher(cl)
	if err := pub.Publish(context.Background(), envelope.New("evt_1", time.Now(), envelope.UsagePayload{FamilyID: 1, CustomerID: 10, AppID: "a"})); err != nil {
		t.Error(err)
	}
	for i, o := range []PublisherOption{WithTopic(""), WithMaxInFlight(0), WithPublisherLogger(nil)} {
		if _, err := NewPublisher(cl, o); !errors.Is(err, ErrInvalid) {
			t.Errorf("option %d: %v", i, err)
		}
	}
	if _, err := NewPublisher(nil); !errors.Is(err, ErrInvalid) {
		t.Error("nil client accepted")
	}
	if _, err := NewPublisher(cl, nil); err != nil {
		t.Error(err)
	}
}
