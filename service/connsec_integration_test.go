//go:build integration

package service

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/dabom/dpcs/idempotency"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// redisACL is the ACL doc/deploy.md gives the deployables' Redis user: every
// key and channel, every command but the dangerous ones, plus INFO (the
// replica acknowledgement and the ops view read it).
var redisACL = []string{"on", ">s3cret", "~*", "&*", "+@all", "-@dangerous", "+info"}

// TestRedisSecurityOnRealRedis: the deployables' Redis settings against a
// real redis-server that takes TLS only (its client certificate verified)
// and an ACL user limited as doc/deploy.md says: the quota engine judges,
// restores and rebuilds through it, and the idempotency store claims.
func TestRedisSecurityOnRealRedis(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed (make integration installs it)")
	}
	pki := newTestPKI(t)
	_, port, err := net.SplitHostPort(testenv.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--port", "0", "--tls-port", port, "--bind", "127.0.0.1",
		"--tls-cert-file", pki.certFile, "--tls-key-file", pki.keyFile, "--tls-ca-cert-file", pki.caFile,
		"--tls-auth-clients", "yes", "--save", "", "--appendonly", "no", "--dir", t.TempDir(),
		"--user", "default", "off", "--user", "dpcs"}
	args = append(args, redisACL...)
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})

	env := map[string]string{"DPCS_REDIS_ADDR": "127.0.0.1:" + port, "DPCS_REDIS_USERNAME": "dpcs",
		"DPCS_REDIS_PASSWORD": "s3cret", "DPCS_REDIS_TLS_CA": pki.caFile,
		"DPCS_REDIS_TLS_CERT": pki.certFile, "DPCS_REDIS_TLS_KEY": pki.keyFile}
	cfg, err := LoadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	rdb := redisFromEnv(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for rdb.Ping(ctx).Err() != nil { // until the server listens
		select {
		case <-ctx.Done():
			t.Fatalf("redis-server did not answer over TLS: %v\n%s", rdb.Ping(context.Background()).Err(), out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}

	// Without the client certificate the server refuses the handshake.
	delete(env, "DPCS_REDIS_TLS_CERT")
	delete(env, "DPCS_REDIS_TLS_KEY")
	if err := redisFromEnv(t, env).Ping(ctx).Err(); err == nil {
		t.Error("a client without a certificate was let in")
	}

	eng, err := quota.New(rdb, cfg.EngineOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Load(ctx); err != nil {
		t.Fatal(err)
	}
	const fid, cid = 7, 70
	if _, err := eng.BeginRebuild(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	if err := eng.Restore(ctx, quota.FamilyState{FamilyID: fid, Provisioned: true, Plan: 1 << 20, Generation: "g1",
		Members: []quota.MemberState{{CustomerID: cid, Version: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := eng.FinishRebuild(ctx, "g1", map[string]int64{"usage-events/0": 0}); err != nil {
		t.Fatal(err)
	}
	res, err := eng.ApplyMarked(ctx, "g1", []quota.Mark{{Stream: "usage-events/0", From: 0, To: 1}},
		[]quota.Event{{ID: "e1", FamilyID: fid, CustomerID: cid, Bytes: 1000, At: time.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Decision != policy.Allowed || res[0].Remaining != 1<<20-1000 {
		t.Errorf("judged %+v, want ALLOWED with %d left", res[0], 1<<20-1000)
	}

	st, err := idempotency.NewRedisStore(rdb)
	if err != nil {
		t.Fatal(err)
	}
	g, err := idempotency.New(st)
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for range 2 {
		if _, _, err := g.Do(ctx, "k1", func(context.Context) ([]byte, error) { ran++; return []byte("ok"), nil }); err != nil {
			t.Fatal(err)
		}
	}
	if ran != 1 {
		t.Errorf("the guarded step ran %d times, want 1", ran)
	}
}
