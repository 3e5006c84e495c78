package service

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql" // the MySQL / MariaDB driver for DPCS_MYSQL_DSN
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // the embedded SQL store

	"github.com/dabom/dpcs/idempotency"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/api"
	"github.com/dabom/dpcs/service/charging"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/recovery"
)

// Config is the deployables' configuration, read from DPCS_* variables
// (doc/configuration.md lists them all; TestConfigurationDoc keeps that
// table equal to these tags).
type Config struct {
	// KafkaBrokers (DPCS_KAFKA_BROKERS, comma-separated).
	KafkaBrokers []string `envconfig:"KAFKA_BROKERS" desc:"Kafka seed brokers, comma-separated. Empty: the embedded Kafka (all-in-one, processor without a Redis address); the server requires it"`
	// RedisAddr (DPCS_REDIS_ADDR) or RedisCluster (DPCS_REDIS_CLUSTER, comma-separated).
	RedisAddr    string   `envconfig:"REDIS_ADDR" desc:"Redis host:port (one primary). Empty and no DPCS_REDIS_CLUSTER: the embedded Redis, rebuilt from SQL at start"`
	RedisCluster []string `envconfig:"REDIS_CLUSTER" desc:"Redis Cluster seed host:port list, comma-separated, instead of DPCS_REDIS_ADDR (set one, not both)"`
	// Kafka (DPCS_KAFKA_TLS*, DPCS_KAFKA_SASL_*) and RedisSec
	// (DPCS_REDIS_USERNAME, DPCS_REDIS_PASSWORD, DPCS_REDIS_TLS*) secure the
	// connections to real brokers and Redis; see KafkaSecurity and
	// RedisSecurity.
	Kafka    KafkaSecurity `envconfig:"KAFKA"`
	RedisSec RedisSecurity `envconfig:"REDIS"`
	// ReplicaAck (DPCS_REDIS_REPLICA_ACK, default 0: off) is how many
	// replicas must acknowledge a batch's writes (Redis WAIT, per master)
	// before its decisions are produced; ReplicaAckTimeout
	// (DPCS_REDIS_REPLICA_ACK_TIMEOUT, default 100ms) bounds the wait, after
	// which the batch is retried. See quota.WithReplicaAck.
	ReplicaAck        int           `envconfig:"REDIS_REPLICA_ACK" default:"0" desc:"replicas that must acknowledge every Redis write (WAIT, per master): a batch's before its decisions are produced, a family change's before it is answered; 0: off. Needs a real Redis"`
	ReplicaAckTimeout time.Duration `envconfig:"REDIS_REPLICA_ACK_TIMEOUT" default:"100ms" desc:"how long a batch waits for the replicas (1ms to below 3s) before it is retried"`
	// LongResults (DPCS_REDIS_LONG_RESULTS, default false) stores the
	// engine's dedupe records in the long form engines before v0.2.0 read,
	// for a rolling upgrade from them. See quota.WithLongResults.
	LongResults bool `envconfig:"REDIS_LONG_RESULTS" default:"false" desc:"store dedupe records in the long form engines before v0.2.0 read: on while upgrading from them, off once none runs (off: the short form, about half the dedupe memory)"`
	// MySQLDSN (DPCS_MYSQL_DSN, go-sql-driver form); when empty the SQLite
	// file SQLitePath (DPCS_SQLITE_PATH, default dpcs.db) is used.
	MySQLDSN   string `envconfig:"MYSQL_DSN" desc:"MySQL/MariaDB DSN (go-sql-driver form, with parseTime=true). Empty: the SQLite file DPCS_SQLITE_PATH"`
	SQLitePath string `envconfig:"SQLITE_PATH" default:"dpcs.db" doc_default:"dpcs.db; all-in-one and embedded processor: $DPCS_DATA_DIR/dpcs.db" desc:"SQLite file used without DPCS_MYSQL_DSN"`
	// Timezone (DPCS_TIMEZONE, default Asia/Seoul) names Zone.
	Timezone string `envconfig:"TIMEZONE" default:"Asia/Seoul" desc:"IANA time zone that judges windows, days and months"`
	// Zone is the loaded Timezone; it judges windows, days and months.
	Zone *time.Location `ignored:"true"`
	// DedupeWindow (DPCS_DEDUPE_WINDOW, default 24h) is how long event ids are
	// remembered; the processor rejects events older than it minus an hour.
	DedupeWindow time.Duration `envconfig:"DEDUPE_WINDOW" default:"24h" desc:"how long event ids are remembered (2h to 720h); the processor rejects events older than it minus an hour"`
	// LogLevel (DPCS_LOG_LEVEL: debug, info, warn, error; default info).
	LogLevel slog.Level `envconfig:"LOG_LEVEL" default:"info" desc:"log level: debug, info, warn or error"`
	// WebhookURL (DPCS_WEBHOOK_URL) receives CUSTOMER_BLOCKED and
	// THRESHOLD_ALERT notifications signed with WebhookSecret
	// (DPCS_WEBHOOK_SECRET, at least 16 bytes). Empty: no external channel.
	WebhookURL    string `envconfig:"WEBHOOK_URL" desc:"URL the notifier POSTs CUSTOMER_BLOCKED and THRESHOLD_ALERT notifications to, signed with DPCS_WEBHOOK_SECRET (doc/security.md, Verifying webhooks). Empty: no webhook"`
	WebhookSecret string `envconfig:"WEBHOOK_SECRET" desc:"HMAC-SHA256 key of the webhook signatures, at least 16 bytes; required with DPCS_WEBHOOK_URL"`
	// VAPIDPublicKey, VAPIDPrivateKey (DPCS_VAPID_PUBLIC_KEY,
	// DPCS_VAPID_PRIVATE_KEY: base64url, as `server vapid-keys` prints them)
	// and VAPIDSubject (DPCS_VAPID_SUBJECT, mailto: or https:) turn on the
	// notifier's Web Push channel and the API's GET /push/vapid-public-key.
	// Unset on the processor and the server: no push (logged at start). The
	// all-in-one without keys generates a pair once and keeps it in its SQL
	// store. PushKinds (DPCS_PUSH_KINDS) are the notification kinds pushed.
	VAPIDPublicKey  string   `envconfig:"VAPID_PUBLIC_KEY" deployables:"processor, server, all-in-one" doc_default:"all-in-one: generated once, kept in its SQL store; processor, server: none (no web push)" desc:"Web Push application server public key (uncompressed P-256, base64url; server vapid-keys makes a pair). Set with DPCS_VAPID_PRIVATE_KEY and DPCS_VAPID_SUBJECT, the same on every processor and server"`
	VAPIDPrivateKey string   `envconfig:"VAPID_PRIVATE_KEY" deployables:"processor, server, all-in-one" desc:"Web Push application server private key (P-256 scalar, base64url): a secret (doc/security.md, Web Push keys)"`
	VAPIDSubject    string   `envconfig:"VAPID_SUBJECT" deployables:"processor, server, all-in-one" doc_default:"all-in-one: mailto:dpcs@localhost; processor, server: required with the keys" desc:"contact the push services' operators can reach: a mailto: or https: URI"`
	PushKinds       []string `envconfig:"PUSH_KINDS" default:"CUSTOMER_BLOCKED,THRESHOLD_ALERT,DATA_REQUESTED,DATA_REQUEST_ANSWERED,DATA_GIFTED,WEEKLY_SUMMARY" deployables:"processor, server, all-in-one" desc:"notification kinds sent as Web Push messages, comma-separated"`
	// CatalogRefresh (DPCS_CATALOG_REFRESH) is how often a process reads
	// the app catalog the back office edits (WatchCatalog).
	CatalogRefresh time.Duration `envconfig:"CATALOG_REFRESH" default:"30s" deployables:"processor, server, all-in-one" desc:"how often the judges read the app catalog the back office edits (app categories for category blocks), 1s to 1h; the API's own process takes an edit at once"`
	// GrantCharged (DPCS_GRANT_CHARGED) is the traffic the network charges
	// through grants (GrantChargedOpts, doc/wire-format.md "Charged once").
	GrantCharged string `envconfig:"GRANT_CHARGED" deployables:"processor, server, all-in-one" desc:"traffic the network charges through grants (its online rating groups): all, or <CATEGORY> and app:<appId> items, comma-separated, as DPCS_CHARGING_RATING_GROUPS maps them; usage events (Kafka, POST /decisions) for it are judged and recorded (grantChargedBytes) but charge nothing. Empty: every event charges"`
	// TopUpOffers (DPCS_TOPUP_OFFERS) are the top-ups the family app
	// offers with their prices (api.ParseTopUpOffers; GET /catalog).
	TopUpOffers string `envconfig:"TOPUP_OFFERS" default:"100MB=2200,500MB=5500,1GB=9900,3GB=19800" deployables:"server, all-in-one" desc:"the top-ups the family app offers and their prices in won, <amount>MB|GB=<won> comma-separated, at most 8; the app shows each with its price and asks before it tops up"`
	// VATRate (DPCS_VAT_RATE, percent, default 10) is the VAT included in
	// the offers' prices: receipts show it (api.Config.VATRate).
	VATRate int `envconfig:"VAT_RATE" default:"10" deployables:"server, all-in-one" desc:"the VAT included in the top-up offers' prices, in percent (0 to 100); receipts and the family's history show it"`
	// TopUps is TopUpOffers parsed.
	TopUps []api.TopUpOffer `ignored:"true"`
	// WeeklySummary (DPCS_WEEKLY_SUMMARY) is when the owners' weekly
	// summary of the week before is sent (ParseWeeklyAt; WeeklySummaries).
	WeeklySummary string `envconfig:"WEEKLY_SUMMARY" default:"MON 09:00" deployables:"server, all-in-one" desc:"when each family's owners get the summary of the week before (usage per member, blocks, requests), a weekday and a time of DPCS_TIMEZONE, e.g. MON 09:00; off: never. Sent once per family and week however many servers run"`
	// WeeklyAt is WeeklySummary parsed (nil: off).
	WeeklyAt *WeeklyAt `ignored:"true"`
	// PushTimeout (DPCS_PUSH_TIMEOUT) bounds each push to one endpoint
	// (notify.WithPushTimeout).
	PushTimeout time.Duration `envconfig:"PUSH_TIMEOUT" default:"3s" deployables:"processor, server, all-in-one" desc:"how long one Web Push request to one endpoint may take (connect, TLS, answer), 100ms to 1m; a slower endpoint fails that attempt and is retried later"`
	// PushMaxSubscriptions (DPCS_PUSH_MAX_SUBSCRIPTIONS) caps each member's
	// push subscriptions (api.Config.MaxPushSubscriptions).
	PushMaxSubscriptions int `envconfig:"PUSH_MAX_SUBSCRIPTIONS" default:"10" deployables:"server, all-in-one" desc:"most Web Push subscriptions (browsers) one member may have, 1 to 100; a new one beyond it is refused (409) until the member deletes one (doc/security.md, Web Push and webhook destinations)"`
	// Recovery (DPCS_RECOVERY: auto, manual, off; default auto) is what the
	// processor and the server's synchronous decisions do when Redis cannot
	// be trusted (it came back empty, from an older snapshot or another
	// generation): auto rebuilds it from SQL and resumes; manual pauses
	// judging until an operator runs `server rebuild`; off: the processor
	// judges whatever Redis holds (the state is trusted), the decisions
	// still answer only from the generation SQL names, and wait for a rebuild.
	Recovery string `envconfig:"RECOVERY" default:"auto" deployables:"processor, server" desc:"when Redis came back empty or stale: auto rebuilds it from SQL; manual pauses judging until server rebuild; off judges whatever Redis holds (processor; the server's decisions wait for a rebuild) (doc/runbook.md)"`
	// AuthLimits are the API's brute-force limits (see AuthLimits; unset:
	// the defaults). DPCS_AUTH_RATE_ADDRESS (logins per client address,
	// default 60/1m), DPCS_AUTH_RATE_LOGIN (attempts per login from all
	// addresses, default 10/1m) and DPCS_AUTH_RATE_REFRESH (refreshes per
	// client address, default 120/1m) are rates written N/duration;
	// DPCS_AUTH_LOCKOUT_AFTER (consecutive failures that lock a login,
	// default 10) and DPCS_AUTH_LOCKOUT_FOR (how long, default 15m).
	AuthLimits api.AuthLimits `envconfig:"AUTH"`
	// TrustedProxies (DPCS_TRUSTED_PROXIES, comma-separated CIDRs or
	// addresses; default none) are the reverse proxies whose
	// X-Forwarded-For tells the client address. Without them the client
	// address is the TCP peer's: behind a proxy, every client would share
	// the proxy's limits.
	TrustedProxies []netip.Prefix `envconfig:"TRUSTED_PROXIES" deployables:"server, all-in-one" desc:"reverse proxies (CIDRs or addresses, comma-separated) whose X-Forwarded-For names the client address. Empty: the TCP peer is the client"`
	// AdminAddr (DPCS_ADMIN_ADDR) is where a deployable serves /healthz,
	// /readyz and /metrics. Default: the deployable's own (AdminAddress):
	// the processor 127.0.0.1:9090, the server 127.0.0.1:9091, the simulator
	// 127.0.0.1:9093, the all-in-one 127.0.0.1:9094; "off" serves none.
	AdminAddr string `envconfig:"ADMIN_ADDR" doc_default:"processor 127.0.0.1:9090, server 127.0.0.1:9091, all-in-one 127.0.0.1:9094" desc:"host:port serving /healthz, /readyz and /metrics; off: none"`
	// AdminPprof (DPCS_ADMIN_PPROF, default false) also serves Go's
	// profiles (net/http/pprof) at /debug/pprof/ on the admin address, for
	// an operator measuring where a deployable's CPU goes.
	AdminPprof bool `envconfig:"ADMIN_PPROF" default:"false" desc:"true: the admin address also serves Go's profiles at /debug/pprof/ (CPU, heap, goroutines); keep the admin address private"`
	// KafkaSessionTimeout (DPCS_KAFKA_SESSION_TIMEOUT, 1s to 30m; 0: kgo's
	// 45s) is how soon the processors' group hands a crashed instance's
	// partitions to the others.
	KafkaSessionTimeout time.Duration `envconfig:"KAFKA_SESSION_TIMEOUT" doc_default:"45s (kgo's)" deployables:"processor" desc:"consumer group session timeout (1s to 30m): how soon a crashed instance's partitions go to the others"`
	// StartTimeout (DPCS_START_TIMEOUT, default 2m) is how long the
	// processor waits at start for Redis and SQL.
	StartTimeout time.Duration `envconfig:"START_TIMEOUT" default:"2m" deployables:"processor" desc:"how long the processor waits at start for Redis and SQL to answer"`
	// Notifier (DPCS_NOTIFIER: on or off; default on) runs the notifier in
	// the processor; off when a server runs it.
	Notifier string `envconfig:"NOTIFIER" default:"on" deployables:"processor" desc:"on or off: off leaves the notifier to the server deployable (whose SSE streams it feeds)"`
	// OperationsMetricsURLs (DPCS_OPERATIONS_METRICS_URLS, comma-separated;
	// default none) are the processors' admin /metrics pages the server's
	// operations view (GET /admin/operations) scrapes besides its own
	// registry; see Config.OperationsMetrics.
	OperationsMetricsURLs []string `envconfig:"OPERATIONS_METRICS_URLS" deployables:"server" desc:"the processors' admin /metrics URLs (http or https, comma-separated) that GET /admin/operations reads decisions, lag and Redis state from, e.g. http://processor-1:9090/metrics. Empty: the server's own metrics only (the all-in-one has the processor's)"`
	// StoreQuotaUpdated (DPCS_NOTIFIER_STORE_QUOTA_UPDATED, default false)
	// stores every QUOTA_UPDATED in the inbox too; by default they are
	// pushed live (SSE) only, as the dashboard shows the pool anyway (see
	// notify.WithStoreQuotaUpdated). CUSTOMER_BLOCKED and THRESHOLD_ALERT
	// are always stored.
	StoreQuotaUpdated bool `envconfig:"NOTIFIER_STORE_QUOTA_UPDATED" default:"false" desc:"true stores every QUOTA_UPDATED in the notification inbox too; false (default) pushes them to live SSE streams only, one inbox write fewer per allowed usage event. CUSTOMER_BLOCKED and THRESHOLD_ALERT are always stored"`
	// Streams bound the live SSE streams of an API instance (see
	// api.StreamLimits; unset: the defaults): DPCS_STREAMS_PER_SESSION
	// (default 5), DPCS_STREAMS_PER_MEMBER (10) and DPCS_STREAMS_MAX (2000).
	Streams api.StreamLimits `envconfig:"STREAMS"`
	// FamilyMaxMembers (DPCS_FAMILY_MAX_MEMBERS, 1 to 100, default 10) is
	// how many current members a family may have; see
	// store.WithMaxFamilyMembers and StoreOptions.
	FamilyMaxMembers int `envconfig:"FAMILY_MAX_MEMBERS" default:"10" deployables:"server, all-in-one" desc:"current members a family may have (1 to 100); adding one more is answered 409. The demo needs 10"`
	// Gift (DPCS_GIFT_*) are the carriers' gift rules and the gift request
	// rate; see GiftConfig.
	Gift GiftConfig `envconfig:"GIFT"`
	// FamilyMaxNotes (DPCS_FAMILY_MAX_NOTES, 1 to 100000, default 1000) is
	// how many care agents' notes a family may have; see
	// store.WithMaxFamilyNotes and StoreOptions.
	FamilyMaxNotes int `envconfig:"FAMILY_MAX_NOTES" default:"1000" deployables:"server, all-in-one" desc:"care agents' notes a family may have (1 to 100000); one more is answered 409"`
	// Tracing (DPCS_OTLP_ENDPOINT or the standard OTEL_EXPORTER_OTLP_ENDPOINT,
	// DPCS_TRACE_SAMPLE_RATIO; default off) exports OpenTelemetry traces;
	// see Tracing and doc/observability.md (Tracing).
	Tracing TracingConfig `ignored:"true"`
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

// listenAddr is the address a variable names to listen on: "" for off
// (nothing listens), else the host:port given; anything else is an error
// naming key. (Unset or empty takes the variable's default before this.)
func listenAddr(errs *[]error, key, v string) string {
	if v == "off" {
		return ""
	}
	if _, _, err := net.SplitHostPort(v); err != nil {
		*errs = append(*errs, fmt.Errorf("%s: want host:port or off, got %q", key, v))
	}
	return v
}

// LoadConfig reads the configuration through getenv (os.Getenv in mains):
// each variable, or its default when unset or empty. Errors name the
// variable.
func LoadConfig(getenv func(string) string) (Config, error) {
	var c Config
	r, err := readEnv(getenv, &c, configDecoders())
	if err != nil {
		return c, err
	}
	errs := c.finish(getenv, r)
	return c, errors.Join(append(errs, r.errs()...)...)
}

// configDecoders decode the types of Config envconfig cannot.
func configDecoders() envDecoders {
	return envDecoders{reflect.TypeFor[[]netip.Prefix](): decodeProxies}
}

// decodeProxies reads DPCS_TRUSTED_PROXIES: CIDRs or single addresses.
func decodeProxies(value string, field reflect.Value) error {
	var out []netip.Prefix
	var errs []error
	for _, p := range trimList(strings.Split(value, ",")) {
		prefix, err := netip.ParsePrefix(p)
		if err != nil {
			a, aerr := netip.ParseAddr(p)
			if aerr != nil || a.Zone() != "" {
				errs = append(errs, fmt.Errorf("%q is neither a CIDR nor an address", p))
				continue
			}
			prefix = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		out = append(out, prefix.Masked())
	}
	field.Set(reflect.ValueOf(out))
	return errors.Join(errs...)
}

// finish checks what readEnv decoded into c and derives the rest (the zone,
// the tracing configuration); errors name the variable.
func (c *Config) finish(getenv func(string) string, r *envRead) []error {
	var errs []error
	c.KafkaBrokers, c.RedisCluster = trimList(c.KafkaBrokers), trimList(c.RedisCluster)
	c.RedisAddr, c.AdminAddr = strings.TrimSpace(c.RedisAddr), strings.TrimSpace(c.AdminAddr)
	if c.RedisAddr != "" && len(c.RedisCluster) > 0 {
		errs = append(errs, errors.New("DPCS_REDIS_ADDR and DPCS_REDIS_CLUSTER: set one, not both"))
	}
	errs = append(errs, c.Kafka.finish(c.KafkaBrokers)...)
	errs = append(errs, c.RedisSec.finish(c.RedisAddr != "" || len(c.RedisCluster) > 0)...)
	r.want(&errs, "DPCS_REDIS_REPLICA_ACK", c.ReplicaAck >= 0, "a number of replicas ≥ 0")
	r.want(&errs, "DPCS_REDIS_REPLICA_ACK_TIMEOUT", c.ReplicaAckTimeout >= time.Millisecond && c.ReplicaAckTimeout < 3*time.Second,
		"a duration from 1ms to below 3s (the Redis read timeout)")
	if c.ReplicaAck > 0 && c.RedisAddr == "" && len(c.RedisCluster) == 0 {
		errs = append(errs, errors.New("DPCS_REDIS_REPLICA_ACK: needs DPCS_REDIS_ADDR or DPCS_REDIS_CLUSTER (the embedded Redis has no replicas)"))
	}
	r.want(&errs, "DPCS_RECOVERY", slices.Contains([]string{"auto", "manual", "off"}, c.Recovery), "auto, manual or off")
	zone, err := policy.LoadZone(c.Timezone)
	if err != nil {
		errs = append(errs, fmt.Errorf("DPCS_TIMEZONE: %w", err))
	}
	c.Zone = zone
	r.want(&errs, "DPCS_DEDUPE_WINDOW", c.DedupeWindow >= 2*time.Hour && c.DedupeWindow <= 30*24*time.Hour, "a duration from 2h to 720h")
	r.want(&errs, "DPCS_AUTH_LOCKOUT_AFTER", c.AuthLimits.LockoutAfter >= 1 && c.AuthLimits.LockoutAfter <= 1000, "a number of failures from 1 to 1000")
	r.want(&errs, "DPCS_AUTH_LOCKOUT_FOR", c.AuthLimits.LockoutFor >= time.Second && c.AuthLimits.LockoutFor <= 24*time.Hour, "a duration from 1s to 24h")
	if a := c.AdminAddr; a != "" {
		listenAddr(&errs, "DPCS_ADMIN_ADDR", a)
	}
	if c.WebhookURL != "" && len(c.WebhookSecret) < 16 {
		errs = append(errs, errors.New("DPCS_WEBHOOK_SECRET: at least 16 bytes are required with DPCS_WEBHOOK_URL"))
	}
	errs = append(errs, c.checkPush()...)
	if offers, err := api.ParseTopUpOffers(c.TopUpOffers); err != nil {
		errs = append(errs, fmt.Errorf("DPCS_TOPUP_OFFERS: %w", err))
	} else {
		c.TopUps = offers
	}
	r.want(&errs, "DPCS_KAFKA_SESSION_TIMEOUT", c.KafkaSessionTimeout >= time.Second && c.KafkaSessionTimeout <= 30*time.Minute, "a duration from 1s to 30m")
	r.want(&errs, "DPCS_START_TIMEOUT", c.StartTimeout >= 0, "a duration ≥ 0")
	r.want(&errs, "DPCS_NOTIFIER", c.Notifier == "on" || c.Notifier == "off", "on or off")
	if _, err := charging.ParseGrantCharged(c.GrantCharged); err != nil {
		errs = append(errs, fmt.Errorf("DPCS_GRANT_CHARGED: %w", err))
	}
	r.want(&errs, "DPCS_CATALOG_REFRESH", c.CatalogRefresh >= time.Second && c.CatalogRefresh <= time.Hour, "a duration from 1s to 1h")
	if at, err := ParseWeeklyAt(c.WeeklySummary); err != nil {
		errs = append(errs, fmt.Errorf("DPCS_WEEKLY_SUMMARY: %w", err))
	} else {
		c.WeeklyAt = at
	}
	errs = append(errs, c.checkLimits(r)...)
	errs = append(errs, c.checkCarrier(r)...)
	tr, err := loadTracing(getenv)
	if err != nil {
		errs = append(errs, err)
	}
	c.Tracing = tr
	return errs
}

// notifierLease is the notifier's idempotency claim lease.
const notifierLease = 10 * time.Second

// NotifierOptions are the notifier's options for this configuration: a Redis
// idempotency guard in front of the inbox, whether QUOTA_UPDATED is stored,
// RecoveryMode is who rebuilds Redis from SQL when Recovery is auto or
// manual (recovery.NewDeployable).
func (c Config) RecoveryMode() recovery.Mode {
	if c.Recovery == "manual" {
		return recovery.Manual
	}
	return recovery.Automatic
}

// and the webhook channel if set.
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
	opts := []notify.Option{notify.WithGuard(g), notify.WithLocation(c.Zone), notify.WithStoreQuotaUpdated(c.StoreQuotaUpdated)}
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
// zone, the dedupe window, the replica acknowledgement when
// DPCS_REDIS_REPLICA_ACK is set and the long stored results when
// DPCS_REDIS_LONG_RESULTS is.
func (c Config) EngineOptions() []quota.Option {
	opts := []quota.Option{quota.WithLocation(c.Zone), quota.WithDedupeTTL(c.DedupeWindow)}
	if c.ReplicaAck > 0 {
		opts = append(opts, quota.WithReplicaAck(c.ReplicaAck, c.ReplicaAckTimeout))
	}
	if c.LongResults {
		opts = append(opts, quota.WithLongResults())
	}
	return opts
}

// Redis opens the configured Redis (a ClusterClient for DPCS_REDIS_CLUSTER),
// with its password and TLS when configured (RedisSecurity).
func (c Config) Redis() (redis.UniversalClient, error) {
	if c.RedisAddr == "" && len(c.RedisCluster) == 0 {
		return nil, errors.New("DPCS_REDIS_ADDR or DPCS_REDIS_CLUSTER: required")
	}
	return c.newRedis(), nil
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

// SimulatorConfig is the simulator deployable's configuration
// (examples/simulator), read from DPCS_* variables.
type SimulatorConfig struct {
	KafkaBrokers []string `envconfig:"KAFKA_BROKERS" desc:"Kafka seed brokers, comma-separated. Empty: an embedded Kafka (kfake)"`
	// Kafka (DPCS_KAFKA_TLS*, DPCS_KAFKA_SASL_*): see KafkaSecurity.
	Kafka           KafkaSecurity `envconfig:"KAFKA"`
	KafkaAcks       string        `envconfig:"KAFKA_ACKS" default:"1" desc:"producer acks: all, 1 or 0"`
	KafkaPartitions int32         `envconfig:"KAFKA_PARTITIONS" default:"10" desc:"partitions per topic of the embedded Kafka"`
	Addr            string        `envconfig:"SIMULATOR_ADDR" default:"127.0.0.1:8081" desc:"host:port of the control API; off: none"`
	AdminAddr       string        `envconfig:"ADMIN_ADDR" default:"127.0.0.1:9093" desc:"host:port serving /healthz, /readyz and /metrics; off: none"`
	Rate            float64       `envconfig:"SIMULATOR_RATE" default:"1000" desc:"events per second"`
	Duration        time.Duration `envconfig:"SIMULATOR_DURATION" desc:"how long to run; 0 runs until SIGINT/SIGTERM"`
	Seed            uint64        `envconfig:"SIMULATOR_SEED" default:"1" desc:"population and event stream seed"`
	Families        int           `envconfig:"SIMULATOR_FAMILIES" default:"250000" desc:"families (4 members each on average)"`
	Diurnal         bool          `envconfig:"SIMULATOR_DIURNAL" desc:"follow the hour-of-day curve (the rate is the day's average)"`
	Timezone        string        `envconfig:"TIMEZONE" default:"Asia/Seoul" desc:"IANA time zone of the simulated days"`
	Scenario        string        `envconfig:"SIMULATOR_SCENARIO" desc:"play this scenario instead of random traffic; list lists them"`
	StepDelay       time.Duration `envconfig:"SIMULATOR_STEP_DELAY" default:"200ms" desc:"pause between scenario steps"`
	Progress        time.Duration `envconfig:"SIMULATOR_PROGRESS" default:"1s" desc:"progress line interval"`
	ShutdownTimeout time.Duration `envconfig:"SIMULATOR_SHUTDOWN_TIMEOUT" default:"15s" desc:"how long shutdown may take to flush"`
	// ChargingURL, when set, makes the simulator a set of simulated SMFs
	// (service/charging/smfsim) against that charging interface instead of
	// an event producer: DPCS_SIMULATOR_SMF_SESSIONS PDU sessions at once,
	// for DPCS_SIMULATOR_SUBSCRIBERS (default: the members of the
	// all-in-one's demo of DPCS_DEMO_FAMILIES families, by their MSISDNs).
	ChargingURL   string   `envconfig:"SIMULATOR_CHARGING_URL" desc:"http://host:port of a charging interface (its DPCS_CHARGING_ADDR): run simulated SMF PDU sessions against it instead of producing events"`
	ChargingToken string   `envconfig:"SIMULATOR_CHARGING_TOKEN" desc:"a charging credential of that interface (one of its DPCS_CHARGING_TOKENS): a secret"`
	SMFSessions   int      `envconfig:"SIMULATOR_SMF_SESSIONS" default:"20" desc:"simulated PDU sessions open at once against DPCS_SIMULATOR_CHARGING_URL (1 to 100000)"`
	Subscribers   []string `envconfig:"SIMULATOR_SUBSCRIBERS" desc:"subscriberIdentifiers (msisdn-…, imsi-…) the simulated sessions are for, comma-separated; empty: the all-in-one demo's members"`
	DemoFamilies  int      `envconfig:"DEMO_FAMILIES" default:"2000" desc:"with DPCS_SIMULATOR_CHARGING_URL and no DPCS_SIMULATOR_SUBSCRIBERS: the demo families whose members the sessions are for (as the all-in-one's)"`
	// Streams bound the live SSE streams of an API instance (see
	// api.StreamLimits; unset: the defaults): DPCS_STREAMS_PER_SESSION
	// (default 5), DPCS_STREAMS_PER_MEMBER (10) and DPCS_STREAMS_MAX (2000).
	Streams api.StreamLimits `envconfig:"STREAMS"`
	// FamilyMaxMembers (DPCS_FAMILY_MAX_MEMBERS, 1 to 100, default 10) is
	// how many current members a family may have; see
	// store.WithMaxFamilyMembers and StoreOptions.
	FamilyMaxMembers int `envconfig:"FAMILY_MAX_MEMBERS" default:"10" deployables:"server, all-in-one" desc:"current members a family may have (1 to 100); adding one more is answered 409. The demo needs 10"`
	// Tracing (DPCS_OTLP_ENDPOINT, DPCS_TRACE_SAMPLE_RATIO or the standard
	// OTEL_EXPORTER_OTLP_* variables) is read as for the other deployables.
	Tracing TracingConfig `ignored:"true"`
}

// LoadSimulatorConfig reads SimulatorConfig through getenv; errors name the
// variable.
func LoadSimulatorConfig(getenv func(string) string) (SimulatorConfig, error) {
	var c SimulatorConfig
	r, err := readEnv(getenv, &c, nil)
	if err != nil {
		return c, err
	}
	c.KafkaBrokers = trimList(c.KafkaBrokers)
	errs := c.Kafka.finish(c.KafkaBrokers)
	c.Addr = listenAddr(&errs, "DPCS_SIMULATOR_ADDR", c.Addr)
	c.Subscribers = trimList(c.Subscribers)
	if c.ChargingURL != "" {
		if u, err := url.Parse(c.ChargingURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("DPCS_SIMULATOR_CHARGING_URL: want http://host:port or https://host:port, got %q", c.ChargingURL))
		}
		if c.ChargingToken == "" {
			errs = append(errs, errors.New("DPCS_SIMULATOR_CHARGING_TOKEN: required with DPCS_SIMULATOR_CHARGING_URL"))
		}
	}
	if c.SMFSessions < 1 || c.SMFSessions > 100_000 {
		errs = append(errs, fmt.Errorf("DPCS_SIMULATOR_SMF_SESSIONS: want 1 to 100000, got %d", c.SMFSessions))
	}
	if c.DemoFamilies < 1 || c.DemoFamilies > 250_000 {
		errs = append(errs, fmt.Errorf("DPCS_DEMO_FAMILIES: want 1 to 250000, got %d", c.DemoFamilies))
	}
	tr, err := loadTracing(getenv)
	c.Tracing = tr
	return c, errors.Join(append(append(errs, r.errs()...), err)...)
}

// GrantChargedOpt is the judges' option for DPCS_GRANT_CHARGED: events of
// the traffic grants charge charge nothing (judge.WithGrantCharged), for
// the processor and POST /decisions alike; with it empty, every event
// charges.
func (c Config) GrantChargedOpt() judge.Opt {
	covered, _ := charging.ParseGrantCharged(c.GrantCharged) // finish refused a bad one
	return judge.WithGrantCharged(covered)
}
