package service

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoadConfig(t *testing.T) {
	c, err := LoadConfig(env(map[string]string{
		"DPCS_KAFKA_BROKERS": "a:9092, b:9092", "DPCS_REDIS_CLUSTER": "r1:7000,r2:7000",
		"DPCS_DEDUPE_WINDOW": "6h", "DPCS_LOG_LEVEL": "debug", "DPCS_TIMEZONE": "UTC",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.KafkaBrokers) != 2 || c.KafkaBrokers[1] != "b:9092" || len(c.RedisCluster) != 2 ||
		c.DedupeWindow != 6*time.Hour || c.LogLevel != slog.LevelDebug || c.Zone.String() != "UTC" || c.SQLitePath != "dpcs.db" {
		t.Errorf("%+v", c)
	}
	if rdb, err := c.Redis(); err != nil || rdb == nil {
		t.Errorf("redis: %v", err)
	}
	_, err = LoadConfig(env(map[string]string{
		"DPCS_REDIS_ADDR": "x", "DPCS_REDIS_CLUSTER": "y", "DPCS_DEDUPE_WINDOW": "1m",
		"DPCS_LOG_LEVEL": "loud", "DPCS_TIMEZONE": "Mars/Base",
	}))
	for _, v := range []string{"DPCS_REDIS_ADDR", "DPCS_DEDUPE_WINDOW", "DPCS_LOG_LEVEL", "DPCS_TIMEZONE"} {
		if err == nil || !strings.Contains(err.Error(), v) {
			t.Errorf("error %v does not name %s", err, v)
		}
	}
	c, _ = LoadConfig(env(map[string]string{"DPCS_SQLITE_PATH": filepath.Join(t.TempDir(), "x.db")}))
	if _, err := c.Redis(); err == nil {
		t.Error("no redis configured, no error")
	}
	db, err := c.SQL(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	c.MySQLDSN = "nobody:x@tcp(127.0.0.1:1)/none?timeout=100ms"
	if _, err := c.SQL(context.Background()); err == nil {
		t.Error("unreachable MySQL, no error")
	}
}
