package service

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// testPKI is a CA and a certificate it signed for 127.0.0.1, as PEM files.
type testPKI struct {
	caFile, certFile, keyFile string
	server                    *tls.Config // presents the certificate
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	ca := newTestCA(t, "dpcs test CA")
	pair, certPEM, keyPEM := ca.issue(t, "127.0.0.1", true)
	p := testPKI{caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem")}
	for file, b := range map[string][]byte{p.caFile: ca.pem, p.certFile: certPEM, p.keyFile: keyPEM} {
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p.server = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	return p
}

func TestConnectionSecurityConfig(t *testing.T) {
	pki := newTestPKI(t)
	real := map[string]string{"DPCS_KAFKA_BROKERS": "127.0.0.1:9092", "DPCS_REDIS_ADDR": "127.0.0.1:6379"}
	tests := []struct {
		name string
		env  map[string]string
		want []string // error substrings; none: valid
	}{
		{"nothing", nil, nil},
		{"scram without TLS", map[string]string{"DPCS_KAFKA_SASL_MECHANISM": "scram-sha-512",
			"DPCS_KAFKA_SASL_USERNAME": "u", "DPCS_KAFKA_SASL_PASSWORD": "p"}, nil},
		{"plain needs TLS", map[string]string{"DPCS_KAFKA_SASL_MECHANISM": "PLAIN",
			"DPCS_KAFKA_SASL_USERNAME": "u", "DPCS_KAFKA_SASL_PASSWORD": "p"}, []string{"DPCS_KAFKA_SASL_MECHANISM: PLAIN", "DPCS_KAFKA_TLS=true"}},
		{"plain over TLS", map[string]string{"DPCS_KAFKA_SASL_MECHANISM": "PLAIN", "DPCS_KAFKA_TLS": "true",
			"DPCS_KAFKA_SASL_USERNAME": "u", "DPCS_KAFKA_SASL_PASSWORD": "p"}, nil},
		{"unknown mechanism", map[string]string{"DPCS_KAFKA_SASL_MECHANISM": "GSSAPI",
			"DPCS_KAFKA_SASL_USERNAME": "u", "DPCS_KAFKA_SASL_PASSWORD": "p"}, []string{`DPCS_KAFKA_SASL_MECHANISM: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got "GSSAPI"`}},
		{"mechanism without password", map[string]string{"DPCS_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
			"DPCS_KAFKA_SASL_USERNAME": "u"}, []string{"DPCS_KAFKA_SASL_USERNAME, DPCS_KAFKA_SASL_PASSWORD: both required"}},
		{"password without mechanism", map[string]string{"DPCS_KAFKA_SASL_PASSWORD": "p"}, []string{"DPCS_KAFKA_SASL_MECHANISM: required"}},
		{"missing CA file", map[string]string{"DPCS_KAFKA_TLS_CA": filepath.Join(t.TempDir(), "none.pem")}, []string{"DPCS_KAFKA_TLS_CA: open"}},
		{"CA file without PEM", map[string]string{"DPCS_REDIS_TLS_CA": pki.keyFile}, []string{"DPCS_REDIS_TLS_CA: ", "holds no PEM certificate"}},
		{"cert without key", map[string]string{"DPCS_REDIS_TLS_CERT": pki.certFile}, []string{"DPCS_REDIS_TLS_CERT, DPCS_REDIS_TLS_KEY: set both or neither"}},
		{"mutual TLS", map[string]string{"DPCS_REDIS_TLS_CA": pki.caFile, "DPCS_REDIS_TLS_CERT": pki.certFile, "DPCS_REDIS_TLS_KEY": pki.keyFile,
			"DPCS_KAFKA_TLS_CA": pki.caFile, "DPCS_KAFKA_TLS_CERT": pki.certFile, "DPCS_KAFKA_TLS_KEY": pki.keyFile}, nil},
		{"username without password", map[string]string{"DPCS_REDIS_USERNAME": "dpcs"}, []string{"DPCS_REDIS_PASSWORD: required with DPCS_REDIS_USERNAME"}},
		{"bad TLS flag", map[string]string{"DPCS_REDIS_TLS": "maybe"}, []string{"DPCS_REDIS_TLS"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range real {
				env[k] = v
			}
			for k, v := range tc.env {
				env[k] = v
			}
			_, err := LoadConfig(func(k string) string { return env[k] })
			checkErrs(t, err, tc.want)
		})
	}
	t.Run("embedded servers take none", func(t *testing.T) {
		env := map[string]string{"DPCS_KAFKA_TLS": "true", "DPCS_REDIS_PASSWORD": "secret"}
		_, err := LoadConfig(func(k string) string { return env[k] })
		checkErrs(t, err, []string{"DPCS_KAFKA_TLS*, DPCS_KAFKA_SASL_*: need DPCS_KAFKA_BROKERS",
			"DPCS_REDIS_USERNAME, DPCS_REDIS_PASSWORD, DPCS_REDIS_TLS*: need DPCS_REDIS_ADDR or DPCS_REDIS_CLUSTER"})
		_, err = LoadSimulatorConfig(func(k string) string { return env[k] })
		checkErrs(t, err, []string{"need DPCS_KAFKA_BROKERS"})
	})
}

func checkErrs(t *testing.T, err error, want []string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error, want %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

// produceWith produces one record with a client on opts and reports the
// produce error (bounded: a refused handshake is retried until the context
// ends).
func produceWith(t *testing.T, opts []kgo.Opt, wait time.Duration) error {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("v")}).FirstErr()
}

func TestKafkaSecurityConnects(t *testing.T) {
	pki := newTestPKI(t)
	tests := []struct {
		name    string
		cluster []kfake.Opt
		env     map[string]string
		ok      bool
	}{
		{"SCRAM-SHA-512", []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "dpcs", "s3cret")},
			map[string]string{"DPCS_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "DPCS_KAFKA_SASL_USERNAME": "dpcs", "DPCS_KAFKA_SASL_PASSWORD": "s3cret"}, true},
		{"SCRAM-SHA-256 wrong password", []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "dpcs", "s3cret")},
			map[string]string{"DPCS_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256", "DPCS_KAFKA_SASL_USERNAME": "dpcs", "DPCS_KAFKA_SASL_PASSWORD": "wrong"}, false},
		{"SASL required, none given", []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "dpcs", "s3cret")},
			nil, false},
		{"PLAIN over TLS", []kfake.Opt{kfake.TLS(pki.server), kfake.EnableSASL(), kfake.Superuser("PLAIN", "dpcs", "s3cret")},
			map[string]string{"DPCS_KAFKA_TLS_CA": pki.caFile, "DPCS_KAFKA_SASL_MECHANISM": "PLAIN",
				"DPCS_KAFKA_SASL_USERNAME": "dpcs", "DPCS_KAFKA_SASL_PASSWORD": "s3cret"}, true},
		{"TLS with an unknown CA", []kfake.Opt{kfake.TLS(pki.server)}, map[string]string{"DPCS_KAFKA_TLS": "true"}, false},
		{"TLS broker, plain client", []kfake.Opt{kfake.TLS(pki.server)}, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A refused connection is retried until the wait ends: long
			// enough for a loaded machine when it should work, short when not.
			wait := 1500 * time.Millisecond
			if tc.ok {
				wait = 20 * time.Second
			}
			c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, "t")}, tc.cluster...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			env := map[string]string{"DPCS_KAFKA_BROKERS": strings.Join(c.ListenAddrs(), ",")}
			for k, v := range tc.env {
				env[k] = v
			}
			cfg, err := LoadConfig(func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			err = produceWith(t, cfg.KafkaOptions(), wait)
			if tc.ok && err != nil {
				t.Fatalf("produce: %v", err)
			}
			if !tc.ok && err == nil {
				t.Fatal("produced without the right credentials")
			}
			// The simulator reads the same variables.
			scfg, err := LoadSimulatorConfig(func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if err := produceWith(t, scfg.KafkaOptions(), wait); (err == nil) != tc.ok {
				t.Errorf("simulator: produce error %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestRedisSecurityConnects(t *testing.T) {
	pki := newTestPKI(t)
	srv, err := miniredis.RunTLS(pki.server)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.RequireUserAuth("dpcs", "s3cret")
	tests := []struct {
		name string
		env  map[string]string
		ok   bool
	}{
		{"user, password and CA", map[string]string{"DPCS_REDIS_USERNAME": "dpcs", "DPCS_REDIS_PASSWORD": "s3cret", "DPCS_REDIS_TLS_CA": pki.caFile}, true},
		{"server name from the certificate", map[string]string{"DPCS_REDIS_USERNAME": "dpcs", "DPCS_REDIS_PASSWORD": "s3cret",
			"DPCS_REDIS_TLS_CA": pki.caFile, "DPCS_REDIS_TLS_SERVER_NAME": "broker.test"}, true},
		{"wrong server name", map[string]string{"DPCS_REDIS_USERNAME": "dpcs", "DPCS_REDIS_PASSWORD": "s3cret",
			"DPCS_REDIS_TLS_CA": pki.caFile, "DPCS_REDIS_TLS_SERVER_NAME": "other.test"}, false},
		{"wrong password", map[string]string{"DPCS_REDIS_USERNAME": "dpcs", "DPCS_REDIS_PASSWORD": "wrong", "DPCS_REDIS_TLS_CA": pki.caFile}, false},
		{"unknown CA", map[string]string{"DPCS_REDIS_USERNAME": "dpcs", "DPCS_REDIS_PASSWORD": "s3cret", "DPCS_REDIS_TLS": "true"}, false},
		{"no TLS", map[string]string{"DPCS_REDIS_USERNAME": "dpcs", "DPCS_REDIS_PASSWORD": "s3cret"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"DPCS_REDIS_ADDR": srv.Addr()}
			for k, v := range tc.env {
				env[k] = v
			}
			rdb := redisFromEnv(t, env)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := rdb.Ping(ctx).Err(); (err == nil) != tc.ok {
				t.Fatalf("ping: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// A Cluster's every node is opened with the same credentials and TLS.
func TestRedisSecurityCluster(t *testing.T) {
	pki := newTestPKI(t)
	env := map[string]string{"DPCS_REDIS_CLUSTER": "127.0.0.1:7001,127.0.0.1:7002", "DPCS_REDIS_USERNAME": "dpcs",
		"DPCS_REDIS_PASSWORD": "s3cret", "DPCS_REDIS_TLS_CA": pki.caFile, "DPCS_REDIS_TLS_SERVER_NAME": "redis.test"}
	rdb := redisFromEnv(t, env)
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("%T, want a cluster client", rdb)
	}
	o := cc.Options()
	if o.Username != "dpcs" || o.Password != "s3cret" || o.TLSConfig == nil || o.TLSConfig.ServerName != "redis.test" || o.TLSConfig.RootCAs == nil {
		t.Errorf("cluster options: user %q password set %v TLS %+v", o.Username, o.Password != "", o.TLSConfig)
	}
}

// redisFromEnv opens the Redis the variables in env configure, closed when
// the test ends.
func redisFromEnv(t *testing.T, env map[string]string) redis.UniversalClient {
	t.Helper()
	cfg, err := LoadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	rdb, err := cfg.Redis()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// testCA is a certificate authority for the tests' TLS.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue is a certificate the CA signs for name (for 127.0.0.1 and
// broker.test, a server's and a client's, when server is set; else a
// client's), as a tls.Certificate and its PEM certificate and key.
func (ca *testCA) issue(t *testing.T, name string, server bool) (tls.Certificate, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.IPAddresses, tmpl.DNSNames = []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"broker.test"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair, certPEM, keyPEM
}
