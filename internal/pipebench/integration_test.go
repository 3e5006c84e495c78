//go:build integration

package pipebench

import (
	"context"
	"os"
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
