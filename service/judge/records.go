package judge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strconv"
	"time"

	"github.com/dabom/dpcs/internal/backoff"
	"github.com/dabom/dpcs/quota"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The decisions' records: produced to Kafka (or spooled to SQL) before
// their callers are answered, tried again while neither takes them; and the
// slot counters and marks recorded in SQL.

// markRecordEvery is how often the slots' counts are recorded.
const markRecordEvery = time.Second

// recordMarks records the slots' counts in the door's mark store
// (WithMarkStore) once a second while they move, and Close records them a
// last time: every process that judges with the same store then finds a
// Redis node that lost this instance's granted batches stale, not only
// this instance's next batch.
func (s *Decisions) recordMarks() {
	defer s.batches.Done()
	t := time.NewTicker(markRecordEvery)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if err := s.recordCounts(s.ctx); err != nil && s.ctx.Err() == nil {
			s.log.Warn("synchronous decisions: recording the batches' marks in SQL failed; trying again", "err", err)
		}
	}
}

// recordCounts records the slots' counts that moved since the last record.
func (s *Decisions) recordCounts(ctx context.Context) error {
	s.recordMu.Lock()
	defer s.recordMu.Unlock()
	s.markMu.Lock()
	gen, acked := s.markGen, slices.Clone(s.acked)
	s.markMu.Unlock()
	if gen == "" {
		return nil
	}
	if gen != s.recordedGen {
		s.recordedGen = gen
		clear(s.recorded)
	}
	for i, n := range acked {
		if n <= s.recorded[i] {
			continue
		}
		if err := s.qs.marks.ms.RecordMark(ctx, gen, quota.Mark{Stream: s.stream + "/" + strconv.Itoa(i), From: n, To: n}); err != nil {
			return err
		}
		s.recorded[i] = n
	}
	return nil
}

// record stores every caller's records: produced to Kafka and acknowledged,
// or else spooled (WithSpool); while Kafka is known down they go to the
// spool at once. Records neither took are tried again, Kafka then the spool,
// with backoff, until one takes them — the batch's callers wait: they are
// charged, and are answered once what they are told is recorded — while every
// new caller is refused unjudged (ErrKafkaUnavailable). Only Close ends the
// wait: it reports the callers whose records are still in neither (they get
// ErrNotRecorded) and keeps the records for its last try. It also returns
// how many records it spooled.
func (s *Decisions) record(ctx context.Context, recs [][]*kgo.Record) ([]bool, int) {
	var flat []*kgo.Record
	owner := []int{}
	for i, rs := range recs {
		for range rs {
			owner = append(owner, i)
		}
		flat = append(flat, rs...)
	}
	failed := make([]bool, len(recs))
	var rest []*kgo.Record
	var whose []int
	if s.spool != nil && s.kafkaDown.Load() {
		rest, whose = flat, owner
	} else {
		for _, k := range s.send(ctx, flat) {
			rest, whose = append(rest, flat[k]), append(whose, owner[k])
		}
	}
	if len(rest) == 0 {
		return failed, 0
	}
	if !s.kafkaDown.Swap(true) {
		s.log.Warn("synchronous decisions: records not acknowledged by Kafka", "records", len(rest), "spool", s.spool != nil)
	}
	stuck := false
	defer func() {
		if stuck && s.stuck.Add(-1) == 0 {
			s.log.Info("synchronous decisions: the waiting records are stored; deciding again")
		}
	}()
	for attempt := 1; ; attempt++ {
		if s.spool != nil {
			// The batch's context may be spent waiting for Kafka: the
			// spool gets a timeout of its own.
			sctx, cancel := context.WithTimeout(context.Background(), s.timeout)
			err := s.spool.Spool(sctx, rest)
			cancel()
			if err == nil {
				s.redoMu.Lock()
				s.probe = copies(rest)
				s.redoMu.Unlock()
				s.retry()
				return failed, len(rest)
			}
			if attempt == 1 {
				s.log.Error("synchronous decisions: records neither in Kafka nor spooled", "records", len(rest), "err", err)
			}
		}
		if !stuck {
			stuck = true
			s.stuck.Add(1)
			s.log.Error("synchronous decisions: refusing new decisions until a judged batch's records are stored; its callers wait",
				"records", len(rest))
		}
		t := time.NewTimer(redoBackoff.Delay(attempt))
		select {
		case <-s.stop:
			t.Stop()
			for _, o := range whose {
				failed[o] = true
			}
			s.redoMu.Lock()
			s.held = append(s.held, copies(rest)...)
			s.redoMu.Unlock()
			return failed, 0
		case <-t.C:
		}
		// Fresh records: kgo keeps what it was handed.
		rest = copies(rest)
		kctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		bad := s.send(kctx, rest)
		cancel()
		var still []*kgo.Record
		var stillWhose []int
		for _, k := range bad {
			still, stillWhose = append(still, rest[k]), append(stillWhose, whose[k])
		}
		if len(still) == 0 {
			s.kafkaDown.Store(false)
			return failed, 0
		}
		rest, whose = still, stillWhose
	}
}

// send produces recs and waits until Kafka acknowledged or failed each, or
// ctx ends; it reports the positions of those not acknowledged. kgo may
// still deliver a record it holds past ctx (an idempotent producer does not
// drop what it sent): such a record is reported failed, produced again, and
// its copy in Kafka is harmless (ids are deterministic; consumers dedupe).
func (s *Decisions) send(ctx context.Context, recs []*kgo.Record) []int {
	// Not ctx: a record failed by its context left kgo's partition stuck
	// (measured on kfake); the client's delivery timeout, which is the
	// decision timeout, fails it instead.
	failed, _ := produce(context.Background(), s.cl, recs).wait(ctx)
	return failed
}

// retry starts the background loop that tries Kafka again (retryLoop),
// unless it runs.
func (s *Decisions) retry() {
	s.redoMu.Lock()
	defer s.redoMu.Unlock()
	if s.redoing {
		return
	}
	s.redoing = true
	s.batches.Add(1)
	go s.retryLoop() // joined by Close
}

// copies are fresh records with recs' contents: a record handed to kgo
// keeps its partition, offset and producer fields.
//
// The timestamp is not copied: kgo stamps a record when it is produced and
// fails it once that stamp is older than the delivery timeout, so a copy
// keeping the first try's stamp failed at once on every retry after a Kafka
// fault longer than the decision timeout, and the batch's callers waited
// forever (TestDecisionsRecoverAfterLongKafkaFault, which failed before).
func copies(recs []*kgo.Record) []*kgo.Record {
	out := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		out[i] = &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}
	}
	return out
}

// redoBackoff paces the tries of records not stored and the probes of Kafka.
var redoBackoff = backoff.Policy{Min: 100 * time.Millisecond, Max: 2 * time.Second}

// retryLoop, while batches spool because Kafka did not acknowledge, produces
// the latest spooled records again with backoff (a copy in Kafka is
// harmless: ids are deterministic, consumers dedupe); once Kafka
// acknowledges them, batches produce to it again. It ends then, or with
// Close.
func (s *Decisions) retryLoop() {
	defer s.batches.Done()
	for attempt := 1; ; attempt++ {
		t := time.NewTimer(redoBackoff.Delay(attempt))
		select {
		case <-s.stop:
			t.Stop()
			s.redoMu.Lock()
			s.redoing = false
			s.redoMu.Unlock()
			return
		case <-t.C:
		}
		s.redoMu.Lock()
		recs := copies(s.probe)
		s.redoMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		up := len(s.send(ctx, recs)) == 0
		cancel()
		s.redoMu.Lock()
		if up && s.kafkaDown.Swap(false) {
			s.log.Info("synchronous decisions: Kafka acknowledges records again")
		}
		if !s.kafkaDown.Load() {
			s.probe = nil
			s.redoing = false
			s.redoMu.Unlock()
			return
		}
		s.redoMu.Unlock()
	}
}

// DecisionStream starts the marker streams of a Decisions instance:
// "decisions/<16 hex digits, random per instance>/<slot>".
const DecisionStream = "decisions/"

func instanceID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
