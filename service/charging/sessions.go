package charging

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/dabom/dpcs/service/store"
)

// errMoved is a step whose session another invocation moved on meanwhile;
// its retry is taken on the session as it is now (moved).
var errMoved = errors.New("charging: the session moved on meanwhile")

// maxRecordBatch bounds the steps one transaction records.
const maxRecordBatch = 256

// moved is the answer to a step err refused: the retry's Problem when the
// session moved on.
func moved(err error) error {
	if errors.Is(err, errMoved) {
		return &Problem{Status: http.StatusInternalServerError, Cause: CauseSystemFailure,
			Detail: "another invocation of this session was answered meanwhile: repeat this one"}
	}
	return err
}

// session is session ref as this process last wrote or read it (the
// cache), else as SQL holds it.
func (s *Service) session(ctx context.Context, ref string) (store.ChargingSession, error) {
	if sess, ok := s.cache.get(ref); ok {
		return sess, nil
	}
	return s.fresh(ctx, ref)
}

// fresh is session ref as SQL holds it, cached while OPEN.
func (s *Service) fresh(ctx context.Context, ref string) (store.ChargingSession, error) {
	s.cache.drop(ref)
	sess, err := s.sessions.ChargingSession(ctx, ref)
	if err == nil {
		s.cache.put(sess)
	}
	return sess, err
}

// recording is a step waiting for the record loop.
type recording struct {
	on   store.ChargingStepOn
	done chan recorded
}

type recorded struct {
	ok  bool
	err error
}

// record stores a step's record (store.RecordChargingStep's promise: only
// if its session is still where it was read) in the next transaction of
// the record loop, and reports whether it was recorded.
func (s *Service) record(ctx context.Context, on store.ChargingStepOn) (bool, error) {
	r := &recording{on: on, done: make(chan recorded, 1)}
	select {
	case s.records <- r:
	case <-s.recDone:
		return false, errors.New("charging: the service is closed")
	case <-ctx.Done():
		return false, ctx.Err()
	}
	select {
	case res := <-r.done:
		return res.ok, res.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// recordLoop records the steps answered at one moment, each of another
// session (a session's steps are serialised by its lock), in one write
// (store.RecordChargingSteps: an UPDATE per 16 steps): the first waiting
// step, and every other that waits by the time it starts. Under load (the
// last write carried more than one step) it first lingers up to
// recordLinger for more, until a statement is full: a lone step's write
// costs MariaDB about 45 µs of CPU, a write of ten about 18 a step
// (doc/benchmarks.md). A quiet system and a lone SMF wait for nothing.
func (s *Service) recordLoop(ctx context.Context) {
	defer close(s.recDone)
	together := false // the last write carried more than one step
	for {
		var batch []*recording
		select {
		case r := <-s.records:
			batch = append(batch, r)
		case <-ctx.Done():
			return
		}
		batch = s.drainRecords(batch)
		if together && s.o.recordLinger > 0 && len(batch) < store.ChargingStepsPerStatement {
			linger := time.NewTimer(s.o.recordLinger)
		wait:
			for len(batch) < store.ChargingStepsPerStatement {
				select {
				case r := <-s.records:
					batch = append(batch, r)
				case <-linger.C:
					break wait
				case <-ctx.Done():
					for _, r := range batch {
						r.done <- recorded{err: ctx.Err()}
					}
					return
				}
			}
			linger.Stop()
			batch = s.drainRecords(batch)
		}
		together = len(batch) > 1
		ons := make([]store.ChargingStepOn, len(batch))
		for i, r := range batch {
			ons[i] = r.on
		}
		ok, err := s.sessions.RecordChargingSteps(ctx, ons)
		if err == nil && len(ok) != len(batch) {
			err = fmt.Errorf("charging: %d steps recorded as %d", len(batch), len(ok))
		}
		for i, r := range batch {
			if err != nil {
				r.done <- recorded{err: err}
				continue
			}
			r.done <- recorded{ok: ok[i]}
		}
	}
}

// drainRecords appends the steps waiting now to batch (up to maxRecordBatch).
func (s *Service) drainRecords(batch []*recording) []*recording {
	for len(batch) < maxRecordBatch {
		select {
		case r := <-s.records:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// sessionCache keeps the OPEN sessions this process stepped as SQL holds
// them after its last read or write, so an update reads nothing and writes
// one statement (doc/benchmarks.md, "The grant path over Nchf"). SQL stays
// the truth: a step whose conditional write finds the row moved on (another
// process stepped or closed it) reads it again (raced), and a restart
// starts empty. An entry is changed only under its session's lock.
type sessionCache struct {
	mu  sync.Mutex
	max int
	m   map[string]store.ChargingSession
}

func (c *sessionCache) get(ref string) (store.ChargingSession, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sess, ok := c.m[ref]
	return sess, ok
}

// put keeps sess while it is OPEN (forgets it otherwise); when full, it
// forgets another session first (its next step reads SQL).
func (c *sessionCache) put(sess store.ChargingSession) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sess.State != store.ChargingOpen || c.max <= 0 {
		delete(c.m, sess.Ref)
		return
	}
	if _, ok := c.m[sess.Ref]; !ok && len(c.m) >= c.max {
		for ref := range c.m {
			delete(c.m, ref)
			break
		}
	}
	c.m[sess.Ref] = sess
}

func (c *sessionCache) drop(ref string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, ref)
}
