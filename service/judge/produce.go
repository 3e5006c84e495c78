package judge

import (
	"context"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// produced is a set of records handed to a Kafka client, each until Kafka
// acknowledged or failed it: the one produce-and-wait of the judges (the
// processor's polls and retries, the decisions' group commits).
type produced struct {
	recs  []*kgo.Record
	mu    sync.Mutex
	acked []bool
	err   error // the first failure
	left  int   // records not answered yet
	done  chan struct{}
}

// produce hands recs to cl with ctx (the records' context for the client's
// hooks, and what fails them when it ends) and returns at once; wait waits
// for the answers.
func produce(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) *produced {
	p := &produced{recs: recs, acked: make([]bool, len(recs)), left: len(recs), done: make(chan struct{})}
	if len(recs) == 0 {
		close(p.done)
		return p
	}
	for i, r := range recs {
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			if err == nil {
				p.acked[i] = true
			} else if p.err == nil {
				p.err = err
			}
			if p.left--; p.left == 0 {
				close(p.done)
			}
		})
	}
	return p
}

// wait returns once Kafka answered every record, or ctx ends: the positions
// of the records not acknowledged (in order; a record not answered when ctx
// ended counts as not acknowledged, and an answer after that changes
// nothing) and the first failure (ctx's error when it ended first).
// Flushing the client first (kgo.Client.Flush) sends what lingers and
// returns only once every record is answered.
func (p *produced) wait(ctx context.Context) (failed []int, err error) {
	select {
	case <-p.done:
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, ok := range p.acked {
		if !ok {
			failed = append(failed, i)
		}
	}
	if err = p.err; p.left > 0 {
		err = ctx.Err()
	}
	return failed, err
}

// pick returns the records of recs at the positions at.
func pick(recs []*kgo.Record, at []int) []*kgo.Record {
	out := make([]*kgo.Record, len(at))
	for i, k := range at {
		out[i] = recs[k]
	}
	return out
}

// produce sends every record and waits for all acknowledgements, retrying the
// ones that failed (duplicates in Kafka are harmless: ids are deterministic).
// It flushes instead of waiting out the producer's linger: the poll is not
// committed before these are acknowledged. Safe for concurrent use.
func (p *Processor) produce(ctx context.Context, recs []*kgo.Record) error {
	pending := recs
	return p.retry(ctx, "kafka produce", func() error {
		if len(pending) == 0 {
			return nil
		}
		sent := produce(ctx, p.cl, pending)
		if err := p.cl.Flush(ctx); err != nil {
			return err
		}
		failed, err := sent.wait(ctx) // at once: every record is answered once Flush returned
		pending = pick(pending, failed)
		return err
	})
}
