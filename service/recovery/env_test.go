package recovery_test

import (
	"database/sql"
	"testing"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/internal/testenv/storetest"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/store"
	"github.com/redis/go-redis/v9"
)

var (
	seoul = storetest.Seoul
	start = storetest.Start
	owner = store.Actor{ID: 1, Role: policy.RoleOwner}
)

// env is a store test environment (internal/testenv).
type env struct{ *storetest.Env }

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
		"TransientSQL":  testRebuildTransientSQL,
		"RacingWrite":   testRebuildRacingWrite,
		"SweepOnce":     testRebuildSweepOnce,
	} {
		t.Run(name, func(t *testing.T) { fn(t, &env{storetest.New(t, open(t))}) })
	}
}

func TestRebuildSQLite(t *testing.T) { runRebuild(t, testenv.SQLite) }

// engine is a quota engine on a fresh embedded Redis, on the store's clock
// and zone, with the Redis's client.
func (e *env) engine(t *testing.T) (*quota.Engine, redis.UniversalClient) {
	t.Helper()
	_, rdb := testenv.Redis(t)
	eng, err := quota.New(rdb, quota.WithClock(e.Clock.Now), quota.WithLocation(seoul))
	if err != nil {
		t.Fatal(err)
	}
	return eng, rdb
}
