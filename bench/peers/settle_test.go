package main

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The backlog counts what the groups with members have not committed: a
// member that committed 4 of 10 records leaves 6; once it leaves, its
// group is not waited on; settle returns once a running group has read
// everything.
func TestBehindGroups(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for range 10 {
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(prod)
	if n, err := behindGroups(ctx, adm); err != nil || n != 0 {
		t.Fatalf("no groups: %d, %v", n, err)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
		kgo.DisableAutoCommit(), kgo.FetchMaxPartitionBytes(1), kgo.FetchMaxBytes(1))
	if err != nil {
		t.Fatal(err)
	}
	var got []*kgo.Record
	for len(got) < 4 {
		fs := cons.PollRecords(ctx, 4-len(got))
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		got = append(got, fs.Records()...)
	}
	if err := cons.CommitRecords(ctx, got...); err != nil {
		t.Fatal(err)
	}
	if n, err := behindGroups(ctx, adm); err != nil || n != 6 {
		t.Errorf("a member 4 records in: %d, %v; want 6", n, err)
	}
	said := make(chan string, 10)
	say := func(f string, _ ...any) { said <- f }
	done := make(chan error, 1)
	go func() { done <- settle(ctx, addr, say) }()
	<-said // it waits, and says so, before the rest is read
	for len(got) < 10 {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		got = append(got, fs.Records()...)
	}
	if err := cons.CommitRecords(ctx, got...); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || len(said) != 0 {
		t.Errorf("settle = %v, said %d more times", err, len(said))
	}
	if _, err := prod.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("y")}).First(); err != nil {
		t.Fatal(err)
	}
	cons.Close() // leaves the group
	if n, err := behindGroups(ctx, adm); err != nil || n != 0 {
		t.Errorf("a group without members: %d, %v; want 0", n, err)
	}
}
