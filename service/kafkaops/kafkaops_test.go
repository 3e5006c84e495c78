package kafkaops

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/notify"
)

// TestBackOffice: dead letters paged newest first across partitions, one
// read by its offset, replayed to the partition it came from without its
// dlt-* headers, and the records a topic holds counted. (The API's routes
// over it: service/api TestDeadLetterRoutes.)
func TestBackOffice(t *testing.T) {
	ctx := context.Background()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, envelope.Topics()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	cl, err := kgo.NewClient(append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	bo, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bo.Close)

	usage, dlt := envelope.TopicUsageEvents, envelope.DLT(envelope.TopicUsageEvents)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for i := range 5 {
		src := &kgo.Record{Topic: usage, Partition: int32(i % 2), Offset: int64(100 + i), Key: []byte(fmt.Sprint("key-", i)),
			Value: []byte(fmt.Sprint(`{"n":`, i, `}`)), Headers: []kgo.RecordHeader{{Key: kafkarecord.HeaderEventType, Value: []byte("DATA_USAGE")}}}
		r := kafkarecord.DeadLetter(src, dlt, fmt.Sprint("reason ", i))
		r.Partition, r.Timestamp = int32(i%2), t0.Add(time.Duration(i)*time.Minute)
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	var seen []string
	q := DeadLetterQuery{Topics: []string{dlt}, Limit: 2}
	for page := 0; ; page++ {
		p, err := bo.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Records) > 2 || page > 3 {
			t.Fatalf("page %d: %d records", page, len(p.Records))
		}
		for _, d := range p.Records {
			seen = append(seen, d.Reason)
			if d.Origin != usage || d.OriginOffset < 100 {
				t.Errorf("%+v: origin %s/%d", d.TopicPartition, d.Origin, d.OriginOffset)
			}
		}
		if p.Next == nil {
			break
		}
		q.Before = p.Next
	}
	if want := "[reason 4 reason 3 reason 2 reason 1 reason 0]"; fmt.Sprint(seen) != want {
		t.Errorf("newest first: %v, want %s", seen, want)
	}

	d, err := bo.Get(ctx, TopicPartition{Topic: dlt, Partition: 1}, 0)
	if err != nil || d.Reason != "reason 1" || d.OriginPartition != 1 {
		t.Fatalf("get: %+v %v", d, err)
	}
	if _, err := bo.Get(ctx, TopicPartition{Topic: dlt, Partition: 1}, 99); !errors.Is(err, ErrDeadLetterNotFound) {
		t.Errorf("get past the end: %v", err)
	}

	if err := bo.Replay(ctx, d); err != nil {
		t.Fatal(err)
	}
	n, err := bo.Records(ctx, usage, dlt)
	if err != nil || n[usage] != 1 || n[dlt] != 5 {
		t.Fatalf("records: %v %v", n, err)
	}
	cons, err := kgo.NewClient(append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{usage: {1: kgo.NewOffset().AtStart()}}))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cons.Close)
	fs := cons.PollRecords(ctx, 1)
	if err := fs.Err(); err != nil {
		t.Fatal(err)
	}
	r := fs.Records()[0]
	var replayed string
	for _, h := range r.Headers {
		if len(h.Key) > 4 && h.Key[:4] == "dlt-" {
			t.Errorf("replayed with %s", h.Key)
		}
		if h.Key == HeaderReplayedFrom {
			replayed = string(h.Value)
		}
	}
	if string(r.Value) != `{"n":1}` || replayed != dlt+"/1/0" {
		t.Errorf("replayed %s from %q", r.Value, replayed)
	}
	if err := bo.Replay(ctx, DeadLetter{OriginPartition: -1}); err == nil {
		t.Error("a replay without an origin was produced")
	}
	if headerDLTChannel != notify.HeaderDLTChannel {
		t.Errorf("the channel header %q, the notifier's %q", headerDLTChannel, notify.HeaderDLTChannel)
	}
	if _, err := bo.Lag(ctx, "no-such-group"); err != nil {
		t.Errorf("lag: %v", err)
	}
}
