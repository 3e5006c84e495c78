package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service"
	"github.com/dabom/dpcs/service/store"
)

func TestRunNeedsInfrastructure(t *testing.T) {
	err := run(context.Background(), nil, func(string) string { return "" }, nil)
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
		"DPCS_JWT_SECRET": strings.Repeat("s", 32),
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
	if err := run(context.Background(), []string{"rebuild", "7"}, getenv, nil); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	eng, _ := quota.New(rdb)
	if fs, err := eng.Family(context.Background(), 7); err != nil || fs.Total != 1<<20 {
		t.Fatalf("after rebuild: %+v %v", fs, err)
	}
	if err := run(context.Background(), []string{"rebuild", "x"}, getenv, nil); err == nil {
		t.Error("bad family id accepted")
	}

	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, getenv, ready) }()
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
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
