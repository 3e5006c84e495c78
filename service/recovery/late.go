package recovery

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/service/store"
	"github.com/dabom/dpcs/writebehind"
)

// LateRecords is the write-behind's usage_record writer with the check for
// late records (doc/architecture.md, "Late records"): a usage-persist record
// of an event judged under another generation than the one SQL names (its
// payload's generation), not in usage_record yet, is one the rebuild that
// named the current generation did not read — a producer slower than the
// drain, a batch spooled or stuck past it. Before such a record is written,
// the state is made stale (judge.State.Distrust), so Redis is rebuilt from
// SQL, the record included, before the next decision; and when a rebuild
// named a generation while a batch was written, its records judged under
// an older one are taken as late too.
type LateRecords struct {
	w   writebehind.Writer[store.UsageRecord]
	st  *store.Store
	qs  *judge.State
	log *slog.Logger
}

// NewLateRecords wraps w (store.NewUsageWriter) for the door qs over the
// truth st; log reports each late record (nil: discard).
func NewLateRecords(w writebehind.Writer[store.UsageRecord], st *store.Store, qs *judge.State, log *slog.Logger) *LateRecords {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &LateRecords{w: w, st: st, qs: qs, log: log}
}

var _ writebehind.Writer[store.UsageRecord] = (*LateRecords)(nil)

// Write writes batch (see LateRecords). A batch without a record judged
// under a generation costs one read of redis_state more.
func (l *LateRecords) Write(ctx context.Context, batch []store.UsageRecord) error {
	stamped := false
	for _, u := range batch {
		if u.Generation != "" {
			stamped = true
			break
		}
	}
	if !stamped {
		return l.w.Write(ctx, batch)
	}
	before, err := l.st.RedisState(ctx)
	if err != nil {
		return fmt.Errorf("recovery: late records: %w", err)
	}
	if err := l.distrustIfLate(ctx, batch, before.Generation, true); err != nil {
		return err
	}
	if err := l.w.Write(ctx, batch); err != nil {
		return err
	}
	after, err := l.st.RedisState(ctx)
	if err != nil {
		return fmt.Errorf("recovery: late records: %w", err)
	}
	if after.Generation == before.Generation {
		return nil
	}
	// A rebuild named a generation while the batch was written: it may
	// have read SQL before these rows.
	return l.distrustIfLate(ctx, batch, after.Generation, false)
}

// distrustIfLate makes the state stale when batch has a record judged under
// another generation than gen (and, when known is set, not in usage_record
// yet: a replay of a written record is not late).
func (l *LateRecords) distrustIfLate(ctx context.Context, batch []store.UsageRecord, gen string, known bool) error {
	var ids []string
	for _, u := range batch {
		if u.Generation != "" && u.Generation != gen {
			ids = append(ids, u.EventID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if known {
		have, err := l.st.KnownEvents(ctx, ids)
		if err != nil {
			return fmt.Errorf("recovery: late records: %w", err)
		}
		fresh := ids[:0]
		for _, id := range ids {
			if !have[id] {
				fresh = append(fresh, id)
			}
		}
		if ids = fresh; len(ids) == 0 {
			return nil
		}
	}
	l.log.Warn("recovery: records of events judged before the current state generation reach SQL only now: Redis is rebuilt from SQL",
		"records", len(ids), "first", ids[0], "generation", gen)
	if err := l.qs.Distrust(ctx); err != nil {
		return fmt.Errorf("recovery: late records: marking the state stale: %w", err)
	}
	return nil
}
