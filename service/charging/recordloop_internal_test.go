package charging

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dabom/dpcs/service/store"
)

// gatedSessions records every write's size and holds it until the test
// lets it go; each step is recorded.
type gatedSessions struct {
	Sessions
	sizes chan int
	gate  chan struct{}
}

func (g *gatedSessions) RecordChargingSteps(ctx context.Context, steps []store.ChargingStepOn) ([]bool, error) {
	g.sizes <- len(steps)
	select {
	case <-g.gate:
		return slices.Repeat([]bool{true}, len(steps)), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// loopOn runs recordLoop alone on a buffered queue (a send is queued at
// once) with linger d; cancel stops it.
func loopOn(t *testing.T, d time.Duration) (*Service, *gatedSessions, context.CancelFunc) {
	t.Helper()
	g := &gatedSessions{sizes: make(chan int, 16), gate: make(chan struct{})}
	s := &Service{sessions: g, o: options{recordLinger: d}, records: make(chan *recording, 64), recDone: make(chan struct{})}
	ctx, cancel := context.WithCancel(t.Context())
	go s.recordLoop(ctx)
	t.Cleanup(func() { cancel(); <-s.recDone })
	return s, g, cancel
}

// size is the next write's size.
func (g *gatedSessions) size(t *testing.T) int {
	t.Helper()
	select {
	case n := <-g.sizes:
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no write for 10s")
		return 0
	}
}

// answered is r's answer.
func answered(t *testing.T, r *recording) recorded {
	t.Helper()
	select {
	case a := <-r.done:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("a step unanswered for 10s")
		return recorded{}
	}
}

func queue(s *Service, n int) []*recording {
	var rs []*recording
	for range n {
		r := &recording{done: make(chan recorded, 1)}
		s.records <- r
		rs = append(rs, r)
	}
	return rs
}

// consumed waits until the loop has taken everything queued.
func consumed(t *testing.T, s *Service) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(s.records) > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the record loop took nothing for 10s")
		}
	}
}

// together has the loop write two steps at once. They are queued while a
// lone write is held, so both wait when the loop next takes steps; queued
// to an idle loop, it could take the first before the second was sent.
func together(t *testing.T, s *Service, g *gatedSessions) {
	t.Helper()
	queue(s, 1)
	if n := g.size(t); n != 1 {
		t.Fatalf("the first write: %d steps", n)
	}
	queue(s, 2)
	g.gate <- struct{}{}
	if n := g.size(t); n != 2 {
		t.Fatalf("two steps queued during a write: a write of %d", n)
	}
	g.gate <- struct{}{}
}

// TestRecordLinger: a write lingers for more steps only when the one
// before it carried more than one (steps arriving together), and stops at
// a full statement; a write after a lone step takes what waits and goes.
func TestRecordLinger(t *testing.T) {
	s, g, _ := loopOn(t, time.Hour)
	queue(s, 1)
	if n := g.size(t); n != 1 {
		t.Fatalf("the first write: %d steps", n)
	}
	queue(s, 2) // wait while the first is written
	g.gate <- struct{}{}
	// After a lone step, no linger: the two waiting go at once, though a
	// linger would hold them for an hour.
	if n := g.size(t); n != 2 {
		t.Fatalf("after a lone step: a write of %d, want the 2 waiting", n)
	}
	g.gate <- struct{}{}
	queue(s, 1)
	consumed(t, s) // taken: without a linger it would be written alone now
	queue(s, store.ChargingStepsPerStatement-1)
	if n := g.size(t); n != store.ChargingStepsPerStatement {
		t.Fatalf("after a write of 2: a write of %d, want %d (lingered until full)", n, store.ChargingStepsPerStatement)
	}
	g.gate <- struct{}{}
}

// TestRecordLingerEnds: a linger with no one else coming ends after its
// time, and a loop stopped while lingering answers what it held.
func TestRecordLingerEnds(t *testing.T) {
	s, g, _ := loopOn(t, time.Millisecond)
	together(t, s, g)
	rs := queue(s, 1)
	if n := g.size(t); n != 1 {
		t.Fatalf("a lone step after a write of 2: a write of %d", n)
	}
	g.gate <- struct{}{}
	if r := answered(t, rs[0]); r.err != nil || !r.ok {
		t.Fatalf("the lone step: %+v", r)
	}

	s, g, cancel := loopOn(t, time.Hour)
	together(t, s, g)
	rs = queue(s, 1)
	consumed(t, s)
	cancel()
	if r := answered(t, rs[0]); r.err == nil {
		t.Fatalf("a step held by a stopped loop: %+v", r)
	}
}
