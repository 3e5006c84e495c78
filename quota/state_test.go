package quota

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
)

func checkStateMarker(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	e, err := New(rdb, WithKeyPrefix(uniquePrefix()))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ev := func(id string) Event { return Event{ID: id, FamilyID: 1, CustomerID: 1, Bytes: 10, At: now} }
	stale := func(what string, err error, want string) {
		t.Helper()
		var se *StaleError
		if !errors.As(err, &se) || !errors.Is(err, ErrStale) || !strings.Contains(se.Reason, want) {
			t.Fatalf("%s: %v, want a stale state error saying %q", what, err, want)
		}
	}
	// Never rebuilt (or lost everything): nothing is judged.
	_, err = e.ApplyMarked(ctx, "g1", []Mark{{Stream: "usage/0", From: 0, To: 1}}, []Event{ev("a")})
	stale("empty Redis", err, "no state marker")

	// A rebuild to g1 that reflects usage/0 up to 5.
	wm, err := e.BeginRebuild(ctx, "g1")
	if err != nil || len(wm) != 0 {
		t.Fatalf("BeginRebuild = %v, %v", wm, err)
	}
	if err := e.Restore(ctx, FamilyState{FamilyID: 1, Provisioned: true, Plan: 100, Members: []MemberState{{CustomerID: 1}}, Generation: "g1"}); err != nil {
		t.Fatal(err)
	}
	if err := e.FinishRebuild(ctx, "g1", map[string]int64{"usage/0": 5}); err != nil {
		t.Fatal(err)
	}
	_, err = e.ApplyMarked(ctx, "g1", []Mark{{Stream: "usage/0", From: 3, To: 7}}, []Event{ev("a")})
	if err != nil {
		t.Fatalf("replaying from before the watermark: %v", err)
	}
	rs, err := e.ApplyMarked(ctx, "g1", []Mark{{Stream: "usage/0", From: 7, To: 9}, {Stream: "usage/1", From: 0, To: 4}}, []Event{ev("b")})
	if err != nil || len(rs) != 1 || rs[0].Decision != policy.Allowed || rs[0].Remaining != 80 {
		t.Fatalf("next batch = %+v, %v", rs, err)
	}
	states, err := e.State(ctx)
	if err != nil || len(states) == 0 {
		t.Fatal(states, err)
	}
	want := map[string]int64{"usage/0": 9, "usage/1": 4}
	for _, st := range states {
		if st.Generation != "g1" || !cmp.Equal(st.Watermarks, want) {
			t.Errorf("marker %s = %+v, want g1 %v", st.Key, st, want)
		}
	}
	// Another generation is not this state.
	_, err = e.ApplyMarked(ctx, "g0", []Mark{{Stream: "usage/0", From: 9, To: 10}}, []Event{ev("c")})
	stale("other generation", err, "generation is g1, expected g0")

	// Redis comes back from a snapshot taken before usage/0 reached 9: the
	// consumer resumes at its committed 9, the state knows only up to 7.
	if err := e.FinishRebuild(ctx, "g1", map[string]int64{"usage/0": 7}); err != nil {
		t.Fatal(err)
	}
	rs, err = e.ApplyMarked(ctx, "g1", []Mark{{Stream: "usage/0", From: 9, To: 10}}, []Event{ev("c")})
	stale("rolled-back state", err, "older than what was committed")
	if rs != nil {
		t.Errorf("stale batch returned results %v", rs)
	}
	if err := e.CheckState(ctx, "g1", []Mark{{Stream: "usage/0", From: 9}}); !errors.Is(err, ErrStale) {
		t.Errorf("CheckState of the rolled-back state = %v", err)
	}

	// A rebuild begins: the old generation's batches fail, their watermarks come back.
	wm, err = e.BeginRebuild(ctx, "g2")
	if err != nil || wm["usage/0"] != 7 {
		t.Fatalf("BeginRebuild = %v, %v", wm, err)
	}
	_, err = e.ApplyMarked(ctx, "g1", []Mark{{Stream: "usage/0", From: 7, To: 8}}, []Event{ev("d")})
	stale("during a rebuild", err, "rebuilding:g2")
	// A family restored by the new generation refuses the old one's events.
	if err := e.Restore(ctx, FamilyState{FamilyID: 1, Provisioned: true, Plan: 100, Members: []MemberState{{CustomerID: 1}}, Generation: "g2"}); err != nil {
		t.Fatal(err)
	}
	if err := e.FinishRebuild(ctx, "g1", nil); err != nil { // a straggler's view: marker g1 again
		t.Fatal(err)
	}
	_, err = e.ApplyMarked(ctx, "g1", []Mark{{Stream: "usage/0", From: 0, To: 1}}, []Event{ev("e")})
	stale("family of another generation", err, "restored by state generation g2")
	f, _ := e.Family(ctx, 1)
	if f.Used != 0 {
		t.Errorf("a refused event was charged: used %d", f.Used)
	}
	if err := e.FinishRebuild(ctx, "g2", nil); err != nil {
		t.Fatal(err)
	}
	if rs, err := e.ApplyMarked(ctx, "g2", []Mark{{Stream: "usage/0", From: 0, To: 1}}, []Event{ev("e")}); err != nil || rs[0].Decision != policy.Allowed {
		t.Errorf("after the rebuild = %v, %v", rs, err)
	}
	// Bad arguments.
	for _, bad := range [][]Mark{{{Stream: ""}}, {{Stream: "a b"}}, {{Stream: "a", From: 2, To: 1}}} {
		if _, err := e.ApplyMarked(ctx, "g2", bad, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("marks %v: %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := e.ApplyMarked(ctx, "", nil, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty generation: %v", err)
	}
	if _, err := e.BeginRebuild(ctx, "rebuilding:x"); !errors.Is(err, ErrInvalid) {
		t.Errorf("BeginRebuild(rebuilding:x): %v", err)
	}
}

func TestStateMarker(t *testing.T) { eachBackend(t, checkStateMarker) }

var prefixSeq atomic.Int64

// uniquePrefix is a key prefix no other test uses (real servers are shared).
func uniquePrefix() string {
	return fmt.Sprintf("t%d:%d:", time.Now().UnixNano(), prefixSeq.Add(1))
}

// Advance raises the watermarks for work judged outside ApplyMarked, after
// the same check; CheckState only checks.
func TestAdvanceAndCheckState(t *testing.T) {
	ctx := context.Background()
	e, err := New(newMiniredis(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.FinishRebuild(ctx, "g1", map[string]int64{"policy/0": 5}); err != nil {
		t.Fatal(err)
	}
	watermarks := func() map[string]int64 {
		t.Helper()
		st, err := e.State(ctx)
		if err != nil || len(st) != 1 {
			t.Fatalf("State = %+v, %v", st, err)
		}
		return st[0].Watermarks
	}
	if err := e.CheckState(ctx, "g1", []Mark{{Stream: "policy/0", From: 5, To: 99}}); err != nil {
		t.Errorf("CheckState at the watermark: %v", err)
	}
	if diff := cmp.Diff(map[string]int64{"policy/0": 5}, watermarks()); diff != "" {
		t.Errorf("CheckState moved the watermarks (-want +got):\n%s", diff)
	}
	if err := e.Advance(ctx, "g1", []Mark{{Stream: "policy/0", From: 5, To: 8}, {Stream: "policy/1", From: 0, To: 2}}); err != nil {
		t.Fatal(err)
	}
	// A replay from before the watermark never lowers it.
	if err := e.Advance(ctx, "g1", []Mark{{Stream: "policy/0", From: 3, To: 4}}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int64{"policy/0": 8, "policy/1": 2}, watermarks()); diff != "" {
		t.Errorf("after Advance (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		gen   string
		marks []Mark
		why   string
	}{
		{"g1", []Mark{{Stream: "policy/0", From: 9, To: 10}}, "stream policy/0: this Redis node has judged up to position 8 but position 9 is next"},
		{"g0", []Mark{{Stream: "policy/0", From: 8, To: 10}}, "state generation is g1, expected g0"},
	} {
		err := e.Advance(ctx, tt.gen, tt.marks)
		var se *StaleError
		if !errors.As(err, &se) || !strings.HasPrefix(se.Reason, tt.why) {
			t.Errorf("Advance(%s, %v) = %v, want stale: %s", tt.gen, tt.marks, err, tt.why)
		} else if err.Error() != "quota: the redis state cannot be trusted: "+se.Reason {
			t.Errorf("message %q", err)
		}
	}
	if diff := cmp.Diff(map[string]int64{"policy/0": 8, "policy/1": 2}, watermarks()); diff != "" {
		t.Errorf("a refused Advance moved the watermarks (-want +got):\n%s", diff)
	}
}

func TestFinishRebuildInvalid(t *testing.T) {
	ctx := context.Background()
	e, err := New(newMiniredis(t))
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"empty generation":      func() error { return e.FinishRebuild(ctx, "", nil) },
		"rebuilding generation": func() error { return e.FinishRebuild(ctx, RebuildingPrefix+"g", nil) },
		"stream with a space":   func() error { return e.FinishRebuild(ctx, "g", map[string]int64{"a b": 1}) },
		"stream with a bar":     func() error { return e.FinishRebuild(ctx, "g", map[string]int64{"a|b": 1}) },
		"negative watermark":    func() error { return e.FinishRebuild(ctx, "g", map[string]int64{"a": -1}) },
		"empty begin":           func() error { _, err := e.BeginRebuild(ctx, ""); return err },
	} {
		if err := call(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if st, err := e.State(ctx); err != nil || st[0].Generation != "" {
		t.Errorf("a refused call wrote a marker: %+v, %v", st, err)
	}
}

// A stream with no watermark in the generation is new to it only from
// position 0: a batch that starts later (a committed offset, a position
// after an earlier batch) on a marker without the stream's watermark finds
// a state that lost the advance — a snapshot taken after the rebuild and
// before the stream's first batch was advanced — and is refused. (It used
// to pass the check.)
func TestMissingWatermarkPastZero(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		e := rebuiltEngine(t, rdb, "g1", map[string]int64{"usage/0": 5})
		if err := e.CheckState(ctx, "g1", []Mark{{Stream: "usage/2", From: 0}}); err != nil {
			t.Errorf("a new stream from 0: %v", err)
		}
		for _, m := range []Mark{{Stream: "usage/1", From: 3, To: 3}, {Stream: "usage/1", From: 3, To: 4}} {
			if err := e.CheckState(ctx, "g1", []Mark{m}); !errors.Is(err, ErrStale) {
				t.Errorf("check of %+v without its watermark: %v, want ErrStale", m, err)
			}
			if err := e.Advance(ctx, "g1", []Mark{m}); !errors.Is(err, ErrStale) {
				t.Errorf("advance of %+v without its watermark: %v, want ErrStale", m, err)
			}
		}
		if err := e.Advance(ctx, "g1", []Mark{{Stream: "usage/1", From: 0, To: 4}}); err != nil {
			t.Fatal(err)
		}
		if err := e.CheckState(ctx, "g1", []Mark{{Stream: "usage/1", From: 4}}); err != nil {
			t.Errorf("after the stream's first advance: %v", err)
		}
	})
}

// A mark with a Node is checked and raised on that node's marker only: a
// family write is marked on the node holding the family (FamilyMarker), and
// the other nodes neither hold nor need its stream.
func TestNodeMarks(t *testing.T) {
	eachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		e := rebuiltEngine(t, rdb, "g1", nil)
		states, err := e.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		node, err := e.FamilyMarker(ctx, 7)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(states, func(s StateInfo) bool { return s.Key == node }) {
			t.Fatalf("FamilyMarker(7) = %q, not one of the markers %+v", node, states)
		}
		if err := e.Advance(ctx, "g1", []Mark{{Stream: "fw/a/0", From: 0, To: 1, Node: node}}); err != nil {
			t.Fatal(err)
		}
		if err := e.Advance(ctx, "g1", []Mark{{Stream: "fw/a/0", From: 1, To: 2, Node: node}}); err != nil {
			t.Fatal(err)
		}
		states, err = e.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range states {
			want := map[string]int64{}
			if st.Key == node {
				want["fw/a/0"] = 2
			}
			if !cmp.Equal(st.Watermarks, want) {
				t.Errorf("marker %s = %v, want %v", st.Key, st.Watermarks, want)
			}
		}
		// Every node passes a floor at the count; the family's node refuses
		// one past it (its state lost the write counted there), in a check,
		// an advance and a judged batch.
		if err := e.CheckState(ctx, "g1", []Mark{{Stream: "fw/a/0", From: 2, Node: node}}); err != nil {
			t.Errorf("check at the count: %v", err)
		}
		past := []Mark{{Stream: "usage/0", From: 0, To: 1}, {Stream: "fw/a/0", From: 3, To: 3, Node: node}}
		if err := e.CheckState(ctx, "g1", past); !errors.Is(err, ErrStale) {
			t.Errorf("check past the count: %v, want ErrStale", err)
		}
		if err := e.Advance(ctx, "g1", past); !errors.Is(err, ErrStale) {
			t.Errorf("advance past the count: %v, want ErrStale", err)
		}
		ev := Event{ID: "x", FamilyID: 7, CustomerID: 1, Bytes: 1, At: time.Now()}
		if _, err := e.ApplyMarked(ctx, "g1", past, []Event{ev}); !errors.Is(err, ErrStale) {
			t.Errorf("batch past the count: %v, want ErrStale", err)
		}
		if _, err := e.FamilyMarker(ctx, 0); !errors.Is(err, ErrInvalid) {
			t.Errorf("FamilyMarker(0) = %v, want ErrInvalid", err)
		}
	})
}

// rebuiltEngine is an engine under a fresh key prefix whose markers a
// rebuild named gen, with watermarks wm.
func rebuiltEngine(t *testing.T, rdb redis.UniversalClient, gen string, wm map[string]int64) *Engine {
	t.Helper()
	ctx := context.Background()
	e, err := New(rdb, WithKeyPrefix(uniquePrefix()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.BeginRebuild(ctx, gen); err != nil {
		t.Fatal(err)
	}
	if err := e.FinishRebuild(ctx, gen, wm); err != nil {
		t.Fatal(err)
	}
	return e
}
