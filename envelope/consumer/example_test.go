package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope/consumer"
)

// A handler that dead-letters what it cannot read and fails once, as a
// database down would: the same batch comes again, then it is committed.
func Example() {
	cluster, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "events", "events.DLT"))
	defer cluster.Close()
	kopts := []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}
	prod, _ := kgo.NewClient(kopts...)
	defer prod.Close()
	for _, v := range []string{"a", "b", "?", "c"} {
		prod.ProduceSync(context.Background(), &kgo.Record{Topic: "events", Value: []byte(v)})
	}

	done := make(chan struct{})
	down := true
	h := consumer.HandlerFunc(func(ctx context.Context, b *consumer.Batch) error {
		fmt.Println("attempt", b.Attempt(), "of", len(b.Records), "records")
		if down {
			down = false
			return errors.New("database down")
		}
		for _, r := range b.Records {
			if string(r.Value) == "?" {
				b.DeadLetter(r, errors.New("unreadable"))
				continue
			}
			fmt.Println("stored", string(r.Value))
		}
		return nil
	})
	c, err := consumer.New(h, kopts, consumer.WithGroup("example"), consumer.WithTopics("events"),
		consumer.WithBackoff(10*time.Millisecond, time.Second, 0),
		consumer.WithHooks(consumer.Hooks{
			OnDeadLetter: func(i consumer.DeadLetterInfo) { fmt.Println("dead letter to", i.Topic+":", i.Cause) },
			OnCommit:     func(i consumer.CommitInfo) { fmt.Println("committed up to", i.Offsets["events"][0]); close(done) },
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	go c.Run(context.Background())
	<-done
	_ = c.Close(context.Background())
	// Output:
	// attempt 1 of 4 records
	// attempt 2 of 4 records
	// stored a
	// stored b
	// stored c
	// dead letter to events.DLT: unreadable
	// committed up to 4
}
