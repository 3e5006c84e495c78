package judge_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/judge"
)

// A processor on an in-process Kafka (kfake) and Redis (miniredis): usage
// events go in on usage-events, each is judged by the quota engine, and the
// decisions come out on usage-persist (and notifications on
// notification-events). Family 100 has a 10 MB pool; member 2 may not use
// games (the processor's catalog knows com.roblox.client is a game).
func ExampleProcessor() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	now := time.Date(2026, 2, 6, 5, 30, 0, 0, time.UTC) // 14:30 in Seoul
	clock := func() time.Time { return now }

	kafka, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, envelope.Topics()...))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer kafka.Close()
	mr, err := miniredis.Run()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	engine, err := quota.New(rdb, quota.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := engine.SetPlan(ctx, 100, 10<<20); err != nil {
		fmt.Println(err)
		return
	}
	for _, member := range []int64{1, 2} {
		if err := engine.AddMember(ctx, 100, member); err != nil {
			fmt.Println(err)
			return
		}
	}
	if _, err := engine.SetConstraints(ctx, 100, 2, 1, map[string]string{"BLOCK:CATEGORY:GAME": "1"}); err != nil {
		fmt.Println(err)
		return
	}

	// Every write to the quota state goes through the door.
	qs, err := judge.NewState(engine)
	if err != nil {
		fmt.Println(err)
		return
	}
	proc, err := judge.NewProcessor(qs,
		[]kgo.Opt{kgo.SeedBrokers(kafka.ListenAddrs()...), kgo.HeartbeatInterval(100 * time.Millisecond)},
		judge.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- proc.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			fmt.Println("processor:", err)
		}
		proc.Close(context.Background())
	}()

	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka.ListenAddrs()...), kgo.ConsumeTopics(envelope.TopicUsagePersist))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()
	events := []envelope.UsagePayload{
		{FamilyID: 100, CustomerID: 1, AppID: "com.youtube.app", BytesUsed: 4 << 20},
		{FamilyID: 100, CustomerID: 2, AppID: "com.roblox.client", BytesUsed: 1 << 20},
		{FamilyID: 100, CustomerID: 1, AppID: "com.youtube.app", BytesUsed: 4 << 20},
		{FamilyID: 100, CustomerID: 1, AppID: "com.youtube.app", BytesUsed: 4 << 20},
	}
	for i, p := range events {
		rec, err := kafkarecord.New(envelope.TopicUsageEvents, envelope.New(fmt.Sprint("evt_", i+1), now, p))
		if err != nil {
			fmt.Println(err)
			return
		}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			fmt.Println(err)
			return
		}
	}

	// One usage-persist record per event, in order (one family, one partition).
	for seen := 0; seen < len(events); {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			fmt.Printf("waited for %d usage-persist records, saw %d\n", len(events), seen)
			return
		}
		for _, r := range fetches.Records() {
			e, err := envelope.DecodeAs[envelope.UsagePersistPayload](r.Value)
			if err != nil {
				fmt.Println(err)
				return
			}
			p := e.Payload
			verdict := p.ProcessResult
			if p.Rule != "" {
				verdict += " by " + p.Rule
			}
			fmt.Printf("%s: member %d, %s, %d MB: %s; %d MB left", p.OriginEventID, p.CustomerID, p.AppID, p.BytesUsed>>20, verdict, p.RemainingAfter>>20)
			for _, c := range p.Crossed {
				fmt.Printf("; crossed %d%%", c.Percent)
			}
			fmt.Println()
			seen++
		}
	}
	// Output:
	// evt_1: member 1, com.youtube.app, 4 MB: ALLOWED; 6 MB left
	// evt_2: member 2, com.roblox.client, 1 MB: BLOCKED_APP by BLOCK:CATEGORY:GAME; 6 MB left
	// evt_3: member 1, com.youtube.app, 4 MB: ALLOWED; 2 MB left; crossed 50%; crossed 30%
	// evt_4: member 1, com.youtube.app, 4 MB: BLOCKED_FAMILY_QUOTA by POOL; 2 MB left
}
