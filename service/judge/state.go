package judge

import (
	"context"
	"errors"
	"time"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// Engine is what the door needs of the quota engine: *quota.Engine. It is
// an interface so that tests can wrap the engine to inject faults.
type Engine interface {
	ApplyBatch(ctx context.Context, evs []quota.Event) ([]quota.Result, error)
	ApplyMarked(ctx context.Context, gen string, marks []quota.Mark, evs []quota.Event) ([]quota.Result, error)
	CheckState(ctx context.Context, gen string, marks []quota.Mark) error
	Advance(ctx context.Context, gen string, marks []quota.Mark) error
	Enforce(ctx context.Context, fid, cid, version int64, c policy.Constraints) (quota.Enforcement, error)
	SetPlan(ctx context.Context, fid, bytes int64) (quota.PoolState, error)
	SetTopUps(ctx context.Context, fid int64, month string, total int64) (quota.PoolState, error)
	SetThresholds(ctx context.Context, fid int64, t policy.Thresholds) error
	AddMember(ctx context.Context, fid, cid int64) error
	RemoveMember(ctx context.Context, fid, cid int64) error
	Restore(ctx context.Context, st quota.FamilyState) error
	BeginRebuild(ctx context.Context, next string) (map[string]int64, error)
	FinishRebuild(ctx context.Context, gen string, watermarks map[string]int64) error
	Family(ctx context.Context, fid int64) (quota.FamilyStatus, error)
	Status(ctx context.Context, fid, cid int64) (quota.MemberStatus, error)
	AcceptedMonths() (months []string, from, to time.Time)
	DedupeWindow() time.Duration
	Location() *time.Location
}

var _ Engine = (*quota.Engine)(nil)

// State is the one door to the quota state in Redis: every write DPCS makes
// to it goes through a State — the processor's and the synchronous
// decisions' judgements (in this package), the API's policy, plan, top-up,
// threshold and membership changes, and the rebuilds of service/recovery —
// so that what is promised about that state (doc/architecture.md, "Never
// trust Redis blindly") is argued about one type. It holds no state of its
// own and is safe for concurrent use.
type State struct {
	eng Engine
}

// NewState returns the door to the quota state eng keeps.
func NewState(eng Engine) (*State, error) {
	if eng == nil {
		return nil, errors.New("judge: nil quota engine")
	}
	return &State{eng: eng}, nil
}

// Location is the service time zone the state's days and months are in.
func (s *State) Location() *time.Location { return s.eng.Location() }

// Judging: the processor and the synchronous decisions.

// apply judges evs with no state check (no guard configured).
func (s *State) apply(ctx context.Context, evs []quota.Event) ([]quota.Result, error) {
	return s.eng.ApplyBatch(ctx, evs)
}

// applyMarked judges evs only on a state of generation gen whose watermarks
// are not behind marks, and advances them (quota.Engine.ApplyMarked).
func (s *State) applyMarked(ctx context.Context, gen string, marks []quota.Mark, evs []quota.Event) ([]quota.Result, error) {
	return s.eng.ApplyMarked(ctx, gen, marks, evs)
}

func (s *State) checkState(ctx context.Context, gen string, marks []quota.Mark) error {
	return s.eng.CheckState(ctx, gen, marks)
}

func (s *State) advance(ctx context.Context, gen string, marks []quota.Mark) error {
	return s.eng.Advance(ctx, gen, marks)
}

// Family changes: the API and the processor's policy-updated records.

// Enforce applies a member's whole constraints, parsed once by the caller
// (policy.ParseConstraints), at version (ignored when the state holds a
// newer one) and reports the member's standing after it: retroactive
// enforcement.
func (s *State) Enforce(ctx context.Context, fid, cid, version int64, c policy.Constraints) (quota.Enforcement, error) {
	return s.eng.Enforce(ctx, fid, cid, version, c)
}

// SetPlan sets the family's monthly plan (quota.Engine.SetPlan).
func (s *State) SetPlan(ctx context.Context, fid, bytes int64) (quota.PoolState, error) {
	return s.eng.SetPlan(ctx, fid, bytes)
}

// SetTopUps raises month's top-ups to the total SQL recorded
// (quota.Engine.SetTopUps).
func (s *State) SetTopUps(ctx context.Context, fid int64, month string, total int64) (quota.PoolState, error) {
	return s.eng.SetTopUps(ctx, fid, month, total)
}

// SetThresholds sets the family's alert levels (quota.Engine.SetThresholds).
func (s *State) SetThresholds(ctx context.Context, fid int64, t policy.Thresholds) error {
	return s.eng.SetThresholds(ctx, fid, t)
}

// AddMember provisions a member (quota.Engine.AddMember).
func (s *State) AddMember(ctx context.Context, fid, cid int64) error {
	return s.eng.AddMember(ctx, fid, cid)
}

// RemoveMember removes a member; its next event is BLOCKED_NOT_MEMBER
// (quota.Engine.RemoveMember).
func (s *State) RemoveMember(ctx context.Context, fid, cid int64) error {
	return s.eng.RemoveMember(ctx, fid, cid)
}

// Rebuilds: service/recovery.

// Restore writes a family's whole state read from SQL (quota.Engine.Restore).
func (s *State) Restore(ctx context.Context, st quota.FamilyState) error {
	return s.eng.Restore(ctx, st)
}

// BeginRebuild marks every node as being rebuilt to generation next, so
// every judgement is refused until FinishRebuild (quota.Engine.BeginRebuild).
func (s *State) BeginRebuild(ctx context.Context, next string) (map[string]int64, error) {
	return s.eng.BeginRebuild(ctx, next)
}

// FinishRebuild names generation gen with watermarks on every node
// (quota.Engine.FinishRebuild).
func (s *State) FinishRebuild(ctx context.Context, gen string, watermarks map[string]int64) error {
	return s.eng.FinishRebuild(ctx, gen, watermarks)
}

// AcceptedMonths are the months a rebuild restores: those the engine still
// accepts events for (quota.Engine.AcceptedMonths).
func (s *State) AcceptedMonths() (months []string, from, to time.Time) { return s.eng.AcceptedMonths() }

// DedupeWindow is how long an event id is remembered; a rebuild restores
// the dedupe records of the events judged within it.
func (s *State) DedupeWindow() time.Duration { return s.eng.DedupeWindow() }

// Reads.

// Family is a snapshot of the family's pool and members (quota.Engine.Family).
func (s *State) Family(ctx context.Context, fid int64) (quota.FamilyStatus, error) {
	return s.eng.Family(ctx, fid)
}

// Status is a member's standing now (quota.Engine.Status).
func (s *State) Status(ctx context.Context, fid, cid int64) (quota.MemberStatus, error) {
	return s.eng.Status(ctx, fid, cid)
}
