package quota

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
)

// Claims: the order in which the state learns a family's committed changes
// (doc/architecture.md, "Writer by writer", family writes).
//
// A family's hash names the generation that restored it (field g, the
// family's token). A writer that committed a change of the family to its
// source of truth claims the family (Claim): its token becomes
// "<generation>~<random>", which no judgement accepts (ApplyMarked reports
// the family in an *UnrestoredError, FamilyNeeds says NeedSettle), and then
// reads the family from the truth and applies it with Settle (or
// RestoreUnrestored, when the family is not restored in the generation
// yet), each of which writes only while the token is still the one seen
// before the read. So:
//
//   - a restore or settle whose read came before a committed change never
//     lands after that change's claim: the token moved (ErrMoved);
//   - the claim that lands last belongs to a read after every earlier
//     claim, so after every change committed before them: whatever order
//     writers' reads and writes take, the state ends at the truth's latest;
//   - a writer whose settle failed (the truth or Redis failed after its
//     commit) leaves the family claimed: it is not judged until a
//     judgement, a write or a read settles it from the truth again.

// ErrMoved is returned by RestoreUnrestored and Settle when the family's
// token is not the one seen before the family was read: it was claimed (or
// restored) since, and a later read will be applied.
var ErrMoved = errors.New("quota: the family was claimed since it was read")

// claimSep separates a token's generation from its claim.
const claimSep = "~"

// Need is what a family needs before it is judged, written or read.
type Need int

const (
	// NeedNothing: the family is the generation's (or no generation is
	// trusted now: judging refuses, a rebuild restores it).
	NeedNothing Need = iota
	// NeedRestore: the generation is restored on touch and has not
	// restored the family yet (RestoreUnrestored).
	NeedRestore
	// NeedSettle: the family is the generation's, but a committed change
	// was claimed and not applied yet (Settle).
	NeedSettle
)

// FamilyNeeds says what a family whose token is token needs in generation
// gen (the marker of its node's).
func FamilyNeeds(gen, token string) Need {
	if gen == "" || strings.HasPrefix(gen, RebuildingPrefix) {
		return NeedNothing
	}
	base, _, claimed := strings.Cut(token, claimSep)
	switch {
	case OnTouch(gen) && base != gen:
		return NeedRestore
	case claimed && (base == gen || base == "" && !OnTouch(gen)):
		// A generation restored whole before it was named holds families
		// provisioned since without a g (base "").
		return NeedSettle
	}
	return NeedNothing
}

// claimScript replaces the family's token by <its generation>~<ARGV[1]> and
// returns it.
var claimScript = redis.NewScript(`
local g = redis.call('HGET', KEYS[1], 'g') or ''
local at = string.find(g, '~', 1, true)
if at then g = string.sub(g, 1, at - 1) end
local t = g .. '~' .. ARGV[1]
redis.call('HSET', KEYS[1], 'g', t)
return t`)

// Claim claims family fid for a change its source of truth committed:
// its token becomes new and unique, so no restore or settle whose read
// came before the change lands after it, and the family is not judged
// until it is settled. It returns the generation the family's node's
// marker names and the new token, for Settle or RestoreUnrestored after
// the family is read (one round trip: the marker and the family share a
// node).
func (e *Engine) Claim(ctx context.Context, fid int64) (gen, token string, err error) {
	marker, err := e.FamilyMarker(ctx, fid)
	if err != nil {
		return "", "", err
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	var mg *redis.StringCmd
	var t *redis.Cmd
	_, err = e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		mg = p.HGet(ctx, marker, "g")
		t = claimScript.Run(ctx, p, []string{e.k.family(fid)}, hex.EncodeToString(b))
		return nil
	})
	// The pipeline's error is its first command's: the marker's HGET is
	// redis.Nil on a node no generation named yet, which would hide the
	// script's NOSCRIPT.
	if serr := t.Err(); serr != nil && redis.HasErrorPrefix(serr, "NOSCRIPT") {
		if err := claimScript.Load(ctx, e.rdb).Err(); err != nil {
			return "", "", fmt.Errorf("quota: claim family %d: %w", fid, err)
		}
		return e.Claim(ctx, fid)
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", "", fmt.Errorf("quota: claim family %d: %w", fid, err)
	}
	if token, err = t.Text(); err != nil {
		return "", "", fmt.Errorf("quota: claim family %d: %w", fid, err)
	}
	return mg.Val(), token, nil
}

// FamilyToken returns the generation the marker of family fid's node names
// and the family's token (one round trip), for FamilyNeeds.
func (e *Engine) FamilyToken(ctx context.Context, fid int64) (gen, token string, err error) {
	marker, err := e.FamilyMarker(ctx, fid)
	if err != nil {
		return "", "", err
	}
	var mg, fg *redis.StringCmd
	_, err = e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		mg = p.HGet(ctx, marker, "g")
		fg = p.HGet(ctx, e.k.family(fid), fieldGeneration)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", "", fmt.Errorf("quota: state marker: %w", err)
	}
	return mg.Val(), fg.Val(), nil
}

// FamilyTokens returns the tokens of fids (absent: "") in one pipeline:
// what a rebuild's sweep reads before it reads a page of families from
// the truth, to restore each only while its token holds.
func (e *Engine) FamilyTokens(ctx context.Context, fids []int64) (map[int64]string, error) {
	cmds := make([]*redis.StringCmd, len(fids))
	_, err := e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, fid := range fids {
			cmds[i] = p.HGet(ctx, e.k.family(fid), fieldGeneration)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("quota: family tokens: %w", err)
	}
	out := make(map[int64]string, len(fids))
	for i, fid := range fids {
		out[fid] = cmds[i].Val()
	}
	return out, nil
}

// Settled is what Settle did.
type Settled struct {
	// Pool is the family's pool of the current month after the settle.
	Pool PoolState
	// Rearmed maps a month and a threshold to how often it had fired: the
	// thresholds the settle re-armed in the current month (the pool is above
	// them again), as a pool change reports them (PoolState.Rearmed).
	Rearmed map[string]map[int]int
}

// Settle applies a family's configuration as its source of truth holds it
// — membership, each member's constraints and policy version, plan,
// thresholds, and the top-ups of the accepted months (raised to st's,
// never lowered) — keeping its usage, dedupe records and fired thresholds,
// and re-arms the thresholds the current month's pool is above again, as a
// pool change does. It writes only while the family's token is seen (Claim; an error
// wrapping ErrMoved otherwise), atomically (WATCH on the family's hash and
// pools), and leaves the family unclaimed in its generation. record, when
// not nil, is called with the thresholds the settle is about to re-arm
// (Settled.Rearmed) before it writes: its error stops the settle, which
// writes nothing (the caller records them where a rebuild reads them).
// Usage and judged events of st are ignored.
func (e *Engine) Settle(ctx context.Context, st FamilyState, seen string, record func(rearmed map[string]map[int]int) error) (Settled, error) {
	fid := st.FamilyID
	if err := checkFamily(fid); err != nil {
		return Settled{}, err
	}
	base, _, claimed := strings.Cut(seen, claimSep)
	if !claimed {
		return Settled{}, fmt.Errorf("%w: settle family %d: token %q is not a claim", ErrInvalid, fid, seen)
	}
	months, _, _ := e.AcceptedMonths()
	for _, m := range months {
		if st.Plan < 0 || st.TopUps[m] < 0 || st.Plan+st.TopUps[m] > policy.MaxBytes {
			return Settled{}, fmt.Errorf("%w: month %s: plan and top-ups must be ≥ 0 and total at most %d", ErrInvalid, m, policy.MaxBytes)
		}
	}
	var ownThr string
	if st.Thresholds != nil {
		c, err := st.Thresholds.Canonical()
		if err != nil {
			return Settled{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		ownThr = c.String()
	}
	type memberWrite struct {
		cid     int64
		fields  []any
		version int64
	}
	members := map[int64]memberWrite{}
	for _, m := range st.Members {
		if err := checkMember(fid, m.CustomerID); err != nil {
			return Settled{}, err
		}
		c, err := policy.ParseConstraints(m.Constraints)
		if err != nil {
			return Settled{}, fmt.Errorf("%w: customer %d: %w", ErrInvalid, m.CustomerID, err)
		}
		if m.Version < 0 {
			return Settled{}, fmt.Errorf("%w: customer %d: version must be ≥ 0", ErrInvalid, m.CustomerID)
		}
		members[m.CustomerID] = memberWrite{m.CustomerID, constraintFields(c), m.Version}
	}
	fam := e.k.family(fid)
	keys := []string{fam}
	for _, m := range months {
		keys = append(keys, e.k.pool(fid, m))
	}
	current, _, _ := e.CurrentMonth()
	var out Settled
	for range restoreAttempts {
		out = Settled{}
		err := e.rdb.Watch(ctx, func(tx *redis.Tx) error {
			fields, err := tx.HGetAll(ctx, fam).Result()
			if err != nil {
				return err
			}
			if fields[fieldGeneration] != seen {
				return ErrMoved
			}
			pools := make([]map[string]string, len(months))
			for i, m := range months {
				if pools[i], err = tx.HGetAll(ctx, e.k.pool(fid, m)).Result(); err != nil {
					return err
				}
			}
			rearmed := settleRearms(st, current, months, pools)
			if record != nil && len(rearmed) > 0 {
				if err := record(rearmed); err != nil {
					return &recordError{err}
				}
			}
			out.Rearmed = rearmed
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				if st.Provisioned {
					p.HSet(ctx, fam, fieldPlan, st.Plan)
				} else {
					p.HDel(ctx, fam, fieldPlan)
				}
				if st.Thresholds != nil {
					p.HSet(ctx, fam, fieldThresholds, ownThr)
				} else {
					p.HDel(ctx, fam, fieldThresholds)
				}
				if base == "" {
					p.HDel(ctx, fam, fieldGeneration)
				} else {
					p.HSet(ctx, fam, fieldGeneration, base)
				}
				for f := range fields {
					if !strings.HasPrefix(f, prefixMember) {
						continue
					}
					cid, err := strconv.ParseInt(f[len(prefixMember):], 10, 64)
					if _, current := members[cid]; err == nil && !current {
						// Removed: as RemoveMember, the version stays.
						p.HDel(ctx, fam, f)
						p.Del(ctx, e.k.constraints(fid, cid))
					}
				}
				for _, cid := range slices.Sorted(maps.Keys(members)) {
					m := members[cid]
					p.HSet(ctx, fam, memberField(cid), "1")
					ck := e.k.constraints(fid, cid)
					p.Del(ctx, ck)
					if len(m.fields) > 0 {
						p.HSet(ctx, ck, m.fields...)
					}
					if m.version > 0 {
						p.HSet(ctx, fam, versionField(cid), m.version)
					} else {
						p.HDel(ctx, fam, versionField(cid))
					}
					p.Del(ctx, e.k.legacyVersion(fid, cid))
				}
				for i, month := range months {
					pool, pk := pools[i], e.k.pool(fid, month)
					topup := max(parseInt(pool[fieldTopUp]), st.TopUps[month])
					if topup > parseInt(pool[fieldTopUp]) {
						p.HSet(ctx, pk, fieldTopUp, topup)
						if len(pool) == 0 {
							p.Expire(ctx, pk, monthTTL)
						}
					}
					total := topup
					if st.Provisioned {
						total += st.Plan
					}
					rem := policy.Pool{Total: total, Used: parseInt(pool[fieldUsed])}.Remaining()
					for _, pct := range slices.Sorted(maps.Keys(rearmed[month])) {
						p.HDel(ctx, pk, prefixAlert+strconv.Itoa(pct), "q") // q: see apply.lua
					}
					if month == current {
						out.Pool = PoolState{Remaining: rem, Total: total, Month: month, Rearmed: rearmed[month]}
					}
				}
				return nil
			})
			return err
		}, keys...)
		if errors.Is(err, redis.TxFailedErr) {
			continue // a judgement or another write came between: look again
		}
		if errors.Is(err, ErrMoved) {
			return Settled{}, fmt.Errorf("quota: settle family %d: %w", fid, ErrMoved)
		}
		var re *recordError
		if errors.As(err, &re) {
			return Settled{}, re.err
		}
		if err != nil {
			return Settled{}, fmt.Errorf("quota: settle family %d: %w", fid, err)
		}
		return out, e.ackFamily(ctx, fid)
	}
	return Settled{}, fmt.Errorf("quota: settle family %d: its keys kept changing (%d attempts)", fid, restoreAttempts)
}

// recordError carries the error of Settle's record out of its WATCH.
type recordError struct{ err error }

func (e *recordError) Error() string { return e.err.Error() }

// settleRearms returns what Settle re-arms given the pools it read (in the
// order of months): in the current month (as pool.lua re-arms the pool a
// change is made in), every fired threshold the pool is above again with
// how often it had fired.
func settleRearms(st FamilyState, current string, months []string, pools []map[string]string) map[string]map[int]int {
	var out map[string]map[int]int
	for i, month := range months {
		if month != current {
			continue
		}
		pool := pools[i]
		topup := max(parseInt(pool[fieldTopUp]), st.TopUps[month])
		total := topup
		if st.Provisioned {
			total += st.Plan
		}
		rem := policy.Pool{Total: total, Used: parseInt(pool[fieldUsed])}.Remaining()
		for f := range pool {
			if !strings.HasPrefix(f, prefixAlert) {
				continue
			}
			pct, err := strconv.Atoi(f[len(prefixAlert):])
			if err != nil || total > 0 && rem*100 <= int64(pct)*total {
				continue
			}
			if out == nil {
				out = map[string]map[int]int{}
			}
			if out[month] == nil {
				out[month] = map[int]int{}
			}
			out[month][pct] = max(int(parseInt(pool[prefixArms+strconv.Itoa(pct)])), 1)
		}
	}
	return out
}
