package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/internal/buildinfo"
	"github.com/dabom/dpcs/internal/testenv"
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
	c := testenv.KafkaOf(t)
	mr := miniredis.RunT(t)
	dbPath := filepath.Join(t.TempDir(), "dpcs.db")
	env := map[string]string{
		"DPCS_KAFKA_BROKERS": strings.Join(c.ListenAddrs(), ","), "DPCS_REDIS_ADDR": mr.Addr(),
		"DPCS_SQLITE_PATH": dbPath, "DPCS_HTTP_ADDR": "127.0.0.1:0", "DPCS_LOG_LEVEL": "warn",
		"DPCS_JWT_SECRET": strings.Repeat("s", 32), "DPCS_ADMIN_ADDR": testenv.FreeAddr(t),
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
		if got := testenv.Get(t, admin+path); got != want {
			t.Errorf("admin %s: %q", path, got)
		}
	}
	m := testenv.Get(t, admin+"/metrics")
	for _, want := range []string{`dpcs_api_request_seconds_count{operation="get-family",status="401"} 1`,
		`dpcs_kafka_connects_total{client="producer"`, "# TYPE dpcs_relay_lag_seconds histogram", "go_goroutines", "dpcs_sse_streams 0"} {
		if !strings.Contains(m, want) {
			t.Errorf("admin /metrics lacks %q", want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// rebuild restores every family it can, prints what it did and which
// families failed and why, and fails (exit status 1) when any did.
func TestRebuildReportsFailedFamilies(t *testing.T) {
	ctx := context.Background()
	c := testenv.KafkaOf(t)
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

// -version prints the build and exits before any configuration is checked
// (run without infrastructure fails, TestRunNeedsInfrastructure). The test
// binary carries no version or commit, as a CI build (-buildvcs=false) does not.
func TestRunVersion(t *testing.T) {
	var b strings.Builder
	if err := run(context.Background(), []string{"-version"}, func(string) string { return "" }, &b, nil); err != nil {
		t.Fatal(err)
	}
	want := buildinfo.Read().Line("dpcs server") + "\n"
	if b.String() != want {
		t.Errorf("printed %q, want %q", b.String(), want)
	}
	if !strings.HasPrefix(want, "dpcs server devel (commit unknown, unknown, go") {
		t.Errorf("a test binary should print devel and unknown: %q", want)
	}
}

// `admin create` on an empty deployment creates an admin with the password
// the operator gave (stdin, a file or a variable), which logs in through the
// API by id or phone; the password is never printed; bad input and a phone
// in use are refused and create nothing.
func TestAdminCreate(t *testing.T) {
	ctx := context.Background()
	c := testenv.KafkaOf(t)
	mr := miniredis.RunT(t)
	dir := t.TempDir()
	const secret = "correct horse battery staple"
	env := map[string]string{
		"DPCS_KAFKA_BROKERS": strings.Join(c.ListenAddrs(), ","), "DPCS_REDIS_ADDR": mr.Addr(),
		"DPCS_SQLITE_PATH": filepath.Join(dir, "dpcs.db"), "DPCS_HTTP_ADDR": "127.0.0.1:0", "DPCS_LOG_LEVEL": "warn",
		"DPCS_JWT_SECRET": strings.Repeat("s", 32), "OPS_PASSWORD": "another long password",
	}
	getenv := func(k string) string { return env[k] }
	file := filepath.Join(dir, "pw")
	if err := os.WriteFile(file, []byte("a third long password\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	create := func(stdin string, args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := admin(ctx, append([]string{"create"}, args...), getenv, strings.NewReader(stdin), &out, &errOut)
		for _, s := range []string{out.String(), errOut.String(), fmt.Sprint(err)} {
			for _, pw := range []string{secret, "another long password", "a third long password", "short"} {
				if strings.Contains(s, pw) {
					t.Errorf("the password was printed: %q", s)
				}
			}
		}
		return out.String(), err
	}
	ids := map[string]string{}
	for _, ok := range []struct {
		phone, stdin, password string
		args                   []string
	}{
		{"010-1000-0001", secret + "\n", secret, nil},
		{"010-1000-0002", "", "another long password", []string{"--password-env", "OPS_PASSWORD"}},
		{"010-1000-0003", "", "a third long password", []string{"--password-file", file}},
		{"010-1000-0004", secret + "\n", secret, []string{"--role", "AGENT"}},
	} {
		out, err := create(ok.stdin, append([]string{"--name", "ops", "--phone", ok.phone}, ok.args...)...)
		m := regexp.MustCompile(`^(?:admin|care agent) (\d+) created`).FindStringSubmatch(out)
		if err != nil || m == nil {
			t.Fatalf("admin create %s: %q %v", ok.phone, out, err)
		}
		ids[ok.phone] = m[1]
	}
	for _, bad := range []struct {
		name, stdin, want string
		args              []string
	}{
		{"short password", "short\n", "12 to 72 bytes", []string{"--name", "x", "--phone", "010-1"}},
		{"no password", "", "no password", []string{"--name", "x", "--phone", "010-1"}},
		{"unset variable", "", "OPS_NONE is empty", []string{"--name", "x", "--phone", "010-1", "--password-env", "OPS_NONE"}},
		{"no name", secret, "--name", []string{"--phone", "010-1"}},
		{"no phone", secret, "--phone", []string{"--name", "x"}},
		{"a family role", secret, "ADMIN or AGENT", []string{"--name", "x", "--phone", "010-1", "--role", "OWNER"}},
		{"phone of an admin", secret, "already admin " + ids["010-1000-0001"], []string{"--name", "x", "--phone", "010-1000-0001"}},
	} {
		if out, err := create(bad.stdin, bad.args...); err == nil || !strings.Contains(err.Error(), bad.want) || out != "" {
			t.Errorf("%s: %q %v, want an error with %q", bad.name, out, err, bad.want)
		}
	}
	if err := admin(ctx, []string{"delete"}, getenv, strings.NewReader(""), io.Discard, io.Discard); err == nil {
		t.Error("admin delete accepted")
	}

	runCtx, cancel := context.WithCancel(ctx)
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, nil, getenv, io.Discard, ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(20 * time.Second):
		t.Fatal("the server was not ready after 20 s")
	}
	for _, l := range []struct{ login, password, role string }{
		{"010-1000-0001", secret, "ADMIN"}, {ids["010-1000-0001"], secret, "ADMIN"}, {"010-1000-0002", "another long password", "ADMIN"},
		{"010-1000-0003", "a third long password", "ADMIN"}, {"010-1000-0004", secret, "AGENT"},
	} {
		resp, err := http.Post("http://"+addr+"/auth/token", "application/json",
			strings.NewReader(`{"login":"`+l.login+`","password":"`+l.password+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		var tok struct{ Role string }
		json.NewDecoder(resp.Body).Decode(&tok)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || tok.Role != l.role {
			t.Errorf("login %s: %d %q", l.login, resp.StatusCode, tok.Role)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestPasswordEnv(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "--name", "a", "--password-env", "OPS_PASSWORD"}, "OPS_PASSWORD"},
		{[]string{"create", "-password-env=DPCS_ADMIN_PASSWORD"}, "DPCS_ADMIN_PASSWORD"},
		{[]string{"create", "--name", "password-env"}, ""},
		{[]string{"create", "--password-env"}, ""},
	} {
		if got := passwordEnv(tt.args); got != tt.want {
			t.Errorf("passwordEnv(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}

// vapid-keys prints a usable pair as environment lines, with no other
// configuration, and LoadConfig accepts it.
func TestRunVAPIDKeys(t *testing.T) {
	var b strings.Builder
	if err := run(context.Background(), []string{"vapid-keys"}, func(string) string { return "" }, &b, nil); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"DPCS_VAPID_SUBJECT": "mailto:ops@dpcs.example"}
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("line %q", line)
		}
		vars[k] = v
	}
	cfg, err := service.LoadConfig(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatalf("printed keys refused: %v\n%s", err, b.String())
	}
	if _, ok := cfg.VAPIDKeys(); !ok {
		t.Errorf("no keys from %q", b.String())
	}
}
