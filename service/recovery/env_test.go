package recovery_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/store"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

var seoul, _ = policy.LoadZone(policy.DefaultZone)

// start is a fixed instant: 2026-02-10 12:00 in Seoul.
var start = time.Date(2026, 2, 10, 12, 0, 0, 0, seoul)

var owner = store.Actor{ID: 1, Role: policy.RoleOwner}

// env is a migrated store on a fresh database, with a settable clock.
type env struct {
	ctx context.Context
	db  *sql.DB
	s   *store.Store
	clk *clock
}

func newEnv(t *testing.T, db *sql.DB) *env {
	t.Helper()
	ctx := context.Background()
	if err := store.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: start}
	s, err := store.New(db, store.WithClock(clk.Now), store.WithBcryptCost(4), store.WithLocation(seoul))
	if err != nil {
		t.Fatal(err)
	}
	return &env{ctx: ctx, db: db, s: s, clk: clk}
}

// family creates family fid with an owner (cid fid*10+1) and a child (fid*10+2).
func (e *env) family(t *testing.T, fid int64) {
	t.Helper()
	if _, err := e.s.CreateFamily(e.ctx, store.NewFamily{ID: fid, Name: fmt.Sprintf("Family %d", fid), PlanBytes: 10 << 20}, store.System); err != nil {
		t.Fatal(err)
	}
	for i, role := range []policy.Role{policy.RoleOwner, policy.RoleMember} {
		cid := fid*10 + int64(i) + 1
		if _, err := e.s.AddMember(e.ctx, store.NewMember{ID: cid, FamilyID: fid, Name: fmt.Sprint("m", cid),
			Phone: fmt.Sprint("010-", cid), Role: role, Password: "pw"}, store.System); err != nil {
			t.Fatal(err)
		}
	}
}

// mustState is the door to eng's state.
func mustState(t testing.TB, eng judge.Engine) *judge.State {
	t.Helper()
	qs, err := judge.NewState(eng)
	if err != nil {
		t.Fatal(err)
	}
	return qs
}

// runRebuild runs the rebuild tests on databases from open.
func runRebuild(t *testing.T, open func(testing.TB) *sql.DB) {
	for name, fn := range map[string]func(*testing.T, *env){
		"Rebuild":       testRebuild,
		"RebuildReport": testRebuildReport,
		"RebuildPages":  testRebuildPages,
	} {
		t.Run(name, func(t *testing.T) { fn(t, newEnv(t, open(t))) })
	}
}

func TestRebuildSQLite(t *testing.T) { runRebuild(t, testenv.SQLite) }
