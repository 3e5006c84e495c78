package family_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/family"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/recovery"
	"github.com/dabom/dpcs/service/store"
)

const (
	fid   = 100
	owner = 1
	child = 2
	mib   = int64(1) << 20
)

var errDown = errors.New("dial tcp 127.0.0.1:6379: connection refused")

// faultyDoor is the real door with a switch that makes every write fail
// before it reaches Redis, as a Redis that is down does.
type faultyDoor struct {
	*judge.State
	mu    sync.Mutex
	fail  error
	calls []string
	// writesOnly: the writes fail, the claims (Unsettled, Settle) do not.
	writesOnly bool
}

func (d *faultyDoor) step(name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, name)
	return d.fail
}

// claimStep is step for the claims, which fail unless only the writes do.
func (d *faultyDoor) claimStep(name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, name)
	if d.writesOnly {
		return nil
	}
	return d.fail
}

func (d *faultyDoor) set(err error) {
	d.mu.Lock()
	d.fail = err
	d.mu.Unlock()
}

func (d *faultyDoor) called() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.calls)
}

func (d *faultyDoor) Enforce(ctx context.Context, fid, cid, version int64, c policy.Constraints) (quota.Enforcement, error) {
	if err := d.step("Enforce"); err != nil {
		return quota.Enforcement{}, err
	}
	return d.State.Enforce(ctx, fid, cid, version, c)
}

func (d *faultyDoor) SetPlan(ctx context.Context, fid, bytes int64) (quota.PoolState, error) {
	if err := d.step("SetPlan"); err != nil {
		return quota.PoolState{}, err
	}
	return d.State.SetPlan(ctx, fid, bytes)
}

func (d *faultyDoor) SetTopUps(ctx context.Context, fid int64, month string, total int64) (quota.PoolState, error) {
	if err := d.step("SetTopUps"); err != nil {
		return quota.PoolState{}, err
	}
	return d.State.SetTopUps(ctx, fid, month, total)
}

func (d *faultyDoor) SetThresholds(ctx context.Context, fid int64, t policy.Thresholds) error {
	if err := d.step("SetThresholds"); err != nil {
		return err
	}
	return d.State.SetThresholds(ctx, fid, t)
}

func (d *faultyDoor) AddMember(ctx context.Context, fid, cid int64) error {
	if err := d.step("AddMember"); err != nil {
		return err
	}
	return d.State.AddMember(ctx, fid, cid)
}

func (d *faultyDoor) RemoveMember(ctx context.Context, fid, cid int64) error {
	if err := d.step("RemoveMember"); err != nil {
		return err
	}
	return d.State.RemoveMember(ctx, fid, cid)
}

func (d *faultyDoor) Settle(ctx context.Context, fid int64) (quota.PoolState, error) {
	if err := d.claimStep("Settle"); err != nil {
		return quota.PoolState{}, err
	}
	return d.State.Settle(ctx, fid)
}

// Unsettled fails too while the door is down: the claim cannot reach
// Redis either (without a mark store the door then answers ErrUnsettled).
func (d *faultyDoor) Unsettled(ctx context.Context, fid int64) error {
	if err := d.claimStep("Unsettled"); err != nil {
		return err
	}
	return d.State.Unsettled(ctx, fid)
}

type fixture struct {
	t       *testing.T
	ctx     context.Context
	db      *sql.DB
	store   *store.Store
	engine  *quota.Engine
	door    *faultyDoor
	svc     *family.Service
	gen     string
	mu      sync.Mutex
	changes []family.Change
	wakes   int
	events  int
}

func newFixture(t *testing.T, opts ...family.Option) *fixture {
	t.Helper()
	f := &fixture{t: t, ctx: context.Background()}
	db := testenv.SQLite(t)
	f.db = db
	if err := store.Migrate(f.ctx, db); err != nil {
		t.Fatal(err)
	}
	var err error
	if f.store, err = store.New(db, store.WithBcryptCost(4)); err != nil {
		t.Fatal(err)
	}
	_, rdb := testenv.Redis(t)
	if f.engine, err = quota.New(rdb); err != nil {
		t.Fatal(err)
	}
	// A generation restored on touch, as after a deployable's first
	// rebuild: a family met unrestored or claimed is settled from SQL.
	f.gen = quota.NewOnTouchGeneration(time.Now(), "family")
	if _, err := f.engine.BeginRebuild(f.ctx, f.gen); err != nil {
		t.Fatal(err)
	}
	if err := f.engine.FinishRebuild(f.ctx, f.gen, nil); err != nil {
		t.Fatal(err)
	}
	qs, err := judge.NewState(f.engine, judge.WithFamilySource(recovery.NewFamilySource(f.store, f.engine)))
	if err != nil {
		t.Fatal(err)
	}
	f.door = &faultyDoor{State: qs}
	f.svc, err = family.New(f.store, f.door, append([]family.Option{family.WithWake(func() { f.mu.Lock(); f.wakes++; f.mu.Unlock() }),
		family.WithOnChange(func(_ context.Context, c family.Change) { f.mu.Lock(); f.changes = append(f.changes, c); f.mu.Unlock() })}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	admin := store.Actor{ID: 9, Role: policy.RoleAdmin}
	if _, err := f.svc.CreateFamily(f.ctx, store.NewFamily{ID: fid, Name: "Kim", PlanBytes: 100 * mib}, admin); err != nil {
		t.Fatal(err)
	}
	for _, m := range []store.NewMember{{ID: owner, FamilyID: fid, Name: "엄마", Role: policy.RoleOwner},
		{ID: child, FamilyID: fid, Name: "아이", Role: policy.RoleMember}} {
		if _, err := f.svc.AddMember(f.ctx, m, admin); err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	f.changes, f.wakes = nil, 0
	f.mu.Unlock()
	return f
}

// unsettled counts the intent rows.
func (f *fixture) unsettled() int {
	f.t.Helper()
	us, err := f.store.UnsettledFamilies(f.ctx, time.Now().Add(time.Hour), 100)
	if err != nil {
		f.t.Fatal(err)
	}
	return len(us)
}

// settle runs one settler pass with no grace.
func (f *fixture) settle() int {
	f.t.Helper()
	st, err := family.NewSettler(f.svc, family.WithSettleGrace(0), family.WithSettleInterval(time.Hour),
		family.WithSettleClock(func() time.Time { return time.Now().Add(time.Second) }))
	if err != nil {
		f.t.Fatal(err)
	}
	defer st.Close(f.ctx)
	return st.Pass()
}

func (f *fixture) by() store.Actor { return store.Actor{ID: owner, Role: policy.RoleOwner} }

func (f *fixture) lastChange() family.Change {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.changes) == 0 {
		f.t.Fatal("no change told to the hooks")
	}
	return f.changes[len(f.changes)-1]
}

// judge decides one event of member cid as the door does: a family met
// unrestored or claimed is settled from SQL first.
func (f *fixture) judge(cid, bytes int64) policy.Decision {
	f.t.Helper()
	f.events++
	ev := []quota.Event{{ID: fmt.Sprintf("evt_%d", f.events), FamilyID: fid, CustomerID: cid, Bytes: bytes, At: time.Now()}}
	for range 3 {
		res, err := f.engine.ApplyMarked(f.ctx, f.gen, nil, ev)
		var un *quota.UnrestoredError
		if errors.As(err, &un) {
			if err := f.door.RestoreOnTouch(f.ctx, f.gen, un.Seen); err != nil {
				f.t.Fatal(err)
			}
			continue
		}
		if err != nil {
			f.t.Fatal(err)
		}
		return res[0].Decision
	}
	f.t.Fatal("the family stayed unrestored")
	return ""
}

// A policy change is applied through the door at once: the answer carries
// the member's standing, the relay is woken, the hooks are told.
func TestChangePolicyApplied(t *testing.T) {
	f := newFixture(t)
	res, err := f.svc.ChangePolicy(f.ctx, store.PolicyChange{FamilyID: fid, CustomerID: child,
		Set: map[string]string{policy.KeyBlockAccess: "1"}, By: f.by()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Standing == nil || res.Standing.Decision != policy.BlockedAccess {
		t.Fatalf("standing %+v, want BLOCKED_ACCESS", res.Standing)
	}
	if got := f.judge(child, mib); got != policy.BlockedAccess {
		t.Errorf("child's next event: %s, want BLOCKED_ACCESS", got)
	}
	if c := f.lastChange(); c.Kind != family.KindPolicy || !c.Applied || !slices.Equal(c.Members, []int64{child}) {
		t.Errorf("change told: %+v", c)
	}
	if f.wakes != 1 {
		t.Errorf("relay woken %d times, want 1", f.wakes)
	}
}

// The one rule for a door step that fails after SQL committed: a change
// that also travels as an event (a policy) is answered as done; any other
// is ErrNotApplied — recorded in SQL, told to the hooks as not applied —
// and sending it again converges.
func TestDoorFailureRule(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(f *fixture) error
		relayed bool
		// converged checks Redis after the change was sent again with the
		// door working.
		converged func(f *fixture)
	}{
		{name: "policy", relayed: true, change: func(f *fixture) error {
			_, err := f.svc.ChangePolicy(f.ctx, store.PolicyChange{FamilyID: fid, CustomerID: child,
				Set: map[string]string{policy.KeyBlockAccess: "1"}, By: f.by()})
			return err
		}, converged: func(f *fixture) {
			if got := f.judge(child, mib); got != policy.BlockedAccess {
				f.t.Errorf("after the retry the child's event is %s, want BLOCKED_ACCESS", got)
			}
		}},
		{name: "plan", change: func(f *fixture) error {
			_, err := f.svc.SetPlan(f.ctx, fid, 3*mib, store.Actor{ID: 9, Role: policy.RoleAdmin})
			return err
		}, converged: func(f *fixture) {
			if got := f.judge(owner, 4*mib); got != policy.BlockedFamilyQuota {
				f.t.Errorf("4 MB on a 3 MB plan: %s, want BLOCKED_FAMILY_QUOTA", got)
			}
		}},
		{name: "thresholds", change: func(f *fixture) error {
			_, err := f.svc.SetThresholds(f.ctx, fid, policy.Thresholds{80}, f.by())
			return err
		}, converged: func(f *fixture) {
			st, err := f.engine.Family(f.ctx, fid)
			if err != nil {
				f.t.Fatal(err)
			}
			if !slices.Equal(st.Thresholds, []int{80}) {
				f.t.Errorf("thresholds in Redis %v, want [80]", st.Thresholds)
			}
		}},
		{name: "top-up", change: func(f *fixture) error {
			_, err := f.svc.TopUp(f.ctx, fid, 10*mib, store.Purchase{}, f.by(), 1<<40)
			return err
		}, converged: func(f *fixture) {
			st, err := f.engine.Family(f.ctx, fid)
			if err != nil {
				f.t.Fatal(err)
			}
			if st.Total != 110*mib {
				f.t.Errorf("pool total %d MB, want 110 (plan + the top-up SQL recorded)", st.Total/mib)
			}
		}},
		{name: "add member", change: func(f *fixture) error {
			_, err := f.svc.AddMember(f.ctx, store.NewMember{FamilyID: fid, Name: "둘째", Role: policy.RoleMember}, f.by())
			return err
		}, converged: func(f *fixture) {
			ms, err := f.store.ListMembers(f.ctx, fid, false)
			if err != nil {
				f.t.Fatal(err)
			}
			for _, m := range ms {
				if m.ID != owner && m.ID != child && f.judge(m.ID, mib) != policy.Allowed {
					f.t.Errorf("the new member %d is not allowed", m.ID)
				}
			}
		}},
		{name: "remove member", change: func(f *fixture) error {
			return f.svc.RemoveMember(f.ctx, fid, child, f.by())
		}, converged: func(f *fixture) {
			if got := f.judge(child, mib); got != policy.BlockedNotMember {
				f.t.Errorf("the removed child's event: %s, want BLOCKED_NOT_MEMBER", got)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.door.set(errDown)
			err := tc.change(f)
			switch {
			case tc.relayed && err != nil:
				t.Fatalf("a relayed change whose door step failed: %v, want it answered (its event applies it)", err)
			case !tc.relayed && !errors.Is(err, family.ErrNotApplied):
				t.Fatalf("door step failed: %v, want ErrNotApplied", err)
			case !tc.relayed && !errors.Is(err, errDown):
				t.Errorf("%v does not wrap the door's error", err)
			}
			if c := f.lastChange(); c.Applied {
				t.Errorf("change told as applied: %+v", c)
			}
			if tc.relayed && f.wakes == 0 {
				t.Error("the relay was not woken")
			}
			f.door.set(nil)
			if tc.relayed {
				// Its event applies it; sent again, the no-op applies
				// the member's policy again.
				if err := tc.change(f); err != nil {
					t.Fatalf("sent again: %v", err)
				}
			} else {
				// The intent row is left for the settler, which applies
				// the family's settings from SQL.
				if n := f.unsettled(); n != 1 {
					t.Fatalf("%d intent rows after the failed door step, want 1", n)
				}
				if n := f.settle(); n != 1 {
					t.Fatalf("the settler settled %d families, want 1", n)
				}
			}
			tc.converged(f)
			if n := f.unsettled(); n != 0 {
				t.Errorf("%d intent rows left after settling", n)
			}
		})
	}
}

// A door write that fails after its commit while Redis still takes the
// claim (a SQL timeout reading the family back, say): the family is
// claimed, so the change is in effect at the family's next decision, with
// no settler.
func TestFailedWriteInEffectBeforeNextDecision(t *testing.T) {
	f := newFixture(t)
	f.door.mu.Lock()
	f.door.writesOnly = true
	f.door.mu.Unlock()
	f.door.set(errDown)
	if err := f.svc.RemoveMember(f.ctx, fid, child, f.by()); !errors.Is(err, family.ErrNotApplied) {
		t.Fatalf("removal: %v, want ErrNotApplied", err)
	}
	if !slices.Contains(f.door.called(), "Unsettled") {
		t.Fatalf("the door was not asked to claim the family: %v", f.door.called())
	}
	if got := f.judge(child, mib); got != policy.BlockedNotMember {
		t.Errorf("the removed child's next event: %s, want BLOCKED_NOT_MEMBER", got)
	}
}

// A process that died between a change's commit and its door step leaves
// the intent row: the settler applies the change from SQL.
func TestSettlerAfterCrash(t *testing.T) {
	f := newFixture(t)
	if _, err := f.store.Unsettle(f.ctx, fid); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.SetPlan(f.ctx, fid, 3*mib, store.System); err != nil { // committed, then the process died
		t.Fatal(err)
	}
	if err := f.store.RemoveMember(f.ctx, fid, child, store.System); err != nil {
		t.Fatal(err)
	}
	if got := f.judge(owner, 4*mib); got != policy.Allowed {
		t.Fatalf("before settling: %s (Redis already had the plan?)", got)
	}
	if n := f.settle(); n != 1 {
		t.Fatalf("settled %d families, want 1", n)
	}
	if got := f.judge(owner, 4*mib); got != policy.BlockedFamilyQuota {
		t.Errorf("4 MB more on a 3 MB plan after settling: %s", got)
	}
	if got := f.judge(child, mib); got != policy.BlockedNotMember {
		t.Errorf("the removed child after settling: %s", got)
	}
	if n := f.unsettled(); n != 0 {
		t.Errorf("%d intent rows left", n)
	}
}

// Changes whose door step succeeded leave no intent row; one still in its
// grace is not taken.
func TestSettlerLeavesChangesInFlight(t *testing.T) {
	f := newFixture(t)
	if _, err := f.svc.SetPlan(f.ctx, fid, 50*mib, store.Actor{ID: 9, Role: policy.RoleAdmin}); err != nil {
		t.Fatal(err)
	}
	if n := f.unsettled(); n != 0 {
		t.Fatalf("%d intent rows after a change the door took", n)
	}
	if _, err := f.store.Unsettle(f.ctx, fid); err != nil { // a change in flight
		t.Fatal(err)
	}
	st, err := family.NewSettler(f.svc, family.WithSettleGrace(time.Hour), family.WithSettleInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(f.ctx)
	if n := st.Pass(); n != 0 {
		t.Errorf("settled %d families within their grace", n)
	}
}

// A state that took a write whose mark could not be recorded is in effect:
// the error is returned as it is, and the hooks are told it applied.
func TestNotMarkedIsInEffect(t *testing.T) {
	f := newFixture(t)
	notMarked := judge.ErrNotMarked
	f.door.set(nil)
	_, err := f.svc.SetPlan(f.ctx, fid, 50*mib, store.Actor{ID: 9, Role: policy.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	f.door.set(notMarked)
	_, err = f.svc.SetPlan(f.ctx, fid, 60*mib, store.Actor{ID: 9, Role: policy.RoleAdmin})
	if !errors.Is(err, judge.ErrNotMarked) || errors.Is(err, family.ErrNotApplied) {
		t.Fatalf("%v: want ErrNotMarked as it is", err)
	}
	if c := f.lastChange(); !c.Applied {
		t.Errorf("told as not applied: %+v", c)
	}
}

// A no-op change applies the member's current policy again: a change whose
// door step failed converges when sent again even though SQL has nothing
// new to write.
func TestNoOpChangeAppliesAgain(t *testing.T) {
	f := newFixture(t)
	set := store.PolicyChange{FamilyID: fid, CustomerID: child, Set: map[string]string{policy.KeyBlockAccess: "1"}, By: f.by()}
	f.door.set(errDown)
	if _, err := f.svc.ChangePolicy(f.ctx, set); err != nil {
		t.Fatal(err)
	}
	if got := f.judge(child, mib); got != policy.Allowed {
		t.Fatalf("the block reached Redis with the door down: %s", got)
	}
	f.door.set(nil)
	res, err := f.svc.ChangePolicy(f.ctx, set)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Unchanged || res.Standing == nil || res.Standing.Decision != policy.BlockedAccess {
		t.Fatalf("no-op answer %+v standing %+v: want unchanged and blocked", res.PolicyUpdate, res.Standing)
	}
	if got := f.judge(child, mib); got != policy.BlockedAccess {
		t.Errorf("after the no-op the child's event is %s, want BLOCKED_ACCESS", got)
	}
}

// A gift moves the giver's allowance to the receiver: both policies are
// applied (the giver's cut first) and the hooks are told once, as a gift.
// (No carrier rules here: the family's pool is 100 MB; the rules are the
// store's property test's and the API's TestGiftCarrierRules'.)
func TestGift(t *testing.T) {
	f := newFixture(t, family.WithGiftRules(store.GiftRules{}))
	for _, cid := range []int64{owner, child} {
		if _, err := f.svc.ChangePolicy(f.ctx, store.PolicyChange{FamilyID: fid, CustomerID: cid,
			Set: map[string]string{policy.KeyLimitMonthly: "10485760"}, By: f.by()}); err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	f.changes = nil
	f.mu.Unlock()
	res, err := f.svc.Gift(f.ctx, store.Gift{FamilyID: fid, From: owner, To: child, Bytes: 4 * mib, By: f.by()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Left != 6*mib || res.From.Standing == nil || res.To.Standing == nil {
		t.Fatalf("gift %+v", res)
	}
	if got := f.judge(child, 14*mib); got != policy.Allowed {
		t.Errorf("the receiver's 14 MB on 10 + 4: %s", got)
	}
	if got := f.judge(owner, 6*mib+1); got != policy.BlockedLimitMonthly {
		t.Errorf("the giver's 6 MB + 1 on 10 − 4: %s", got)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.changes) != 1 || f.changes[0].Kind != family.KindGift || !slices.Equal(f.changes[0].Members, []int64{owner, child}) {
		t.Errorf("changes told: %+v, want one gift", f.changes)
	}
}

// gifted returns the DATA_GIFTED events in the outbox, oldest first.
func (f *fixture) gifted() []envelope.DataGifted {
	f.t.Helper()
	rows, err := f.db.QueryContext(f.ctx, `SELECT payload FROM outbox WHERE topic = ? ORDER BY id`, envelope.TopicNotificationEvents)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	var out []envelope.DataGifted
	for rows.Next() {
		var raw string
		if err := rows.Scan(&raw); err != nil {
			f.t.Fatal(err)
		}
		ev, err := envelope.Decode([]byte(raw))
		if err != nil {
			f.t.Fatal(err)
		}
		if p, ok := ev.Payload.(envelope.DataGifted); ok {
			out = append(out, p)
		}
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// giftable gives owner and child a monthly limit of 10 MB each.
func (f *fixture) giftable() {
	f.t.Helper()
	for _, cid := range []int64{owner, child} {
		if _, err := f.svc.ChangePolicy(f.ctx, store.PolicyChange{FamilyID: fid, CustomerID: cid,
			Set: map[string]string{policy.KeyLimitMonthly: "10485760"}, By: f.by()}); err != nil {
			f.t.Fatal(err)
		}
	}
}

// A gift is told to both members through the outbox, in the gift's
// transaction: the receiver's DATA_GIFTED and the giver's confirmation,
// naming both by name and who made it; the relay is woken (#38).
func TestGiftNotifiesBothMembers(t *testing.T) {
	for _, tc := range []struct {
		name       string
		from, to   int64
		by         store.Actor
		givenBy    int64
		byName     string
		fromN, toN string
	}{
		{"own data", owner, child, store.Actor{ID: owner, Role: policy.RoleOwner}, owner, "", "엄마", "아이"},
		{"an owner gives a member's data", child, owner, store.Actor{ID: owner, Role: policy.RoleOwner}, owner, "", "아이", "엄마"},
		{"an owner of neither side", child, 3, store.Actor{ID: owner, Role: policy.RoleOwner}, owner, "엄마", "아이", "할머니"},
		{"the back office", owner, child, store.Actor{ID: 9, Role: policy.RoleAdmin}, 0, "", "엄마", "아이"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, family.WithGiftRules(store.GiftRules{}))
			if _, err := f.svc.AddMember(f.ctx, store.NewMember{ID: 3, FamilyID: fid, Name: "할머니", Role: policy.RoleMember},
				store.Actor{ID: 9, Role: policy.RoleAdmin}); err != nil {
				t.Fatal(err)
			}
			f.giftable()
			if _, err := f.svc.ChangePolicy(f.ctx, store.PolicyChange{FamilyID: fid, CustomerID: 3,
				Set: map[string]string{policy.KeyLimitMonthly: "10485760"}, By: f.by()}); err != nil {
				t.Fatal(err)
			}
			f.mu.Lock()
			wakes := f.wakes
			f.mu.Unlock()
			res, err := f.svc.Gift(f.ctx, store.Gift{FamilyID: fid, From: tc.from, To: tc.to, Bytes: 3 * mib, By: tc.by})
			if err != nil {
				t.Fatal(err)
			}
			one := envelope.DataGifted{FamilyID: fid, GiftID: res.Gift.ID, FromCustomerID: tc.from, ToCustomerID: tc.to,
				AmountBytes: 3 * mib, Month: res.Month, GivenBy: tc.givenBy, FromName: tc.fromN, ToName: tc.toN, ByName: tc.byName}
			receiver, giver := one, one
			receiver.CustomerID, giver.CustomerID = tc.to, tc.from
			got := f.gifted()
			if diff := cmp.Diff([]envelope.DataGifted{receiver, giver}, got, cmpopts.IgnoreFields(envelope.DataGifted{}, "GivenAt")); diff != "" {
				t.Errorf("outbox DATA_GIFTED (-want +got):\n%s", diff)
			}
			for _, p := range got {
				if err := p.Validate(); err != nil || p.GivenAt.Sub(res.Gift.CreatedAt).Abs() > time.Millisecond {
					t.Errorf("%+v: %v, given at %v, the row's %v", p, err, p.GivenAt, res.Gift.CreatedAt)
				}
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.wakes == wakes {
				t.Error("the relay was not woken")
			}
		})
	}
}

// A gift whose transaction fails after its notifications were written
// leaves none (nor the gift); a refused gift writes none either (#38).
func TestGiftNotificationsRollBack(t *testing.T) {
	f := newFixture(t, family.WithGiftRules(store.GiftRules{}))
	f.giftable()
	// The gift's audit row is its transaction's last statement: failing
	// it rolls back what was written before, notifications included.
	if _, err := f.db.ExecContext(f.ctx, `CREATE TRIGGER no_gift_audit BEFORE INSERT ON audit_log WHEN NEW.action = 'data.gift'
		BEGIN SELECT RAISE(ABORT, 'audit refused'); END`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Gift(f.ctx, store.Gift{FamilyID: fid, From: owner, To: child, Bytes: 3 * mib, By: f.by()}); err == nil {
		t.Fatal("the gift succeeded with its audit row refused")
	}
	if got := f.gifted(); len(got) != 0 {
		t.Errorf("a rolled-back gift left notifications: %+v", got)
	}
	if gifts, err := f.store.Gifts(f.ctx, fid, policy.MomentOf(time.Now(), f.svc.Location()).Month, 0); err != nil || len(gifts) != 0 {
		t.Errorf("gifts after the rollback: %+v, %v", gifts, err)
	}
	if _, err := f.db.ExecContext(f.ctx, `DROP TRIGGER no_gift_audit`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Gift(f.ctx, store.Gift{FamilyID: fid, From: owner, To: child, Bytes: 20 * mib, By: f.by()}); err == nil {
		t.Fatal("a gift of more than the giver has was made")
	}
	if got := f.gifted(); len(got) != 0 {
		t.Errorf("a refused gift left notifications: %+v", got)
	}
	if _, err := f.svc.Gift(f.ctx, store.Gift{FamilyID: fid, From: owner, To: child, Bytes: 3 * mib, By: f.by()}); err != nil {
		t.Fatal(err)
	}
	if got := f.gifted(); len(got) != 2 {
		t.Errorf("after a gift: %d notifications, want 2", len(got))
	}
}

// An owner resets a MEMBER's password only; never its own, nor another
// owner's.
func TestResetPasswordRules(t *testing.T) {
	f := newFixture(t)
	other, err := f.svc.AddMember(f.ctx, store.NewMember{FamilyID: fid, Name: "아빠", Role: policy.RoleOwner}, f.by())
	if err != nil {
		t.Fatal(err)
	}
	const pw = "correct horse battery"
	if err := f.svc.ResetPassword(f.ctx, fid, owner, pw, f.by()); !errors.Is(err, family.ErrOwnPassword) {
		t.Errorf("own: %v", err)
	}
	if err := f.svc.ResetPassword(f.ctx, fid, other.ID, pw, f.by()); !errors.Is(err, family.ErrOwnerPassword) {
		t.Errorf("another owner: %v", err)
	}
	if err := f.svc.ResetPassword(f.ctx, fid, child, pw, f.by()); err != nil {
		t.Errorf("a member: %v", err)
	}
	if err := f.svc.ResetPassword(f.ctx, fid, other.ID, pw, store.Actor{ID: 9, Role: policy.RoleAdmin}); err != nil {
		t.Errorf("the back office: %v", err)
	}
}
