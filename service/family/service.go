package family

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/store"
)

// Door is what the service writes through: the one door to the quota state
// (*judge.State). Tests wrap it to make a step fail.
type Door interface {
	Enforce(ctx context.Context, fid, cid, version int64, c policy.Constraints) (quota.Enforcement, error)
	SetPlan(ctx context.Context, fid, bytes int64) (quota.PoolState, error)
	SetTopUps(ctx context.Context, fid int64, month string, total int64) (quota.PoolState, error)
	SetThresholds(ctx context.Context, fid int64, t policy.Thresholds) error
	AddMember(ctx context.Context, fid, cid int64) error
	RemoveMember(ctx context.Context, fid, cid int64) error
	// Status is a checked read: a state the door cannot vouch for is
	// quota.ErrStale, so no decision is made on it (a gift's "what the
	// giver has left").
	Status(ctx context.Context, fid, cid int64) (quota.MemberStatus, error)
	// Settle claims the family and applies what SQL holds now; Unsettled
	// claims it (or, when Redis cannot be reached, has every judgement find
	// the state stale) so a change committed in SQL is in effect before the
	// family's next decision (judge.State.Settle, judge.State.Unsettled).
	Settle(ctx context.Context, fid int64) (quota.PoolState, error)
	Unsettled(ctx context.Context, fid int64) error
	Location() *time.Location
}

var _ Door = (*judge.State)(nil)

// Kind names a family change for the hooks.
type Kind string

// The kinds of change.
const (
	KindPolicy     Kind = "POLICY"     // a member's constraints (PATCH, templates, exceptions, grants of requests)
	KindPlan       Kind = "PLAN"       // the family's monthly plan (and its creation)
	KindThresholds Kind = "THRESHOLDS" // alert levels
	KindTopUp      Kind = "TOPUP"      // data added to the month's pool
	KindGift       Kind = "GIFT"       // data moved between two members
	KindMember     Kind = "MEMBER"     // a member added
	KindRemoved    Kind = "REMOVED"    // a member removed
	KindRole       Kind = "ROLE"       // a member's role
	KindMinor      Kind = "MINOR"      // a member marked as a minor, or no longer
	KindPassword   Kind = "PASSWORD"   // a member's password reset (its sessions end)
	KindIMSI       Kind = "IMSI"       // the IMSI the network names a member by (charging)
	KindRequest    Kind = "REQUEST"    // a data or time request made or answered
	KindNote       Kind = "NOTE"       // a care agent's note
)

// Change is one change the service committed, for WithOnChange.
type Change struct {
	Kind     Kind
	FamilyID int64
	// Members are the members it is about (none: the whole family).
	Members []int64
	// Applied is false when the change is recorded but the quota state has
	// not taken it yet (ErrNotApplied).
	Applied bool
	By      store.Actor
}

// Service is DPCS's application layer: every change to a family is one of
// its methods, which owns the whole sequence — the truth first (SQL, with
// its audit rows and outbox events in one transaction), then the door to
// the quota state, then the relay and the hooks — and the one rule for a
// step that fails after the truth committed (doc/architecture.md, "One
// place for each family change"). It is safe for concurrent use.
type Service struct {
	store    *store.Store
	door     Door
	wake     func()
	onChange []func(context.Context, Change)
	log      *slog.Logger
	gifts    store.GiftRules
}

// Option configures a Service.
type Option func(*Service)

// WithWake has the service tell the outbox relay after a change that wrote
// outbox events (outbox.Relay.Wake). Default: none, the relay polls.
func WithWake(fn func()) Option { return func(s *Service) { s.wake = fn } }

// WithOnChange has the service call fn after every change it committed,
// applied or not, in the caller's goroutine (fn must not block: hand work
// to a goroutine of its own). Several may be given; each is called in
// order. Default: none.
func WithOnChange(fn func(context.Context, Change)) Option {
	return func(s *Service) {
		if fn != nil {
			s.onChange = append(s.onChange, fn)
		}
	}
}

// WithGiftRules sets the carriers' rules every gift keeps (the operator's
// DPCS_GIFT_*; a zero field sets no rule). Default:
// store.DefaultGiftRules().
func WithGiftRules(r store.GiftRules) Option { return func(s *Service) { s.gifts = r } }

// WithLogger has the service report what it does not return (a step that
// failed after a change was answered). Default: discard.
func WithLogger(l *slog.Logger) Option { return func(s *Service) { s.log = l } }

// New returns the application service over the truth st and the door d.
func New(st *store.Store, d Door, opts ...Option) (*Service, error) {
	if st == nil {
		return nil, errors.New("family: nil store")
	}
	if d == nil {
		return nil, errors.New("family: nil door")
	}
	s := &Service{store: st, door: d, wake: func() {}, log: slog.New(slog.DiscardHandler), gifts: store.DefaultGiftRules()}
	for _, o := range opts {
		o(s)
	}
	if err := s.gifts.Check(); err != nil {
		return nil, fmt.Errorf("family: gift rules: %w", err)
	}
	if s.wake == nil {
		s.wake = func() {}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// Location is the service time zone the quota state's days and months are in.
func (s *Service) Location() *time.Location { return s.door.Location() }

// ErrNotApplied: the change is recorded in SQL (it stands: a retry does not
// make it twice) but the door did not apply it now; it is in effect before
// the family's next decision all the same (the door claimed the family, or
// every judgement finds the state stale until Redis is rebuilt from SQL;
// judge.ErrUnsettled), and the settler applies it from SQL when this
// process could not even say so (it died). Policy changes, which also
// travel as events, are never answered with it. Wrapped in a
// *NotAppliedError.
var ErrNotApplied = errors.New("family: the change is recorded but the quota state has not taken it")

// NotAppliedError is ErrNotApplied with the door's error.
type NotAppliedError struct {
	FamilyID int64
	Kind     Kind
	Err      error
}

func (e *NotAppliedError) Error() string {
	return fmt.Sprintf("family: %s change of family %d recorded, not applied: %v", e.Kind, e.FamilyID, e.Err)
}

// Unwrap returns ErrNotApplied and the door's error.
func (e *NotAppliedError) Unwrap() []error { return []error{ErrNotApplied, e.Err} }

// doorTimeout bounds a door step the caller no longer waits for: a change
// SQL committed is applied whether or not its caller is still there.
const doorTimeout = 10 * time.Second

// doorContext is ctx without its cancellation, bounded by doorTimeout.
func doorContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), doorTimeout)
}

// settled is the one rule for the door step of a change SQL committed
// (doc/architecture.md, "The rule for every family change"). err is the
// door's answer; relayed says whether the change also travels by a path
// that cannot lose it (an outbox event the processors apply in the
// family's partition order, watermarked like every judged record).
//
//   - nil: applied.
//   - judge.ErrNotMarked, quota.ErrNotReplicated: the state took the change
//     but its protection against a loss of the state is not complete; the
//     error is returned as it is (the caller answers "in effect, read it
//     back before repeating it"), relayed or not.
//   - any other error: unless it says the door made sure already
//     (judge.ErrUnsettled), the door is asked to (judge.State.Unsettled:
//     the family is claimed, or every judgement finds the state stale), so
//     the change is in effect before the family's next decision. A relayed
//     change is then answered as done (its event applies it too); any
//     other is a *NotAppliedError: recorded, not applied now.
//
// The hooks are told in every case.
func (s *Service) settled(ctx context.Context, c Change, relayed bool, err error) error {
	protected := errors.Is(err, judge.ErrNotMarked) || errors.Is(err, quota.ErrNotReplicated)
	c.Applied = err == nil || protected
	if relayed {
		s.wake()
	}
	defer s.changed(ctx, c)
	switch {
	case err == nil:
		return nil
	case protected:
		return err
	}
	if !errors.Is(err, judge.ErrUnsettled) {
		dctx, cancel := doorContext(ctx)
		defer cancel()
		if uerr := s.door.Unsettled(dctx, c.FamilyID); uerr != nil && !errors.Is(uerr, judge.ErrUnsettled) {
			s.log.ErrorContext(ctx, "family: a change's door step failed and the family could not be claimed",
				"kind", c.Kind, "family", c.FamilyID, "err", err, "claim", uerr)
		}
	}
	s.log.WarnContext(ctx, "family: change recorded, not applied now", "kind", c.Kind, "family", c.FamilyID,
		"members", c.Members, "relayed", relayed, "err", err)
	if relayed {
		return nil
	}
	return &NotAppliedError{FamilyID: c.FamilyID, Kind: c.Kind, Err: err}
}

// changed tells the hooks.
func (s *Service) changed(ctx context.Context, c Change) {
	for _, fn := range s.onChange {
		fn(ctx, c)
	}
}
