package charging_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/charging"
)

// heldCharger is the in-memory engine, but the first step after hold is
// set tells entered and waits for release.
type heldCharger struct {
	charging.Charger
	hold             atomic.Bool
	entered, release chan struct{}
}

func (h *heldCharger) Charge(ctx context.Context, ops []quota.GrantOp) ([]quota.GrantResult, error) {
	if h.hold.CompareAndSwap(true, false) {
		h.entered <- struct{}{}
		<-h.release
	}
	return h.Charger.Charge(ctx, ops)
}

// TestStepWaitingForItsSessionEndsWithItsContext: a step queued behind
// another step of its session gives up when its context ends (the routes
// run self-timed: NewServer), answering SYSTEM_FAILURE without taking a
// step, and the session goes on.
func TestStepWaitingForItsSessionEndsWithItsContext(t *testing.T) {
	e := newEnv(t)
	held := &heldCharger{Charger: e.fake, entered: make(chan struct{}), release: make(chan struct{})}
	svc := e.service(held, e.st.S)
	ref, _, err := svc.Create(e.ctx, request("imsi-"+childIMSI, 0, ask(10, 1*mib, -1)))
	if err != nil {
		t.Fatal(err)
	}
	calls := e.fake.Calls()
	held.hold.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := svc.Update(e.ctx, ref, request("", 1, ask(10, 1*mib, 1024)))
		done <- err
	}()
	<-held.entered // the update holds its session, inside the Charger
	ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
	defer cancel()
	_, err = svc.Update(ctx, ref, request("", 2, ask(10, 1*mib, 1024)))
	if p := problem(t, err); p.Status != http.StatusInternalServerError || p.Cause != charging.CauseSystemFailure ||
		!errors.Is(p.Err, context.DeadlineExceeded) {
		t.Fatalf("the waiting step: %d %s %v, want 500 SYSTEM_FAILURE on its deadline", p.Status, p.Cause, p.Err)
	}
	close(held.release)
	if err := <-done; err != nil {
		t.Fatalf("the step holding the session: %v", err)
	}
	if got := e.fake.Calls(); got != calls+1 {
		t.Fatalf("Charger calls = %d, want %d: the step that gave up took none", got, calls+1)
	}
	if _, err := svc.Update(e.ctx, ref, request("", 2, ask(10, 1*mib, 1024))); err != nil {
		t.Fatalf("the retry after: %v", err)
	}
}
