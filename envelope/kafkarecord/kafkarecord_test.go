package kafkarecord_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/internal/testenv"
)

func TestNew(t *testing.T) {
	for _, path := range goldenFiles(t) {
		ev, err := envelope.Decode(readFile(t, path))
		if err != nil {
			t.Fatal(err)
		}
		r, err := kafkarecord.New("some-topic", ev)
		if err != nil {
			t.Fatal(err)
		}
		value, _ := envelope.Encode(ev)
		want := &kgo.Record{
			Topic:   "some-topic",
			Key:     []byte("100"),
			Value:   value,
			Headers: []kgo.RecordHeader{{Key: "eventType", Value: []byte(ev.EventType)}},
		}
		if ev.SubType != "" {
			want.Headers = append(want.Headers, kgo.RecordHeader{Key: "subType", Value: []byte(ev.SubType)})
		}
		if p, ok := ev.Payload.(envelope.UsagePersistPayload); ok && len(p.Notifies) > 0 {
			want.Headers = append(want.Headers, kgo.RecordHeader{Key: "notifies", Value: []byte("CUSTOMER_BLOCKED")})
		}
		if diff := cmp.Diff(want, r, cmpopts.IgnoreUnexported(kgo.Record{}, kgo.RecordAttrs{})); diff != "" {
			t.Errorf("%s (-want +got):\n%s", path, diff)
		}
		back, err := kafkarecord.Decode(r)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(ev, back); diff != "" {
			t.Errorf("%s: Decode (-want +got):\n%s", path, diff)
		}
	}

	// Typed envelopes and large/negative-looking keys.
	e := envelope.New("evt_1", at("2026-02-06T14:30:00Z"), envelope.UsagePayload{FamilyID: 9223372036854775807, CustomerID: 1, AppID: "a"})
	r, err := kafkarecord.New(envelope.TopicUsageEvents, e)
	if err != nil || string(r.Key) != "9223372036854775807" {
		t.Fatalf("New = %v, %v", r, err)
	}

	e.Payload.FamilyID = 0
	if r, err := kafkarecord.New(envelope.TopicUsageEvents, e); r != nil || err == nil {
		t.Errorf("New of an invalid envelope = %v, %v", r, err)
	}
}

func TestDecode(t *testing.T) {
	if _, err := kafkarecord.Decode(nil); !errors.Is(err, envelope.ErrMalformed) {
		t.Errorf("Decode(nil) = %v", err)
	}
	if _, err := kafkarecord.Decode(&kgo.Record{Key: []byte("100")}); !errors.Is(err, envelope.ErrMalformed) {
		t.Errorf("Decode(tombstone) = %v", err)
	}
	// Headers and key are advisory: the value wins.
	r := &kgo.Record{
		Key:     []byte("not-a-family"),
		Value:   readFile(t, "../testdata/data_usage.json"),
		Headers: []kgo.RecordHeader{{Key: "eventType", Value: []byte("NOTIFICATION")}, {Key: "subType", Value: []byte("QUOTA_UPDATED")}},
	}
	ev, err := kafkarecord.Decode(r)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(dataUsageEvent, ev); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// javaMurmur2 is Kafka's org.apache.kafka.common.utils.Utils.murmur2,
// transcribed with Java's int arithmetic, to check kgo against.
func javaMurmur2(data []byte) int32 {
	const seed, m, r = int32(-1756908916), int32(0x5bd1e995), 24
	length := int32(len(data))
	h := seed ^ length
	length4 := length / 4
	for i := range length4 {
		i4 := i * 4
		k := int32(data[i4+0]) + int32(data[i4+1])<<8 + int32(data[i4+2])<<16 + int32(data[i4+3])<<24
		k *= m
		k ^= int32(uint32(k) >> r)
		k *= m
		h *= m
		h ^= k
	}
	switch length % 4 {
	case 3:
		h ^= int32(data[(length & ^3)+2]) << 16
		fallthrough
	case 2:
		h ^= int32(data[(length & ^3)+1]) << 8
		fallthrough
	case 1:
		h ^= int32(data[length & ^3])
		h *= m
	}
	h ^= int32(uint32(h) >> 13)
	h *= m
	h ^= int32(uint32(h) >> 15)
	return h
}

// javaPartition is Kafka's default partition for a keyed record.
func javaPartition(key []byte, n int) int { return int(javaMurmur2(key)&0x7fffffff) % n }

func TestPartitioningMatchesJava(t *testing.T) {
	// Kafka's own test vectors (UtilsTest.testMurmur2).
	vectors := map[string]int32{
		"21": -973932308, "foobar": -790332482, "a-little-bit-long-string": -985981536,
		"a-little-bit-longer-string": -1486304829, "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for in, want := range vectors {
		if got := javaMurmur2([]byte(in)); got != want {
			t.Fatalf("javaMurmur2(%q) = %d, want %d", in, got, want)
		}
	}
	// kgo's default keyed partitioning agrees for family keys.
	p := kgo.StickyKeyPartitioner(nil).ForTopic(envelope.TopicUsageEvents)
	for fam := int64(1); fam <= 20000; fam += 7 {
		key := fmt.Appendf(nil, "%d", fam)
		if got, want := p.Partition(&kgo.Record{Key: key}, 10), javaPartition(key, 10); got != want {
			t.Fatalf("family %d: kgo partition %d, Java %d", fam, got, want)
		}
	}
}

// TestKfakeRoundTrip produces records made by New through a real client
// to an in-process broker and decodes what a consumer receives.
func TestKfakeRoundTrip(t *testing.T) {
	const partitions = 10
	c := testenv.KafkaOf(t, kfake.SeedTopics(partitions, envelope.TopicNotificationEvents))
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumeTopics(envelope.TopicNotificationEvents),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ts := at("2026-02-06T14:30:01Z")
	var sent []envelope.Event
	for fam := int64(1); fam <= 30; fam++ {
		p := envelope.QuotaUpdated{FamilyID: fam, CustomerID: fam * 10, FamilyRemainingBytes: 1 << 30, FamilyUsedPercent: 12.5}
		ev := envelope.New[envelope.Payload](envelope.DerivedID(envelope.PrefixNotification, fmt.Sprint(fam), "quota-updated"), ts, p)
		r, err := kafkarecord.New(envelope.TopicNotificationEvents, ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if want := javaPartition(r.Key, partitions); int(r.Partition) != want {
			t.Errorf("family %d went to partition %d, Java would pick %d", fam, r.Partition, want)
		}
		sent = append(sent, ev)
	}

	got := make(map[string]envelope.Event)
	for len(got) < len(sent) {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("received %d of %d: %v", len(got), len(sent), err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s[%d]: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			ev, err := kafkarecord.Decode(r)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			got[ev.EventID] = ev
		})
	}
	for _, ev := range sent {
		if diff := cmp.Diff(ev, got[ev.EventID]); diff != "" {
			t.Errorf("%s (-sent +received):\n%s", ev.EventID, diff)
		}
	}
}

func TestDeadLetter(t *testing.T) {
	src := &kgo.Record{Topic: envelope.TopicUsageEvents, Partition: 3, Offset: 42, Key: []byte("100"), Value: []byte("{bad"),
		Headers: []kgo.RecordHeader{{Key: kafkarecord.HeaderEventType, Value: []byte("DATA_USAGE")}}}
	got := kafkarecord.DeadLetter(src, envelope.DLT(src.Topic), "malformed", kgo.RecordHeader{Key: "x", Value: []byte("y")})
	want := &kgo.Record{Topic: "usage-events.DLT", Key: []byte("100"), Value: []byte("{bad"), Headers: []kgo.RecordHeader{
		{Key: kafkarecord.HeaderEventType, Value: []byte("DATA_USAGE")},
		{Key: kafkarecord.HeaderDLTReason, Value: []byte("malformed")},
		{Key: kafkarecord.HeaderDLTTopic, Value: []byte("usage-events")},
		{Key: kafkarecord.HeaderDLTPartition, Value: []byte("3")},
		{Key: kafkarecord.HeaderDLTOffset, Value: []byte("42")},
		{Key: "x", Value: []byte("y")},
	}}
	if d := cmp.Diff(want, got, cmpopts.EquateComparable(kgo.RecordAttrs{})); d != "" {
		t.Error(d)
	}
	if len(src.Headers) != 1 {
		t.Error("the source record's headers were changed")
	}
}
