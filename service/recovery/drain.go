package recovery

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/outbox"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// The lease a rebuild holds and the drain before it: the write-behind's
// backlog read to its end so SQL holds every record Redis counted.

// drainUnderLease waits until SQL holds every judged event (drain), or
// only reads the processors' commits (!drain); a failure after the lease
// was lost is reported as the lease lost.
func (r *Guard) drainUnderLease(ctx, rctx context.Context, keep *leaseKeeper, drain bool) (ends, committed map[string]int64, err error) {
	if drain {
		ends, committed, err = r.drain(rctx)
	} else {
		committed, err = r.committed(rctx, judge.ProcessorGroup, judge.ProcessorTopics()...)
	}
	if err != nil {
		if lost := keep.lost(ctx); lost != nil {
			return nil, nil, lost
		}
		return nil, nil, err
	}
	return ends, committed, nil
}

// leaseKeeper renews the rebuild lease in the background; see keepLease.
type leaseKeeper struct {
	r      *Guard
	gen    string
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
}

// keepLease renews the rebuild lease (taken for generation gen) every third
// of its duration until stop; when a renewal finds it taken by another
// instance, the returned context is cancelled with errLeaseLost.
func (r *Guard) keepLease(ctx context.Context, gen string) (context.Context, *leaseKeeper) {
	k := &leaseKeeper{r: r, gen: gen}
	k.ctx, k.cancel = context.WithCancelCause(ctx)
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		t := time.NewTicker(max(r.cfg.Lease/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-k.ctx.Done():
				return
			case <-t.C:
			}
			ok, err := r.cfg.Store.AcquireRebuild(k.ctx, r.cfg.Owner, gen, r.cfg.Lease)
			switch {
			case err != nil: // SQL unreachable: the lease may still hold; try again
				r.log.Warn("recovery: renewing the rebuild lease", "err", err)
			case !ok:
				k.cancel(errLeaseLost)
				return
			}
		}
	}()
	return k.ctx, k
}

// lost renews the lease once more and returns errLeaseLost (or the SQL
// error) when this instance no longer holds it.
func (k *leaseKeeper) lost(ctx context.Context) error {
	if errors.Is(context.Cause(k.ctx), errLeaseLost) {
		return errLeaseLost
	}
	ok, err := k.r.cfg.Store.AcquireRebuild(ctx, k.r.cfg.Owner, k.gen, k.r.cfg.Lease)
	if err != nil {
		return fmt.Errorf("recovery: recovery: renewing the rebuild lease: %w", err)
	}
	if !ok {
		return errLeaseLost
	}
	return nil
}

// stop ends the renewals (idempotent).
func (k *leaseKeeper) stop() {
	k.cancel(nil)
	k.wg.Wait()
}

// drain waits until SQL holds every judged event: the outbox holds no
// usage-persist row the relay has yet to publish (the synchronous decisions'
// spool), the write-behind has written usage-persist to its end, and neither
// that end nor the processors' committed offsets moved for Quiet (every processor paused, its last
// outputs acknowledged). keepLease renews the lease meanwhile and cancels ctx
// when it is lost.
func (r *Guard) drain(ctx context.Context) (ends, proc map[string]int64, err error) {
	var lastEnds, lastProc map[string]int64
	var quietSince time.Time
	var said time.Time
	for {
		ends, err := r.ends(ctx, envelope.TopicUsagePersist)
		if err != nil {
			return nil, nil, err
		}
		written, err := r.committed(ctx, r.cfg.WriteBehindGroup, envelope.TopicUsagePersist)
		if err != nil {
			return nil, nil, err
		}
		proc, err := r.committed(ctx, judge.ProcessorGroup, judge.ProcessorTopics()...)
		if err != nil {
			return nil, nil, err
		}
		behind := int64(0)
		for k, e := range ends {
			behind += max(e-written[k], 0)
		}
		spooled, err := outbox.Pending(ctx, r.cfg.Store.DB(), envelope.TopicUsagePersist)
		if err != nil {
			return nil, nil, err
		}
		if !maps.Equal(ends, lastEnds) || !maps.Equal(proc, lastProc) || behind+spooled > 0 {
			quietSince = time.Now()
		}
		lastEnds, lastProc = ends, proc
		if behind+spooled == 0 && time.Since(quietSince) >= r.cfg.Quiet {
			return ends, proc, nil
		}
		if time.Since(said) > 10*time.Second {
			said = time.Now()
			r.log.Warn("recovery: waiting until SQL holds every judged event", "usagePersistNotWritten", behind,
				"usagePersistInOutbox", spooled)
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, ctx.Err()
		case <-t.C:
		}
	}
}

// Backlog returns how many usage-persist records the write-behind has yet to
// write to SQL.
func (r *Guard) Backlog(ctx context.Context) (int64, error) {
	ends, err := r.ends(ctx, envelope.TopicUsagePersist)
	if err != nil {
		return 0, err
	}
	written, err := r.committed(ctx, r.cfg.WriteBehindGroup, envelope.TopicUsagePersist)
	if err != nil {
		return 0, err
	}
	var n int64
	for k, e := range ends {
		n += max(e-written[k], 0)
	}
	return n, nil
}

func (r *Guard) ends(ctx context.Context, topics ...string) (map[string]int64, error) {
	ls, err := r.cfg.Admin.ListEndOffsets(ctx, topics...)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return map[string]int64{}, nil // nothing written yet
	}
	if err != nil {
		return nil, fmt.Errorf("recovery: recovery: end offsets: %w", err)
	}
	out := map[string]int64{}
	var ferr error
	ls.Each(func(o kadm.ListedOffset) {
		if errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
			return
		}
		if o.Err != nil {
			ferr = o.Err
		}
		out[o.Topic+"/"+strconv.Itoa(int(o.Partition))] = o.Offset
	})
	if ferr != nil {
		return nil, fmt.Errorf("recovery: recovery: end offsets: %w", ferr)
	}
	return out, nil
}

// committed returns group's committed offsets of topics, as "topic/partition".
func (r *Guard) committed(ctx context.Context, group string, topics ...string) (map[string]int64, error) {
	os, err := r.cfg.Admin.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[string]int64{}, nil // nothing committed yet
	}
	if err != nil {
		return nil, fmt.Errorf("recovery: recovery: committed offsets of %s: %w", group, err)
	}
	out := map[string]int64{}
	for _, t := range topics {
		for p, o := range os[t] {
			if o.Err == nil && o.At >= 0 {
				out[t+"/"+strconv.Itoa(int(p))] = o.At
			}
		}
	}
	return out, nil
}
