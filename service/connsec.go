package service

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// KafkaSecurity is how a deployable connects to real Kafka brokers: TLS
// (DPCS_KAFKA_TLS, verified against DPCS_KAFKA_TLS_CA or the system roots,
// with an optional client certificate for mutual TLS) and SASL
// (DPCS_KAFKA_SASL_MECHANISM PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 with
// DPCS_KAFKA_SASL_USERNAME and DPCS_KAFKA_SASL_PASSWORD). PLAIN sends the
// password as it is, so it is refused without TLS. Unset: plain TCP, no
// authentication. The embedded Kafka takes none of them.
type KafkaSecurity struct {
	TLS           bool   `envconfig:"TLS" desc:"true: connect to the Kafka brokers over TLS, verified against DPCS_KAFKA_TLS_CA or else the system roots"`
	TLSCA         string `envconfig:"TLS_CA" desc:"PEM file of the CA certificates the brokers' certificates are verified against (turns TLS on). Empty: the system roots"`
	TLSCert       string `envconfig:"TLS_CERT" desc:"PEM file of a client certificate for mutual TLS with the brokers (turns TLS on), with DPCS_KAFKA_TLS_KEY"`
	TLSKey        string `envconfig:"TLS_KEY" desc:"PEM file of the private key of DPCS_KAFKA_TLS_CERT: a secret"`
	TLSServerName string `envconfig:"TLS_SERVER_NAME" desc:"name the brokers' certificates must carry, when it is not the host of each broker address"`
	SASLMechanism string `envconfig:"SASL_MECHANISM" desc:"Kafka SASL mechanism: PLAIN (only with TLS), SCRAM-SHA-256 or SCRAM-SHA-512, with DPCS_KAFKA_SASL_USERNAME and DPCS_KAFKA_SASL_PASSWORD. Empty: no SASL"`
	SASLUsername  string `envconfig:"SASL_USERNAME" desc:"Kafka SASL user"`
	SASLPassword  string `envconfig:"SASL_PASSWORD" desc:"Kafka SASL password: a secret"`

	// TLSConfig and SASL are what the loader made of the variables (nil
	// when off); KafkaOptions uses them.
	TLSConfig *tls.Config    `ignored:"true"`
	SASL      sasl.Mechanism `ignored:"true"`
}

// RedisSecurity is how a deployable connects to a real Redis (one primary
// or every node of a Cluster): AUTH with DPCS_REDIS_PASSWORD (requirepass)
// or an ACL user (DPCS_REDIS_USERNAME), and TLS (DPCS_REDIS_TLS, verified
// against DPCS_REDIS_TLS_CA or the system roots, with an optional client
// certificate). The embedded Redis takes none of them.
type RedisSecurity struct {
	Username      string `envconfig:"USERNAME" desc:"Redis ACL user, with DPCS_REDIS_PASSWORD. Empty: the default user"`
	Password      string `envconfig:"PASSWORD" desc:"Redis password (requirepass, or the ACL user's): a secret"`
	TLS           bool   `envconfig:"TLS" desc:"true: connect to Redis over TLS, verified against DPCS_REDIS_TLS_CA or else the system roots"`
	TLSCA         string `envconfig:"TLS_CA" desc:"PEM file of the CA certificates Redis's certificate is verified against (turns TLS on). Empty: the system roots"`
	TLSCert       string `envconfig:"TLS_CERT" desc:"PEM file of a client certificate for Redis (tls-auth-clients; turns TLS on), with DPCS_REDIS_TLS_KEY"`
	TLSKey        string `envconfig:"TLS_KEY" desc:"PEM file of the private key of DPCS_REDIS_TLS_CERT: a secret"`
	TLSServerName string `envconfig:"TLS_SERVER_NAME" desc:"name Redis's certificate must carry, when it is not the host of the address"`

	// TLSConfig is what the loader made of the TLS variables (nil when off).
	TLSConfig *tls.Config `ignored:"true"`
}

// set reports whether any of k's variables is set.
func (k KafkaSecurity) set() bool {
	return k.TLS || k.TLSCA != "" || k.TLSCert != "" || k.TLSKey != "" || k.TLSServerName != "" ||
		k.SASLMechanism != "" || k.SASLUsername != "" || k.SASLPassword != ""
}

// finish checks k and loads its files; errors name the variable.
func (k *KafkaSecurity) finish(brokers []string) []error {
	if !k.set() {
		return nil
	}
	if len(brokers) == 0 {
		return []error{errors.New("DPCS_KAFKA_TLS*, DPCS_KAFKA_SASL_*: need DPCS_KAFKA_BROKERS (the embedded Kafka takes no TLS or SASL)")}
	}
	var errs []error
	c, err := tlsFiles{"DPCS_KAFKA_", k.TLS, k.TLSCA, k.TLSCert, k.TLSKey, k.TLSServerName}.config()
	if err != nil {
		errs = append(errs, err)
	}
	k.TLSConfig = c
	mech := strings.ToUpper(strings.TrimSpace(k.SASLMechanism))
	switch {
	case mech == "" && (k.SASLUsername != "" || k.SASLPassword != ""):
		errs = append(errs, errors.New("DPCS_KAFKA_SASL_MECHANISM: required with DPCS_KAFKA_SASL_USERNAME or DPCS_KAFKA_SASL_PASSWORD"))
	case mech == "":
	case k.SASLUsername == "" || k.SASLPassword == "":
		errs = append(errs, fmt.Errorf("DPCS_KAFKA_SASL_USERNAME, DPCS_KAFKA_SASL_PASSWORD: both required with DPCS_KAFKA_SASL_MECHANISM=%s", mech))
	case mech == "PLAIN" && c == nil:
		errs = append(errs, errors.New("DPCS_KAFKA_SASL_MECHANISM: PLAIN sends the password as it is; it needs DPCS_KAFKA_TLS=true (or use SCRAM-SHA-512)"))
	case mech == "PLAIN":
		k.SASL = plain.Auth{User: k.SASLUsername, Pass: k.SASLPassword}.AsMechanism()
	case mech == "SCRAM-SHA-256":
		k.SASL = scram.Auth{User: k.SASLUsername, Pass: k.SASLPassword}.AsSha256Mechanism()
	case mech == "SCRAM-SHA-512":
		k.SASL = scram.Auth{User: k.SASLUsername, Pass: k.SASLPassword}.AsSha512Mechanism()
	default:
		errs = append(errs, fmt.Errorf("DPCS_KAFKA_SASL_MECHANISM: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got %q", k.SASLMechanism))
	}
	return errs
}

// options are the client options of k: TLS dialing and SASL, when set.
func (k KafkaSecurity) options() []kgo.Opt {
	var opts []kgo.Opt
	if k.TLSConfig != nil {
		opts = append(opts, kgo.DialTLSConfig(k.TLSConfig.Clone()))
	}
	if k.SASL != nil {
		opts = append(opts, kgo.SASL(k.SASL))
	}
	return opts
}

// set reports whether any of r's variables is set.
func (r RedisSecurity) set() bool {
	return r.Username != "" || r.Password != "" || r.TLS || r.TLSCA != "" || r.TLSCert != "" || r.TLSKey != "" || r.TLSServerName != ""
}

// finish checks r and loads its files; errors name the variable.
func (r *RedisSecurity) finish(external bool) []error {
	if !r.set() {
		return nil
	}
	if !external {
		return []error{errors.New("DPCS_REDIS_USERNAME, DPCS_REDIS_PASSWORD, DPCS_REDIS_TLS*: need DPCS_REDIS_ADDR or DPCS_REDIS_CLUSTER (the embedded Redis takes none)")}
	}
	var errs []error
	if r.Username != "" && r.Password == "" {
		errs = append(errs, errors.New("DPCS_REDIS_PASSWORD: required with DPCS_REDIS_USERNAME"))
	}
	c, err := tlsFiles{"DPCS_REDIS_", r.TLS, r.TLSCA, r.TLSCert, r.TLSKey, r.TLSServerName}.config()
	if err != nil {
		errs = append(errs, err)
	}
	r.TLSConfig = c
	return errs
}

// tlsFiles are the TLS variables of one connection kind (prefix
// DPCS_KAFKA_ or DPCS_REDIS_).
type tlsFiles struct {
	prefix                    string
	on                        bool
	ca, cert, key, serverName string
}

// config is the client TLS configuration the variables describe, nil when
// TLS is off. Any file or the server name turns TLS on.
func (f tlsFiles) config() (*tls.Config, error) {
	if !f.on && f.ca == "" && f.cert == "" && f.key == "" && f.serverName == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.serverName}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, fmt.Errorf("%sTLS_CA: %w", f.prefix, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%sTLS_CA: %s holds no PEM certificate", f.prefix, f.ca)
		}
		c.RootCAs = pool
	}
	switch {
	case f.cert != "" && f.key != "":
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, fmt.Errorf("%sTLS_CERT, %sTLS_KEY: %w", f.prefix, f.prefix, err)
		}
		c.Certificates = []tls.Certificate{pair}
	case f.cert != "" || f.key != "":
		return nil, fmt.Errorf("%sTLS_CERT, %sTLS_KEY: set both or neither", f.prefix, f.prefix)
	}
	return c, nil
}

// KafkaOptions are the Kafka client options of the configured brokers: the
// seed brokers, and TLS and SASL when configured. Every deployable's Kafka
// client (producer, consumers, admin) starts from them.
func (c Config) KafkaOptions() []kgo.Opt {
	return append([]kgo.Opt{kgo.SeedBrokers(c.KafkaBrokers...)}, c.Kafka.options()...)
}

// KafkaOptions are the simulator's Kafka client options (see
// Config.KafkaOptions).
func (c SimulatorConfig) KafkaOptions() []kgo.Opt {
	return append([]kgo.Opt{kgo.SeedBrokers(c.KafkaBrokers...)}, c.Kafka.options()...)
}

// apply sets a client's credentials and TLS from r.
func (r RedisSecurity) apply(username, password *string, c **tls.Config) {
	*username, *password = r.Username, r.Password
	if r.TLSConfig != nil {
		*c = r.TLSConfig.Clone()
	}
}

// newRedis opens a client of the configured Redis with its security.
func (c Config) newRedis() redis.UniversalClient {
	if len(c.RedisCluster) > 0 {
		o := &redis.ClusterOptions{Addrs: c.RedisCluster}
		c.RedisSec.apply(&o.Username, &o.Password, &o.TLSConfig)
		return redis.NewClusterClient(o)
	}
	o := &redis.Options{Addr: c.RedisAddr}
	c.RedisSec.apply(&o.Username, &o.Password, &o.TLSConfig)
	return redis.NewClient(o)
}
