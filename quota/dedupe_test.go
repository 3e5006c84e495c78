package quota

import (
	"context"
	"testing"
	"time"
)

// A dedupe bucket's TTL is set by its first write (three windows) and marked,
// not renewed by every event; Restore marks the bucket it writes.
func TestDedupeBucketTTLSetOnce(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)
	e := holeEngine(t, &now)
	if err := e.AddMember(ctx, 1, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := e.SetPlan(ctx, 1, 1000); err != nil {
		t.Fatal(err)
	}
	ev := Event{ID: "a", FamilyID: 1, CustomerID: 2, Bytes: 1, AppID: "x", At: now}
	if _, err := e.Apply(ctx, ev); err != nil {
		t.Fatal(err)
	}
	bk := e.k.events(1, e.bucket(now))
	ttl := func() time.Duration {
		t.Helper()
		d, err := e.rdb.TTL(ctx, bk).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if got, want := ttl(), 3*e.dedupeTTL; got != want {
		t.Fatalf("TTL after the first write %v, want %v", got, want)
	}
	if m, err := e.rdb.HGet(ctx, bk, bucketMarked).Result(); err != nil || m != "1" {
		t.Fatalf("marker %q, %v", m, err)
	}
	// A second event a second later does not renew it.
	if err := e.rdb.Expire(ctx, bk, 3*e.dedupeTTL-time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	ev.ID = "b"
	if _, err := e.Apply(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if got, want := ttl(), 3*e.dedupeTTL-time.Hour; got != want {
		t.Errorf("TTL after the second write %v, want %v (set once)", got, want)
	}
	for _, id := range []string{"a", "b"} {
		ev.ID = id
		r, err := e.Apply(ctx, ev)
		if err != nil || !r.Duplicate {
			t.Errorf("replay of %s: %+v, %v", id, r, err)
		}
	}
	// Restore writes its judged events marked, with the same TTL.
	if err := e.Restore(ctx, FamilyState{FamilyID: 1, Members: []MemberState{{CustomerID: 2}},
		Judged: []JudgedEvent{{ID: "a", Result: Result{Decision: "ALLOWED"}}}}); err != nil {
		t.Fatal(err)
	}
	if got, want := ttl(), 3*e.dedupeTTL; got != want {
		t.Errorf("TTL after restore %v, want %v", got, want)
	}
	if m, err := e.rdb.HGet(ctx, bk, bucketMarked).Result(); err != nil || m != "1" {
		t.Errorf("marker after restore %q, %v", m, err)
	}
}
