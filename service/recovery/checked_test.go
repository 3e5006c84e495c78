package recovery_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/internal/testenv/storetest"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/recovery"
	"github.com/dabom/dpcs/service/store"
)

// A decision made from a read — a gift's "what the giver has left" — is
// made on a state the door checked: after Redis lost its data (and until a
// rebuild: DPCS_RECOVERY=manual waits for an operator), the door's reads
// are refused as stale, so a giver with nothing left cannot give. It
// failed before: the read found an empty family, the giver with its whole
// allowance left (issue #36, item 3: 4 MB given, two members spending 12 MB
// against limits totalling 8 MB).
func TestGiftReadsACheckedState(t *testing.T) {
	e := &env{storetest.New(t, testenv.SQLite(t))}
	ctx := e.Ctx
	_, rdb := testenv.Redis(t)
	eng, err := quota.New(rdb, quota.WithClock(e.Clock.Now), quota.WithLocation(seoul))
	if err != nil {
		t.Fatal(err)
	}
	e.Family(t, 1)
	up, err := e.S.UpdatePolicy(ctx, store.PolicyChange{FamilyID: 1, CustomerID: 12,
		Set: map[string]string{policy.KeyLimitMonthly: "4000000"}, By: owner})
	if err != nil {
		t.Fatal(err)
	}
	gen := quota.NewOnTouchGeneration(start, "checked")
	if ok, err := e.S.AcquireRebuild(ctx, "test", "", time.Minute); err != nil || !ok {
		t.Fatalf("lease: %v, %v", ok, err)
	}
	if _, err := eng.BeginRebuild(ctx, gen); err != nil {
		t.Fatal(err)
	}
	if err := eng.FinishRebuild(ctx, gen, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.S.RebuildDone(ctx, "test", gen, store.RedisState{}); err != nil {
		t.Fatal(err)
	}
	door, err := judge.NewState(eng, judge.WithMarkStore(recovery.NewGenerations(e.S)),
		judge.WithFamilySource(recovery.NewFamilySource(e.S, eng)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := door.Enforce(ctx, 1, 12, up.Policy.Version, mustConstraints(t, up.Policy.Rules)); err != nil {
		t.Fatal(err)
	}
	// The giver spends its whole allowance.
	ev := []quota.Event{{ID: "evt_all", FamilyID: 1, CustomerID: 12, Bytes: 4000000, AppID: "com.kakao.talk", At: start}}
	if res, err := eng.ApplyMarked(ctx, gen, nil, ev); err != nil || res[0].Decision != policy.Allowed {
		t.Fatalf("the giver's usage: %+v, %v", res, err)
	}
	st, err := door.Status(ctx, 1, 12)
	if err != nil || st.MonthlyUsed != 4000000 {
		t.Fatalf("the giver before the loss: %+v, %v", st, err)
	}

	if err := rdb.FlushAll(ctx).Err(); err != nil { // Redis came back empty
		t.Fatal(err)
	}
	st, err = door.Status(ctx, 1, 12)
	if !errors.Is(err, quota.ErrStale) {
		t.Errorf("the giver after Redis lost its data: %+v, %v; want ErrStale (it has nothing left to give)", st, err)
	}
	if f, err := door.Family(ctx, 1); !errors.Is(err, quota.ErrStale) {
		t.Errorf("the family after Redis lost its data: %+v, %v; want ErrStale", f, err)
	}
}

func mustConstraints(t *testing.T, m map[string]string) policy.Constraints {
	t.Helper()
	c, err := policy.ParseConstraints(m)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
