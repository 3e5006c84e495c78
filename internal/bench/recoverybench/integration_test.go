//go:build integration

package recoverybench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// The harness at a small scale (a little over one rebuild page) on the real
// servers of make integration: the seeded population is what the rebuild
// restores — plans, thresholds, top-ups, policies, usage, the dedupe records
// of the last day — and the report's figures are filled in.
func TestHarnessOnRealServers(t *testing.T) {
	addr, dsn := os.Getenv("DPCS_TEST_REDIS_ADDR"), os.Getenv("DPCS_TEST_MYSQL_DSN")
	if addr == "" || dsn == "" {
		t.Fatal("DPCS_TEST_REDIS_ADDR and DPCS_TEST_MYSQL_DSN are not set (make integration sets them)")
	}
	ctx := context.Background()
	db := openDatabase(t, dsn)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	prefix := fmt.Sprintf("recoverybench:%d:", time.Now().UnixNano())
	eng, err := quota.New(rdb, quota.WithKeyPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteKeys(t, rdb, prefix) })

	pop := Population{Families: 1200, RowsPerFamily: 10, History: 5} // history: not restored
	seeded, err := Seed(ctx, db, eng, pop)
	if err != nil {
		t.Fatal(err)
	}
	if seeded.Families != 1200 || seeded.Members != 4800 || seeded.UsageRows != 18_000 || seeded.Policies == 0 || seeded.TopUps == 0 {
		t.Fatalf("seeded %+v", seeded)
	}
	rep, err := Run(ctx, db, rdb, eng, Config{PerFamily: 50, Quiet: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Families != 1200 || rep.Rebuild <= 0 || rep.PerFamily != 50 || rep.PerFamilyTook <= 0 ||
		rep.Recovery.Families != 1200 || rep.Recovery.Drain < 200*time.Millisecond || rep.Recovery.Generation == "" ||
		rep.MemAfter <= 0 || rep.Keys <= 0 {
		t.Errorf("report %+v", rep)
	}
	if ri := rep.Recovery; !ri.OnTouch || ri.Available <= 0 || ri.Available > ri.Total || rep.FirstDecision < ri.Drain || rep.FirstDecisionTook <= 0 {
		t.Errorf("restored on touch: %+v, first decision after %s (took %s)", ri, rep.FirstDecision, rep.FirstDecisionTook)
	}
	md := rep.Markdown(seeded, "go run ./examples/recoverybench", "setting")
	for _, want := range []string{"| `recovery.Rebuild`, every family | 1,200 |", "Batched ÷ one call per family", "18,000 usage_record rows"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}

	month, from, to := eng.CurrentMonth()
	for _, f := range []int64{1, 5, 10, 999, 1000, 1001, 1200} {
		st, err := eng.Family(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var used int64
		if err := db.QueryRowContext(ctx, `SELECT COALESCE(SUM(bytes_used), 0) FROM usage_record WHERE family_id = ? AND process_result = 'ALLOWED'
			AND event_time >= ? AND event_time < ?`, f, from.UTC(), to.UTC()).
			Scan(&used); err != nil {
			t.Fatal(err)
		}
		wantTop := int64(0)
		for i := range TopUps(f) {
			wantTop += TopUp >> i
		}
		wantThr := policy.DefaultThresholds()
		if Thresholds(f) != "" {
			wantThr = policy.Thresholds{80, 40}
		}
		if f == 1200 {
			used++ // the first decision after the loss, one byte
		}
		if !st.Provisioned || st.Month != month || st.Plan != Plan || st.TopUps != wantTop || st.Used != used ||
			len(st.Members) != 4 || fmt.Sprint(st.Thresholds) != fmt.Sprint(wantThr) {
			t.Errorf("family %d restored as %+v; SQL: used %d, top-ups %d, thresholds %v", f, st, used, wantTop, wantThr)
		}
		for c := 1; c <= 4; c++ {
			ms, err := eng.Status(ctx, f, f*10+int64(c))
			if err != nil {
				t.Fatal(err)
			}
			if want := HasPolicy(f, c); want != (ms.Version == 1+f%3) || want != (ms.Constraints[policy.KeyLimitMonthly] != "") {
				t.Errorf("member %d of family %d: policy %v (version %d), want one: %v", c, f, ms.Constraints, ms.Version, want)
			}
		}
		// The last event of the family was judged minutes ago: a replay gets
		// its original result and charges nothing.
		id := fmt.Sprintf("rb-%d-%d", f, pop.RowsPerFamily-1)
		var decision string
		if err := db.QueryRowContext(ctx, `SELECT process_result FROM usage_record WHERE event_id = ?`, id).Scan(&decision); err != nil {
			t.Fatal(err)
		}
		res, err := eng.Apply(ctx, quota.Event{ID: id, FamilyID: f, CustomerID: f*10 + 1, Bytes: 1, AppID: "com.example.app", At: time.Now()})
		if err != nil || !res.Duplicate || string(res.Decision) != decision {
			t.Errorf("replay of %s: %+v, %v; want a duplicate judged %s", id, res, err, decision)
		}
	}
}

// openDatabase creates a fresh database on dsn's server, dropped afterwards.
func openDatabase(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "dpcs_recbench_" + hex.EncodeToString(b)
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE " + name) })
	cfg.DBName, cfg.ParseTime = name, true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func deleteKeys(t *testing.T, rdb *redis.Client, prefix string) {
	t.Helper()
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		if err := rdb.Unlink(ctx, keys[:n]...).Err(); err != nil {
			t.Error(err)
		}
		keys = keys[n:]
	}
	if err := iter.Err(); err != nil {
		t.Error(err)
	}
}
