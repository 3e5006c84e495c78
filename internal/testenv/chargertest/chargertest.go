// Package chargertest is an in-memory grant engine for tests of the
// charging interface (service/charging): a faithful stand-in for the door's
// grant steps (quota.GrantOp) that keeps their invariant — per family, used
// plus outstanding reservations never exceed the pool — reserves, charges
// and releases per GrantID and dedupes by step ID.
package chargertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// Fake is the in-memory grant engine. Its zero value is not usable: make
// one with New.
type Fake struct {
	mu       sync.Mutex
	families map[int64]*family
	grants   map[string]*grant
	steps    map[string]quota.GrantResult
	blocks   map[int64]policy.Decision // member → why it is blocked
	throttle map[int64]int64
	until    time.Time
	fail     int
	reclaim  []string
	crowd    int
	calls    int
	ops      []quota.GrantOp
}

type family struct {
	total, used, reserved int64
}

type grant struct {
	family, member int64
	reserved       int64
}

// New is an engine with no families.
func New() *Fake {
	return &Fake{families: map[int64]*family{}, grants: map[string]*grant{}, steps: map[string]quota.GrantResult{},
		blocks: map[int64]policy.Decision{}, throttle: map[int64]int64{}}
}

// SetPool gives family fid a pool of total bytes.
func (f *Fake) SetPool(fid, total int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.family(fid).total = total
}

// Block makes every next grant of member mid answer why (Allowed lifts it).
func (f *Fake) Block(mid int64, why policy.Decision) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if why == policy.Allowed {
		delete(f.blocks, mid)
		return
	}
	f.blocks[mid] = why
}

// Throttle makes member mid's grants come with a speed limit (0 lifts it).
func (f *Fake) Throttle(mid, kbps int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.throttle[mid] = kbps
}

// ValidUntil makes every next answer valid until t (zero: no boundary).
func (f *Fake) ValidUntil(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.until = t
}

// FailNext makes the next n calls fail, changing nothing.
func (f *Fake) FailNext(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = n
}

// ReclaimNext makes the next step's result name these grants as holding
// more than their fair share (quota.GrantResult.Reclaim).
func (f *Fake) ReclaimNext(grantIDs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reclaim = grantIDs
}

// CrowdNext makes the next n steps that ask for units answer as the
// engine does a grant crowded out by the family's other grants:
// BLOCKED_FAMILY_QUOTA, nothing granted, not final, the grant kept open
// (holding nothing) for its next step. (A block is final, as the
// engine's.)
func (f *Fake) CrowdNext(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.crowd = n
}

// ErrInjected is the error of a call FailNext made fail.
var ErrInjected = errors.New("chargertest: injected failure")

func (f *Fake) family(fid int64) *family {
	fam := f.families[fid]
	if fam == nil {
		fam = &family{}
		f.families[fid] = fam
	}
	return fam
}

// Charge takes the steps in order, all of them or (on an injected failure)
// none.
func (f *Fake) Charge(_ context.Context, ops []quota.GrantOp) ([]quota.GrantResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail > 0 {
		f.fail--
		return nil, ErrInjected
	}
	out := make([]quota.GrantResult, len(ops))
	for i, op := range ops {
		f.ops = append(f.ops, op)
		if r, ok := f.steps[op.ID]; ok {
			r.Duplicate = true
			out[i] = r
			continue
		}
		fam := f.family(op.FamilyID)
		if g := f.grants[op.GrantID]; g != nil { // the step replaces the reservation
			fam.reserved -= g.reserved
			delete(f.grants, op.GrantID)
		}
		fam.used += op.Used
		r := quota.GrantResult{Decision: policy.Allowed, Charged: op.Used, ValidUntil: f.until}
		switch why, blocked := f.blocks[op.CustomerID]; {
		case op.Release:
		case blocked:
			r.Decision, r.Final = why, true
		case f.crowd > 0 && op.Requested > 0:
			f.crowd--
			r.Decision = policy.BlockedFamilyQuota // the others' reservations hold the pool
		default:
			avail := max(fam.total-fam.used-fam.reserved, 0)
			r.Granted = min(op.Requested, avail)
			r.Final = r.Granted < op.Requested
			if r.Granted == 0 {
				r.Decision = policy.BlockedFamilyQuota
			}
			r.ThrottleKbps = f.throttle[op.CustomerID]
		}
		if r.Granted > 0 || !(op.Release || r.Final) {
			f.grants[op.GrantID] = &grant{family: op.FamilyID, member: op.CustomerID, reserved: r.Granted}
			fam.reserved += r.Granted
		}
		r.Total = fam.total
		r.Remaining = fam.total - fam.used - fam.reserved
		r.Reclaim, f.reclaim = f.reclaim, nil
		f.steps[op.ID] = r
		out[i] = r
	}
	return out, nil
}

// Pool is family fid's pool: its total, what was charged and what grants
// hold.
func (f *Fake) Pool(fid int64) (total, used, reserved int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fam := f.family(fid)
	return fam.total, fam.used, fam.reserved
}

// Reserved is what grant id holds.
func (f *Fake) Reserved(grantID string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if g := f.grants[grantID]; g != nil {
		return g.reserved
	}
	return 0
}

// Outstanding is how many grants are open: holding a reservation, or
// crowded out and waiting for their next step (CrowdNext).
func (f *Fake) Outstanding() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.grants)
}

// Calls is how many times Charge was called; Ops every step it was given.
func (f *Fake) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// Ops returns every step Charge was given, in order.
func (f *Fake) Ops() []quota.GrantOp {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]quota.GrantOp(nil), f.ops...)
}

// Check returns an error if a family's reservations disagree with its
// grants, or if what the grants hold exceeds what the pool has left
// (used alone may exceed it: usage reported is charged whatever it was).
func (f *Fake) Check() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	held := map[int64]int64{}
	for _, g := range f.grants {
		held[g.family] += g.reserved
	}
	for fid, fam := range f.families {
		if held[fid] != fam.reserved {
			return fmt.Errorf("family %d: grants hold %d, the pool counts %d reserved", fid, held[fid], fam.reserved)
		}
		if fam.reserved > 0 && fam.used+fam.reserved > fam.total {
			return fmt.Errorf("family %d: used %d + reserved %d > pool %d", fid, fam.used, fam.reserved, fam.total)
		}
	}
	return nil
}
