package service

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/api"
	"github.com/dabom/dpcs/service/limit"
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

func TestLoadConfigReplicaAck(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		replica int
		timeout time.Duration
		errVar  string // the variable the error names; "" for none
	}{
		{"off by default", map[string]string{"DPCS_REDIS_ADDR": "r:6379"}, 0, 100 * time.Millisecond, ""},
		{"on", map[string]string{"DPCS_REDIS_ADDR": "r:6379", "DPCS_REDIS_REPLICA_ACK": "1"}, 1, 100 * time.Millisecond, ""},
		{"cluster, own timeout", map[string]string{"DPCS_REDIS_CLUSTER": "r:7000", "DPCS_REDIS_REPLICA_ACK": "2", "DPCS_REDIS_REPLICA_ACK_TIMEOUT": "250ms"}, 2, 250 * time.Millisecond, ""},
		{"not a number", map[string]string{"DPCS_REDIS_ADDR": "r:6379", "DPCS_REDIS_REPLICA_ACK": "one"}, 0, 0, "DPCS_REDIS_REPLICA_ACK"},
		{"negative", map[string]string{"DPCS_REDIS_ADDR": "r:6379", "DPCS_REDIS_REPLICA_ACK": "-1"}, 0, 0, "DPCS_REDIS_REPLICA_ACK"},
		{"timeout past the read timeout", map[string]string{"DPCS_REDIS_ADDR": "r:6379", "DPCS_REDIS_REPLICA_ACK": "1", "DPCS_REDIS_REPLICA_ACK_TIMEOUT": "3s"}, 0, 0, "DPCS_REDIS_REPLICA_ACK_TIMEOUT"},
		{"timeout zero", map[string]string{"DPCS_REDIS_ADDR": "r:6379", "DPCS_REDIS_REPLICA_ACK": "1", "DPCS_REDIS_REPLICA_ACK_TIMEOUT": "0s"}, 0, 0, "DPCS_REDIS_REPLICA_ACK_TIMEOUT"},
		{"embedded redis", map[string]string{"DPCS_REDIS_REPLICA_ACK": "1"}, 0, 0, "DPCS_REDIS_REPLICA_ACK"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := LoadConfig(env(tt.env))
			if tt.errVar != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errVar+":") {
					t.Fatalf("error %v does not name %s", err, tt.errVar)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.ReplicaAck != tt.replica || c.ReplicaAckTimeout != tt.timeout {
				t.Errorf("got %d replicas, %v; want %d, %v", c.ReplicaAck, c.ReplicaAckTimeout, tt.replica, tt.timeout)
			}
			// The options are valid for the configured client.
			rdb, err := c.Redis()
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			if _, err := quota.New(rdb, c.EngineOptions()...); err != nil {
				t.Errorf("engine options: %v", err)
			}
		})
	}
}

func TestLoadConfigAuthLimits(t *testing.T) {
	c, err := LoadConfig(env(map[string]string{
		"DPCS_AUTH_RATE_ADDRESS": "300/1m", "DPCS_AUTH_RATE_LOGIN": "5/30s", "DPCS_AUTH_RATE_REFRESH": "1000/1h",
		"DPCS_AUTH_LOCKOUT_AFTER": "20", "DPCS_AUTH_LOCKOUT_FOR": "1h",
		"DPCS_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.7 ,fd00::/8,::1, 10.1.2.3/8",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := api.AuthLimits{LoginPerAddress: limit.Rate{N: 300, Per: time.Minute}, LoginPerLogin: limit.Rate{N: 5, Per: 30 * time.Second},
		RefreshPerAddress: limit.Rate{N: 1000, Per: time.Hour}, LockoutAfter: 20, LockoutFor: time.Hour}
	if c.AuthLimits != want {
		t.Errorf("limits %+v, want %+v", c.AuthLimits, want)
	}
	var proxies []string
	for _, p := range c.TrustedProxies {
		proxies = append(proxies, p.String())
	}
	if got := strings.Join(proxies, ","); got != "10.0.0.0/8,192.0.2.7/32,fd00::/8,::1/128,10.0.0.0/8" {
		t.Errorf("proxies %s", got)
	}
	if c, err := LoadConfig(env(nil)); err != nil || c.AuthLimits != (api.AuthLimits{}) || c.TrustedProxies != nil {
		t.Errorf("unset: %+v %v, %v (want zero limits: api.New's defaults)", c.AuthLimits, c.TrustedProxies, err)
	}
	_, err = LoadConfig(env(map[string]string{
		"DPCS_AUTH_RATE_ADDRESS": "60", "DPCS_AUTH_RATE_LOGIN": "0/1m", "DPCS_AUTH_RATE_REFRESH": "5/forever",
		"DPCS_AUTH_LOCKOUT_AFTER": "0", "DPCS_AUTH_LOCKOUT_FOR": "5ms", "DPCS_TRUSTED_PROXIES": "proxy.example",
	}))
	for _, v := range []string{"DPCS_AUTH_RATE_ADDRESS", "DPCS_AUTH_RATE_LOGIN", "DPCS_AUTH_RATE_REFRESH",
		"DPCS_AUTH_LOCKOUT_AFTER", "DPCS_AUTH_LOCKOUT_FOR", "DPCS_TRUSTED_PROXIES"} {
		if err == nil || !strings.Contains(err.Error(), v) {
			t.Errorf("error %v does not name %s", err, v)
		}
	}
}

func TestAdminAddress(t *testing.T) {
	tests := []struct {
		env, want string
		bad       bool
	}{
		{env: "", want: DefaultProcessorAdminAddr},
		{env: "off", want: ""},
		{env: "0.0.0.0:9200", want: "0.0.0.0:9200"},
		{env: ":9200", want: ":9200"},
		{env: "9200", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			c, err := LoadConfig(env(map[string]string{"DPCS_ADMIN_ADDR": tt.env}))
			if tt.bad {
				if err == nil || !strings.Contains(err.Error(), "DPCS_ADMIN_ADDR") {
					t.Fatalf("error %v does not name DPCS_ADMIN_ADDR", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.AdminAddress(DefaultProcessorAdminAddr); got != tt.want {
				t.Errorf("AdminAddress = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLoadConfigStoreQuotaUpdated(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    bool
		wantErr bool
	}{
		{"", false, false},
		{"true", true, false},
		{"false", false, false},
		{"sometimes", false, true},
	} {
		t.Run(tc.value, func(t *testing.T) {
			c, err := LoadConfig(env(map[string]string{"DPCS_NOTIFIER_STORE_QUOTA_UPDATED": tc.value}))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && c.StoreQuotaUpdated != tc.want {
				t.Errorf("StoreQuotaUpdated = %v, want %v", c.StoreQuotaUpdated, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), "DPCS_NOTIFIER_STORE_QUOTA_UPDATED") {
				t.Errorf("error does not name the variable: %v", err)
			}
		})
	}
}

// TestListenAddrOff: "off" turns a listener off, as a reader of the
// configuration expects; unset keeps the default; anything that is not
// host:port is refused naming the variable. (Before, an empty
// DPCS_SIMULATOR_ADDR meant to turn the simulator's API off took the
// default 127.0.0.1:8081, and a test that set it failed whenever anything
// else listened there.)
func TestListenAddrOff(t *testing.T) {
	for _, c := range []struct {
		value, want, err string
	}{
		{"", "127.0.0.1:8081", ""},
		{"off", "", ""},
		{"127.0.0.1:0", "127.0.0.1:0", ""},
		{"8081", "", "DPCS_SIMULATOR_ADDR"},
	} {
		get := env(map[string]string{"DPCS_SIMULATOR_ADDR": c.value})
		sys, err := LoadSystemConfig(get)
		sim, serr := LoadSimulatorConfig(get)
		for _, got := range []struct {
			addr string
			err  error
		}{{sys.SimulatorAddr, err}, {sim.Addr, serr}} {
			switch {
			case c.err != "" && (got.err == nil || !strings.Contains(got.err.Error(), c.err)):
				t.Errorf("%q: error %v, want one naming %s", c.value, got.err, c.err)
			case c.err == "" && (got.err != nil || got.addr != c.want):
				t.Errorf("%q: %q, %v; want %q", c.value, got.addr, got.err, c.want)
			}
		}
	}
}

// DPCS_REDIS_LONG_RESULTS makes the engine store its dedupe records in the
// long form engines before v0.2.0 read (a rolling upgrade); by default they
// are short.
func TestLoadConfigLongResults(t *testing.T) {
	for _, tt := range []struct {
		value, prefix string
	}{{"", "a"}, {"false", "a"}, {"true", "ALLOWED|"}} {
		t.Run("value "+tt.value, func(t *testing.T) {
			m := miniredis.RunT(t)
			c, err := LoadConfig(env(map[string]string{"DPCS_REDIS_ADDR": m.Addr(), "DPCS_REDIS_LONG_RESULTS": tt.value}))
			if err != nil {
				t.Fatal(err)
			}
			rdb, err := c.Redis()
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			e, err := quota.New(rdb, c.EngineOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := e.SetPlan(ctx, 1, 100); err != nil {
				t.Fatal(err)
			}
			if err := e.AddMember(ctx, 1, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Apply(ctx, quota.Event{ID: "evt_1", FamilyID: 1, CustomerID: 1, Bytes: 10, At: time.Now()}); err != nil {
				t.Fatal(err)
			}
			var stored []string
			for _, k := range m.Keys() {
				if strings.Contains(k, ":evt:") {
					stored = append(stored, m.HGet(k, "evt_1"))
				}
			}
			if len(stored) != 1 || !strings.HasPrefix(stored[0], tt.prefix) {
				t.Errorf("stored %q, want one record starting %q", stored, tt.prefix)
			}
		})
	}
	if _, err := LoadConfig(env(map[string]string{"DPCS_REDIS_ADDR": "r:6379", "DPCS_REDIS_LONG_RESULTS": "maybe"})); err == nil || !strings.Contains(err.Error(), "DPCS_REDIS_LONG_RESULTS") {
		t.Errorf("error %v does not name DPCS_REDIS_LONG_RESULTS", err)
	}
}

// DPCS_CHARGING_RECORD_LINGER: 1 ms unless set, 0 to 100 ms.
func TestLoadConfigRecordLinger(t *testing.T) {
	load := func(v map[string]string) (SystemConfig, error) {
		if v == nil {
			v = map[string]string{}
		}
		v["DPCS_DATA_DIR"] = t.TempDir()
		return LoadSystemConfig(env(v))
	}
	c, err := load(nil)
	if err != nil || c.Charging.RecordLinger != time.Millisecond {
		t.Errorf("unset: %s, %v; want 1ms", c.Charging.RecordLinger, err)
	}
	if c, err := load(map[string]string{"DPCS_CHARGING_RECORD_LINGER": "0"}); err != nil || c.Charging.RecordLinger != 0 {
		t.Errorf("0: %s, %v", c.Charging.RecordLinger, err)
	}
	for _, bad := range []string{"-1ms", "101ms", "soon"} {
		if _, err := load(map[string]string{"DPCS_CHARGING_RECORD_LINGER": bad}); err == nil ||
			!strings.Contains(err.Error(), "DPCS_CHARGING_RECORD_LINGER") {
			t.Errorf("%q: error %v does not name DPCS_CHARGING_RECORD_LINGER", bad, err)
		}
	}
}
