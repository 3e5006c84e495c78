package quota

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
)

func TestFamilyNeeds(t *testing.T) {
	for _, tt := range []struct {
		gen, token string
		want       Need
	}{
		{"t:a", "t:a", NeedNothing},
		{"t:a", "t:a~1f", NeedSettle},
		{"t:a", "t:old", NeedRestore},
		{"t:a", "t:old~1f", NeedRestore},
		{"t:a", "", NeedRestore},
		{"t:a", "~1f", NeedRestore},
		{"g1", "g1", NeedNothing},
		{"g1", "", NeedNothing}, // provisioned since the rebuild
		{"g1", "g1~1f", NeedSettle},
		{"g1", "~1f", NeedSettle},
		{"g1", "g0", NeedNothing}, // another generation's: judged stale
		{"", "t:a~1f", NeedNothing},
		{"rebuilding:t:b", "t:a~1f", NeedNothing},
	} {
		if got := FamilyNeeds(tt.gen, tt.token); got != tt.want {
			t.Errorf("FamilyNeeds(%q, %q) = %v, want %v", tt.gen, tt.token, got, tt.want)
		}
	}
}

// A claimed family is not judged until it is settled; a settle or restore
// whose token moved since it was read is refused; the settle applies the
// configuration the source of truth holds and keeps usage, dedupe records
// and fired thresholds, re-arming those the pool is above again.
func checkClaimAndSettle(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	e, err := New(rdb, WithKeyPrefix(uniquePrefix()), WithLocation(time.UTC), WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	gen := NewOnTouchGeneration(now, "claim")
	if _, err := e.BeginRebuild(ctx, gen); err != nil {
		t.Fatal(err)
	}
	if err := e.FinishRebuild(ctx, gen, nil); err != nil {
		t.Fatal(err)
	}
	fam := FamilyState{FamilyID: 1, Provisioned: true, Plan: 100, Thresholds: policy.Thresholds{50},
		Members: []MemberState{{CustomerID: 11}, {CustomerID: 12}}, Generation: gen}
	if ok, err := e.RestoreUnrestored(ctx, fam, ""); err != nil || !ok {
		t.Fatalf("restore: %v, %v", ok, err)
	}
	ev := func(id string, cid, bytes int64) Event {
		return Event{ID: id, FamilyID: 1, CustomerID: cid, Bytes: bytes, AppID: "app", At: now}
	}
	// 60 of 100: 50 % crossed.
	rs, err := e.ApplyMarked(ctx, gen, nil, []Event{ev("a", 11, 60)})
	if err != nil || !slices.Equal(rs[0].Crossed, []int{50}) {
		t.Fatalf("first event: %+v, %v", rs, err)
	}

	// A restore that read the family before a claim is refused.
	_, before, err := e.FamilyToken(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Claim(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := e.RestoreUnrestored(ctx, FamilyState{FamilyID: 2, Generation: gen}, before); !errors.Is(err, ErrMoved) {
		t.Errorf("a restore older than a claim: %v, want ErrMoved", err)
	}

	// Two claims of family 1: it is not judged, and only the last one's
	// settle applies.
	g, first, err := e.Claim(ctx, 1)
	if err != nil || g != gen || FamilyNeeds(g, first) != NeedSettle {
		t.Fatalf("Claim = %s, %q, %v", g, first, err)
	}
	_, last, err := e.Claim(ctx, 1)
	if err != nil || last == first {
		t.Fatalf("second Claim = %q, %v (first %q)", last, err, first)
	}
	_, err = e.ApplyMarked(ctx, gen, nil, []Event{ev("b", 11, 1), ev("a", 11, 60)})
	var un *UnrestoredError
	if !errors.As(err, &un) || un.Seen[1] != last || !slices.Equal(un.Pending, []int{0, 1}) {
		t.Fatalf("judging a claimed family: %v, want it pending with token %q", err, last)
	}
	// The truth now: plan 200 (the pool above 50 % again: re-armed), the
	// child removed, member 13 added with a limit, thresholds 50 and 20,
	// 10 bytes of top-ups.
	settled := FamilyState{FamilyID: 1, Provisioned: true, Plan: 200, Thresholds: policy.Thresholds{50, 20},
		TopUps:  map[string]int64{"202603": 10},
		Members: []MemberState{{CustomerID: 11}, {CustomerID: 13, Constraints: map[string]string{policy.KeyLimitMonthly: "5"}, Version: 3}},
		// Ignored by a settle:
		Usage: []Usage{{CustomerID: 11, At: now, Bytes: 999}}, Generation: gen}
	if _, err := e.Settle(ctx, settled, first, nil); !errors.Is(err, ErrMoved) {
		t.Errorf("a settle of an earlier claim: %v, want ErrMoved", err)
	}
	done, err := e.Settle(ctx, settled, last, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantPool := PoolState{Remaining: 150, Total: 210, Month: "202603", Rearmed: map[int]int{50: 1}}
	if done.Pool.Remaining != wantPool.Remaining || done.Pool.Total != wantPool.Total || done.Pool.Month != wantPool.Month ||
		done.Pool.Rearmed[50] != 1 || done.Rearmed["202603"][50] != 1 {
		t.Errorf("Settle = %+v, want pool %+v and 50 re-armed", done, wantPool)
	}
	if _, err := e.Settle(ctx, settled, last, nil); !errors.Is(err, ErrMoved) {
		t.Errorf("a second settle of the same claim: %v, want ErrMoved", err)
	}
	if g, token, err := e.FamilyToken(ctx, 1); err != nil || token != gen || FamilyNeeds(g, token) != NeedNothing {
		t.Errorf("after the settle: token %q (%v), want %q", token, err, gen)
	}
	f, err := e.Family(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var members []int64
	for _, m := range f.Members {
		members = append(members, m.CustomerID)
	}
	if f.Plan != 200 || f.TopUps != 10 || f.Used != 60 || !slices.Equal(f.Thresholds, policy.Thresholds{50, 20}) ||
		!slices.Equal(members, []int64{11, 13}) || len(f.Fired) != 0 {
		t.Errorf("family after the settle: %+v", f)
	}
	st, err := e.Status(ctx, 1, 13)
	if err != nil || st.Version != 3 || st.Constraints[policy.KeyLimitMonthly] != "5" {
		t.Errorf("member 13 after the settle: %+v, %v", st, err)
	}
	// Judged again: the replay of a is a duplicate (dedupe kept), b is
	// charged on the settled pool, the removed child is not a member.
	rs, err = e.ApplyMarked(ctx, gen, nil, []Event{ev("a", 11, 60), ev("b", 11, 1), ev("c", 12, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if !rs[0].Duplicate || rs[1].Remaining != 149 || rs[1].Total != 210 || rs[2].Decision != policy.BlockedNotMember {
		t.Errorf("after the settle: %+v", rs)
	}
	// Only a claim is settled.
	if _, err := e.Settle(ctx, FamilyState{FamilyID: 1, Generation: gen}, gen, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("a settle of a token that is no claim: %v, want ErrInvalid", err)
	}
}

func TestClaimAndSettle(t *testing.T) { eachBackend(t, checkClaimAndSettle) }
