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

// Two sessions share a 100 MB pool: each grant is at most its fair share,
// an update charges what was used and reserves again, a release returns
// the rest.
func ExampleEngine_Grant() {
	srv, _ := miniredis.Run()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	zone, _ := policy.LoadZone(policy.DefaultZone)
	at := time.Date(2026, 2, 6, 12, 0, 0, 0, zone)
	eng, _ := quota.New(rdb, quota.WithClock(func() time.Time { return at }))
	const mb = 1 << 20
	eng.SetPlan(ctx, 100, 100*mb)
	eng.AddMember(ctx, 100, 1)
	eng.AddMember(ctx, 100, 2)
	step := func(op quota.GrantOp) {
		rs, err := eng.Grant(ctx, []quota.GrantOp{op})
		if err != nil {
			fmt.Println(err)
			return
		}
		r := rs[0]
		until := "-" // a release grants nothing
		if !r.ValidUntil.IsZero() {
			until = r.ValidUntil.In(zone).Format("01-02 15:04")
		}
		fmt.Printf("%s: granted %d MB, charged %d MB, %d MB left, %d MB reserved, valid until %s\n", op.ID, r.Granted/mb,
			r.Charged/mb, r.Remaining/mb, r.Reserved/mb, until)
	}
	step(quota.GrantOp{ID: "a1", GrantID: "phone-a", FamilyID: 100, CustomerID: 1, Requested: 80 * mb, At: at})
	step(quota.GrantOp{ID: "b1", GrantID: "phone-b", FamilyID: 100, CustomerID: 2, Requested: 80 * mb, At: at})
	step(quota.GrantOp{ID: "a2", GrantID: "phone-a", FamilyID: 100, CustomerID: 1, Used: 30 * mb, Requested: 80 * mb, At: at})
	step(quota.GrantOp{ID: "b2", GrantID: "phone-b", FamilyID: 100, CustomerID: 2, Used: 5 * mb, Release: true, At: at})
	// Output:
	// a1: granted 80 MB, charged 0 MB, 100 MB left, 80 MB reserved, valid until 02-07 00:00
	// b1: granted 20 MB, charged 0 MB, 100 MB left, 100 MB reserved, valid until 02-07 00:00
	// a2: granted 35 MB, charged 30 MB, 70 MB left, 55 MB reserved, valid until 02-07 00:00
	// b2: granted 0 MB, charged 5 MB, 65 MB left, 35 MB reserved, valid until -
}
