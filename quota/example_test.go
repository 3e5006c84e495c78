package quota_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// The seed's "Last 10 MB" story: four members ask at once, the engine grants
// in order, all or nothing.
func Example() {
	srv, _ := miniredis.Run() // any Redis, Redis Cluster or Ring works
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	ctx := context.Background()
	eng, err := quota.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	const mb = 1 << 20
	eng.SetPlan(ctx, 100, 10*mb)
	for c := int64(1); c <= 4; c++ {
		eng.AddMember(ctx, 100, c)
	}
	at := time.Date(2026, 2, 6, 14, 30, 0, 0, time.UTC)
	for i, want := range []int64{5, 3, 8, 4} {
		r, err := eng.Apply(ctx, quota.Event{
			ID: fmt.Sprintf("evt_%d", i), FamilyID: 100, CustomerID: int64(i + 1),
			Bytes: want * mb, AppID: "com.youtube.app", At: at,
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%d MB: %s, %d MB left, alerts %v\n", want, r.Decision, r.Remaining/mb, r.Crossed)
	}
	// Output:
	// 5 MB: ALLOWED, 5 MB left, alerts [50]
	// 3 MB: ALLOWED, 2 MB left, alerts [30]
	// 8 MB: BLOCKED_FAMILY_QUOTA, 2 MB left, alerts []
	// 4 MB: BLOCKED_FAMILY_QUOTA, 2 MB left, alerts []
}

func ExampleEngine_Enforce() {
	srv, _ := miniredis.Run()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	eng, _ := quota.New(rdb)
	eng.SetPlan(ctx, 100, 100<<30)
	eng.AddMember(ctx, 100, 3)
	eng.Apply(ctx, quota.Event{ID: "evt_1", FamilyID: 100, CustomerID: 3, Bytes: 1200 << 20, At: time.Now()})

	// An owner cuts the monthly limit to 500 MB: the member is blocked at once.
	rules, _ := policy.ParseConstraints(map[string]string{"LIMIT:DATA:MONTHLY": "524288000"})
	enf, _ := eng.Enforce(ctx, 100, 3, 1, rules)
	fmt.Println(enf.Applied, enf.Status.Decision, enf.Status.Rule)
	// Output:
	// true BLOCKED_LIMIT_MONTHLY LIMIT:DATA:MONTHLY
}
