//go:build integration

package kafkarecord_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
)

// TestKcatInterop checks the interop promise of doc/wire-format.md ("Topics
// and records": any Kafka client that keys and partitions as it says
// co-partitions, and its records decode) with a producer that knows nothing of
// this package: kcat (librdkafka) produces the golden DATA_USAGE JSON
// (../testdata/data_usage.json), keyed "100", to an in-process kfake broker; a
// kgo consumer receives it and Decode decodes it. With librdkafka's
// murmur2_random partitioner the record must land where kgo's default
// partitioner — and Kafka's Java client — put key "100".
//
// Run: DPCS_TEST_KCAT=/usr/bin/kcat go test -tags integration -run Kcat ./envelope/kafkarecord
func TestKcatInterop(t *testing.T) {
	kcat := os.Getenv("DPCS_TEST_KCAT")
	if kcat == "" {
		t.Fatal("DPCS_TEST_KCAT is not set: point it at a kcat binary (make integration does)")
	}
	const partitions = 10
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, envelope.TopicUsageEvents))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// kcat -P sends one message per input line: send the seed's JSON on one.
	seed := readFile(t, "../testdata/data_usage.json")
	var line bytes.Buffer
	if err := json.Compact(&line, seed); err != nil {
		t.Fatal(err)
	}
	value := bytes.Clone(line.Bytes())
	line.WriteByte('\n')
	cmd := exec.CommandContext(ctx, kcat, "-P",
		"-b", strings.Join(c.ListenAddrs(), ","),
		"-t", envelope.TopicUsageEvents,
		"-k", "100",
		"-X", "topic.partitioner=murmur2_random",
	)
	cmd.Stdin = &line
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat: %v\n%s", err, out)
	}

	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumeTopics(envelope.TopicUsageEvents),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got *kgo.Record
	for got == nil {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("no record from kcat: %v", err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s[%d]: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if got != nil {
				t.Errorf("more than one record: %q", r.Value)
			}
			got = r
		})
	}

	if string(got.Key) != "100" {
		t.Errorf("key = %q, want 100", got.Key)
	}
	if !bytes.Equal(got.Value, value) {
		t.Errorf("value changed in transit:\n%s", got.Value)
	}
	want := kgo.StickyKeyPartitioner(nil).ForTopic(envelope.TopicUsageEvents).Partition(&kgo.Record{Key: []byte("100")}, partitions)
	if java := javaPartition([]byte("100"), partitions); want != java {
		t.Fatalf("kgo picks partition %d for key 100, Java %d", want, java)
	}
	if int(got.Partition) != want {
		t.Errorf("kcat put key 100 on partition %d; kgo and Java pick %d", got.Partition, want)
	}

	ev, err := kafkarecord.Decode(got)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if diff := cmp.Diff(dataUsageEvent, ev); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	// And the other way round: kgo producing the same event with New
	// lands on the same partition.
	r, err := kafkarecord.New(envelope.TopicUsageEvents, ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if r.Partition != got.Partition {
		t.Errorf("kgo produced key 100 to partition %d, kcat to %d", r.Partition, got.Partition)
	}
	t.Logf("key 100 → partition %d of %d", got.Partition, partitions)
}
