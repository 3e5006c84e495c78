package recovery_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/internal/testenv/storetest"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/recovery"
	"github.com/dabom/dpcs/service/store"
)

// Late records (issue #36, item 6: the drain ends after its quiet window,
// while a spooled batch, a producer waiting out a Kafka leader election or a
// batch stuck through a double fault may bring its records later): a
// usage-persist record judged under an older generation that SQL learns
// after a rebuild named the current one — which restored its family without
// it — makes the state stale before it is written, so Redis is rebuilt from
// SQL with it. Confirmed: before, Redis went on judging the family without
// the late 5 MB, trusted.
func TestLateRecordMakesTheStateStale(t *testing.T) {
	e := &env{storetest.New(t, testenv.SQLite(t))}
	ctx := e.Ctx
	eng, _ := e.engine(t)
	e.Family(t, 1)
	qs := mustState(t, eng)
	name := func(gen string) {
		t.Helper()
		st, err := e.S.RedisState(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := e.S.AcquireRebuild(ctx, "test", st.Generation, time.Minute); err != nil || !ok {
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
	}
	old, cur := quota.NewOnTouchGeneration(start, "old"), quota.NewOnTouchGeneration(start.Add(time.Second), "cur")
	name(old)
	w, err := store.NewUsageWriter(e.DB)
	if err != nil {
		t.Fatal(err)
	}
	late := recovery.NewLateRecords(w, e.S, qs, nil)
	record := func(id, gen string) store.UsageRecord {
		return store.UsageRecord{EventID: id, FamilyID: 1, CustomerID: 12, AppID: "com.kakao.talk", BytesUsed: 5 << 20,
			ProcessResult: string(policy.Allowed), RemainingAfter: 5 << 20, EventTime: start, TotalBytes: 10 << 20, Generation: gen}
	}
	// A record of the old generation written in time.
	if err := late.Write(ctx, []store.UsageRecord{record("evt_in_time", old)}); err != nil {
		t.Fatal(err)
	}
	// The rebuild names the current generation; family 1 is restored
	// from SQL.
	name(cur)
	states, _, err := e.S.ReadFamilies(ctx, qs, []int64{1}, false)
	if err != nil {
		t.Fatal(err)
	}
	st := states[1]
	st.Generation = cur
	_, seen, err := eng.FamilyToken(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := qs.RestoreUnrestored(ctx, st, seen); err != nil || !ok {
		t.Fatalf("restore: %v, %v", ok, err)
	}
	// A replay of the record written in time, and a record of the current
	// generation: nothing late.
	if err := late.Write(ctx, []store.UsageRecord{record("evt_in_time", old), record("evt_now", cur)}); err != nil {
		t.Fatal(err)
	}
	if err := eng.CheckState(ctx, cur, nil); err != nil {
		t.Fatalf("after records in time: %v", err)
	}
	// The late record: judged under the old generation, reaching SQL only
	// now.
	if err := late.Write(ctx, []store.UsageRecord{record("evt_late", old)}); err != nil {
		t.Fatal(err)
	}
	if err := eng.CheckState(ctx, cur, nil); !errors.Is(err, quota.ErrStale) {
		f, _ := eng.Family(ctx, 1)
		t.Errorf("after a late record: %v, want ErrStale (Redis has used %d, SQL %d more)", err, f.Used, 5<<20)
	}
}
