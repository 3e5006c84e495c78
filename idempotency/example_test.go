package idempotency_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/idempotency"
)

func Example() {
	m, _ := miniredis.Run()
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()

	store, _ := idempotency.NewRedisStore(rdb)
	guard, _ := idempotency.New(store)
	ctx := context.Background()
	key := idempotency.Key("notification-group", "evt_550e8400-e29b-41d4-a716-446655440000")

	for delivery := 1; delivery <= 3; delivery++ {
		result, duplicate, err := guard.Do(ctx, key, func(context.Context) ([]byte, error) {
			fmt.Println("sending the notification")
			return []byte("sent"), nil
		})
		fmt.Printf("delivery %d: %s duplicate=%v err=%v\n", delivery, result, duplicate, err)
	}
	// Output:
	// sending the notification
	// delivery 1: sent duplicate=false err=<nil>
	// delivery 2: sent duplicate=true err=<nil>
	// delivery 3: sent duplicate=true err=<nil>
}

func ExampleGuard_Claim() {
	m, _ := miniredis.Run()
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	store, _ := idempotency.NewRedisStore(rdb)
	guard, _ := idempotency.New(store)
	ctx := context.Background()
	key := idempotency.TaggedKey("processor-usage-group", "100", "evt_1")
	fmt.Println("redis key:", store.RedisKey(key))

	mine, _ := guard.Claim(ctx, key)
	theirs, _ := guard.Claim(ctx, key) // another worker, while we work
	fmt.Println(mine.Outcome, theirs.Outcome)
	_ = guard.Complete(ctx, mine, []byte("ALLOWED"))
	again, _ := guard.Claim(ctx, key)
	fmt.Println(again.Outcome, string(again.Result))
	// Output:
	// redis key: idem:processor-usage-group:{100}:evt_1
	// acquired in-progress
	// done ALLOWED
}
