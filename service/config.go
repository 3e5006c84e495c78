package service

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql" // the MySQL / MariaDB driver for DPCS_MYSQL_DSN
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // the embedded SQL store

	"github.com/dabom/dpcs/idempotency"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// Config is the deployables' configuration, read from DPCS_* variables.
type Config struct {
	// KafkaBrokers (DPCS_KAFKA_BROKERS, comma-separated).
	KafkaBrokers []string
	// RedisAddr (DPCS_REDIS_ADDR) or RedisCluster (DPCS_REDIS_CLUSTER, comma-separated).
	RedisAddr    string
	RedisCluster []string
	// ReplicaAck (DPCS_REDIS_REPLICA_ACK, default 0: off) is how many
	// replicas must acknowledge a batch's writes (Redis WAIT, per master)
	// before its decisions are produced; ReplicaAckTimeout
	// (DPCS_REDIS_REPLICA_ACK_TIMEOUT, default 100ms) bounds the wait, after
	// which the batch is retried. See quota.WithReplicaAck.
	ReplicaAck        int
	ReplicaAckTimeout time.Duration
	// MySQLDSN (DPCS_MYSQL_DSN, go-sql-driver form); when empty the SQLite
	// file SQLitePath (DPCS_SQLITE_PATH, default dpcs.db) is used.
	MySQLDSN   string
	SQLitePath string
	// Zone (DPCS_TIMEZONE, default Asia/Seoul) judges windows, days and months.
	Zone *time.Location
	// DedupeWindow (DPCS_DEDUPE_WINDOW, default 24h) is how long event ids are
	// remembered; the processor rejects events older than it minus an hour.
	DedupeWindow time.Duration
	// LogLevel (DPCS_LOG_LEVEL: debug, info, warn, error; default info).
	LogLevel slog.Level
	// WebhookURL (DPCS_WEBHOOK_URL) receives CUSTOMER_BLOCKED and
	// THRESHOLD_ALERT notifications signed with WebhookSecret
	// (DPCS_WEBHOOK_SECRET, at least 16 bytes). Empty: no external channel.
	WebhookURL    string
	WebhookSecret string
	// Recovery (DPCS_RECOVERY: auto, manual, off; default auto) is what the
	// processor does when Redis cannot be trusted (it came back empty, from
	// an older snapshot or another generation): auto rebuilds it from SQL
	// and resumes; manual pauses judging until an operator runs `server
	// rebuild`; off judges whatever Redis holds (the state is trusted).
	Recovery string
	// AuthLimits are the API's brute-force limits (see AuthLimits; unset:
	// the defaults). DPCS_AUTH_RATE_ADDRESS (logins per client address,
	// default 60/1m), DPCS_AUTH_RATE_LOGIN (attempts per login from all
	// addresses, default 10/1m) and DPCS_AUTH_RATE_REFRESH (refreshes per
	// client address, default 120/1m) are rates written N/duration;
	// DPCS_AUTH_LOCKOUT_AFTER (consecutive failures that lock a login,
	// default 10) and DPCS_AUTH_LOCKOUT_FOR (how long, default 15m).
	AuthLimits AuthLimits
	// TrustedProxies (DPCS_TRUSTED_PROXIES, comma-separated CIDRs or
	// addresses; default none) are the reverse proxies whose
	// X-Forwarded-For tells the client address. Without them the client
	// address is the TCP peer's: behind a proxy, every client would share
	// the proxy's limits.
	TrustedProxies []netip.Prefix
	// AdminAddr (DPCS_ADMIN_ADDR) is where a deployable serves /healthz,
	// /readyz and /metrics. Default: the deployable's own (AdminAddress):
	// the processor 127.0.0.1:9090, the server 127.0.0.1:9091, the simulator
	// 127.0.0.1:9093, the all-in-one 127.0.0.1:9094; "off" serves none.
	AdminAddr string
	// Tracing (DPCS_OTLP_ENDPOINT or the standard OTEL_EXPORTER_OTLP_ENDPOINT,
	// DPCS_TRACE_SAMPLE_RATIO; default off) exports OpenTelemetry traces;
	// see Tracing and doc/observability.md (Tracing).
	Tracing TracingConfig
}

// Default admin addresses of the deployables (DPCS_ADMIN_ADDR), one each so
// they can run side by side on one machine (9092 is Kafka's).
const (
	DefaultProcessorAdminAddr = "127.0.0.1:9090"
	DefaultServerAdminAddr    = "127.0.0.1:9091"
	DefaultSimulatorAdminAddr = "127.0.0.1:9093"
	DefaultAllInOneAdminAddr  = "127.0.0.1:9094"
)

// AdminAddress is the admin address to listen on: DPCS_ADMIN_ADDR, else def;
// "" when DPCS_ADMIN_ADDR is off.
func (c Config) AdminAddress(def string) string {
	switch c.AdminAddr {
	case "":
		return def
	case "off":
		return ""
	}
	return c.AdminAddr
}

// LoadConfig reads the configuration through getenv (os.Getenv in mains).
// Errors name the variable.
func LoadConfig(getenv func(string) string) (Config, error) {
	c := Config{SQLitePath: "dpcs.db", DedupeWindow: 24 * time.Hour, ReplicaAckTimeout: 100 * time.Millisecond, Recovery: "auto"}
	var errs []error
	list := func(s string) []string {
		var out []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	c.KafkaBrokers = list(getenv("DPCS_KAFKA_BROKERS"))
	c.RedisAddr = strings.TrimSpace(getenv("DPCS_REDIS_ADDR"))
	c.RedisCluster = list(getenv("DPCS_REDIS_CLUSTER"))
	if c.RedisAddr != "" && len(c.RedisCluster) > 0 {
		errs = append(errs, errors.New("DPCS_REDIS_ADDR and DPCS_REDIS_CLUSTER: set one, not both"))
	}
	if v := getenv("DPCS_REDIS_REPLICA_ACK"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("DPCS_REDIS_REPLICA_ACK: want a number of replicas ≥ 0, got %q", v))
		}
		c.ReplicaAck = n
	}
	if v := getenv("DPCS_REDIS_REPLICA_ACK_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Millisecond || d >= 3*time.Second {
			errs = append(errs, fmt.Errorf("DPCS_REDIS_REPLICA_ACK_TIMEOUT: want a duration from 1ms to below 3s (the Redis read timeout), got %q", v))
		}
		c.ReplicaAckTimeout = d
	}
	if c.ReplicaAck > 0 && c.RedisAddr == "" && len(c.RedisCluster) == 0 {
		errs = append(errs, errors.New("DPCS_REDIS_REPLICA_ACK: needs DPCS_REDIS_ADDR or DPCS_REDIS_CLUSTER (the embedded Redis has no replicas)"))
	}
	switch v := getenv("DPCS_RECOVERY"); v {
	case "":
	case "auto", "manual", "off":
		c.Recovery = v
	default:
		errs = append(errs, fmt.Errorf("DPCS_RECOVERY: want auto, manual or off, got %q", v))
	}
	c.MySQLDSN = getenv("DPCS_MYSQL_DSN")
	if v := getenv("DPCS_SQLITE_PATH"); v != "" {
		c.SQLitePath = v
	}
	zone, err := policy.LoadZone(getenv("DPCS_TIMEZONE"))
	if err != nil {
		errs = append(errs, fmt.Errorf("DPCS_TIMEZONE: %w", err))
	}
	c.Zone = zone
	if v := getenv("DPCS_DEDUPE_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 2*time.Hour || d > 30*24*time.Hour {
			errs = append(errs, fmt.Errorf("DPCS_DEDUPE_WINDOW: want a duration from 2h to 720h, got %q", v))
		}
		c.DedupeWindow = d
	}
	if v := getenv("DPCS_LOG_LEVEL"); v != "" {
		if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
			errs = append(errs, fmt.Errorf("DPCS_LOG_LEVEL: %w", err))
		}
	}
	for _, r := range []struct {
		name string
		dst  *Rate
	}{{"DPCS_AUTH_RATE_ADDRESS", &c.AuthLimits.LoginPerAddress}, {"DPCS_AUTH_RATE_LOGIN", &c.AuthLimits.LoginPerLogin},
		{"DPCS_AUTH_RATE_REFRESH", &c.AuthLimits.RefreshPerAddress}} {
		if v := getenv(r.name); v != "" {
			rate, err := ParseRate(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", r.name, err))
			}
			*r.dst = rate
		}
	}
	if v := getenv("DPCS_AUTH_LOCKOUT_AFTER"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			errs = append(errs, fmt.Errorf("DPCS_AUTH_LOCKOUT_AFTER: want a number of failures from 1 to 1000, got %q", v))
		}
		c.AuthLimits.LockoutAfter = n
	}
	if v := getenv("DPCS_AUTH_LOCKOUT_FOR"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second || d > 24*time.Hour {
			errs = append(errs, fmt.Errorf("DPCS_AUTH_LOCKOUT_FOR: want a duration from 1s to 24h, got %q", v))
		}
		c.AuthLimits.LockoutFor = d
	}
	for _, p := range list(getenv("DPCS_TRUSTED_PROXIES")) {
		prefix, err := netip.ParsePrefix(p)
		if err != nil {
			a, aerr := netip.ParseAddr(p)
			if aerr != nil || a.Zone() != "" {
				errs = append(errs, fmt.Errorf("DPCS_TRUSTED_PROXIES: %q is neither a CIDR nor an address", p))
				continue
			}
			prefix = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		c.TrustedProxies = append(c.TrustedProxies, prefix.Masked())
	}
	c.AdminAddr = strings.TrimSpace(getenv("DPCS_ADMIN_ADDR"))
	if a := c.AdminAddr; a != "" && a != "off" {
		if _, _, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("DPCS_ADMIN_ADDR: want host:port or off, got %q", a))
		}
	}
	c.WebhookURL, c.WebhookSecret = getenv("DPCS_WEBHOOK_URL"), getenv("DPCS_WEBHOOK_SECRET")
	if c.WebhookURL != "" && len(c.WebhookSecret) < 16 {
		errs = append(errs, errors.New("DPCS_WEBHOOK_SECRET: at least 16 bytes are required with DPCS_WEBHOOK_URL"))
	}
	tr, err := loadTracing(getenv)
	if err != nil {
		errs = append(errs, err)
	}
	c.Tracing = tr
	return c, errors.Join(errs...)
}

// notifierLease is the notifier's idempotency claim lease.
const notifierLease = 10 * time.Second

// NotifierOptions are the notifier's options for this configuration: a Redis
// idempotency guard in front of the inbox, and the webhook channel if set.
func (c Config) NotifierOptions(rdb redis.UniversalClient) ([]notify.Option, error) {
	st, err := idempotency.NewRedisStore(rdb)
	if err != nil {
		return nil, err
	}
	// A claim covers two SQL statements; a short lease bounds how long a
	// notifier killed mid-claim holds up the others (its records are
	// redelivered to them and wait out the lease inside their poll).
	g, err := idempotency.New(st, idempotency.WithLease(notifierLease))
	if err != nil {
		return nil, err
	}
	opts := []notify.Option{notify.WithGuard(g), notify.WithLocation(c.Zone)}
	if c.WebhookURL != "" {
		wh, err := notify.NewWebhook(c.WebhookURL, []byte(c.WebhookSecret))
		if err != nil {
			return nil, fmt.Errorf("DPCS_WEBHOOK_URL: %w", err)
		}
		opts = append(opts, notify.WithChannel("webhook", wh))
	}
	return opts, nil
}

// EngineOptions are the quota engine's options for this configuration: the
// zone, the dedupe window and, when DPCS_REDIS_REPLICA_ACK is set, the
// replica acknowledgement.
func (c Config) EngineOptions() []quota.Option {
	opts := []quota.Option{quota.WithLocation(c.Zone), quota.WithDedupeTTL(c.DedupeWindow)}
	if c.ReplicaAck > 0 {
		opts = append(opts, quota.WithReplicaAck(c.ReplicaAck, c.ReplicaAckTimeout))
	}
	return opts
}

// Redis opens the configured Redis (a ClusterClient for DPCS_REDIS_CLUSTER).
func (c Config) Redis() (redis.UniversalClient, error) {
	switch {
	case len(c.RedisCluster) > 0:
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.RedisCluster}), nil
	case c.RedisAddr != "":
		return redis.NewClient(&redis.Options{Addr: c.RedisAddr}), nil
	}
	return nil, errors.New("DPCS_REDIS_ADDR or DPCS_REDIS_CLUSTER: required")
}

// SQL opens the configured database: MySQL when DPCS_MYSQL_DSN is set, else
// the SQLite file, and checks that it answers.
func (c Config) SQL(ctx context.Context) (*sql.DB, error) {
	driver, dsn := "mysql", c.MySQLDSN
	if dsn == "" {
		driver = "sqlite"
		dsn = "file:" + c.SQLitePath + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", driver, err)
	}
	if driver == "sqlite" {
		db.SetMaxOpenConns(1) // one writer; WAL readers go through the same handle
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect %s: %w", driver, err)
	}
	return db, nil
}
