package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// DPCS's pools as its Redis holds them (doc/redis-keys.md): a family's plan
// is the family hash's plan, its month's pool the pool hash's used (every
// byte charged, events and grants), topup and r (what open grants
// reserve). The engine keeps used + r ≤ plan + topup at every instant, so
// a pool's overshoot is what used + r is above that total, read from
// outside after a step.

// maxTotal is the largest pool total the engine counts (policy.MaxBytes).
const maxTotal = 1 << 46

// poolZone is the server's DPCS_TIMEZONE (its default; the bench sets none),
// which names the month of a pool's key.
const poolZone = "Asia/Seoul"

// pool is one family's month as read.
type pool struct {
	total, used, reserved int64
}

// over is how many bytes the pool's used and reserved bytes are above its
// total (0 when they are not).
func (p pool) over() int64 { return max(0, p.used+p.reserved-p.total) }

// left is what the pool still has for a grant or an event.
func (p pool) left() int64 { return max(0, p.total-p.used-p.reserved) }

// poolCheck is what the pools of a step say: the largest overshoot, how
// many pools were read, and how many had less left than one grant (used
// up as far as the step's SMFs go).
type poolCheck struct {
	overshoot    int64
	read, usedUp int
}

// checkPools summarises pools for grants of grant bytes.
func checkPools(pools map[int64]pool, grant int64) poolCheck {
	var c poolCheck
	for _, p := range pools {
		c.read++
		c.overshoot = max(c.overshoot, p.over())
		if p.left() < grant {
			c.usedUp++
		}
	}
	return c
}

// poolMonth is the month of a pool's key at t.
func poolMonth(t time.Time) (string, error) {
	loc, err := time.LoadLocation(poolZone)
	if err != nil {
		return "", err
	}
	return t.In(loc).Format("200601"), nil
}

// readPools reads families' pools of month from DPCS's Redis, pipelined in
// chunks. A family without a plan is an error: the bench reads only
// seeded families, and a layout it does not know must not read as 0.
func readPools(ctx context.Context, rdb redis.Cmdable, fids []int64, month string) (map[int64]pool, error) {
	const chunk = 1000
	pools := make(map[int64]pool, len(fids))
	for start := 0; start < len(fids); start += chunk {
		part := fids[start:min(start+chunk, len(fids))]
		plans := make([]*redis.SliceCmd, len(part))
		months := make([]*redis.SliceCmd, len(part))
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, f := range part {
				fs := strconv.FormatInt(f, 10)
				plans[i] = p.HMGet(ctx, "family:{"+fs+"}", "plan")
				months[i] = p.HMGet(ctx, "family:{"+fs+"}:pool:"+month, "used", "topup", "r")
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("reading the pools: %w", err)
		}
		for i, f := range part {
			plan, err := poolFields(plans[i].Val())
			if err != nil || !plan[0].set {
				return nil, fmt.Errorf("family %d: no plan in family:{%d} (%v)", f, f, err)
			}
			m, err := poolFields(months[i].Val())
			if err != nil {
				return nil, fmt.Errorf("family %d's pool of %s: %w", f, month, err)
			}
			pools[f] = pool{total: min(plan[0].n+m[1].n, maxTotal), used: m[0].n, reserved: m[2].n}
		}
	}
	return pools, nil
}

type poolField struct {
	n   int64
	set bool
}

// poolFields parses an HMGET reply of whole numbers (absent: 0, not set).
func poolFields(vals []any) ([]poolField, error) {
	out := make([]poolField, len(vals))
	for i, v := range vals {
		if v == nil {
			continue
		}
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("field %d is %T", i, v)
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("field %d: %w", i, err)
		}
		out[i] = poolField{n, true}
	}
	return out, nil
}

// poolContention is the DPCS grant path's contention check: every caller
// on one family's members until its pool grants no more.
type poolContention struct {
	family, grant  int64
	rounds         int
	calls, errors  int64
	refused        int64 // answers that granted nothing
	granted        int64 // bytes the answers granted
	before         pool  // before the check
	held, released pool  // when nothing more was granted (sessions open); after the releases
}

func (c *poolContention) sentence() string {
	return fmt.Sprintf("DPCS, every caller on one family's four members (family %s: a pool of %s bytes with %s left, %s MiB grants, until it granted no more): "+
		"%s calls in %d rounds of 2 s, %d failed, %s answered with nothing granted; %s bytes granted. "+
		"With nothing more granted the pool held %s bytes used and %s reserved of its %s: **overshoot %s bytes**; after the releases it reserved %s bytes.",
		thousands(float64(c.family)), thousands(float64(c.before.total)), thousands(float64(c.before.left())), thousands(float64(c.grant>>20)),
		thousands(float64(c.calls)), c.rounds, c.errors, thousands(float64(c.refused)), thousands(float64(c.granted)),
		thousands(float64(c.held.used)), thousands(float64(c.held.reserved)), thousands(float64(c.held.total)),
		thousands(float64(c.held.over())), thousands(float64(c.released.reserved)))
}
