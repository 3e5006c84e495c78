package service

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/store"
)

// Grant steps through the door with the promise of POST /decisions
// (doc/architecture.md, "Grants"): two sessions share family 1's 20 MB
// pool fairly; their steps' charges and reservations reach SQL through
// usage-persist; Redis comes back empty, the door finds it stale, the
// state guard rebuilds it from SQL, and the open reservations are back
// before anything more is granted — a retry of a step gets its first
// answer, an event finds the pool reserved to the byte, nothing
// overshoots. While Kafka does not acknowledge, a step is charged and its
// caller waits (others are refused unjudged, charged nothing); a retry
// once Kafka is back answers identically.
func TestGrantsThroughTheDoor(t *testing.T) {
	r := newRecoveryRig(t)
	var down atomic.Bool
	testenv.RefuseProduces(r.h.Kafka, kerr.InvalidRecord.Code, down.Load)
	r.start()
	ctx := r.h.Ctx
	dec := r.decisions(t)
	step := func(id, grant string, cid, used, requested int64) quota.GrantOp {
		return quota.GrantOp{ID: id, GrantID: grant, FamilyID: 1, CustomerID: cid, AppID: "com.youtube.app",
			Used: used, Requested: requested, At: r.h.Now}
	}
	charge := func(ops ...quota.GrantOp) ([]quota.GrantResult, error) { return dec.Charge(ctx, ops) }
	must := func(what string, ops ...quota.GrantOp) []quota.GrantResult {
		t.Helper()
		rs, err := charge(ops...)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return rs
	}
	family := func() quota.FamilyStatus {
		t.Helper()
		st, err := r.h.Engine.Family(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	// A lone session may take what it asks; a second gets its fair share;
	// the first's update is cut to what the other leaves it.
	a1 := must("a1", step("a1", "sess-a/32", 11, 0, 8*mb))
	b1 := must("b1", step("b1", "sess-b/32", 12, 0, 20*mb))
	up := step("a2", "sess-a/32", 11, 3*mb, 8*mb)
	a2 := must("a2", up)
	if a1[0].Granted != 8*mb || b1[0].Granted != 10*mb || a2[0].Granted != 7*mb || a2[0].Charged != 3*mb || a2[0].Previous != "a1" {
		t.Fatalf("grants: a1 %+v, b1 %+v, a2 %+v", a1[0], b1[0], a2[0])
	}
	if st := family(); st.Used != 3*mb || st.Reserved != 17*mb {
		t.Fatalf("before the loss: used %d, reserved %d", st.Used, st.Reserved)
	}
	// The write-behind wrote the three charges and steps.
	waitCount(t, r, `SELECT COUNT(*) FROM grant_step`, 3)
	waitCount(t, r, `SELECT COUNT(*) FROM usage_record WHERE grant_id <> ''`, 3)

	r.mr.FlushAll() // Redis came back empty

	deadline := time.Now().Add(60 * time.Second)
	again := untilCharged(t, "a2 retried while Redis is rebuilt", deadline, func() ([]quota.GrantResult, error) { return charge(up) })
	want := a2[0]
	want.Duplicate = true
	if d := gocmp.Diff(want, again[0], cmpopts.EquateEmpty()); d != "" {
		t.Errorf("a2 after the rebuild (-first +retry):\n%s", d)
	}
	st := family()
	wantGrants := []quota.GrantState{
		{GrantID: "sess-a/32", CustomerID: 11, Reserved: 7 * mb, At: r.h.Now.Truncate(time.Second), Step: "a2"},
		{GrantID: "sess-b/32", CustomerID: 12, Reserved: 10 * mb, At: r.h.Now.Truncate(time.Second), Step: "b1"},
	}
	if st.Used != 3*mb || st.Reserved != 17*mb || !gocmp.Equal(wantGrants, st.Grants) {
		t.Fatalf("after the rebuild: used %d, reserved %d, grants %+v; want 3 MB, 17 MB, %+v", st.Used, st.Reserved, st.Grants, wantGrants)
	}
	// The pool is used or reserved to the byte: an event finds nothing free.
	res, err := dec.Decide(ctx, []envelope.Envelope[envelope.UsagePayload]{envelope.New("e1", r.h.Now,
		envelope.UsagePayload{FamilyID: 1, CustomerID: 13, AppID: "com.youtube.app", BytesUsed: 1})})
	if err != nil || res[0].Decision != policy.BlockedFamilyQuota {
		t.Fatalf("an event beside the restored reservations: %+v, %v", res, err)
	}

	// Kafka down: b's update is judged and charged, its caller waits for
	// its records; another caller is refused unjudged and charged nothing.
	down.Store(true)
	b2 := step("b2", "sess-b/32", 12, 4*mb, 10*mb)
	waiting := make(chan []quota.GrantResult, 1)
	go func() {
		rs, err := charge(b2)
		if err != nil {
			t.Errorf("b2 with Kafka down: %v", err)
		}
		waiting <- rs
	}()
	for !waitingOn(dec) {
		if time.Now().After(deadline) {
			t.Fatal("b2's records never waited for Kafka")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if rs, err := charge(step("a3", "sess-a/32", 11, 1*mb, 1*mb)); !errors.Is(err, judge.ErrKafkaUnavailable) {
		t.Fatalf("a3 while b2's records wait: %+v, %v; want ErrKafkaUnavailable", rs, err)
	}
	if st := family(); st.Used != 7*mb {
		t.Fatalf("used %d while b2 waits: want 7 MB (b2 charged, a3 not)", st.Used)
	}
	down.Store(false)
	first := <-waiting
	retry := must("b2 retried", b2)
	want = first[0]
	want.Duplicate = true
	if d := gocmp.Diff(want, retry[0], cmpopts.EquateEmpty()); d != "" {
		t.Errorf("b2 retried after the outage (-first +retry):\n%s", d)
	}
	if first[0].Charged != 4*mb || first[0].Previous != "b1" {
		t.Errorf("b2: %+v", first[0])
	}
	// Every answer's records are in SQL, and SQL agrees with Redis.
	waitCount(t, r, `SELECT COUNT(*) FROM grant_step`, 4)
	r.rec.Wait()
	r.h.checkInvariants(r.db)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.recovered) != 2 { // the rig's start, then the loss's
		t.Errorf("recoveries %+v: want the start's and the loss's", r.recovered)
	}
}

// A grant's charges count for its member's daily category budget, also a
// category-only rating group's (no app): in Redis as grant.lua counts
// them, and after Redis is lost as the rebuild restores them from SQL
// (grant_step's category and step time), so the next grant is still cut
// to what the budget leaves.
func TestGrantBudgetsSurviveARebuild(t *testing.T) {
	r := newRecoveryRig(t)
	budget := map[string]string{policy.KeyLimitCatPrefix + string(policy.CategoryVideo): fmt.Sprint(5 * mb)}
	up, err := r.st.UpdatePolicy(r.h.Ctx, store.PolicyChange{FamilyID: 2, CustomerID: 21, Set: budget, By: store.System})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.h.Engine.SetConstraints(r.h.Ctx, 2, 21, up.Policy.Version, budget); err != nil {
		t.Fatal(err)
	}
	r.start()
	ctx := r.h.Ctx
	dec := r.decisions(t)
	step := func(id string, used, requested int64) quota.GrantOp {
		return quota.GrantOp{ID: id, GrantID: "sess-v/10", FamilyID: 2, CustomerID: 21, Category: policy.CategoryVideo,
			Used: used, Requested: requested, At: r.h.Now}
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, op := range []quota.GrantOp{step("v1", 0, 2*mb), step("v2", 2*mb, 2*mb), step("v3", 2*mb, 2*mb)} {
		rs := untilCharged(t, op.ID, deadline, func() ([]quota.GrantResult, error) { return dec.Charge(ctx, []quota.GrantOp{op}) })
		if rs[0].Granted != 2*mb && op.ID != "v3" {
			t.Fatalf("%s: %+v", op.ID, rs[0])
		}
		if op.ID == "v3" && rs[0].Granted != 1*mb { // 4 MB of the 5 MB budget used
			t.Fatalf("v3 before the loss: %+v; want 1 MB, what the budget leaves", rs[0])
		}
	}
	waitCount(t, r, `SELECT COUNT(*) FROM grant_step WHERE category = 'VIDEO'`, 3)
	r.mr.FlushAll() // Redis came back empty
	v4 := untilCharged(t, "v4 after the loss", deadline, func() ([]quota.GrantResult, error) {
		return dec.Charge(ctx, []quota.GrantOp{step("v4", 0, 2*mb)})
	})
	if v4[0].Granted != 1*mb {
		t.Errorf("v4 after the rebuild: %+v; want 1 MB, what the restored budget leaves", v4[0])
	}
}

// waitingOn reports whether dec refuses new callers because a batch's
// records wait for Kafka.
func waitingOn(dec *judge.Decisions) bool { return !dec.Available() }

// waitCount waits until query counts want rows.
func waitCount(t *testing.T, r *recoveryRig, query string, want int) {
	t.Helper()
	var got int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := r.db.QueryRow(query).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d, want %d", query, got, want)
		}
	}
}

// untilCharged is untilJudged for grant steps.
func untilCharged(t *testing.T, what string, deadline time.Time, charge func() ([]quota.GrantResult, error)) []quota.GrantResult {
	t.Helper()
	for {
		res, err := charge()
		if err == nil {
			return res
		}
		if !errors.Is(err, quota.ErrStale) || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
