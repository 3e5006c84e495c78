package judge

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// memMarks is a MarkStore in memory, as SQL would keep it.
type memMarks struct {
	mu       sync.Mutex
	gen      string
	genErr   error
	recErr   error
	marks    map[string]map[[2]string]int64 // gen → (node, stream) → n
	forgot   int
	recorded int
}

func (m *memMarks) Generation(context.Context) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen, m.genErr
}

func (m *memMarks) Forget() { m.mu.Lock(); m.forgot++; m.mu.Unlock() }

func (m *memMarks) Floors(_ context.Context, gen string) ([]quota.Mark, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []quota.Mark
	for k, n := range m.marks[gen] {
		out = append(out, quota.Mark{Node: k[0], Stream: k[1], From: n, To: n})
	}
	return out, nil
}

func (m *memMarks) RecordMark(_ context.Context, gen string, mk quota.Mark) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.recErr != nil {
		return m.recErr
	}
	if m.marks == nil {
		m.marks = map[string]map[[2]string]int64{}
	}
	if m.marks[gen] == nil {
		m.marks[gen] = map[[2]string]int64{}
	}
	k := [2]string{mk.Node, mk.Stream}
	m.marks[gen][k] = max(m.marks[gen][k], mk.To)
	m.recorded++
	return nil
}

func (m *memMarks) total(gen string) (n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range m.marks[gen] {
		n += v
	}
	return n
}

func markedDoor(t *testing.T) (*State, *quota.Engine, *memMarks, redis.UniversalClient) {
	t.Helper()
	_, rdb := testenv.Redis(t)
	eng, err := quota.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	ms := &memMarks{}
	qs, err := NewState(eng, WithMarkStore(ms))
	if err != nil {
		t.Fatal(err)
	}
	return qs, eng, ms, rdb
}

// Every family write through the door is marked on the family's node and
// recorded; the judgements check what was recorded.
func TestFamilyWriteMarks(t *testing.T) {
	ctx := context.Background()
	qs, eng, ms, rdb := markedDoor(t)

	// Never rebuilt: nothing to mark against (the first rebuild reads SQL).
	if err := qs.AddMember(ctx, 1, 11); err != nil {
		t.Fatal(err)
	}
	if ms.recorded != 0 {
		t.Fatalf("marked before any generation: %v", ms.marks)
	}
	if _, err := eng.BeginRebuild(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	if err := eng.FinishRebuild(ctx, "g1", nil); err != nil {
		t.Fatal(err)
	}
	ms.gen = "g1"
	writes := []func() error{
		func() error { _, err := qs.SetPlan(ctx, 1, 10<<20); return err },
		func() error { return qs.AddMember(ctx, 1, 12) },
		func() error { _, err := qs.SetTopUps(ctx, 1, "202611", 1<<20); return err },
		func() error { return qs.SetThresholds(ctx, 1, policy.Thresholds{50}) },
		func() error {
			_, err := qs.Enforce(ctx, 1, 12, 1, policy.Constraints{})
			return err
		},
		func() error { return qs.RemoveMember(ctx, 1, 12) },
	}
	for i, w := range writes {
		if err := w(); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if got := ms.total("g1"); got != int64(len(writes)) {
		t.Fatalf("recorded counts sum to %d, want %d: %v", got, len(writes), ms.marks)
	}
	// The processor's own policy updates are marked by their partitions.
	if _, err := qs.enforce(ctx, 1, 11, 1, policy.Constraints{}); err != nil || ms.total("g1") != int64(len(writes)) {
		t.Fatalf("enforce marked a processor's policy update: %v, %v", err, ms.marks)
	}
	if err := qs.checkState(ctx, "g1", nil); err != nil {
		t.Fatalf("check with the marks recorded: %v", err)
	}
	// Redis loses the last write's mark (a rollback): every judgement is
	// refused until a rebuild.
	states, _ := eng.State(ctx)
	for f, v := range rdb.HGetAll(ctx, states[0].Key).Val() {
		if strings.HasPrefix(f, "w:"+FamilyWriteStream) && v == "2" {
			rdb.HSet(ctx, states[0].Key, f, "1")
		}
	}
	err := qs.checkState(ctx, "g1", nil)
	if !errors.Is(err, quota.ErrStale) || !strings.Contains(err.Error(), FamilyWriteStream) {
		t.Fatalf("check after the rollback: %v, want stale naming the family writes", err)
	}
	if _, err := qs.applyMarked(ctx, "g1", nil, []quota.Event{{ID: "e", FamilyID: 1, CustomerID: 11, Bytes: 1, At: time.Now()}}); !errors.Is(err, quota.ErrStale) {
		t.Fatalf("batch after the rollback: %v", err)
	}
	if err := qs.advance(ctx, "g1", nil); !errors.Is(err, quota.ErrStale) {
		t.Fatalf("advance after the rollback: %v", err)
	}
}

// A write to a state of another generation or one that lost the door's
// earlier marks stands (SQL holds it; the judges find the state stale), and
// the count the door reached is recorded; store failures are errors.
func TestFamilyWriteMarksStale(t *testing.T) {
	ctx := context.Background()
	qs, eng, ms, rdb := markedDoor(t)
	for _, g := range []string{"g1", "g2"} {
		if _, err := eng.BeginRebuild(ctx, g); err != nil {
			t.Fatal(err)
		}
		if err := eng.FinishRebuild(ctx, g, nil); err != nil {
			t.Fatal(err)
		}
	}
	ms.gen = "g1" // SQL still names the old generation for a moment
	if err := qs.AddMember(ctx, 1, 11); err != nil {
		t.Fatalf("write while SQL names another generation: %v", err)
	}
	// The state's generation is not the one SQL names: the write is counted
	// under SQL's (a count no node of it holds; the rebuild that finished
	// is about to name g2, and its counts start again).
	if ms.forgot != 1 || ms.total("g1") != 1 {
		t.Fatalf("forgot %d, recorded %v: want the generation read again and the write counted under g1", ms.forgot, ms.marks)
	}
	ms.gen = "g2"
	for range markSlots {
		if err := qs.AddMember(ctx, 1, 11); err != nil {
			t.Fatal(err)
		}
	}
	if ms.total("g2") != markSlots {
		t.Fatalf("recorded %v, want one mark per slot", ms.marks)
	}
	// The node loses every mark (a restart from a snapshot taken after the
	// rebuild): the next write on a slot that had counted finds it behind,
	// stands, and the judges refuse the node.
	states, _ := eng.State(ctx)
	for f := range rdb.HGetAll(ctx, states[0].Key).Val() {
		if strings.HasPrefix(f, "w:"+FamilyWriteStream) {
			rdb.HDel(ctx, states[0].Key, f)
		}
	}
	if err := qs.AddMember(ctx, 1, 11); err != nil {
		t.Fatalf("write on a node behind the door: %v", err)
	}
	if err := qs.checkState(ctx, "g2", nil); !errors.Is(err, quota.ErrStale) {
		t.Fatalf("check of a node behind the recorded marks: %v", err)
	}
	// A rollback that brings the counts back to what SQL held before that
	// write does not hide it: the write was counted past them.
	before := ms.total("g2")
	for f := range rdb.HGetAll(ctx, states[0].Key).Val() {
		if strings.HasPrefix(f, "w:"+FamilyWriteStream) {
			rdb.HSet(ctx, states[0].Key, f, "1")
		}
	}
	if err := qs.AddMember(ctx, 1, 11); err != nil {
		t.Fatal(err)
	}
	if ms.total("g2") <= before {
		t.Fatalf("a write on the stale state was not counted: %v", ms.marks)
	}
	if err := qs.checkState(ctx, "g2", nil); !errors.Is(err, quota.ErrStale) {
		t.Fatalf("check after the counts were rolled back to the recorded ones: %v", err)
	}
	// Store failures are the caller's errors.
	ms.recErr = errors.New("sql down")
	if err := qs.SetThresholds(ctx, 1, policy.Thresholds{50}); !errors.Is(err, ErrNotMarked) || !strings.Contains(err.Error(), "sql down") {
		t.Errorf("record failure: %v", err)
	}
	ms.recErr, ms.genErr = nil, errors.New("sql down")
	if _, err := qs.SetPlan(ctx, 1, 5); !errors.Is(err, ErrNotMarked) || !strings.Contains(err.Error(), "sql down") {
		t.Errorf("generation failure: %v", err)
	}
	if _, err := NewState(eng, WithMarkStore(nil)); err == nil {
		t.Error("NewState with a nil mark store: no error")
	}
}
