package judge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/internal/backoff"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// split divides a poll's usage records into at most p.groups groups of
// whole partitions, balanced by record count, each keeping the poll's order;
// it makes no more groups than it has p.minGroup records for.
func (p *Processor) split(recs []*kgo.Record) [][]*kgo.Record {
	if len(recs) == 0 {
		return nil
	}
	count := map[int32]int{}
	var parts []int32
	for _, r := range recs {
		if count[r.Partition] == 0 {
			parts = append(parts, r.Partition)
		}
		count[r.Partition]++
	}
	n := min(p.groups, len(parts), len(recs)/max(p.minGroup, 1))
	if n <= 1 {
		return [][]*kgo.Record{recs}
	}
	// Largest partitions first, each to the lightest group.
	slices.SortFunc(parts, func(a, b int32) int { return count[b] - count[a] })
	load := make([]int, n)
	groupOf := make(map[int32]int, len(parts))
	for _, part := range parts {
		g := slices.Index(load, slices.Min(load))
		groupOf[part] = g
		load[g] += count[part]
	}
	groups := make([][]*kgo.Record, n)
	for g := range groups {
		groups[g] = make([]*kgo.Record, 0, load[g])
	}
	for _, r := range recs {
		g := groupOf[r.Partition]
		groups[g] = append(groups[g], r)
	}
	return groups
}

// decodeUsage decodes usage-events records; what cannot be judged is
// dead-lettered with the reason.
func (p *Processor) decodeUsage(recs []*kgo.Record, now time.Time) (usage []usageIn, dead []*kgo.Record) {
	usage = make([]usageIn, 0, len(recs))
	for _, r := range recs {
		ev, err := kafkarecord.Decode(r)
		if err != nil {
			dead = append(dead, p.deadLetter(r, err.Error()))
			continue
		}
		pl, ok := ev.Payload.(envelope.UsagePayload)
		if !ok {
			reason := fmt.Sprintf("unexpected %s event on topic %s", ev.EventType, r.Topic)
			if _, policy := ev.Payload.(envelope.PolicyUpdatedPayload); policy {
				reason = "POLICY_UPDATED event on topic " + r.Topic
			}
			dead = append(dead, p.deadLetter(r, reason))
			continue
		}
		u := envelope.New(ev.EventID, ev.Timestamp, pl)
		if err := p.checkUsage(u, now); err != nil {
			dead = append(dead, p.deadLetter(r, err.Error()))
			continue
		}
		usage = append(usage, usageIn{rec: r, env: u})
	}
	return usage, dead
}

// apply runs the batch through the engine, retrying Redis failures with
// backoff behind the circuit breaker (fetching paused meanwhile). Events the
// engine rejects as invalid are dead-lettered and the rest applied again
// (already-applied ones come back as duplicates with their original result).
// With a state guard the batch is judged with its marks (even when no event
// is left, so the watermarks move); a stale state is recovered and the batch
// judged again.
func (p *Processor) apply(ctx context.Context, usage []usageIn, marks []quota.Mark) ([]quota.Result, []usageIn, []*kgo.Record, string, error) {
	var dead []*kgo.Record
	for len(usage) > 0 || len(marks) > 0 {
		evs := make([]quota.Event, len(usage))
		for i, u := range usage {
			evs[i] = p.event(u.env)
			usage[i].charged = evs[i].Bytes
		}
		var results []quota.Result
		var gen string
		err := p.retry(ctx, "redis apply", func() error {
			r, err := p.breaker.Execute(func() (any, error) {
				if p.guard == nil {
					return p.qs.apply(ctx, evs)
				}
				var err error
				gen, err = p.generation(ctx)
				if err != nil {
					return nil, err
				}
				return p.qs.applyMarked(ctx, gen, marks, evs)
			})
			if err == nil {
				results, _ = r.([]quota.Result)
			}
			if errors.Is(err, quota.ErrInvalid) {
				return backoff.Permanent(err)
			}
			return stalePermanent(err)
		})
		var ee *quota.EventError
		if errors.As(err, &ee) && ee.Index < len(usage) {
			dead = append(dead, p.deadLetter(usage[ee.Index].rec, ee.Err.Error()))
			usage = append(usage[:ee.Index:ee.Index], usage[ee.Index+1:]...)
			continue
		}
		if p.stale(ctx, gen, &err) {
			continue
		}
		if err != nil {
			return nil, nil, nil, "", err
		}
		if p.guard != nil {
			p.advanced(gen, marks)
		}
		return results, usage, dead, gen, nil
	}
	return nil, nil, dead, "", nil
}

func (p *Processor) policyUpdated(ctx context.Context, r *kgo.Record, ev envelope.Event, pl envelope.PolicyUpdatedPayload) ([]*kgo.Record, error) {
	rules, err := policy.ParseConstraints(pl.Constraints)
	if err != nil {
		return []*kgo.Record{p.deadLetter(r, fmt.Errorf("%w: %w", quota.ErrInvalid, err).Error())}, nil
	}
	var enf quota.Enforcement
	err = p.retry(ctx, "redis enforce", func() error {
		v, err := p.breaker.Execute(func() (any, error) {
			return p.qs.enforce(ctx, pl.FamilyID, pl.TargetCustomerID, pl.Version, rules)
		})
		if err == nil {
			enf = v.(quota.Enforcement)
		}
		if errors.Is(err, quota.ErrInvalid) {
			return backoff.Permanent(err)
		}
		return err
	})
	var perm *backoff.PermanentError
	if errors.As(err, &perm) {
		return []*kgo.Record{p.deadLetter(r, perm.Err.Error())}, nil
	}
	if err != nil {
		return nil, err
	}
	st := enf.Status
	if !st.Blocked() || st.Decision == policy.BlockedNotMember {
		return nil, nil
	}
	// Retroactive enforcement: the member is blocked now, before its next event.
	rec, err := kafkarecord.New(envelope.TopicNotificationEvents, envelope.New(
		envelope.DerivedID(envelope.PrefixNotification, ev.EventID, "customer-blocked"), ev.Timestamp,
		envelope.CustomerBlocked{FamilyID: pl.FamilyID, CustomerID: pl.TargetCustomerID,
			BlockReason: st.Rule, BlockedAt: ev.Timestamp, Decision: string(st.Decision)}))
	if err != nil {
		return nil, fmt.Errorf("judge: build CUSTOMER_BLOCKED for %s: %w", ev.EventID, err)
	}
	return []*kgo.Record{rec}, nil
}
