package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // the server's zone on a host without zoneinfo

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

// defaultZone is DPCS_TIMEZONE's default, which names the month of a pool's
// key unless -server-env sets another.
const defaultZone = "Asia/Seoul"

// serverZone is the server's DPCS_TIMEZONE (-server-env's, else the
// default), loaded.
func serverZone(cfg config) (*time.Location, error) {
	zone := defaultZone
	for _, kv := range cfg.serverEnv {
		if v, ok := strings.CutPrefix(kv, "DPCS_TIMEZONE="); ok {
			zone = v
		}
	}
	return time.LoadLocation(zone)
}

// pool is one family's month as read.
type pool struct {
	total, used, reserved int64
}

// over is how many bytes the pool's used and reserved bytes are above its
// total (0 when they are not).
func (p pool) over() int64 { return max(0, p.used+p.reserved-p.total) }

// left is what the pool still has for a grant or an event.
func (p pool) left() int64 { return max(0, p.total-p.used-p.reserved) }

// poolCheck is what the pools of a step say: the largest overshoot, and
// how many had less left than one grant.
type poolCheck struct {
	overshoot int64
	usedUp    int
}

// checkPools summarises pools for grants of grant bytes.
func checkPools(pools map[int64]pool, grant int64) poolCheck {
	var c poolCheck
	for _, p := range pools {
		c.overshoot = max(c.overshoot, p.over())
		if p.left() < grant {
			c.usedUp++
		}
	}
	return c
}

// poolMonth is the month of a pool's key at t in the server's zone.
func poolMonth(t time.Time, loc *time.Location) string { return t.In(loc).Format("200601") }

// readPools reads families' pools of month from DPCS's Redis, pipelined in
// chunks. Errors, not zeros: a family without a plan (the bench reads only
// seeded families, and a layout it does not know must not read as 0), and
// no family with a pool hash of month (a month the server does not use
// reads as empty pools).
func readPools(ctx context.Context, rdb redis.Cmdable, fids []int64, month string) (map[int64]pool, error) {
	const chunk = 1000
	pools, found := make(map[int64]pool, len(fids)), 0
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
			if m[0].set || m[1].set || m[2].set {
				found++
			}
			pools[f] = pool{total: min(plan[0].n+m[1].n, maxTotal), used: m[0].n, reserved: m[2].n}
		}
	}
	if found == 0 && len(fids) > 0 {
		return nil, fmt.Errorf("no family of %d read has a pool of %s (the server's month or zone is another)", len(fids), month)
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
	family, grant int64
	rounds        int
	calls, errors int64
	refused       int64 // answers that granted nothing
	granted       int64 // bytes the answers granted
	before        pool  // before the check
	held          pool  // the read after a round that found the most reserved
	open          int   // the sessions parked then
	overshoot     int64 // the largest of every read
	released      pool  // after the round that granted nothing and every release
}

func (c *poolContention) sentence() string {
	return fmt.Sprintf("DPCS, every caller on one family's four members (family %s: a pool of %s bytes with %s left, %s MiB grants, until it granted no more): "+
		"%s calls in %d rounds of 200 ms, %d failed, %s answered with nothing granted; %s bytes granted. "+
		"Read after every round: **largest overshoot %s bytes**; the most reserved at once %s bytes, by %d open sessions (%s used of %s then); "+
		"after the releases %s bytes used, %s reserved, %s left.",
		thousands(float64(c.family)), thousands(float64(c.before.total)), thousands(float64(c.before.left())), thousands(float64(c.grant>>20)),
		thousands(float64(c.calls)), c.rounds, c.errors, thousands(float64(c.refused)), thousands(float64(c.granted)),
		thousands(float64(c.overshoot)), thousands(float64(c.held.reserved)), c.open, thousands(float64(c.held.used)), thousands(float64(c.held.total)),
		thousands(float64(c.released.used)), thousands(float64(c.released.reserved)), thousands(float64(c.released.left())))
}
