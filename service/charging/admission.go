package charging

import (
	"sync"
	"time"
)

// wanting is how long a consumer refused with nothing in flight waits for
// a place (counts for the others' fair shares and has a place kept for
// it): beyond the Retry-After it was given, so its retry finds the place.
const wanting = 2 * time.Second

// maxWanting bounds the consumers waiting at once, and so the work of a
// request under overload (each looks through those waiting): consumers
// are NF instances, a few dozen. Past it a refused consumer is not
// recorded as waiting (it gets a place when one is free and none waits).
const maxWanting = 256

// admission is HandlerConfig.MaxInFlight's bound, fair between consumers.
// It counts the requests in flight, in all and by consumer, and the
// consumers waiting: refused with nothing in flight, and asking again
// within 2 s of each refusal.
//
//   - At most max requests are in flight.
//   - A free place is kept for each consumer waiting, and the waiting take
//     them in the order they were first refused: one refused while others'
//     storm held every place gets one on a retry, whatever the storm does
//     meanwhile.
//   - A consumer with requests in flight takes no more than its share,
//     max over the consumers in flight or waiting (at least 1), except
//     for a release (it frees what its session holds; it is refused as
//     for a full bound when the places free are kept).
//
// A lone consumer may so take every place; with others, each gets its
// share in turn.
type admission struct {
	mu    sync.Mutex
	now   func() time.Time
	max   int
	total int
	by    map[string]int
	wants map[string]waiter
}

// waiter is a consumer waiting: since its first refusal, last refused at
// last.
type waiter struct{ since, last time.Time }

func newAdmission(maxInFlight int, now func() time.Time) *admission {
	return &admission{now: now, max: maxInFlight, by: map[string]int{}, wants: map[string]waiter{}}
}

// take admits a request of consumer, or refuses it: share reports a
// consumer refused for holding its share (or giving way to those waiting)
// rather than for every place being taken.
func (a *admission) take(consumer string, release bool) (refused, share bool) {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for c, w := range a.wants { // few: the consumers refused lately
		if now.Sub(w.last) > wanting {
			delete(a.wants, c)
		}
	}
	n, free := a.by[consumer], a.max-a.total
	w, waiting := a.wants[consumer]
	switch {
	case waiting && free > a.ahead(consumer, w):
	case waiting:
		w.last = now
		a.wants[consumer] = w
		return true, false
	case free <= len(a.wants): // none free, or those free are kept for the waiting
		if n == 0 && len(a.wants) < maxWanting {
			a.wants[consumer] = waiter{since: now, last: now}
		}
		return true, free > 0 && n > 0 && !release // giving way, or full
	case !release && n > 0 && n >= max(1, a.max/(len(a.by)+len(a.wants))):
		return true, true
	}
	a.total++
	a.by[consumer] = n + 1
	delete(a.wants, consumer)
	return false, false
}

// ahead is how many consumers wait before consumer, waiting as w: first
// refused earlier (or at once, with a name sorting first).
func (a *admission) ahead(consumer string, w waiter) int {
	n := 0
	for c, o := range a.wants {
		if c != consumer && (o.since.Before(w.since) || (o.since.Equal(w.since) && c < consumer)) {
			n++
		}
	}
	return n
}

// done ends a request take admitted.
func (a *admission) done(consumer string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.total--
	decrement(a.by, consumer)
}

// decrement counts one less of k in m, forgetting k at 0.
func decrement(m map[string]int, k string) {
	if n := m[k] - 1; n > 0 {
		m[k] = n
	} else {
		delete(m, k)
	}
}
