//go:build integration

package pipebench

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/quota"
)

// The ceiling is measured with redis-benchmark on the engine's own script and
// keys: every call is a full judgement that charges the member.
func TestCeilingOnRealRedis(t *testing.T) {
	addr := os.Getenv("DPCS_TEST_REDIS_ADDR")
	if addr == "" {
		t.Fatal("DPCS_TEST_REDIS_ADDR is not set (make integration sets it)")
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	eng, err := quota.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	const fid = 987_654_321
	rps, cmd, err := Ceiling(ctx, eng, CeilingConfig{Addr: addr, Requests: 20_000, FamilyID: fid})
	if err != nil {
		t.Fatalf("%v (%s)", err, cmd)
	}
	if rps <= 0 || !strings.Contains(cmd, "EVALSHA") || !strings.Contains(cmd, "evt___rand_int__") {
		t.Fatalf("rate %.0f, command %s", rps, cmd)
	}
	st, err := eng.Status(ctx, fid, 9_876_543_210)
	if err != nil {
		t.Fatal(err)
	}
	if st.MonthlyUsed < 19_000 || st.MonthlyUsed > 20_000 {
		t.Errorf("20,000 calls of 1 byte charged %d bytes", st.MonthlyUsed)
	}
	// The ceiling run kept the server busy: its CPU shows in INFO cpu.
	if c := cpuBetween(cpuSample{at: time.Now().Add(-time.Hour)}, sampleCPU(ctx, rdb)); c.Redis <= 0 {
		t.Errorf("no Redis CPU: %+v", c)
	}
	if err := ResetServerStats(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Apply(ctx, quota.Event{ID: "evt_stats", FamilyID: fid, CustomerID: 9_876_543_210, Bytes: 1,
		AppID: "com.kakao.talk", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	ss, err := ReadServerScript(ctx, rdb)
	if err != nil || ss.Calls < 1 || ss.P99 <= 0 || ss.MeanPerCall <= 0 {
		t.Errorf("server script stats %+v, %v", ss, err)
	}
	mem, err := RedisMemory(ctx, rdb)
	if err != nil || mem <= 0 {
		t.Errorf("used_memory %d, %v", mem, err)
	}
	if _, _, err := Ceiling(ctx, eng, CeilingConfig{Addr: "nohostport"}); err == nil {
		t.Error("bad address accepted")
	}
}

// The first apply script and the engine's own run one after the other on the
// same member, each charging it once per call, each with its own server time.
func TestCompareScriptsOnRealRedis(t *testing.T) {
	addr := os.Getenv("DPCS_TEST_REDIS_ADDR")
	if addr == "" {
		t.Fatal("DPCS_TEST_REDIS_ADDR is not set (make integration sets it)")
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	eng, err := quota.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	requests := 20_000
	if n, err := strconv.Atoi(os.Getenv("DPCS_COMPARE_REQUESTS")); err == nil && n > 0 {
		requests = n
	}
	c, err := CompareScripts(ctx, rdb, eng, CeilingConfig{Addr: addr, Requests: requests, FamilyID: 987_654_322})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]ScriptCost{"old": c.Old, "new": c.New} {
		if s.Rate <= 0 || s.PerCall <= 0 || s.CPUPerCall <= 0 || !strings.Contains(s.Command, "EVALSHA") {
			t.Errorf("%s script: %+v", name, s)
		}
	}
	if c.Old.Command == c.New.Command {
		t.Errorf("the same command measured twice: %s", c.Old.Command)
	}
	t.Logf("old: %.0f calls/s, %v per call, %v CPU per call; new: %.0f calls/s, %v per call, %v CPU per call",
		c.Old.Rate, c.Old.PerCall, c.Old.CPUPerCall, c.New.Rate, c.New.PerCall, c.New.CPUPerCall)
}
