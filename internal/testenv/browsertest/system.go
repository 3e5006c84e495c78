package browsertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/service"
	"github.com/dabom/dpcs/simulate"
)

// Login is a seeded member's credentials.
type Login struct {
	ID    int64
	Phone string
	Name  string
}

// System is the all-in-one under test: embedded Kafka, miniredis and SQLite
// with the demo seeded (every demo login's password is Password).
type System struct {
	*service.System
	// URL is the API's base URL (http://127.0.0.1:port); the family app is
	// at URL+"/app/" and the back office at URL+"/console/".
	URL string
	// KafkaAddr is the embedded Kafka's address, for test clients.
	KafkaAddr string
	// FamilyID is the demo family "김씨 가족 (Last 10 MB)": Owner (아빠) and
	// Owner2 (엄마) are its owners, Child (자녀1) and Child2 (자녀2) members.
	FamilyID      int64
	Owner, Owner2 Login
	Child, Child2 Login
	Admin         Login
	// Agent is the demo care agent (AGENT: reads only).
	Agent    Login
	Password string
	http     *http.Client
}

// SystemOption changes the system StartSystem starts.
type SystemOption func(*systemOptions)

type systemOptions struct {
	vars         map[string]string
	loopbackPush bool
}

// WithEnv sets a DPCS_* variable of the all-in-one's configuration (see
// doc/configuration.md), e.g. WithEnv("DPCS_SIMULATOR_RATE", "200").
func WithEnv(name, value string) SystemOption {
	return func(o *systemOptions) { o.vars[name] = value }
}

// WithLoopbackPush accepts Web Push subscriptions whose endpoint is on
// loopback (service.SystemConfig.AllowLoopbackPush): a test's own push
// service (internal/pushtest).
func WithLoopbackPush() SystemOption {
	return func(o *systemOptions) { o.loopbackPush = true }
}

// StartSystem starts the all-in-one for t on free loopback ports with the
// demo (50 simulated families, the simulator stopped unless WithEnv sets
// DPCS_SIMULATOR_RATE), and closes it when t ends. It starts more than ten
// minutes away from midnight in the service zone (waiting for it to pass
// if need be): the stories on it compare a day's and a month's counts on
// the real clock.
func StartSystem(t testing.TB, opts ...SystemOption) *System {
	t.Helper()
	testenv.AwayFromMidnightFor(t, 10*time.Minute)
	vars := map[string]string{
		"DPCS_DATA_DIR": t.TempDir(), "DPCS_EMBEDDED_KAFKA_PORT": "0", "DPCS_HTTP_ADDR": "127.0.0.1:0",
		"DPCS_SIMULATOR_ADDR": "127.0.0.1:0", "DPCS_DEMO": "1", "DPCS_DEMO_FAMILIES": "50", "DPCS_SIMULATOR_RATE": "0",
	}
	o := systemOptions{vars: vars}
	for _, opt := range opts {
		opt(&o)
	}
	cfg, err := service.LoadSystemConfig(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	cfg.AllowLoopbackPush = o.loopbackPush
	// A bound on the start, not a guess at it: seeding the demo's 2,000
	// families is ~10,000 transactions, 16 s on a busy 2-core machine and
	// several times that under -race.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	s, err := service.StartSystem(ctx, cfg, nil)
	if err != nil {
		t.Fatalf("start the all-in-one: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("close the all-in-one: %v", err)
		}
	})
	fam := int64(service.DemoFamilyID)
	member := func(i int, name, phone string) Login {
		return Login{ID: simulate.CustomerID(fam, i), Name: name, Phone: phone}
	}
	sys := &System{System: s, URL: "http://" + s.HTTPAddr, FamilyID: fam,
		Owner: member(0, "아빠", "010-0000-0100"), Owner2: member(1, "엄마", "010-0000-0101"),
		Child: member(2, "자녀1", "010-0000-0102"), Child2: member(3, "자녀2", "010-0000-0103"),
		Admin:    Login{ID: service.DemoAdminID, Name: "admin", Phone: "010-0000-0001"},
		Agent:    Login{ID: service.DemoAgentID, Name: "상담원", Phone: "010-0000-0002"},
		Password: service.DemoPassword, http: &http.Client{Timeout: 30 * time.Second}}
	if len(s.Brokers) > 0 {
		sys.KafkaAddr = s.Brokers[0]
	}
	return sys
}

// Token logs l in through the API and returns an access token.
func (s *System) Token(t testing.TB, l Login) string {
	t.Helper()
	var out struct {
		AccessToken string `json:"accessToken"`
	}
	s.Call(t, "", http.MethodPost, "/auth/token",
		map[string]string{"login": strconv.FormatInt(l.ID, 10), "password": s.Password}, &out, http.StatusOK)
	if out.AccessToken == "" {
		t.Fatalf("login %d: no access token", l.ID)
	}
	return out.AccessToken
}

// Call sends a JSON request to the API with token (none when "") and decodes
// the answer into out (when not nil); the status must be one of want (200
// when none is given).
func (s *System) Call(t testing.TB, token, method, path string, body, out any, want ...int) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := s.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if len(want) == 0 {
		want = []int{http.StatusOK}
	}
	ok := false
	for _, w := range want {
		ok = ok || res.StatusCode == w
	}
	if !ok {
		t.Fatalf("%s %s: status %d, want %v: %s", method, path, res.StatusCode, want, b)
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	return res.StatusCode
}

// String is a Login as shown in logs.
func (l Login) String() string { return fmt.Sprintf("%s (%d)", l.Name, l.ID) }
