package quota

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
)

// FamilyState is a family's state as its source of truth (the SQL store)
// knows it, for Restore.
type FamilyState struct {
	FamilyID int64
	// Provisioned false leaves the pool unprovisioned (0 bytes); else Plan
	// is the monthly plan.
	Provisioned bool
	Plan        int64
	// Thresholds are the family's own alert levels; nil means the engine
	// default.
	Thresholds policy.Thresholds
	// TopUps is the sum of this month's top-ups.
	TopUps int64
	// Members are the family's current members.
	Members []MemberState
	// Usage is the allowed usage of the family (current and removed
	// members); entries outside the engine's current month are ignored.
	Usage []Usage
}

// MemberState is one member's policy for Restore; Version 0 means none was set.
type MemberState struct {
	CustomerID  int64
	Constraints map[string]string
	Version     int64
}

// Usage is allowed usage of a member at a time (one event, or a sum within
// one day of the service zone).
type Usage struct {
	CustomerID int64
	At         time.Time
	Bytes      int64
}

// CurrentMonth returns the month key (YYYYMM) of the engine's clock in its
// zone and the month's bounds [from, to).
func (e *Engine) CurrentMonth() (month string, from, to time.Time) {
	lt := e.now().In(e.loc)
	from = time.Date(lt.Year(), lt.Month(), 1, 0, 0, 0, 0, e.loc)
	return policy.MomentOf(lt, e.loc).Month, from, from.AddDate(0, 1, 0)
}

// Restore replaces the family's Redis state with st, atomically (one
// MULTI/EXEC; every key is in the family's slot): membership, plan and
// thresholds; the current month's pool (used = Σ usage, top-ups, and every
// threshold the pool has reached marked as fired, so a rebuild does not
// announce old crossings again); each member's constraints and policy
// version (written as given: the source of truth wins over what Redis held);
// and each member's month and day counters. It is the rebuild after Redis
// lost data (SPEC §6). Not restored: the dedupe buckets, so events judged
// before the loss must not be delivered again (their consumer offsets were
// committed), and fired alerts of earlier months.
func (e *Engine) Restore(ctx context.Context, st FamilyState) error {
	fid := st.FamilyID
	if err := checkFamily(fid); err != nil {
		return err
	}
	if st.Plan < 0 || st.TopUps < 0 || st.Plan+st.TopUps > policy.MaxBytes {
		return fmt.Errorf("%w: plan and top-ups must be ≥ 0 and total at most %d", ErrInvalid, policy.MaxBytes)
	}
	thr := e.thresholds
	var ownThr string
	if st.Thresholds != nil {
		c, err := st.Thresholds.Canonical()
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		thr, ownThr = c, c.String()
	}
	type memberWrite struct {
		cid     int64
		canon   map[string]string
		version int64
	}
	members := make([]memberWrite, 0, len(st.Members))
	for _, m := range st.Members {
		if err := checkMember(fid, m.CustomerID); err != nil {
			return err
		}
		if m.Version < 0 {
			return fmt.Errorf("%w: customer %d: version must be ≥ 0", ErrInvalid, m.CustomerID)
		}
		canon, err := policy.Canonical(m.Constraints)
		if err != nil {
			return fmt.Errorf("%w: customer %d: %w", ErrInvalid, m.CustomerID, err)
		}
		members = append(members, memberWrite{m.CustomerID, canon, m.Version})
	}
	month, from, to := e.CurrentMonth()
	var used int64
	usage := map[int64]map[string]int64{} // cid -> field -> bytes
	for _, u := range st.Usage {
		if u.CustomerID <= 0 || u.Bytes < 0 || u.Bytes > policy.MaxBytes {
			return fmt.Errorf("%w: usage of customer %d: bad customer or bytes", ErrInvalid, u.CustomerID)
		}
		if u.At.Before(from) || !u.At.Before(to) {
			continue
		}
		f := usage[u.CustomerID]
		if f == nil {
			f = map[string]int64{}
			usage[u.CustomerID] = f
		}
		f[fieldMonth] += u.Bytes
		f[dayField(policy.MomentOf(u.At, e.loc).Day)] += u.Bytes
		used += u.Bytes
	}
	total := st.Plan + st.TopUps
	if !st.Provisioned {
		total = st.TopUps
	}
	remaining := policy.Pool{Total: total, Used: used}.Remaining()

	_, err := e.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		fam := e.k.family(fid)
		p.Del(ctx, fam)
		var famFields []any
		if st.Provisioned {
			famFields = append(famFields, fieldPlan, st.Plan)
		}
		if st.Thresholds != nil {
			famFields = append(famFields, fieldThresholds, ownThr)
		}
		for _, m := range members {
			famFields = append(famFields, memberField(m.cid), "1")
		}
		if len(famFields) > 0 {
			p.HSet(ctx, fam, famFields...)
		}
		pool := e.k.pool(fid, month)
		p.Del(ctx, pool)
		poolFields := []any{fieldUsed, used, fieldTopUp, st.TopUps}
		for _, pct := range thr {
			if total > 0 && remaining*100 <= int64(pct)*total {
				poolFields = append(poolFields, prefixAlert+strconv.Itoa(pct), "1", prefixArms+strconv.Itoa(pct), 1)
			}
		}
		p.HSet(ctx, pool, poolFields...)
		p.Expire(ctx, pool, monthTTL)
		for _, m := range members {
			ck := e.k.constraints(fid, m.cid)
			p.Del(ctx, ck)
			if len(m.canon) > 0 {
				args := make([]any, 0, 2*len(m.canon))
				for _, k := range slices.Sorted(maps.Keys(m.canon)) {
					args = append(args, k, m.canon[k])
				}
				p.HSet(ctx, ck, args...)
			}
			if m.version > 0 {
				p.Set(ctx, e.k.version(fid, m.cid), m.version, 0)
			} else {
				p.Del(ctx, e.k.version(fid, m.cid))
			}
			if usage[m.cid] == nil {
				p.Del(ctx, e.k.usage(fid, m.cid, month))
			}
		}
		for _, cid := range slices.Sorted(maps.Keys(usage)) {
			uk := e.k.usage(fid, cid, month)
			p.Del(ctx, uk)
			args := make([]any, 0, 2*len(usage[cid]))
			for _, f := range slices.Sorted(maps.Keys(usage[cid])) {
				args = append(args, f, usage[cid][f])
			}
			p.HSet(ctx, uk, args...)
			p.Expire(ctx, uk, monthTTL)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("quota: restore family %d: %w", fid, err)
	}
	return nil
}
