package judge

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/internal/backoff"
	"github.com/dabom/dpcs/quota"
)

// policies handles a poll's policy-updated records (and strays) in order and
// returns what they cause and how many policy updates there were. With a
// state guard the state is checked before and the watermarks advanced after;
// if the state went stale meanwhile, Redis is recovered and the records are
// handled again (versioned updates are idempotent).
func (p *Processor) policies(ctx context.Context, recs []*kgo.Record) ([]*kgo.Record, int, error) {
	if len(recs) == 0 {
		return nil, 0, nil
	}
	if p.tracer != nil {
		p.startSpans(recs)
		var err error
		defer endSpans(recs, &err)
		out, n, perr := p.judgePolicies(ctx, recs)
		err = perr
		return out, n, perr
	}
	return p.judgePolicies(ctx, recs)
}

// judgePolicies is policies without the spans.
func (p *Processor) judgePolicies(ctx context.Context, recs []*kgo.Record) ([]*kgo.Record, int, error) {
	marks := p.marksOf(recs)
	for {
		var gen string
		if p.guard != nil {
			err := p.retry(ctx, "redis state check", func() error {
				var err error
				if gen, err = p.generation(ctx); err == nil {
					err = p.qs.checkState(ctx, gen, marks)
				}
				return stalePermanent(err)
			})
			if p.stale(ctx, gen, &err) {
				continue
			}
			if err != nil {
				return nil, 0, err
			}
		}
		var out []*kgo.Record
		policies := 0
		for _, r := range recs {
			ev, err := kafkarecord.Decode(r)
			if err != nil {
				out = append(out, p.deadLetter(r, err.Error()))
				continue
			}
			switch pl := ev.Payload.(type) {
			case envelope.UsagePayload:
				out = append(out, p.deadLetter(r, "DATA_USAGE event on topic "+r.Topic))
			case envelope.PolicyUpdatedPayload:
				if r.Topic != envelope.TopicPolicyUpdated {
					out = append(out, p.deadLetter(r, "POLICY_UPDATED event on topic "+r.Topic))
					continue
				}
				policies++
				recs, err := p.policyUpdated(ctx, r, ev, pl)
				if err != nil {
					return nil, 0, err
				}
				if p.tracer != nil {
					causedBy(recs, r)
					if span := trace.SpanFromContext(r.Context); span.IsRecording() {
						span.SetAttributes(attribute.String("dpcs.event_id", ev.EventID),
							attribute.Int64("dpcs.family_id", pl.FamilyID), attribute.Int64("dpcs.customer_id", pl.TargetCustomerID),
							attribute.Int64("dpcs.policy_version", pl.Version), attribute.Int("dpcs.blocked_notifications", len(recs)))
					}
				}
				out = append(out, recs...)
			default:
				out = append(out, p.deadLetter(r, fmt.Sprintf("unexpected %s event on topic %s", ev.EventType, r.Topic)))
			}
		}
		if p.guard != nil {
			err := p.retry(ctx, "redis state advance", func() error {
				return stalePermanent(p.qs.advance(ctx, gen, marks))
			})
			if p.stale(ctx, gen, &err) {
				continue
			}
			if err != nil {
				return nil, 0, err
			}
			p.advanced(gen, marks)
		}
		return out, policies, nil
	}
}

// raise advances the watermarks of recs' partitions to after their last
// record under the current generation (see process), recovering again if the
// state went stale meanwhile.
func (p *Processor) raise(ctx context.Context, recs []*kgo.Record) error {
	for {
		marks := p.marksOf(recs)
		if len(marks) == 0 {
			return nil
		}
		var gen string
		err := p.retry(ctx, "redis state advance", func() error {
			var err error
			if gen, err = p.generation(ctx); err == nil {
				err = p.qs.advance(ctx, gen, marks)
			}
			return stalePermanent(err)
		})
		if p.stale(ctx, gen, &err) {
			continue
		}
		if err != nil {
			return err
		}
		p.advanced(gen, marks)
		return nil
	}
}

// stalePermanent makes a stale state a permanent error for retry: waiting
// does not fix it, a rebuild does.
func stalePermanent(err error) error {
	if errors.Is(err, quota.ErrStale) {
		return backoff.Permanent(err)
	}
	return err
}

// generation is the state generation to judge with.
func (p *Processor) generation(ctx context.Context) (string, error) {
	gen, err := p.guard.Generation(ctx)
	if err == nil && gen == "" {
		err = &quota.StaleError{Reason: "Redis was never rebuilt from SQL (no state generation yet)"}
	}
	return gen, err
}

// errRecovering: the Redis state is being recovered (by this processor's
// guard, in the background); the batch is handled again later.
var errRecovering = errors.New("judge: the Redis state is being rebuilt from SQL")

// recovering is a recovery of the Redis state run by the guard in the
// background (startRecovery), so that the consumer keeps polling — letting
// the group rebalance — while a rebuild takes its time.
type recovering struct {
	done   chan struct{}
	start  time.Time
	reason string // why the state was stale
	gen    string
	err    error
}

// recoveryPatience is how long a batch waits inside the handler for a
// running recovery before the consumer is given the batch back to retry.
const recoveryPatience = time.Second

// stale reports whether *err says the Redis state is stale; if so it says so
// (log, OnStale, Stale), has the outputs of earlier batches flushed, and
// recovers Redis through the guard in the background. It returns true once
// the guard recovered Redis (judge again). While the recovery runs (waited
// for at most recoveryPatience) it returns false with *err wrapping
// errRecovering: the handler gives the batch back, the consumer polls (a
// rebalance may run) and hands it again after a backoff. With ctx done it
// returns false and *err stands.
func (p *Processor) stale(ctx context.Context, used string, err *error) bool {
	var se *quota.StaleError
	var un *quota.UnrestoredError // a door without a family source: the guard restores them
	var stale error
	reason := ""
	switch {
	case errors.As(*err, &se):
		stale, reason = se, se.Reason
	case errors.As(*err, &un):
		stale, reason = un, un.Error()
	default:
		return false
	}
	if !p.paused.Swap(true) {
		p.log.Error("the Redis state cannot be trusted: judging paused until Redis is rebuilt from SQL", "reason", reason)
		if p.hooks.OnStale != nil {
			p.hooks.OnStale(StaleInfo{Stale: true, Reason: reason})
		}
	}
	// Outputs of batches judged before the state went stale are in flight:
	// have them in Kafka before the recovery waits for SQL to hold them.
	if ferr := p.cl.Flush(ctx); ferr != nil {
		return false
	}
	rec := p.startRecovery(used, *err, reason)
	t := time.NewTimer(recoveryPatience)
	defer t.Stop()
	select {
	case <-rec.done:
	case <-t.C:
		*err = fmt.Errorf("%w: %w", errRecovering, stale) // not the retry's permanent mark
		return false
	case <-ctx.Done():
		return false
	}
	if !p.recovered(rec) {
		return false // failed: *err stands
	}
	return true
}

// settleRecovery finishes the books of a background recovery that ended
// while no batch waited for it (the consumer was backing off): judging
// resumes with the next batch.
func (p *Processor) settleRecovery() {
	p.recMu.Lock()
	rec := p.rec
	p.recMu.Unlock()
	if rec == nil {
		return
	}
	select {
	case <-rec.done:
		p.recovered(rec)
	default:
	}
}

// recovered finishes the books of rec, which ended: on success the
// positions are forgotten (the rebuilt state's watermarks are the group's
// committed offsets), the recovery is counted and judging resumes (log,
// OnStale). It reports whether rec succeeded.
func (p *Processor) recovered(rec *recovering) bool {
	p.recMu.Lock()
	if p.rec == rec {
		p.rec = nil
	}
	p.recMu.Unlock()
	if rec.err != nil {
		if p.life.Err() == nil {
			p.log.Error("recovering the Redis state failed", "err", rec.err)
		}
		return false
	}
	p.posMu.Lock()
	clear(p.positions)
	p.posMu.Unlock()
	p.recoveries.Add(1)
	if p.paused.Swap(false) {
		paused := time.Since(rec.start)
		p.log.Warn("the Redis state is trusted again: judging resumes", "generation", rec.gen, "paused", paused)
		if p.hooks.OnStale != nil {
			p.hooks.OnStale(StaleInfo{Reason: rec.reason, Paused: paused})
		}
	}
	return true
}

// startRecovery returns the running recovery, or starts one: the guard's
// Recover in a goroutine of the processor's own (ended by Run's end).
func (p *Processor) startRecovery(used string, cause error, reason string) *recovering {
	p.recMu.Lock()
	defer p.recMu.Unlock()
	if p.rec != nil {
		return p.rec
	}
	rec := &recovering{done: make(chan struct{}), start: time.Now(), reason: reason}
	p.rec = rec
	p.bg.Add(1)
	go func() { // ends with the recovery; Run waits for it
		defer p.bg.Done()
		defer close(rec.done)
		rec.gen, rec.err = p.guard.Recover(p.life, used, cause)
	}()
	return rec
}

// marksOf returns the marks of a batch's records: per partition, from where
// this processor's previous batch ended (or the group's committed offset, or
// 0 when the group never committed the partition) to after the last record.
func (p *Processor) marksOf(recs []*kgo.Record) []quota.Mark {
	if p.guard == nil {
		return nil
	}
	var committed map[string]map[int32]kgo.EpochOffset
	idx := map[string]int{}
	var marks []quota.Mark
	p.posMu.Lock()
	defer p.posMu.Unlock()
	for _, r := range recs {
		key := r.Topic + "/" + strconv.Itoa(int(r.Partition))
		i, ok := idx[key]
		if !ok {
			from := r.Offset
			if pos, ok := p.positions[key]; ok {
				from = min(from, pos)
			} else {
				if committed == nil {
					committed = p.cl.CommittedOffsets()
				}
				if c, ok := committed[r.Topic][r.Partition]; ok && c.Offset >= 0 {
					from = min(from, c.Offset)
				} else {
					// Never committed: the state owes nothing of this
					// stream yet (its first records may be past 0, after
					// retention), and a watermark the state lacks for it
					// is no loss.
					from = 0
				}
			}
			idx[key] = len(marks)
			marks = append(marks, quota.Mark{Stream: key, From: from, To: r.Offset + 1})
			continue
		}
		marks[i].To = max(marks[i].To, r.Offset+1)
	}
	return marks
}

// advanced records where this processor's next batches begin.
func (p *Processor) advanced(gen string, marks []quota.Mark) {
	p.posMu.Lock()
	defer p.posMu.Unlock()
	for _, m := range marks {
		if strings.HasPrefix(m.Stream, FamilyWriteStream) || strings.HasPrefix(m.Stream, DecisionStream) {
			continue // the floors checked with the batch, not its partitions
		}
		p.positions[m.Stream] = m.To
		p.posGen[m.Stream] = gen
	}
}

// recordPositions records the partitions' positions (the watermarks this
// processor's batches raised) in the door's mark store once a second while
// they move, and once more when Run ends: every process that judges with
// the same store — the synchronous decisions above all, which check no
// partition of their own — then finds a Redis node that lost a processor's
// judged batches stale, not only that processor's next batch.
func (p *Processor) recordPositions() {
	defer p.bg.Done()
	t := time.NewTicker(markRecordEvery)
	defer t.Stop()
	for {
		select {
		case <-p.life.Done():
			ctx, cancel := context.WithTimeout(context.WithoutCancel(p.life), time.Second)
			_ = p.recordMoved(ctx)
			cancel()
			return
		case <-t.C:
		}
		if err := p.recordMoved(p.life); err != nil && p.life.Err() == nil {
			p.log.Warn("recording the partitions' positions in SQL failed; trying again", "err", err)
		}
	}
}

// recordMoved records the positions that moved since they were last
// recorded under their generation.
func (p *Processor) recordMoved(ctx context.Context) error {
	p.posMu.Lock()
	type moved struct {
		stream, gen string
		n           int64
	}
	var ms []moved
	for st, n := range p.positions {
		if g := p.posGen[st]; g != "" && (p.recGen[st] != g || p.recorded[st] < n) {
			ms = append(ms, moved{st, g, n})
		}
	}
	p.posMu.Unlock()
	for _, m := range ms {
		if err := p.qs.marks.ms.RecordMark(ctx, m.gen, quota.Mark{Stream: m.stream, From: m.n, To: m.n}); err != nil {
			return err
		}
		p.posMu.Lock()
		p.recorded[m.stream], p.recGen[m.stream] = m.n, m.gen
		p.posMu.Unlock()
	}
	return nil
}

// forget drops the positions of revoked or lost partitions: their next
// batches begin where the group committed.
func (p *Processor) forget(parts map[string][]int32) {
	if p.positions == nil {
		return
	}
	p.posMu.Lock()
	defer p.posMu.Unlock()
	for t, ps := range parts {
		for _, part := range ps {
			delete(p.positions, t+"/"+strconv.Itoa(int(part)))
		}
	}
}
