package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service"
	"github.com/dabom/dpcs/service/store"
)

func TestRunNeedsInfrastructure(t *testing.T) {
	err := run(context.Background(), nil, func(string) string { return "" }, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "DPCS_KAFKA_BROKERS") {
		t.Fatalf("err %v", err)
	}
}

// The API deployable serves against Kafka, Redis and SQL, and its rebuild
// command restores Redis from SQL.
func TestRunServesAndRebuilds(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mr := miniredis.RunT(t)
	dbPath := filepath.Join(t.TempDir(), "dpcs.db")
	env := map[string]string{
		"DPCS_KAFKA_BROKERS": strings.Join(c.ListenAddrs(), ","), "DPCS_REDIS_ADDR": mr.Addr(),
		"DPCS_SQLITE_PATH": dbPath, "DPCS_HTTP_ADDR": "127.0.0.1:0", "DPCS_LOG_LEVEL": "warn",
		"DPCS_JWT_SECRET": strings.Repeat("s", 32), "DPCS_ADMIN_ADDR": freeAddr(t),
	}
	getenv := func(k string) string { return env[k] }

	// A family in SQL, nothing in Redis yet.
	cfg, _ := service.LoadConfig(getenv)
	db, err := cfg.SQL(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	st, _ := store.New(db)
	if _, err := st.CreateFamily(context.Background(), store.NewFamily{ID: 7, Name: "f", PlanBytes: 1 << 20}, store.System); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := run(context.Background(), []string{"rebuild", "7"}, getenv, io.Discard, nil); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	eng, _ := quota.New(rdb)
	if fs, err := eng.Family(context.Background(), 7); err != nil || fs.Total != 1<<20 {
		t.Fatalf("after rebuild: %+v %v", fs, err)
	}
	if err := run(context.Background(), []string{"rebuild", "x"}, getenv, io.Discard, nil); err == nil {
		t.Error("bad family id accepted")
	}

	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, getenv, io.Discard, ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(20 * time.Second):
		t.Fatal("not ready")
	}
	for _, path := range []string{"/healthz", "/openapi.json"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, b)
		}
	}
	resp, err := http.Get("http://" + addr + "/families/7")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("dashboard without a token: %d", resp.StatusCode)
	}
	// The admin address: alive, ready (Redis and SQL answer), and the API
	// request above measured by operation id and status.
	admin := "http://" + getenv("DPCS_ADMIN_ADDR")
	for path, want := range map[string]string{"/healthz": "ok\n", "/readyz": "ready\n"} {
		if got := get(t, admin+path); got != want {
			t.Errorf("admin %s: %q", path, got)
		}
	}
	m := get(t, admin+"/metrics")
	for _, want := range []string{`dpcs_api_request_seconds_count{operation="get-family",status="401"} 1`,
		`dpcs_kafka_connects_total{client="producer"`, "# TYPE dpcs_relay_lag_seconds histogram", "go_goroutines"} {
		if !strings.Contains(m, want) {
			t.Errorf("admin /metrics lacks %q", want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

// rebuild restores every family it can, prints what it did and which
// families failed and why, and fails (exit status 1) when any did.
func TestRebuildReportsFailedFamilies(t *testing.T) {
	ctx := context.Background()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mr := miniredis.RunT(t)
	env := map[string]string{
		"DPCS_KAFKA_BROKERS": strings.Join(c.ListenAddrs(), ","), "DPCS_REDIS_ADDR": mr.Addr(),
		"DPCS_SQLITE_PATH": filepath.Join(t.TempDir(), "dpcs.db"), "DPCS_LOG_LEVEL": "warn",
		"DPCS_JWT_SECRET": strings.Repeat("s", 32),
	}
	getenv := func(k string) string { return env[k] }
	cfg, err := service.LoadConfig(getenv)
	if err != nil {
		t.Fatal(err)
	}
	db, err := cfg.SQL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(db, store.WithLocation(cfg.Zone))
	if err != nil {
		t.Fatal(err)
	}
	for _, fid := range []int64{7, 8, 9} {
		if _, err := st.CreateFamily(ctx, store.NewFamily{ID: fid, Name: "f", PlanBytes: 1 << 20}, store.System); err != nil {
			t.Fatal(err)
		}
	}
	// Family 8: a top-up over the maximum, written before the API checked
	// it (this month's and next month's, whichever the rebuild sees).
	now := time.Now()
	for _, at := range []time.Time{now, now.AddDate(0, 1, 0)} {
		if _, err := db.ExecContext(ctx, `INSERT INTO topups (family_id, bytes, month, created_by, created_at) VALUES (8, ?, ?, 1, ?)`,
			policy.MaxBytes, policy.MomentOf(at, cfg.Zone).Month, now.UTC().Format(time.RFC3339)); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	var out bytes.Buffer
	err = run(ctx, []string{"rebuild"}, getenv, &out, nil)
	if err == nil || !strings.Contains(err.Error(), "1 of 3 families") {
		t.Errorf("rebuild with a failing family: err = %v, want one naming 1 of 3 families", err)
	}
	for _, want := range []string{"families restored: 2, failed: 1", "failed family 8: ", "plan and top-ups"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report does not say %q:\n%s", want, out.String())
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	eng, err := quota.New(rdb, quota.WithLocation(cfg.Zone))
	if err != nil {
		t.Fatal(err)
	}
	for _, fid := range []int64{7, 9} {
		if fs, err := eng.Family(ctx, fid); err != nil || fs.Total != 1<<20 {
			t.Errorf("family %d after rebuild: %+v %v", fid, fs, err)
		}
	}
}
