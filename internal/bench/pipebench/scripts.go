package pipebench

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// applyV1Lua is the engine's first apply script (issue #16's starting point,
// 20–26 µs of Redis per decision), kept verbatim so that every benchmark run
// measures it beside the engine's current one on the same server.
//
//go:embed apply_v1.lua
var applyV1Lua string

var applyV1Script = redis.NewScript(applyV1Lua)

// ScriptCost is one apply script's cost on the server, measured under
// redis-benchmark's load: the rate it sustained and the server time per call
// (INFO commandstats, usec ÷ calls of EVALSHA).
type ScriptCost struct {
	// Rate is calls per second, PerCall the server's mean time per call
	// (INFO commandstats: wall time inside the command, so on a busy host it
	// includes time the server was not on a CPU), CPUPerCall the server's
	// processor time per call (INFO cpu, user + system: the command, its
	// parsing and the network I/O). Command is the redis-benchmark command line.
	Rate                float64
	PerCall, CPUPerCall time.Duration
	Command             string
}

// ScriptComparison is the first apply script beside the engine's own one,
// measured one after the other in the same run on the same server.
type ScriptComparison struct {
	Old, New ScriptCost
}

// CompareScripts measures the engine's apply script and its first version
// (apply_v1.lua) on the same member (see benchMember): cfg.Rounds
// redis-benchmark runs each, alternating, the server's command statistics
// reset before each; each script's best rate and least time per call.
// rdb is a client of the server at cfg.Addr; eng must use it without a key
// prefix (the first script's keys are built here, as it knew them).
func CompareScripts(ctx context.Context, rdb *redis.Client, eng *quota.Engine, cfg CeilingConfig) (ScriptComparison, error) {
	var out ScriptComparison
	if err := cfg.defaults(); err != nil {
		return out, err
	}
	ev, err := benchMember(ctx, eng, cfg.FamilyID)
	if err != nil {
		return out, err
	}
	if err := eng.Load(ctx); err != nil {
		return out, err
	}
	if err := applyV1Script.Load(ctx, rdb).Err(); err != nil {
		return out, fmt.Errorf("pipebench: load apply_v1.lua: %w", err)
	}
	newSHA, newKeys, newArgs := eng.ApplyCommand(ev)
	oldKeys, oldArgs := applyV1Call(eng, ev)
	runs := []struct {
		cost *ScriptCost
		sha  string
		keys []string
		args []any
	}{
		{&out.Old, applyV1Script.Hash(), oldKeys, oldArgs},
		{&out.New, newSHA, newKeys, newArgs},
	}
	// Both scripts are (re)loaded before every run, and a run that charged
	// nothing is run again, up to four more times: a server shared with other
	// work (the integration tests run packages side by side on one
	// redis-server, and quota's tests SCRIPT FLUSH it) may have had its
	// scripts flushed, which makes every call of a run fail with NOSCRIPT.
	load := func() error {
		if err := eng.Load(ctx); err != nil {
			return err
		}
		return applyV1Script.Load(ctx, rdb).Err()
	}
	for range cfg.Rounds {
		for _, r := range runs {
			var c ScriptCost
			var err error
			for attempt := 0; attempt < 5; attempt++ {
				if err = load(); err != nil {
					return out, err
				}
				if c, err = measureScript(ctx, rdb, eng, cfg, ev, r.sha, r.keys, r.args); err == nil {
					break
				}
			}
			if err != nil {
				return out, err
			}
			if r.cost.PerCall == 0 || c.PerCall < r.cost.PerCall {
				r.cost.PerCall = c.PerCall
			}
			if r.cost.CPUPerCall == 0 || c.CPUPerCall < r.cost.CPUPerCall {
				r.cost.CPUPerCall = c.CPUPerCall
			}
			if c.Rate > r.cost.Rate {
				r.cost.Rate = c.Rate
			}
			r.cost.Command = c.Command
		}
	}
	return out, nil
}

// measureScript is one redis-benchmark run of a script on ev's member, with
// the server's time per call over the run.
func measureScript(ctx context.Context, rdb *redis.Client, eng *quota.Engine, cfg CeilingConfig, ev quota.Event,
	sha string, keys []string, args []any) (ScriptCost, error) {
	var c ScriptCost
	st, err := eng.Family(ctx, ev.FamilyID)
	if err != nil {
		return c, err
	}
	if err := ResetServerStats(ctx, rdb); err != nil {
		return c, err
	}
	before := sampleCPU(ctx, rdb)
	if c.Rate, c.Command, err = benchmark(ctx, cfg, sha, keys, args, ev.ID); err != nil {
		return c, err
	}
	after := sampleCPU(ctx, rdb)
	ss, err := ReadServerScript(ctx, rdb)
	if err != nil {
		return c, err
	}
	c.PerCall = ss.MeanPerCall
	if ss.Calls > 0 {
		c.CPUPerCall = (after.redis - before.redis) / time.Duration(ss.Calls)
	}
	return c, charged(ctx, eng, ev, st.Used, cfg.Requests)
}

// applyV1Call is the first apply script's keys and arguments for ev, as the
// engine built them then.
func applyV1Call(eng *quota.Engine, ev quota.Event) ([]string, []any) {
	m := policy.MomentOf(ev.At, eng.Location())
	fam := "family:{" + strconv.FormatInt(ev.FamilyID, 10) + "}"
	member := fam + ":customer:" + strconv.FormatInt(ev.CustomerID, 10) + ":"
	window := int64(eng.DedupeWindow() / time.Second)
	b := time.Now().Unix() / window
	keys := []string{fam, member + "constraints", fam + ":pool:" + m.Month, member + "usage:" + m.Month,
		fam + ":evt:" + strconv.FormatInt(b, 10), fam + ":evt:" + strconv.FormatInt(b-1, 10)}
	args := []any{ev.CustomerID, ev.Bytes, ev.AppID, string(ev.Category), m.Minute, m.Weekday, m.Day[6:8], ev.ID,
		2 * window, int64(62 * 24 * time.Hour / time.Second), policy.DefaultThresholds().String(), policy.MaxBytes, ""}
	return keys, args
}
