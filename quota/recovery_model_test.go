package quota

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/dabom/dpcs/policy"
)

// The recovery property drives the engine the way the processor does — every
// batch judged with ApplyMarked on one stream whose positions advance by one
// per event — while Redis loses everything or rolls back to an older snapshot
// at random points (across days and months too). The model plays the SQL
// store: plans, top-ups, thresholds, membership and policies, and the
// write-behind's record of every judged event. Each loss must be detected by
// the next batch (ErrStale) and repaired exactly as recovery.Guard does:
// BeginRebuild, Restore of every family from the SQL view, FinishRebuild at
// the committed position, and the batch judged again.
//
// Every API write is made as the door makes it (judge.State with a family
// source): SQL (the model) first, then the family is claimed, read back and
// settled (Engine.Claim, Engine.Settle) — or, a fault, the door's read of
// SQL fails after the claim and the family stays claimed until a touch
// settles it — and the write is marked (judge.WithMarkStore): the family's
// node's stream familyWriteStream is raised by one from the count the door
// holds, which SQL records. The judges read the counts SQL recorded a
// second late (the "recordMarks" step catches them up), so a rollback of
// any age — a restart from a snapshot, the newest one of now included, or
// a replica that lagged by the steps since ("failover") — is found by the
// node's identity, which every rollback changes (the marker's n), before
// the next decision. A batch of synchronous decisions may be judged with
// its records stored nowhere (Kafka down, no spool): its callers are told
// to retry, SQL never sees it, the door distrusts the state, and a retry
// with the same id is judged afresh after the rebuild. Through all of it
// the ledger (SQL) holds nobody over the pool or a limit, every answer
// given equals its recorded row, and after every rebuild SQL = Redis.

const recoveryStream = "s/0"

// familyWriteStream is the door's one family-write stream in the model.
const familyWriteStream = "family-writes/model/0"

// decisionSlots are the model's synchronous-decisions instance's slots:
// streams decisionStream+"0" and +"1" (judge.Decisions' marks).
const (
	decisionStream = "decisions/model/"
	decisionSlots  = 2
)

// ledgerRecord is a usage_record row: an event's first judgment.
type ledgerRecord struct {
	ev Event
	r  Result
	at time.Time // when it was judged (the row's created_at)
}

type crossing struct {
	f        int64
	month    string
	pct, arm int
}

// ledger is the SQL record of judged events and the invariants on it, which
// hold whatever Redis lost: nobody over the pool or a limit, each event id
// charged once, each threshold announced once per arm.
type ledger struct {
	loc       *time.Location
	records   []ledgerRecord
	first     map[fid]Result
	used      map[fp]int64
	daily     map[fcp]int64
	monthly   map[fcp]int64
	announced map[crossing]bool
	// rearmed is what the door records of the thresholds a pool change
	// re-armed (PoolState.Rearmed): per family and month, the highest arm
	// after which each was re-armed.
	rearmed map[fp]map[int]int
	// steps are the grant steps' rows (usage_record with the charged
	// bytes, the reservation after the step); stepFirst each step id's
	// first result; open each open grant's latest reservation, what a
	// rebuild restores.
	steps     []stepRecord
	stepFirst map[fid]GrantResult
	open      map[fcg]GrantState
}

// stepRecord is a grant step's row: its first judgment.
type stepRecord struct {
	op GrantOp
	r  GrantResult
	at time.Time
}

func newLedger(loc *time.Location) *ledger {
	return &ledger{loc: loc, first: map[fid]Result{}, used: map[fp]int64{}, daily: map[fcp]int64{},
		monthly: map[fcp]int64{}, announced: map[crossing]bool{}, rearmed: map[fp]map[int]int{},
		stepFirst: map[fid]GrantResult{}, open: map[fcg]GrantState{}}
}

// addStep records a judged grant step, as the write-behind does: the charge
// (usage at ChargedAt), the crossings, and the grant's reservation after it.
// It returns what broke an invariant, "" if nothing: a retry answered as
// first, a step charged once, each threshold announced once per arm.
func (l *ledger) addStep(op GrantOp, r GrantResult, at time.Time) string {
	key := fid{op.FamilyID, op.ID}
	if r.Duplicate {
		orig, ok := l.stepFirst[key]
		if !ok {
			return fmt.Sprintf("step %s: a duplicate of nothing judged", op.ID)
		}
		r.Duplicate = false
		if !gocmp.Equal(orig, r, cmpopts.EquateEmpty()) {
			return fmt.Sprintf("step %s: retry differs from the first answer (-first +retry):\n%s", op.ID, gocmp.Diff(orig, r, cmpopts.EquateEmpty()))
		}
		return ""
	}
	if _, ok := l.stepFirst[key]; ok {
		return fmt.Sprintf("step %s judged (charged) twice within the dedupe window", op.ID)
	}
	l.stepFirst[key] = r
	l.steps = append(l.steps, stepRecord{op: op, r: r, at: at})
	f, c := op.FamilyID, op.CustomerID
	cm := policy.MomentOf(r.ChargedAt, l.loc)
	l.used[fp{f, cm.Month}] += r.Charged
	l.daily[fcp{f, c, cm.Day}] += r.Charged
	l.monthly[fcp{f, c, cm.Month}] += r.Charged
	g := fcg{f, c, op.GrantID}
	if r.Granted > 0 || !(op.Release || r.Final) {
		l.open[g] = GrantState{GrantID: op.GrantID, CustomerID: c, Reserved: r.Granted, At: time.Unix(op.At.Unix(), 0).In(l.loc), Step: op.ID}
	} else {
		delete(l.open, g)
	}
	for i, p := range r.Crossed {
		x := crossing{f, cm.Month, p, r.Arms[i]}
		if l.announced[x] {
			return fmt.Sprintf("step %s: %d %% of family %d in %s announced twice on arm %d", op.ID, p, f, cm.Month, x.arm)
		}
		l.announced[x] = true
	}
	return ""
}

// add records a judged event; cons are the member's constraints when it was
// judged. It returns what broke an invariant, "" if nothing.
func (l *ledger) add(ev Event, r Result, at time.Time, cons policy.Constraints) string {
	key := fid{ev.FamilyID, ev.ID}
	if r.Duplicate {
		orig, ok := l.first[key]
		if !ok {
			return fmt.Sprintf("event %s: a duplicate of nothing judged", ev.ID)
		}
		r.Duplicate = false
		if !gocmp.Equal(orig, r, cmpopts.EquateEmpty()) {
			return fmt.Sprintf("event %s: replay differs from the first result (-first +replay):\n%s", ev.ID,
				gocmp.Diff(orig, r, cmpopts.EquateEmpty()))
		}
		return ""
	}
	if _, ok := l.first[key]; ok {
		return fmt.Sprintf("event %s judged (charged) twice within the dedupe window", ev.ID)
	}
	l.first[key] = r
	l.records = append(l.records, ledgerRecord{ev: ev, r: r, at: at})
	mo := policy.MomentOf(ev.At, l.loc)
	f, c := ev.FamilyID, ev.CustomerID
	pool, dk, mk := fp{f, mo.Month}, fcp{f, c, mo.Day}, fcp{f, c, mo.Month}
	if r.Decision == policy.Allowed {
		l.used[pool] += ev.Bytes
		l.daily[dk] += ev.Bytes
		l.monthly[mk] += ev.Bytes
		// A plan cut below usage leaves nothing to allow but empty events.
		if ev.Bytes > 0 && l.used[pool] > r.Total {
			return fmt.Sprintf("event %s: family %d used %d of %d in %s", ev.ID, f, l.used[pool], r.Total, mo.Month)
		}
		// Limits as raised by the extras of the event's day and month.
		daily, monthly := cons.EffectiveLimits(mo)
		if lim := daily; lim != nil && r.DailyUsed > *lim {
			return fmt.Sprintf("event %s: customer %d used %d of a daily limit of %d", ev.ID, c, r.DailyUsed, *lim)
		}
		if lim := monthly; lim != nil && r.MonthlyUsed > *lim {
			return fmt.Sprintf("event %s: customer %d used %d of a monthly limit of %d", ev.ID, c, r.MonthlyUsed, *lim)
		}
	}
	if want := max(r.Total-l.used[pool], 0); r.Remaining != want {
		return fmt.Sprintf("event %s: remaining %d, but the records leave %d of %d", ev.ID, r.Remaining, want, r.Total)
	}
	if r.DailyUsed != l.daily[dk] || r.MonthlyUsed != l.monthly[mk] {
		return fmt.Sprintf("event %s: customer %d used %d/%d (day/month), the records say %d/%d",
			ev.ID, c, r.DailyUsed, r.MonthlyUsed, l.daily[dk], l.monthly[mk])
	}
	for i, p := range r.Crossed {
		x := crossing{f, mo.Month, p, r.Arms[i]}
		if l.announced[x] {
			return fmt.Sprintf("event %s: %d %% of family %d in %s announced twice on arm %d", ev.ID, p, f, mo.Month, x.arm)
		}
		l.announced[x] = true
	}
	return ""
}

// firedAfterRestore is what Restore marks fired in month k.p of st, with
// the model's pool: every threshold that fired that month, the pool has
// reached and no recorded pool change re-armed after its last arm.
func firedAfterRestore(m *model, st FamilyState, k fp) map[int]bool {
	pool := m.pool(k.f, k.p)
	fired := map[int]bool{}
	for p, n := range st.Arms[k.p] {
		if n > 0 && policy.Reached(p, pool.Total, pool.Remaining()) && st.Rearmed[k.p][p] < n {
			fired[p] = true
		}
	}
	return fired
}

// recordRearmed records what the door records after a pool change: the
// thresholds the engine says it re-armed, keeping the highest arm.
func (l *ledger) recordRearmed(f int64, ps PoolState) {
	for p, arm := range ps.Rearmed {
		k := fp{f, ps.Month}
		if l.rearmed[k] == nil {
			l.rearmed[k] = map[int]int{}
		}
		l.rearmed[k][p] = max(l.rearmed[k][p], arm)
	}
}

// familyState is what service/store.RebuildGeneration reads from SQL for a
// family: the store's plan, thresholds, members with their policies and
// top-ups, and from the records of the accepted months the allowed usage and
// the arms crossed, and the events judged within the dedupe window.
func familyState(m *model, l *ledger, e *Engine, f int64, gen string, now time.Time) FamilyState {
	months, from, to := e.AcceptedMonths()
	_, provisioned := m.plan[f]
	st := FamilyState{FamilyID: f, Provisioned: provisioned, Plan: m.plan[f], TopUps: map[string]int64{},
		Arms: map[string]map[int]int{}, Rearmed: map[string]map[int]int{}, Generation: gen}
	if t, ok := m.thr[f]; ok {
		st.Thresholds = append(policy.Thresholds{}, t...)
	}
	for _, mo := range months {
		st.TopUps[mo] = m.topup[fp{f, mo}]
		if r := l.rearmed[fp{f, mo}]; r != nil {
			st.Rearmed[mo] = maps.Clone(r)
		}
	}
	for c, on := range m.members {
		if c.f == f && on {
			st.Members = append(st.Members, MemberState{CustomerID: c.c, Constraints: m.cons[c], Version: m.ver[c]})
		}
	}
	slices.SortFunc(st.Members, func(a, b MemberState) int { return cmp.Compare(a.CustomerID, b.CustomerID) })
	since := now.Add(-e.DedupeWindow())
	for _, rec := range l.records {
		if rec.ev.FamilyID != f {
			continue
		}
		if !rec.ev.At.Before(from) && rec.ev.At.Before(to) {
			if rec.r.Decision == policy.Allowed {
				st.Usage = append(st.Usage, Usage{CustomerID: rec.ev.CustomerID, At: rec.ev.At, Bytes: rec.ev.Bytes})
			}
			month := policy.MomentOf(rec.ev.At, e.loc).Month
			for i, p := range rec.r.Crossed {
				if st.Arms[month] == nil {
					st.Arms[month] = map[int]int{}
				}
				st.Arms[month][p] = max(st.Arms[month][p], rec.r.Arms[i])
			}
		}
		if !rec.at.Before(since) {
			st.Judged = append(st.Judged, JudgedEvent{ID: rec.ev.ID, Result: rec.r})
		}
	}
	for _, rec := range l.steps {
		if rec.op.FamilyID != f {
			continue
		}
		if t := rec.r.ChargedAt; !t.Before(from) && t.Before(to) {
			if rec.r.Charged > 0 {
				st.Usage = append(st.Usage, Usage{CustomerID: rec.op.CustomerID, At: t, Bytes: rec.r.Charged})
			}
			month := policy.MomentOf(t, e.loc).Month
			for i, p := range rec.r.Crossed {
				if st.Arms[month] == nil {
					st.Arms[month] = map[int]int{}
				}
				st.Arms[month][p] = max(st.Arms[month][p], rec.r.Arms[i])
			}
		}
		if !rec.at.Before(since) {
			st.Steps = append(st.Steps, JudgedStep{ID: rec.op.ID, Result: rec.r})
		}
	}
	// The open grants of the accepted months (store.ReadFamilies reads
	// no older step: a grant the sweep never closed is forgotten with its
	// month).
	for k, g := range l.open {
		if k.f == f && !g.At.Before(from) && g.At.Before(to) {
			st.Grants = append(st.Grants, g)
		}
	}
	slices.SortFunc(st.Grants, func(a, b GrantState) int {
		return cmp.Or(cmp.Compare(a.CustomerID, b.CustomerID), cmp.Compare(a.GrantID, b.GrantID))
	})
	return st
}

// keyDump is one key of a snapshot: a string or a hash, with its TTL.
type keyDump struct {
	str  *string
	hash map[string]string
	ttl  time.Duration
}

// snapshot is the test prefix's keys at one step, and the stream position
// and generation then.
type snapshot struct {
	keys map[string]keyDump
	pos  int64
	gen  string
	fw   map[string]int64 // the family-write counts per node
	dec  [decisionSlots]int64
	lost bool // taken from a state that lost writes
}

// prefixKeys lists the keys under prefix on every master.
func prefixKeys(ctx context.Context, rdb redis.UniversalClient, prefix string) ([]string, error) {
	var mu sync.Mutex
	var out []string
	scan := func(ctx context.Context, c redis.Cmdable) error {
		it := c.Scan(ctx, 0, prefix+"*", 200).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			out = append(out, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, rdb)
	}
	slices.Sort(out)
	return slices.Compact(out), err
}

func takeSnapshot(ctx context.Context, rdb redis.UniversalClient, prefix string) (map[string]keyDump, error) {
	ks, err := prefixKeys(ctx, rdb, prefix)
	if err != nil {
		return nil, err
	}
	out := map[string]keyDump{}
	for _, k := range ks {
		typ, err := rdb.Type(ctx, k).Result()
		if err != nil {
			return nil, err
		}
		var d keyDump
		switch typ {
		case "string":
			s, err := rdb.Get(ctx, k).Result()
			if err != nil {
				return nil, err
			}
			d.str = &s
		case "hash":
			if d.hash, err = rdb.HGetAll(ctx, k).Result(); err != nil {
				return nil, err
			}
		case "none": // expired meanwhile
			continue
		default:
			return nil, fmt.Errorf("key %s: unexpected type %s", k, typ)
		}
		if d.ttl, err = rdb.PTTL(ctx, k).Result(); err != nil {
			return nil, err
		}
		out[k] = d
	}
	return out, nil
}

// dropPrefix deletes every key under prefix: Redis came back empty.
func dropPrefix(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	ks, err := prefixKeys(ctx, rdb, prefix)
	if err != nil {
		return err
	}
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range ks {
			p.Del(ctx, k)
		}
		return nil
	})
	return err
}

// rollBack replaces the keys under prefix by those of a snapshot: Redis came
// back from an older dump.
func rollBack(ctx context.Context, rdb redis.UniversalClient, prefix string, snap map[string]keyDump) error {
	if err := dropPrefix(ctx, rdb, prefix); err != nil {
		return err
	}
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, d := range snap {
			if d.str != nil {
				p.Set(ctx, k, *d.str, 0)
			} else {
				p.HSet(ctx, k, d.hash)
			}
			if d.ttl > 0 {
				p.PExpire(ctx, k, d.ttl)
			}
		}
		return nil
	})
	return err
}

func sameSnapshot(a, b map[string]keyDump) bool {
	return maps.EqualFunc(a, b, func(x, y keyDump) bool {
		if (x.str == nil) != (y.str == nil) {
			return false
		}
		if x.str != nil {
			return *x.str == *y.str
		}
		return maps.Equal(x.hash, y.hash)
	})
}

func checkRecoveryMatchesModel(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	loc, _ := policy.LoadZone(policy.DefaultZone)
	var losses, rollbacks, detected, touched, pendingJudged, grantsRestored int // over every sequence, for the log
	var settled, failedSettles, unrecorded int
	defer func() {
		t.Logf("Redis lost %d and rolled back %d times; %d stale states detected and rebuilt; %d families restored on touch, %d events and steps judged after their family's restore; %d open grants restored; %d settles, %d door reads failed after a claim; %d batches recorded nowhere",
			losses, rollbacks, detected, touched, pendingJudged, grantsRestored, settled, failedSettles, unrecorded)
	}()
	rapid.Check(t, func(rt *rapid.T) {
		base := time.Date(2026, time.Month(rapid.IntRange(1, 12).Draw(rt, "month")), 1, 0, 0, 0, 0, loc)
		now := base.Add(-time.Duration(rapid.IntRange(0, 48*60).Draw(rt, "startBeforeMonth")) * time.Minute)
		prefix := fmt.Sprintf("rec%d:%d:", time.Now().UnixNano(), checkSeq.Add(1))
		// Each check's keys go when it ends: the server is shared by every
		// check, and a keyspace growing by a check's keys each time makes
		// every SCAN (snapshots, rollbacks) slower than the last.
		defer dropPrefix(context.Background(), rdb, prefix)
		e, err := New(rdb, WithKeyPrefix(prefix), WithLocation(loc), WithClock(func() time.Time { return now }),
			WithGrantSizes(testGrantSizes))
		if err != nil {
			rt.Fatal(err)
		}
		m := newModel(loc)
		l := newLedger(loc)
		gd := newGrantDriver(m, loc)
		families := []int64{1, 2}
		customers := map[int64][]int64{} // every customer id a family ever had
		nextCustomer := int64(1)
		nextID := 0

		must := func(err error) {
			if err != nil {
				rt.Fatalf("engine error: %v", err)
			}
		}
		var lost bool // Redis lost writes the next batch must detect
		// onTouch: rebuilds name generations restored on touch (the
		// deployables'), else every family is restored before one is named.
		onTouch := rapid.Bool().Draw(rt, "onTouch")
		// mustAdmin checks the engine's answer to an API write the store
		// accepted. On a state the rebuild will replace (a lost plan, a
		// rolled-back top-up) the engine may refuse what SQL accepted.
		mustAdmin := func(what string, err error) {
			if err != nil && !(lost && errors.Is(err, ErrInvalid)) {
				rt.Fatalf("%s: %v", what, err)
			}
		}
		// admin reports whether the engine's answer to an API write can be
		// compared: not while Redis holds a state the rebuild will replace.
		admin := func() bool { return !lost }
		compare := func(what func() string, want, got any) {
			// DeepEqual, then Equal (nil = empty), then Diff: comparing
			// costs more than the engine's work on miniredis.
			if !reflect.DeepEqual(want, got) && !gocmp.Equal(want, got, cmpopts.EquateEmpty()) {
				rt.Fatalf("%s: engine differs from model (-model +engine):\n%s", what(), gocmp.Diff(want, got, cmpopts.EquateEmpty()))
			}
		}
		var markWrite, touch func(f int64)       // below
		var doorWrite func(rt *rapid.T, f int64) // below
		addMember := func(rt *rapid.T, f int64) {
			c := nextCustomer
			nextCustomer++
			customers[f] = append(customers[f], c)
			m.members[fc{f, c}] = true // SQL first
			doorWrite(rt, f)
		}
		month := func() string { return policy.MomentOf(now, loc).Month }

		var (
			gen       string
			genSeq    int
			pos       int64 // the committed position: after the last judged batch
			snapshots []snapshot
			fw        = map[string]int64{} // SQL's family-write counts per node under gen
			door      = map[string]int64{} // the door's own counts per node under gen
			// dec are the decisions' slots' counts under gen: the batches
			// whose results were used (recorded in SQL, as the instance
			// records them, and checked by every batch).
			dec [decisionSlots]int64
			// The counts as the judges read them from SQL: recorded once a
			// second and read at most once a second, so they lag (the
			// "recordMarks" step catches them up). A rollback within the
			// lag is found by the node's identity, not the marks.
			recFW  = map[string]int64{}
			recDec [decisionSlots]int64
			recPos int64
			// pending are the families claimed for a change whose settle
			// failed (the door's read of SQL timed out): not judged until
			// a touch settles them.
			pending = map[int64]bool{}
			// lostEvents were judged in a batch whose records were stored
			// nowhere (Kafka down, no spool): never told, never in SQL.
			lostEvents []Event
			restarts   int
		)
		// markWrite marks an API write of family f as the door does.
		markWrite = func(f int64) {
			if gen == "" {
				return // never rebuilt: the first rebuild reads SQL
			}
			node, err := e.FamilyMarker(ctx, f)
			must(err)
			err = e.Advance(ctx, gen, []Mark{{Stream: familyWriteStream, From: door[node], To: door[node] + 1, Node: node}})
			switch {
			case errors.Is(err, ErrStale) && !lost:
				rt.Fatalf("a family write's mark found the state stale without a loss: %v", err)
			case errors.Is(err, ErrStale):
				// The write stands on a state that lost writes; the door
				// counts it all the same and records the count, which the
				// node does not hold, so the state stays stale even if a
				// rollback makes it look whole again, and the door's next
				// marks on it fail too.
				door[node]++
				fw[node] = max(fw[node], door[node])
			default:
				must(err)
				door[node]++
				fw[node] = max(fw[node], door[node])
			}
		}
		floors := func() []Mark {
			var out []Mark
			for node, n := range recFW {
				out = append(out, Mark{Stream: familyWriteStream, From: n, To: n, Node: node})
			}
			for i, n := range recDec {
				if n > 0 {
					out = append(out, Mark{Stream: decisionStream + strconv.Itoa(i), From: n, To: n})
				}
			}
			// The processor records its partition's position too
			// (judge.Processor's recordPositions): the decisions check it.
			if recPos > 0 {
				out = append(out, Mark{Stream: recoveryStream, From: recPos, To: recPos})
			}
			return out
		}
		// recover is recovery.Guard: a new generation rebuilt from SQL
		// at the committed position.
		// restored applies what a restore of family f from SQL (the
		// model's view) did: the door records its re-arms, and the model
		// takes the restore's rule for fired thresholds.
		restored := func(st FamilyState) {
			grantsRestored += len(st.Grants)
			for k := range m.grants { // the restore keeps only st's
				if k.f == st.FamilyID && !slices.ContainsFunc(st.Grants, func(g GrantState) bool {
					return g.CustomerID == k.c && g.GrantID == k.id
				}) {
					delete(m.grants, k)
				}
			}
			for mo, r := range e.RestoredRearms(st) {
				l.recordRearmed(st.FamilyID, PoolState{Month: mo, Rearmed: r})
			}
			months, _, _ := e.AcceptedMonths()
			for _, mo := range months {
				m.fired[fp{st.FamilyID, mo}] = firedAfterRestore(m, st, fp{st.FamilyID, mo})
			}
		}
		// touch is the door's restore on touch before a judgement, a
		// family write or a read in a generation restored on touch: the
		// family is restored from SQL unless a restore of the generation
		// came first (a rolled-back or lost node whose marker names another
		// generation is left alone: the next judgement finds it stale).
		// settleNow settles family f claimed with token seen from SQL (the
		// model), as the door does: the model's re-arm rule at settle
		// time (a change whose settle failed is re-armed for here).
		settleNow := func(f int64, seen string) {
			cur, _, _ := e.CurrentMonth()
			st := familyState(m, l, e, f, gen, now)
			done, err := e.Settle(ctx, st, seen, nil)
			mustAdmin("settle", err)
			if err == nil {
				l.recordRearmed(f, PoolState{Month: cur, Rearmed: done.Rearmed[cur]})
				settled++
			}
			delete(pending, f)
			if ps := m.rearm(f, cur); admin() {
				compare(func() string { return fmt.Sprintf("settle family %d", f) }, ps, done.Pool)
			}
		}
		touch = func(f int64) {
			if gen == "" {
				return
			}
			mg, seen, err := e.FamilyToken(ctx, f)
			must(err)
			if mg != gen {
				return
			}
			switch FamilyNeeds(mg, seen) {
			case NeedRestore:
				st := familyState(m, l, e, f, gen, now)
				ok, err := e.RestoreUnrestored(ctx, st, seen)
				must(err)
				if ok {
					touched++
					restored(st)
					delete(pending, f)
				}
			case NeedSettle:
				settleNow(f, seen)
			}
		}
		// doorWrite is the door's part of a family change SQL (the model)
		// committed: claim, read the family back, settle (or restore) it,
		// mark it. When the door's read of SQL fails after the claim, the
		// family stays claimed: not judged until a touch settles it.
		doorWrite = func(rt *rapid.T, f int64) {
			g, token, err := e.Claim(ctx, f)
			must(err)
			switch FamilyNeeds(g, token) {
			case NeedNothing:
				// No generation vouches for the state (lost): the rebuild
				// reads the change from SQL.
				pending[f] = true
				return
			case NeedRestore:
				touch(f)
			case NeedSettle:
				if rapid.IntRange(0, 4).Draw(rt, "doorReadFails") == 0 {
					pending[f] = true
					failedSettles++
					return
				}
				settleNow(f, token)
			}
			markWrite(f)
		}
		recover := func() {
			genSeq++
			next := fmt.Sprintf("g%d", genSeq)
			if onTouch {
				next = fmt.Sprintf("t:%d", genSeq)
			}
			nodes, err := e.State(ctx)
			must(err)
			wm, err := e.BeginRebuild(ctx, next)
			must(err)
			// On a Cluster a batch refused by one node's check (a
			// family-write mark it lacks) is advanced on the others, so
			// only a single node's watermark is bounded by the position.
			if len(nodes) == 1 && wm[recoveryStream] > pos {
				rt.Fatalf("marker watermark %d is past the committed position %d", wm[recoveryStream], pos)
			}
			// The model takes the restore's rule for fired thresholds
			// (firedAfterRestore): a threshold that fired this month, that the
			// pool has reached and that no recorded pool change re-armed
			// after its last arm. It is the live engine's but where a
			// re-arm went unrecorded: a pool change made on a state that
			// had lost writes records the re-arms that state saw
			// (doc/architecture.md).
			if onTouch {
				// Named first; the sweep restores some families now, the
				// others are restored by their first touch.
				must(e.FinishRebuild(ctx, next, map[string]int64{recoveryStream: pos}))
				gen, lost = next, false
				fw, door, dec = map[string]int64{}, map[string]int64{}, [decisionSlots]int64{}
				recFW, recDec, recPos = map[string]int64{}, [decisionSlots]int64{}, pos
				clear(pending) // every family is restored from SQL in the new generation
				for _, f := range families {
					if !rapid.Bool().Draw(rt, "sweptFirst") {
						continue
					}
					_, seen, err := e.FamilyToken(ctx, f)
					must(err)
					st := familyState(m, l, e, f, next, now)
					ok, err := e.RestoreUnrestored(ctx, st, seen)
					must(err)
					if !ok {
						rt.Fatalf("family %d: a restore of a new generation skipped", f)
					}
					restored(st)
					got, err := e.Family(ctx, f)
					must(err)
					compare(func() string { return fmt.Sprintf("family %d after the sweep (SQL = Redis)", f) }, m.family(f, now), got)
				}
				return
			}
			for _, f := range families {
				st := familyState(m, l, e, f, next, now)
				must(e.Restore(ctx, st))
				restored(st) // the door records the re-arms of the restore too
			}
			must(e.FinishRebuild(ctx, next, map[string]int64{recoveryStream: pos}))
			gen, lost = next, false
			fw, door, dec = map[string]int64{}, map[string]int64{}, [decisionSlots]int64{}
			recFW, recDec, recPos = map[string]int64{}, [decisionSlots]int64{}, pos
			clear(pending)
			for _, f := range families {
				got, err := e.Family(ctx, f)
				must(err)
				compare(func() string { return fmt.Sprintf("family %d after the rebuild (SQL = Redis)", f) }, m.family(f, now), got)
			}
		}
		// Provisioned in SQL before the first rebuild, which reads it.
		for _, f := range families {
			for range 3 {
				c := nextCustomer
				nextCustomer++
				customers[f] = append(customers[f], c)
				m.members[fc{f, c}] = true
			}
		}
		m.plan[1] = rapid.Int64Range(0, 40*mb).Draw(rt, "plan")
		m.rearm(1, month())
		recover() // the processor's start: a bootstrap rebuild

		newEvent := func(rt *rapid.T) Event {
			f := rapid.SampledFrom(families).Draw(rt, "family")
			app := rapid.SampledFrom(testApps).Draw(rt, "app")
			remaining := m.pool(f, month()).Remaining()
			bytes := rapid.OneOf(
				rapid.Int64Range(0, 3*mb),
				rapid.Just(remaining),
				rapid.Just(remaining+1),
				rapid.Int64Range(0, 100*mb),
			).Draw(rt, "bytes")
			nextID++
			return Event{
				ID: fmt.Sprintf("evt_%d", nextID), FamilyID: f,
				CustomerID: rapid.SampledFrom(append([]int64{99}, customers[f]...)).Draw(rt, "customer"),
				Bytes:      min(bytes, policy.MaxBytes), AppID: app.ID, Category: app.Category,
				// The processor takes events up to 5 min ahead of its clock.
				At: now.Add(time.Duration(rapid.IntRange(-180, 5).Draw(rt, "offsetMin")) * time.Minute),
			}
		}
		// recent are the sent events first judged within the dedupe window.
		recent := func() []Event {
			var out []Event
			for _, rec := range l.records {
				if now.Sub(rec.at) < 24*time.Hour {
					out = append(out, rec.ev)
				}
			}
			return out
		}
		// judge judges evs as a processor batch (slot < 0: the next
		// positions of its partition) or as a synchronous-decisions group
		// commit in slot (judge.Decisions: every slot's count checked, its
		// own raised by one).
		// record false: the batch's records are stored nowhere (Kafka
		// down, no spool) — its callers are told to retry, SQL never sees
		// it, and the door makes the state stale (Engine.Distrust) so it
		// is rebuilt from SQL without the charges. Such batches carry no
		// grant steps here.
		judge := func(rt *rapid.T, evs []Event, ops []GrantOp, slot int, record bool) {
			mine := func() []Mark {
				if slot < 0 {
					return []Mark{{Stream: recoveryStream, From: pos, To: pos + int64(len(evs))}}
				}
				var ms []Mark
				for i, n := range dec {
					m := Mark{Stream: decisionStream + strconv.Itoa(i), From: n, To: n}
					if i == slot {
						m.To++
					}
					ms = append(ms, m)
				}
				return ms
			}
			marks := append(mine(), floors()...)
			got, gotG, err := e.JudgeMarked(ctx, gen, marks, evs, ops)
			// The door: families not restored in the generation yet are
			// restored on touch and their events and steps judged then.
			unrestored := func() {
				var un *UnrestoredError
				for range 3 {
					if !errors.As(err, &un) || lost { // lost: the door's touch then finds it stale
						return
					}
					claimed := false
					for _, f := range un.Families {
						claimed = claimed || pending[f]
					}
					if !onTouch && !claimed {
						rt.Fatalf("unrestored families %v (on touch %v, none claimed)", un.Families, onTouch)
					}
					for _, f := range un.Families {
						touch(f)
					}
					sub := make([]Event, len(un.Pending))
					for i, at := range un.Pending {
						sub[i] = evs[at]
					}
					subG := make([]GrantOp, len(un.GrantPending))
					for i, at := range un.GrantPending {
						subG[i] = ops[at]
					}
					rs, rsG, e2 := e.JudgeMarked(ctx, gen, marks, sub, subG)
					if e2 != nil {
						err = e2
						continue
					}
					for i, at := range un.Pending {
						un.Results[at] = rs[i]
					}
					for i, at := range un.GrantPending {
						un.GrantResults[at] = rsG[i]
					}
					pendingJudged += len(un.Pending) + len(un.GrantPending)
					got, gotG, err = un.Results, un.GrantResults, nil
				}
			}
			unrestored()
			switch {
			case lost && !errors.Is(err, ErrStale):
				rt.Fatalf("first batch after Redis lost writes: %v, want ErrStale", err)
			case errors.Is(err, ErrStale):
				if !lost {
					rt.Fatalf("stale without a loss: %v", err)
				}
				if got != nil || gotG != nil {
					rt.Fatalf("a stale batch returned results %v %v", got, gotG)
				}
				detected++
				recover()
				marks = append(mine(), floors()...) // the new generation's
				got, gotG, err = e.JudgeMarked(ctx, gen, marks, evs, ops)
				unrestored()
			}
			must(err)
			if slot < 0 {
				pos += int64(len(evs))
			} else {
				dec[slot]++
			}
			if !record {
				if len(ops) > 0 {
					rt.Fatalf("an unrecorded batch with grant steps %+v", ops)
				}
				for _, ev := range evs {
					if _, judged := l.first[fid{ev.FamilyID, ev.ID}]; !judged {
						lostEvents = append(lostEvents, ev)
					}
				}
				must(e.Distrust(ctx))
				lost = true
				unrecorded++
				return
			}
			ps := newPeriods()
			for _, ev := range evs {
				ps.add(ev.FamilyID, ev.CustomerID, ev.At, loc)
			}
			for _, op := range ops {
				ps.add(op.FamilyID, op.CustomerID, op.At, loc)
				if g, ok := m.grants[fcg{op.FamilyID, op.CustomerID, op.GrantID}]; ok {
					ps.add(op.FamilyID, op.CustomerID, g.at, loc)
				}
			}
			before := gd.bounds(ps)
			var want []Result
			cons := make([]policy.Constraints, len(evs))
			for i, ev := range evs {
				cons[i] = m.constraints(ev.FamilyID, ev.CustomerID)
				want = append(want, m.apply(ev, now))
			}
			var wantG []GrantResult
			opens := make([]int64, len(ops))
			for i, op := range ops {
				wantG = append(wantG, m.grant(op, now))
				opens[i] = m.openGrants(op.FamilyID)
			}
			compare(func() string { return fmt.Sprintf("apply %+v", evs) }, want, got)
			compare(func() string { return fmt.Sprintf("grant steps %+v", ops) }, wantG, gotG)
			for i, ev := range evs {
				if broke := l.add(ev, got[i], now, cons[i]); broke != "" {
					rt.Fatal(broke)
				}
			}
			var overage int64
			for i, op := range ops {
				if broke := l.addStep(op, gotG[i], now); broke != "" {
					rt.Fatal(broke)
				}
				gd.stepped(rt, op, gotG[i], opens[i])
				if !gotG[i].Duplicate {
					overage += gotG[i].Overage
				}
			}
			gd.check(rt, fmt.Sprintf("events %+v, steps %+v", evs, ops), ps, before, gd.bounds(ps), overage)
		}

		// restart replaces the state by a snapshot's and gives every node
		// a new identity, as a restart or a promoted replica has (the
		// marker's n no longer names the node: on miniredis, which has no
		// INFO server, by changing n; doc/architecture.md, "No window").
		// Every such rollback is stale before the next decision, whatever
		// the marks recorded so far tell.
		restart := func(snap snapshot) {
			must(rollBack(ctx, rdb, prefix, snap.keys))
			restarts++
			nodes, err := e.State(ctx)
			must(err)
			for _, n := range nodes {
				if n.Generation != "" {
					must(rdb.HSet(ctx, n.Key, "n", fmt.Sprintf("restarted-%d", restarts)).Err())
				}
			}
			rollbacks++
			lost = true
		}

		rt.Repeat(map[string]func(*rapid.T){
			"apply": func(rt *rapid.T) { judge(rt, []Event{newEvent(rt)}, nil, -1, true) },
			"decide": func(rt *rapid.T) {
				// A synchronous-decisions group commit: new events and
				// retries of judged ones (flagged duplicate, same answer).
				n := rapid.IntRange(1, 5).Draw(rt, "requests")
				var evs []Event
				for range n {
					if r := recent(); len(r) > 0 && rapid.IntRange(0, 3).Draw(rt, "retried") == 0 {
						evs = append(evs, rapid.SampledFrom(r).Draw(rt, "retry"))
						continue
					}
					evs = append(evs, newEvent(rt))
				}
				// Grant steps go through the decisions' group commits too.
				var ops []GrantOp
				for range rapid.IntRange(0, 3).Draw(rt, "steps") {
					if op, ok := gd.retry(rt, now); ok && rapid.IntRange(0, 3).Draw(rt, "retriedStep") == 0 {
						ops = append(ops, op)
						continue
					}
					ops = append(ops, gd.draw(rt, families, func(f int64) []int64 { return append([]int64{99}, customers[f]...) }, now))
				}
				judge(rt, evs, ops, rapid.IntRange(0, decisionSlots-1).Draw(rt, "slot"), true)
			},
			"decideUnrecorded": func(rt *rapid.T) {
				// Kafka down and no spool until the server stopped: judged,
				// charged, recorded nowhere.
				judge(rt, []Event{newEvent(rt)}, nil, rapid.IntRange(0, decisionSlots-1).Draw(rt, "slot"), false)
			},
			"retryUnrecorded": func(rt *rapid.T) {
				// A caller told "judged and counted, retry with the same
				// ids" retries: judged afresh (SQL never saw it).
				// (A judge takes events no older than the dedupe window.)
				lostEvents = slices.DeleteFunc(lostEvents, func(ev Event) bool { return now.Sub(ev.At) > 23*time.Hour })
				if len(lostEvents) == 0 {
					rt.Skip("nothing unrecorded")
				}
				i := rapid.IntRange(0, len(lostEvents)-1).Draw(rt, "lost")
				ev := lostEvents[i]
				lostEvents = append(lostEvents[:i:i], lostEvents[i+1:]...)
				judge(rt, []Event{ev}, nil, rapid.IntRange(0, decisionSlots-1).Draw(rt, "slot"), true)
			},
			"applyBatch": func(rt *rapid.T) {
				n := rapid.IntRange(1, 20).Draw(rt, "batch")
				var evs []Event
				for range n {
					if r := recent(); len(r) > 0 && rapid.IntRange(0, 4).Draw(rt, "replayInBatch") == 0 {
						evs = append(evs, rapid.SampledFrom(r).Draw(rt, "replayed"))
						continue
					}
					evs = append(evs, newEvent(rt))
				}
				judge(rt, evs, nil, -1, true)
			},
			"replayOtherTime": func(rt *rapid.T) {
				// The same id with another timestamp the processor accepts
				// (within its age and skew bounds) is the same event.
				r := recent()
				if len(r) == 0 {
					rt.Skip("nothing judged within the window")
				}
				ev := rapid.SampledFrom(r).Draw(rt, "replayed")
				ev.At = now.Add(time.Duration(rapid.IntRange(-23*60, 5).Draw(rt, "atMin")) * time.Minute)
				judge(rt, []Event{ev}, nil, -1, true)
			},
			"setPlan": func(rt *rapid.T) {
				f := rapid.SampledFrom(families).Draw(rt, "family")
				cur, _, _ := e.CurrentMonth()
				prev := policy.MomentOf(time.Date(now.In(loc).Year(), now.In(loc).Month(), 1, 12, 0, 0, 0, loc).AddDate(0, -1, 0), loc).Month
				room := policy.MaxBytes - max(m.topup[fp{f, cur}], m.topup[fp{f, prev}])
				used := m.used[fp{f, cur}]
				b := rapid.OneOf(
					rapid.Int64Range(0, 60*mb),
					rapid.Int64Range(0, max(used-1, 0)), // a cut below usage
					rapid.Int64Range(max(room-2, 0), room+2),
				).Draw(rt, "plan")
				if b > room {
					return // the store refuses it (a PoolLimitError): Redis is not asked
				}
				m.plan[f] = b // SQL first
				doorWrite(rt, f)
			},
			"topUp": func(rt *rapid.T) {
				f := rapid.SampledFrom(families).Draw(rt, "family")
				cur, _, _ := e.CurrentMonth()
				room := policy.MaxBytes - m.plan[f] - m.topup[fp{f, cur}]
				b := rapid.OneOf(
					rapid.Int64Range(1, 30*mb),
					rapid.Int64Range(max(room-2, 1), room+2),
				).Draw(rt, "topup")
				if b > room {
					// The store refuses it; the engine must too.
					if _, err := e.TopUp(ctx, f, b); !errors.Is(err, ErrInvalid) && admin() {
						rt.Fatalf("TopUp(%d) past the bound (room %d): %v, want ErrInvalid", b, room, err)
					}
					return
				}
				m.topup[fp{f, cur}] += b
				doorWrite(rt, f)
			},
			"setThresholds": func(rt *rapid.T) {
				f := rapid.SampledFrom(families).Draw(rt, "family")
				var th policy.Thresholds
				for _, p := range []int{90, 75, 50, 30, 10, 5, 1} {
					if rapid.Bool().Draw(rt, "threshold") {
						th = append(th, p)
					}
				}
				canon, _ := th.Canonical()
				m.thr[f] = canon
				doorWrite(rt, f)
			},
			"setConstraints": func(rt *rapid.T) {
				f := rapid.SampledFrom(families).Draw(rt, "family")
				var ms []int64
				for _, c := range customers[f] {
					if m.members[fc{f, c}] {
						ms = append(ms, c)
					}
				}
				if len(ms) == 0 {
					rt.Skip("no members")
				}
				c := rapid.SampledFrom(ms).Draw(rt, "customer")
				cur := m.ver[fc{f, c}]
				v := rapid.Int64Range(max(cur-2, 1), cur+3).Draw(rt, "version")
				cons := genExceptions(rt, genExtras(rt, genConstraints(rt), now, loc), now, loc)
				touch(f)
				got, err := e.SetConstraints(ctx, f, c, v, cons)
				must(err)
				markWrite(f)
				if applied := m.setConstraints(f, c, v, cons); admin() {
					compare(func() string { return "setConstraints applied" }, applied, got)
				}
			},
			"addMember": func(rt *rapid.T) { addMember(rt, rapid.SampledFrom(families).Draw(rt, "family")) },
			"removeMember": func(rt *rapid.T) {
				f := rapid.SampledFrom(families).Draw(rt, "family")
				c := rapid.SampledFrom(customers[f]).Draw(rt, "customer")
				delete(m.members, fc{f, c})
				delete(m.cons, fc{f, c})
				doorWrite(rt, f)
			},
			"tick": func(rt *rapid.T) {
				now = now.Add(time.Duration(rapid.IntRange(1, 180).Draw(rt, "minutes")) * time.Minute)
			},
			"nextDay": func(rt *rapid.T) {
				now = now.Add(time.Duration(rapid.IntRange(1, 3).Draw(rt, "days")) * 24 * time.Hour)
			},
			"toMonthEnd": func(rt *rapid.T) {
				// Minutes before the next month, where a loss meets events
				// stamped in the next month.
				_, _, to := e.CurrentMonth()
				now = to.Add(-time.Duration(rapid.IntRange(1, 10).Draw(rt, "minutesBefore")) * time.Minute)
			},
			"snapshot": func(rt *rapid.T) {
				keys, err := takeSnapshot(ctx, rdb, prefix)
				must(err)
				snapshots = append(snapshots, snapshot{keys: keys, pos: pos, gen: gen, fw: maps.Clone(fw), dec: dec, lost: lost})
				if len(snapshots) > 3 {
					snapshots = snapshots[1:]
				}
			},
			"loseRedis": func(rt *rapid.T) {
				must(dropPrefix(ctx, rdb, prefix))
				lost = true
				losses++
			},
			"rollback": func(rt *rapid.T) {
				// Redis restarted from a snapshot of any age (the newest may
				// be of now: nothing judged or written since), or a replica
				// that lagged by the steps since took over.
				if len(snapshots) == 0 {
					rt.Skip("no snapshot")
				}
				s := rapid.SampledFrom(snapshots).Draw(rt, "snapshot")
				restart(s)
			},
			"failover": func(rt *rapid.T) {
				// The replica had everything up to the latest snapshot.
				if len(snapshots) == 0 {
					rt.Skip("no snapshot")
				}
				restart(snapshots[len(snapshots)-1])
			},
			"recordMarks": func(rt *rapid.T) {
				// The judges read the counts SQL recorded (a second late).
				recFW, recDec, recPos = maps.Clone(fw), dec, pos
			},
			"": func(rt *rapid.T) {
				if lost {
					return // Redis is wrong until the next batch detects it
				}
				for _, f := range families {
					touch(f) // a read restores too
					got, err := e.Family(ctx, f)
					must(err)
					compare(func() string { return fmt.Sprintf("family %d state", f) }, m.family(f, now), got)
				}
			},
		})
	})
}

func TestRecoveryMatchesModel(t *testing.T) {
	t.Parallel() // with TestEngineMatchesModel: each check has its own key prefix
	eachBackendOnce(t, checkRecoveryMatchesModel)
}
