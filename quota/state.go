package quota

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrStale is wrapped by every error saying the Redis state cannot be trusted:
// it is empty, older than what was already judged, from another rebuild
// generation, or being rebuilt. See ApplyMarked.
var ErrStale = errors.New("quota: the redis state cannot be trusted")

// StaleError says why the Redis state cannot be trusted.
type StaleError struct {
	// Reason is for operators, e.g. "no state marker: this Redis node lost its
	// data or was never rebuilt from SQL".
	Reason string
}

func (e *StaleError) Error() string { return "quota: the redis state cannot be trusted: " + e.Reason }

// Is makes errors.Is(err, ErrStale) true.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// OnTouch says whether generation gen is restored on touch: a rebuild
// names it as soon as SQL holds every judged event, and each family is
// restored from SQL (Engine.RestoreUnrestored) by the first judgement or
// family write that meets it, or by the rebuild's sweep, whichever comes
// first. In such a generation a family whose hash does not name gen (field
// g; absent included) is not judged: ApplyMarked reports it in an
// *UnrestoredError. Its names have ':' as their second byte
// (NewOnTouchGeneration); a generation named otherwise (by an earlier
// release) was restored whole before it was named, and a family without g
// in it was provisioned since.
func OnTouch(gen string) bool { return len(gen) > 2 && gen[1] == ':' }

// NewOnTouchGeneration returns a new generation name restored on touch
// (OnTouch) from the time and a random suffix: "t:<ms base 36>-<suffix>".
func NewOnTouchGeneration(now time.Time, suffix string) string {
	return "t:" + strconv.FormatInt(now.UnixMilli(), 36) + "-" + suffix
}

// UnrestoredError is ApplyMarked's (GrantMarked's, JudgeMarked's) answer
// for a batch with events or grant steps of families not restored in a
// generation restored on touch (OnTouch) yet, or claimed for a change not
// settled yet (Claim): those (Pending, GrantPending) were not judged, every
// other one was and its result is in Results or GrantResults, and the
// watermarks were advanced as for any batch. Restore or settle the
// Families from SQL (FamilyNeeds of Seen: RestoreUnrestored, Settle, each
// with the token seen) and judge the pending ones again with the same
// marks. It is ErrStale for a caller that does not restore: no decision of
// the batch may be used then.
type UnrestoredError struct {
	Generation string
	// Families are the families to restore or settle, in the order of
	// their first pending event (then step).
	Families []int64
	// Seen are their tokens as the batch saw them.
	Seen map[int64]string
	// Pending are the indices of the events not judged, in order.
	Pending []int
	// Results has every event's result; the pending ones' are zero.
	Results []Result
	// GrantPending are the indices of the grant steps not judged, in order.
	GrantPending []int
	// GrantResults has every step's result; the pending ones' are zero.
	GrantResults []GrantResult
}

func (e *UnrestoredError) Error() string {
	return fmt.Sprintf("quota: %d families not restored in state generation %s yet (%d events, %d grant steps not judged)",
		len(e.Families), e.Generation, len(e.Pending), len(e.GrantPending))
}

// Is makes errors.Is(err, ErrStale) true.
func (e *UnrestoredError) Is(target error) bool { return target == ErrStale }

// Mark places a batch in an ordered stream the consumer judges, such as a
// Kafka partition: the state marker keeps, per stream, the position after
// the last judged record (the watermark). A state whose watermark is below
// From has lost judged records: it is older than what the consumer committed.
type Mark struct {
	// Stream names the stream, e.g. "usage-events/3"; no '|' or spaces.
	Stream string
	// From is the first position this batch judges: the position the
	// consumer resumed from (its committed offset), or the end of its
	// previous batch.
	From int64
	// To is the position after the batch's last record.
	To int64
	// Node, when set, is the marker key (StateInfo.Key) the mark is for:
	// the other nodes' markers ignore it. A family write is marked on the
	// node that holds the family (FamilyMarker), since only that node's
	// marker is written after it in the node's own order. "" is every node.
	Node string
}

func validMarks(marks []Mark) error {
	for _, m := range marks {
		if m.Stream == "" || strings.ContainsAny(m.Stream, " |") || m.From < 0 || m.To < m.From {
			return fmt.Errorf("%w: mark %+v: want a stream name without spaces and 0 ≤ from ≤ to", ErrInvalid, m)
		}
	}
	return nil
}

// markArgs returns the state script's arguments for the marker key: the
// marks (stream, from, to) for every node and those for key.
func markArgs(op, gen, key string, marks []Mark) []any {
	args := make([]any, 0, 2+3*len(marks))
	args = append(args, op, gen)
	for _, m := range marks {
		if m.Node != "" && m.Node != key {
			continue
		}
		args = append(args, m.Stream, m.From, m.To)
	}
	return args
}

// guardResult reads the guards of a marked batch (state.lua's guard: {0, ""}
// when the marker vouched for the batch and advanced, else {1, reason});
// phase names the guard in errors.
func guardResult(phase string, guards []*redis.Cmd) error {
	for _, c := range guards {
		v, err := c.Slice()
		if err != nil {
			return fmt.Errorf("quota: state %s: %w", phase, err)
		}
		if len(v) != 2 {
			return fmt.Errorf("quota: state %s: unexpected reply %v", phase, v)
		}
		if v[0] != int64(0) {
			reason, _ := v[1].(string)
			return &StaleError{Reason: reason}
		}
	}
	return nil
}

// markerKeys returns the state marker keys: one on a single Redis (or Ring),
// one per master on a Redis Cluster, so that a master that fails over to a
// lagging replica or restarts empty is caught by its own marker. On a
// Cluster the masters are looked at again at most every markerRefresh (by
// the client's slot map, which follows MOVED answers): a master added since
// gets a marker key too, which it does not hold until the next rebuild, so
// its families are refused as stale instead of judged from a state nobody
// vouched for.
func (e *Engine) markerKeys(ctx context.Context) ([]string, error) {
	e.markersMu.Lock()
	defer e.markersMu.Unlock()
	cc, ok := e.rdb.(*redis.ClusterClient)
	if !ok {
		if e.markers == nil {
			e.markers = []string{e.k.state("state")}
		}
		return e.markers, nil
	}
	if e.markers != nil && time.Since(e.markersAt) < e.markerRefresh {
		return e.markers, nil
	}
	found, err := e.clusterMarkers(ctx, cc)
	if err != nil {
		if e.markers != nil {
			return e.markers, nil // judge with the masters known; look again next time
		}
		return nil, err
	}
	e.markers, e.markersAt = found, time.Now()
	return found, nil
}

// clusterMarkers finds one marker key per master of the client's slot map.
func (e *Engine) clusterMarkers(ctx context.Context, cc *redis.ClusterClient) ([]string, error) {
	var mu sync.Mutex
	masters := map[string]bool{}
	err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		masters[c.Options().Addr] = true
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("quota: cluster slots: %w", err)
	}
	covered := map[string]bool{}
	var found []string
	for n := 0; len(covered) < len(masters) && n < 100_000; n++ {
		key := e.k.state("s" + strconv.Itoa(n))
		c, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("quota: cluster slots: %w", err)
		}
		if a := c.Options().Addr; masters[a] && !covered[a] {
			covered[a] = true
			found = append(found, key)
		}
	}
	if len(covered) < len(masters) {
		return nil, fmt.Errorf("quota: found state marker slots for %d of %d masters", len(covered), len(masters))
	}
	return found, nil
}

// FamilyMarker returns the marker key (StateInfo.Key) of the node that holds
// family fid's keys: the node a family write is marked on (Mark.Node). On a
// Cluster it follows the client's slot map, looked at again as markerKeys
// does.
func (e *Engine) FamilyMarker(ctx context.Context, fid int64) (string, error) {
	if err := checkFamily(fid); err != nil {
		return "", err
	}
	keys, err := e.markerKeys(ctx)
	if err != nil {
		return "", err
	}
	cc, ok := e.rdb.(*redis.ClusterClient)
	if !ok {
		return keys[0], nil
	}
	fam, err := cc.MasterForKey(ctx, e.k.family(fid))
	if err != nil {
		return "", fmt.Errorf("quota: cluster slots: %w", err)
	}
	for _, k := range keys {
		c, err := cc.MasterForKey(ctx, k)
		if err != nil {
			return "", fmt.Errorf("quota: cluster slots: %w", err)
		}
		if c.Options().Addr == fam.Options().Addr {
			return k, nil
		}
	}
	// A master the markers do not know yet: look again at once.
	e.forgetMarkers()
	return "", &StaleError{Reason: "the family's Redis master has no state marker yet (a master added since the last rebuild)"}
}

// MarkerGeneration returns the generation the marker of the node that holds
// family fid names ("rebuilding:<next>" during a rebuild, "" when it has
// none).
func (e *Engine) MarkerGeneration(ctx context.Context, fid int64) (string, error) {
	marker, err := e.FamilyMarker(ctx, fid)
	if err != nil {
		return "", err
	}
	g, err := e.rdb.HGet(ctx, marker, "g").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("quota: state marker: %w", err)
	}
	return g, nil
}

func (e *Engine) forgetMarkers() {
	e.markersMu.Lock()
	e.markers = nil
	e.markersMu.Unlock()
}

// CheckState checks every node's state marker as ApplyMarked does, without
// judging or advancing anything: nil when the state has generation gen and no
// stream is behind its mark's From, a *StaleError when not.
func (e *Engine) CheckState(ctx context.Context, gen string, marks []Mark) error {
	at := make([]Mark, len(marks))
	for i, m := range marks {
		at[i] = Mark{Stream: m.Stream, From: m.From, To: m.From, Node: m.Node}
	}
	_, err := e.ApplyMarked(ctx, gen, at, nil)
	return err
}

// Advance checks the markers as CheckState does and raises the watermarks to
// each mark's To: for work judged outside ApplyMarked (policy updates) once
// it is done.
func (e *Engine) Advance(ctx context.Context, gen string, marks []Mark) error {
	_, err := e.ApplyMarked(ctx, gen, marks, nil)
	return err
}

// StateInfo is a node's state marker.
type StateInfo struct {
	// Key is the marker's key (its hash tag picks the node).
	Key string
	// Generation is the state generation; "" when the node has no marker
	// (it lost its data or was never rebuilt); "rebuilding:<next>" while a
	// rebuild runs.
	Generation string
	// Watermarks are the positions after the last judged record, per stream.
	Watermarks map[string]int64
}

func parseMarker(key string, flat []any) StateInfo {
	st := StateInfo{Key: key, Watermarks: map[string]int64{}}
	for i := 0; i+1 < len(flat); i += 2 {
		f, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		switch {
		case f == fieldGeneration:
			st.Generation = v
		case strings.HasPrefix(f, "w:"):
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				st.Watermarks[f[2:]] = n
			}
		}
	}
	return st
}

func (e *Engine) stateOp(ctx context.Context, op, gen string, extra ...any) ([]StateInfo, error) {
	keys, err := e.markerKeys(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]StateInfo, 0, len(keys))
	for _, k := range keys {
		c := stateScript.Run(ctx, e.rdb, []string{k}, append([]any{op, gen}, extra...)...)
		if c.Err() != nil {
			return nil, fmt.Errorf("quota: state %s: %w", op, c.Err())
		}
		v, _ := c.Val().([]any) // finish answers 1
		out = append(out, parseMarker(k, v))
	}
	return out, nil
}

// State returns every node's state marker.
func (e *Engine) State(ctx context.Context) ([]StateInfo, error) { return e.stateOp(ctx, "get", "") }

// RebuildingPrefix starts the generation a marker has while a rebuild runs.
const RebuildingPrefix = "rebuilding:"

// BeginRebuild starts a rebuild towards generation next: every node's marker
// gets generation "rebuilding:<next>", so from now on every ApplyMarked of
// the old generation fails (its results unused), and the apply script refuses
// families already restored by next. It returns the watermarks the markers
// held (the highest per stream over the nodes): every batch whose results
// were used is within them.
func (e *Engine) BeginRebuild(ctx context.Context, next string) (map[string]int64, error) {
	if next == "" || strings.HasPrefix(next, RebuildingPrefix) {
		return nil, fmt.Errorf("%w: bad generation %q", ErrInvalid, next)
	}
	e.forgetMarkers() // the cluster's topology may have changed
	states, err := e.stateOp(ctx, "begin", RebuildingPrefix+next)
	if err != nil {
		return nil, err
	}
	wm := map[string]int64{}
	for _, st := range states {
		for s, n := range st.Watermarks {
			wm[s] = max(wm[s], n)
		}
	}
	return wm, nil
}

// DistrustedPrefix starts the generation of a marker Distrust made stale.
const DistrustedPrefix = "distrusted:"

// Distrust makes every node's state stale until a rebuild: each marker's
// generation becomes "distrusted:<generation>" (one being rebuilt is left
// alone). It is for a judge that charged what it could not record (its
// records stored nowhere): the rebuild reads the state back from the
// truth, without those charges.
func (e *Engine) Distrust(ctx context.Context) error {
	_, err := e.stateOp(ctx, "distrust", "")
	return err
}

// FinishRebuild ends a rebuild: every node's marker is replaced by generation
// gen with the given watermarks (the positions the restored state reflects,
// e.g. the consumers' committed offsets), and judging with gen may resume.
func (e *Engine) FinishRebuild(ctx context.Context, gen string, watermarks map[string]int64) error {
	if gen == "" || strings.HasPrefix(gen, RebuildingPrefix) {
		return fmt.Errorf("%w: bad generation %q", ErrInvalid, gen)
	}
	var extra []any
	for _, s := range slices.Sorted(maps.Keys(watermarks)) {
		if err := validMarks([]Mark{{Stream: s, From: watermarks[s], To: watermarks[s]}}); err != nil {
			return err
		}
		extra = append(extra, s, watermarks[s])
	}
	if _, err := e.stateOp(ctx, "finish", gen, extra...); err != nil {
		return err
	}
	if e.ack.replicas == 0 {
		return nil
	}
	// The restores were written on every master before its marker: a
	// replica that acknowledged the marker's barrier has them all.
	keys, err := e.markerKeys(ctx)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := e.ackBarrier(ctx, k+":replica-ack"); err != nil {
			return err
		}
	}
	return nil
}
