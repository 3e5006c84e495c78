package smfsim_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/internal/testenv/chargertest"
	"github.com/dabom/dpcs/internal/testenv/storetest"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/charging"
	"github.com/dabom/dpcs/service/charging/smfsim"
	"github.com/dabom/dpcs/service/store"
)

const token = "smfsim-test-credential-0123456789abcdef"

// Simulated SMFs open sessions, report at their thresholds, answer a
// REAUTHORIZATION with an update, and release everything they hold when
// stopped: the engine holds nothing afterwards and charged what they
// reported.
func TestSessions(t *testing.T) {
	ctx := t.Context()
	st := storetest.New(t, testenv.SQLite(t))
	if _, err := st.S.CreateFamily(ctx, store.NewFamily{ID: 100, Name: "f", PlanBytes: 1 << 40}, store.System); err != nil {
		t.Fatal(err)
	}
	subs := []string{"msisdn-821000010000", "msisdn-821000010001"}
	for i, phone := range []string{"010-0001-0000", "010-0001-0001"} {
		if _, err := st.S.AddMember(ctx, store.NewMember{ID: int64(1001 + i), FamilyID: 100, Name: "m", Phone: phone, Role: policy.RoleOwner}, store.System); err != nil {
			t.Fatal(err)
		}
	}
	fake := chargertest.New()
	fake.SetPool(100, 1<<40)
	svc, err := charging.New(fake, st.S, charging.WithNotifyNetworks(true), charging.WithGrantSizes(1<<10, 256<<10, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	url := serve(t, svc)

	sim, err := smfsim.New(smfsim.Config{URL: url, Token: token, Subscribers: subs, Sessions: 4,
		NotifyAddr: "127.0.0.1:0", Rate: [2]int64{1 << 20, 2 << 20}, Lifetime: [2]time.Duration{300 * time.Millisecond, 800 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); sim.Stats().Updates < 4 || sim.Stats().Releases < 4; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stats: %+v", sim.Stats())
		}
	}
	for deadline := time.Now().Add(30 * time.Second); sim.Stats().Open == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no session open: %+v", sim.Stats())
		}
	}
	svc.Changed(100)
	for deadline := time.Now().Add(30 * time.Second); sim.Stats().Notifications == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no REAUTHORIZATION reached the SMFs: %+v", sim.Stats())
		}
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sim.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	s := sim.Stats()
	t.Logf("stats: %+v", s)
	if s.Open != 0 || s.Releases < s.Creates {
		t.Errorf("sessions left open: %+v", s)
	}
	if n := fake.Outstanding(); n != 0 {
		t.Errorf("%d grants still held after every session was released", n)
	}
	if _, used, _ := fake.Pool(100); uint64(used) != s.UsedBytes {
		t.Errorf("charged %d, the SMFs reported %d", used, s.UsedBytes)
	}
	if err := fake.Check(); err != nil {
		t.Error(err)
	}
}

// A session the CHF's sweep closes gets ABORT_CHARGING and ends there:
// the simulated SMF sends nothing more for it (no release of a session
// that is gone) and opens another in its place.
func TestAbortEndsSessions(t *testing.T) {
	ctx := t.Context()
	st, fake := oneMember(t)
	var skew atomic.Int64 // how far the service's clock runs ahead
	svc, err := charging.New(fake, st.S, charging.WithNotifyNetworks(true), charging.WithGrantSizes(1<<10, 1<<30, 1<<30),
		charging.WithValidity(time.Minute), charging.WithQuotaHoldingTime(time.Minute),
		charging.WithClock(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	sim, stop := startSim(t, smfsim.Config{URL: serve(t, svc), Token: token, Subscribers: []string{"msisdn-821000010000"},
		Sessions: 2, NotifyAddr: "127.0.0.1:0", Rate: [2]int64{1 << 10, 2 << 10}, Lifetime: [2]time.Duration{time.Hour, time.Hour}})
	defer stop()
	for deadline := time.Now().Add(30 * time.Second); sim.Stats().Open < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("sessions not open: %+v", sim.Stats())
		}
	}
	skew.Store(int64(3 * time.Minute)) // past validity and holding: lost, as the CHF sees them
	if info, err := svc.Sweep(ctx); err != nil || info.Closed != 2 {
		t.Fatalf("sweep: %+v, %v", info, err)
	}
	for deadline := time.Now().Add(30 * time.Second); sim.Stats().Aborts < 2 || sim.Stats().Creates < 4 || sim.Stats().Open < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the aborted sessions did not end and give way to others: %+v", sim.Stats())
		}
	}
	if s := sim.Stats(); s.Aborts != 2 || s.Releases != 0 || s.Errors != 0 {
		t.Errorf("stats %+v: want 2 aborts, no release, no error", s)
	}
}

// serve serves svc's charging interface on a loopback port until the test
// ends, and returns its URL.
func serve(t *testing.T, svc *charging.Service) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := charging.NewServer(charging.Handler(svc, charging.HandlerConfig{Tokens: []string{token}}), nil, nil)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// A rating group crowded out (nothing granted, not final) keeps its
// session: the simulated SMF asks again at validityTime and is granted.
func TestCrowdedSessionAsksAgain(t *testing.T) {
	st, fake := oneMember(t)
	fake.CrowdNext(1)
	svc, err := charging.New(fake, st.S, charging.WithGrantSizes(1<<10, 1<<30, 1<<30), charging.WithValidity(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	sim, stop := startSim(t, smfsim.Config{URL: serve(t, svc), Token: token, Subscribers: []string{"msisdn-821000010000"},
		Sessions: 1, Rate: [2]int64{1 << 10, 2 << 10}, Lifetime: [2]time.Duration{time.Hour, time.Hour}})
	defer stop()
	for deadline := time.Now().Add(30 * time.Second); sim.Stats().GrantedBytes == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never granted after being crowded out: %+v", sim.Stats())
		}
	}
	if s := sim.Stats(); s.Creates != 1 || s.Refused != 1 || s.Updates < 1 || s.Releases != 0 || s.Errors != 0 {
		t.Errorf("stats %+v: want one session, crowded once, then granted on its update", s)
	}
}

// oneMember is a store with family 100 and its member 1001 (phone
// 010-0001-0000), and a grant engine giving the family a large pool.
func oneMember(t *testing.T) (*storetest.Env, *chargertest.Fake) {
	t.Helper()
	st := storetest.New(t, testenv.SQLite(t))
	if _, err := st.S.CreateFamily(t.Context(), store.NewFamily{ID: 100, Name: "f", PlanBytes: 1 << 40}, store.System); err != nil {
		t.Fatal(err)
	}
	if _, err := st.S.AddMember(t.Context(), store.NewMember{ID: 1001, FamilyID: 100, Name: "m", Phone: "010-0001-0000",
		Role: policy.RoleOwner}, store.System); err != nil {
		t.Fatal(err)
	}
	fake := chargertest.New()
	fake.SetPool(100, 1<<40)
	return st, fake
}

// startSim starts the simulated SMFs of cfg; stop closes them (within 10 s).
func startSim(t *testing.T, cfg smfsim.Config) (*smfsim.Simulator, func()) {
	t.Helper()
	sim, err := smfsim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	return sim, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = sim.Close(ctx)
	}
}
