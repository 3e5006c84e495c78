package family

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dabom/dpcs/internal/backoff"
)

// unrelayed runs a change that has no event of its own to bring it to the
// quota state (a plan, alert levels, a top-up, a member added or removed):
// an intent row for the family first (store.Store.Unsettle), then the
// change (commit), then its door step (door), then the rule (settled). The
// row is deleted once the door took the change; one a failed door step or
// a process that died between the commit and the door leaves behind is
// found by the Settler, which settles the family from SQL (Settle). The
// door step runs whether or not the caller still waits (doorContext). fid
// 0 (a family the commit creates) writes the row after the commit.
func (s *Service) unrelayed(ctx context.Context, fid int64, commit func() (Change, error), door func(context.Context) error) error {
	var token int64
	if fid != 0 {
		t, err := s.store.Unsettle(ctx, fid)
		if err != nil {
			return err
		}
		token = t
	}
	c, err := commit()
	if err != nil {
		if token != 0 {
			s.settle(ctx, fid, token)
		}
		return err
	}
	if token == 0 {
		if token, err = s.store.Unsettle(ctx, c.FamilyID); err != nil {
			// SQL answered the commit a moment ago: the change stands, the
			// door step is tried all the same.
			s.log.WarnContext(ctx, "family: recording a change's door step", "family", c.FamilyID, "err", err)
		}
	}
	dctx, cancel := doorContext(ctx)
	defer cancel()
	err = s.settled(ctx, c, false, door(dctx))
	if token != 0 && !errors.Is(err, ErrNotApplied) {
		s.settle(ctx, c.FamilyID, token)
	}
	return err
}

// settle deletes an intent row; one left behind costs the settler a
// harmless settling of the family.
func (s *Service) settle(ctx context.Context, fid, token int64) {
	if err := s.store.Settle(ctx, fid, token); err != nil {
		s.log.WarnContext(ctx, "family: forgetting a settled change", "family", fid, "err", err)
	}
}

// Settle brings family fid to what SQL holds now through the door
// (judge.State.Settle: it claims the family, reads it back and applies
// it, so a change committed meanwhile is not overwritten): what the
// Settler does with a family whose change's door step was not confirmed,
// and what a retry that finds its change already made does.
func (s *Service) Settle(ctx context.Context, fid int64) error {
	_, err := s.door.Settle(ctx, fid)
	return err
}

// Settler settles, in the background, the families whose change's door
// step was not confirmed (store.Store.UnsettledFamilies) once their intent
// row is older than the grace a change in flight needs (Service.Settle),
// and forgets each row it settled. Several settlers (one per API process)
// may run: settling is idempotent.
type Settler struct {
	svc          *Service
	every, grace time.Duration
	stop, done   chan struct{}
	once         sync.Once
	onSettled    func(fid int64, err error)
	policy       backoff.Policy
	batch        int
	now          func() time.Time
	mu           sync.Mutex
	failures     map[int64]int
	retryAfter   map[int64]time.Time
}

// SettlerOption configures a Settler.
type SettlerOption func(*Settler)

// WithSettleInterval is how often the settler looks for unsettled
// families. Default: 2 s.
func WithSettleInterval(d time.Duration) SettlerOption { return func(t *Settler) { t.every = d } }

// WithSettleGrace is how old an intent row must be before the settler
// takes it: longer than a change takes from its intent to its door step.
// Default: 10 s.
func WithSettleGrace(d time.Duration) SettlerOption { return func(t *Settler) { t.grace = d } }

// WithSettleHook has the settler call fn after each family it tried
// (err nil: settled and forgotten). Default: none.
func WithSettleHook(fn func(fid int64, err error)) SettlerOption {
	return func(t *Settler) { t.onSettled = fn }
}

// WithSettleClock sets the clock the grace is measured on. Default: time.Now.
func WithSettleClock(now func() time.Time) SettlerOption { return func(t *Settler) { t.now = now } }

// NewSettler starts a settler for svc; Close stops it.
func NewSettler(svc *Service, opts ...SettlerOption) (*Settler, error) {
	if svc == nil {
		return nil, errors.New("family: nil service")
	}
	t := &Settler{svc: svc, every: 2 * time.Second, grace: 10 * time.Second, stop: make(chan struct{}), done: make(chan struct{}),
		policy: backoff.Policy{Min: time.Second, Max: time.Minute}, batch: 100, now: time.Now,
		failures: map[int64]int{}, retryAfter: map[int64]time.Time{}}
	for _, o := range opts {
		o(t)
	}
	if t.every <= 0 || t.grace < 0 || t.now == nil {
		return nil, errors.New("family: settler interval must be positive, grace not negative, clock set")
	}
	go t.run()
	return t, nil
}

func (t *Settler) run() {
	defer close(t.done)
	tick := time.NewTicker(t.every)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
			t.Pass()
		}
	}
}

// Pass settles the families due now, once; the loop calls it every
// interval. It returns how many it settled.
func (t *Settler) Pass() int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-t.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	now := t.now()
	due, err := t.svc.store.UnsettledFamilies(ctx, now.Add(-t.grace), t.batch)
	if err != nil {
		t.svc.log.WarnContext(ctx, "family: listing unsettled families", "err", err)
		return 0
	}
	n := 0
	for _, u := range due {
		t.mu.Lock()
		wait := now.Before(t.retryAfter[u.FamilyID])
		t.mu.Unlock()
		if wait || ctx.Err() != nil {
			continue
		}
		err := t.svc.Settle(ctx, u.FamilyID)
		if err == nil {
			err = t.svc.store.Settle(ctx, u.FamilyID, u.Token)
		}
		t.mu.Lock()
		if err != nil {
			t.failures[u.FamilyID]++
			t.retryAfter[u.FamilyID] = now.Add(t.policy.Delay(t.failures[u.FamilyID] - 1))
			t.svc.log.WarnContext(ctx, "family: settling a family", "family", u.FamilyID, "err", err)
		} else {
			delete(t.failures, u.FamilyID)
			delete(t.retryAfter, u.FamilyID)
			n++
		}
		t.mu.Unlock()
		if t.onSettled != nil {
			t.onSettled(u.FamilyID, err)
		}
	}
	return n
}

// Close stops the settler and waits for a pass under way (its door calls
// are cancelled).
func (t *Settler) Close(ctx context.Context) error {
	t.once.Do(func() { close(t.stop) })
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
