package charging_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/internal/testenv/chargertest"
	"github.com/dabom/dpcs/internal/testenv/storetest"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/charging"
	"github.com/dabom/dpcs/service/store"
)

// The family every test charges: 100 MiB, three members.
const (
	family    = 100
	dad       = 1001 // phone 010-1234-5678
	mom       = 1002 // phone +82 10 2222 3333
	child     = 1003 // IMSI 450051234567890, no phone
	childIMSI = "450051234567890"
	pool      = 100 << 20
	mib       = 1 << 20
)

// env is a charging service on a SQLite store and the in-memory grant
// engine, its clock settable.
type env struct {
	t     testing.TB
	ctx   context.Context
	st    *storetest.Env
	fake  *chargertest.Fake
	svc   *charging.Service
	clock *storetest.Clock
}

func newEnv(t *testing.T, opts ...charging.Option) *env { return newEnvTB(t, opts...) }

// newBenchEnv is newEnv for a benchmark.
func newBenchEnv(b *testing.B, opts ...charging.Option) *env { return newEnvTB(b, opts...) }

func newEnvTB(t testing.TB, opts ...charging.Option) *env {
	t.Helper()
	db := testenv.SQLite
	if _, isBench := t.(*testing.B); isBench && os.Getenv("DPCS_TEST_MYSQL_DSN") != "" {
		db = testenv.MySQL // the benchmarks on MariaDB (BenchmarkUpdateOverH2C)
	}
	st := storetest.New(t, db(t))
	e := &env{t: t, ctx: t.Context(), st: st, fake: chargertest.New(), clock: st.Clock}
	if _, err := st.S.CreateFamily(e.ctx, store.NewFamily{ID: family, Name: "Kim", PlanBytes: pool}, store.System); err != nil {
		t.Fatal(err)
	}
	for _, m := range []store.NewMember{
		{ID: dad, FamilyID: family, Name: "dad", Phone: "010-1234-5678", Role: policy.RoleOwner},
		{ID: mom, FamilyID: family, Name: "mom", Phone: "+82 10 2222 3333", Role: policy.RoleOwner},
		{ID: child, FamilyID: family, Name: "child", Role: policy.RoleMember},
	} {
		if _, err := st.S.AddMember(e.ctx, m, store.System); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.S.SetMemberIMSI(e.ctx, family, child, childIMSI, store.System); err != nil {
		t.Fatal(err)
	}
	e.fake.SetPool(family, pool)
	e.svc = e.service(e.fake, st.S, opts...)
	return e
}

// service is a service on charger and sessions with the env's clock, no
// background sweep, and opts.
func (e *env) service(charger charging.Charger, sessions charging.Sessions, opts ...charging.Option) *charging.Service {
	e.t.Helper()
	svc, err := charging.New(charger, sessions, append([]charging.Option{charging.WithClock(e.clock.Now),
		charging.WithSweep(0, time.Hour)}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = svc.Close(ctx)
	})
	return svc
}

func u32(v uint32) *uint32 { return &v }
func u64(v uint64) *uint64 { return &v }
func i64(v int64) *int64   { return &v }

// request is a ChargingDataRequest of invocation seq for subscriber sub
// with the rating groups' usage.
func request(sub string, seq uint32, usage ...charging.MultipleUnitUsage) *charging.ChargingDataRequest {
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	return &charging.ChargingDataRequest{SubscriberIdentifier: sub,
		NfConsumerIdentification: &charging.NFIdentification{NFName: "0a3b5c7d-1e2f-4a6b-8c9d-0e1f2a3b4c5d", NodeFunctionality: "SMF"},
		InvocationTimeStamp:      &at, InvocationSequenceNumber: u32(seq), MultipleUnitUsage: usage}
}

// ask asks rg for want bytes (0: the CHF decides) after using used (-1:
// no usage container).
func ask(rg uint32, want uint64, used int64) charging.MultipleUnitUsage {
	u := charging.MultipleUnitUsage{RatingGroup: u32(rg), RequestedUnit: &charging.RequestedUnit{}}
	if want > 0 {
		u.RequestedUnit.TotalVolume = u64(want)
	}
	if used >= 0 {
		u.UsedUnitContainer = []charging.UsedUnitContainer{{TotalVolume: u64(uint64(used)), LocalSequenceNumber: i64(1)}}
	}
	return u
}

// report reports rg's used bytes and asks for nothing more.
func report(rg uint32, used uint64) charging.MultipleUnitUsage {
	return charging.MultipleUnitUsage{RatingGroup: u32(rg),
		UsedUnitContainer: []charging.UsedUnitContainer{{TotalVolume: u64(used), LocalSequenceNumber: i64(1)}}}
}

// problem is err as a *charging.Problem, failing the test if it is not.
func problem(t *testing.T, err error) *charging.Problem {
	t.Helper()
	var p *charging.Problem
	if !errors.As(err, &p) {
		t.Fatalf("err = %v, want a *charging.Problem", err)
	}
	return p
}

// wantProblem checks a refusal's status, cause and first invalid param.
func wantProblem(t *testing.T, err error, status int, cause, param string) {
	t.Helper()
	p := problem(t, err)
	got := ""
	if len(p.InvalidParams) > 0 {
		got = p.InvalidParams[0].Param
	}
	if p.Status != status || p.Cause != cause || got != param {
		t.Errorf("problem = %d %s %q (%s), want %d %s %q", p.Status, p.Cause, got, p.Detail, status, cause, param)
	}
}

// unit is the answer's part about rg.
func unit(t *testing.T, resp *charging.ChargingDataResponse, rg uint32) charging.MultipleUnitInformation {
	t.Helper()
	for _, u := range resp.MultipleUnitInformation {
		if u.RatingGroup == rg {
			return u
		}
	}
	t.Fatalf("no answer for rating group %d in %+v", rg, resp.MultipleUnitInformation)
	return charging.MultipleUnitInformation{}
}

func granted(u charging.MultipleUnitInformation) uint64 {
	if u.GrantedUnit == nil || u.GrantedUnit.TotalVolume == nil {
		return 0
	}
	return *u.GrantedUnit.TotalVolume
}

// golden compares b (JSON) with testdata/golden/name, or rewrites it with
// -update.
func golden(t *testing.T, name string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(b) {
		t.Errorf("%s differs (run with -update to rewrite it):\ngot:\n%s\nwant:\n%s", path, b, want)
	}
}

// readRequest reads a golden request.
func readRequest(t *testing.T, name string, op charging.Op) *charging.ChargingDataRequest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "golden", name))
	if err != nil {
		t.Fatal(err)
	}
	req, err := charging.DecodeRequest(b, op)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
