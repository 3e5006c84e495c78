package quota

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/policy"
)

var (
	//go:embed lua/apply.lua
	applyLua string
	//go:embed lua/grant.lua
	grantLua string
	//go:embed lua/policy.lua
	policyLua string
	//go:embed lua/limits.lua
	limitsLua string
	//go:embed lua/crossings.lua
	crossingsLua string
	//go:embed lua/budget.lua
	budgetLua string
	//go:embed lua/pool.lua
	poolLua string
	//go:embed lua/constraints.lua
	constraintsLua string
	//go:embed lua/state.lua
	stateLua string
	//go:embed lua/restore.lua
	restoreLua string

	poolScript        = redis.NewScript(poolLua)
	constraintsScript = redis.NewScript(constraintsLua)
	stateScript       = redis.NewScript(stateLua)
	restoreScript     = redis.NewScript(restoreLua)
)

// ErrInvalid is wrapped by every error about bad arguments (not Redis failures).
var ErrInvalid = errors.New("quota: invalid argument")

// Event is one usage event to judge.
type Event struct {
	// ID is the event's unique id (the envelope's eventId); replays are
	// recognised by it.
	ID         string
	FamilyID   int64
	CustomerID int64
	Bytes      int64
	AppID      string
	// Category is the app's category for BLOCK:CATEGORY constraints. When
	// empty, an engine given a catalog (WithCatalog) looks AppID up in it;
	// without one, or for an app the catalog does not know, the event has no
	// category and no category block applies to it.
	Category policy.Category
	// At is the event's own timestamp: time windows, days and months are judged at it.
	At time.Time
}

// MaxEventIDLen is the longest event id the engine takes, in bytes: the
// one bound every producer and API that hands events to it checks (app ids:
// policy.MaxAppIDLen).
const MaxEventIDLen = 200

func (ev Event) validate() error {
	switch {
	case ev.ID == "":
		return fmt.Errorf("%w: event id is empty", ErrInvalid)
	case len(ev.ID) > MaxEventIDLen:
		return fmt.Errorf("%w: event id longer than %d bytes", ErrInvalid, MaxEventIDLen)
	case len(ev.AppID) > policy.MaxAppIDLen || !utf8.ValidString(ev.AppID):
		// The rule of a block names the app: both must fit what the truth
		// stores of the decision (policy.MaxAppIDLen).
		return fmt.Errorf("%w: app id longer than %d bytes or not UTF-8", ErrInvalid, policy.MaxAppIDLen)
	case ev.FamilyID <= 0:
		return fmt.Errorf("%w: familyId must be > 0", ErrInvalid)
	case ev.CustomerID <= 0:
		return fmt.Errorf("%w: customerId must be > 0", ErrInvalid)
	case ev.Bytes < 0 || ev.Bytes > policy.MaxBytes:
		return fmt.Errorf("%w: bytes must be 0..%d, got %d", ErrInvalid, policy.MaxBytes, ev.Bytes)
	case ev.At.IsZero():
		return fmt.Errorf("%w: event time is zero", ErrInvalid)
	}
	return nil
}

// Result is the engine's verdict on one event.
type Result struct {
	// Duplicate is true when the event id was judged before: the result is the
	// original one and nothing changed.
	Duplicate bool
	Decision  policy.Decision
	// Rule names what decided a block (see policy.Result.Rule); "" when allowed.
	Rule string
	// Remaining is the family pool's remaining bytes after the event.
	Remaining int64
	// Total is the month's pool: plan plus top-ups.
	Total int64
	// DailyUsed and MonthlyUsed are the member's usage in the event's day and
	// month, after the event.
	DailyUsed, MonthlyUsed int64
	// ThrottleKbps is the member's THROTTLE:SPEED, with ALLOWED only.
	ThrottleKbps int64
	// Crossed lists the thresholds (percent remaining, descending) this event
	// crossed; each fires once per family and month until a top-up re-arms it.
	Crossed []int
	// Arms[i] says how many times Crossed[i] has fired this month, this time
	// included: 1 the first time, 2 after a top-up re-armed it and the pool
	// fell again, and so on — so each crossing can be announced once.
	Arms []int
}

// UsedPercent is the share of the month's pool used, in percent with two
// decimals (0 when the pool is empty).
func (r Result) UsedPercent() float64 { return usedPercent(r.Total, r.Remaining) }

func usedPercent(total, remaining int64) float64 {
	if total <= 0 {
		return 0
	}
	return float64((total-remaining)*10000/total) / 100
}

// EventError reports which event of a batch was invalid.
type EventError struct {
	Index int
	Err   error
}

func (e *EventError) Error() string { return fmt.Sprintf("event %d: %v", e.Index, e.Err) }
func (e *EventError) Unwrap() error { return e.Err }

// ApplyInfo is passed to Hooks.OnApply after every batch (Apply,
// ApplyBatch, ApplyMarked, Grant, GrantMarked, JudgeMarked).
type ApplyInfo struct {
	Events int
	// Grants is the batch's grant steps.
	Grants   int
	Duration time.Duration
	Err      error
	// Replicas is how many replicas acknowledged the batch's writes (on a
	// Cluster, the fewest of any master it wrote to); 0 without WithReplicaAck.
	Replicas int
}

// Hooks are optional callbacks for observability; nil funcs are skipped.
type Hooks struct {
	OnApply func(ApplyInfo)
}

// Option configures an Engine.
type Option func(*Engine) error

// WithLocation sets the service time zone for windows, days and months.
// Default: Asia/Seoul.
func WithLocation(loc *time.Location) Option {
	return func(e *Engine) error {
		if loc == nil {
			return fmt.Errorf("%w: nil location", ErrInvalid)
		}
		e.loc = loc
		return nil
	}
}

// WithClock sets the clock used for pool changes and status queries (usage
// events are judged at their own timestamp). Default: time.Now.
func WithClock(now func() time.Time) Option {
	return func(e *Engine) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalid)
		}
		e.now = now
		return nil
	}
}

// WithDedupeTTL sets how long an event id is remembered. A consumer must reject
// events older than this window, or a late replay would be counted twice.
// At most 30 days. Default: 24 h.
func WithDedupeTTL(d time.Duration) Option {
	return func(e *Engine) error {
		if d < time.Second || d > 30*24*time.Hour {
			return fmt.Errorf("%w: dedupe TTL must be 1s..30 days", ErrInvalid)
		}
		e.dedupeTTL = d
		return nil
	}
}

// WithKeyPrefix puts prefix before every key (for sharing a Redis between
// deployments or tests). Default: none.
func WithKeyPrefix(prefix string) Option {
	return func(e *Engine) error {
		if strings.ContainsAny(prefix, "{}") {
			return fmt.Errorf("%w: key prefix must not contain '{' or '}'", ErrInvalid)
		}
		e.k = keys{prefix: prefix}
		return nil
	}
}

// WithDefaultThresholds sets the alert levels of families that have none of
// their own. Default: 50, 30, 10 % remaining.
func WithDefaultThresholds(t policy.Thresholds) Option {
	return func(e *Engine) error {
		c, err := t.Canonical()
		if err != nil {
			return err
		}
		e.thresholds = c
		return nil
	}
}

// WithCatalog gives the engine the app catalog (app id → category) that
// fills in the Category of an event that carries none, so that an event
// naming only its app is judged against BLOCK:CATEGORY constraints. A
// Category set on the event wins. The catalog is copied. Default: none, and
// an event with an empty Category is judged as an app of no category.
func WithCatalog(c policy.Catalog) Option {
	return func(e *Engine) error {
		if c == nil {
			return fmt.Errorf("%w: nil catalog", ErrInvalid)
		}
		e.catalog = maps.Clone(c)
		return nil
	}
}

// WithLongResults makes the engine store results in its dedupe records in
// the long form every earlier engine reads, instead of this release's short
// form (about half of a family's dedupe memory; see stored.go and
// doc/redis-keys.md). For a rolling upgrade from an engine before v0.2.0:
// run the new engines with it until no earlier engine is left, then restart
// them without it. Engines of this release read both forms either way.
func WithLongResults() Option {
	return func(e *Engine) error { e.longResults = true; return nil }
}

// WithHooks sets observability callbacks. Default: none.
func WithHooks(h Hooks) Option {
	return func(e *Engine) error { e.hooks = h; return nil }
}

// Engine is the Lua quota engine. It is safe for concurrent use; events of one
// family should be applied in order (one partition, one goroutine), though
// concurrent applies never overspend.
type Engine struct {
	rdb        redis.UniversalClient
	k          keys
	loc        *time.Location
	now        func() time.Time
	dedupeTTL  time.Duration
	thresholds policy.Thresholds
	catalog    policy.Catalog // nil: no lookup
	hooks      Hooks
	ack        replicaAck
	// longResults stores results in the long form (WithLongResults).
	longResults bool
	sizes       GrantSizes
	// apply and grant are apply.lua and grant.lua with their parts and
	// this engine's constants (scriptSource).
	apply, grant *redis.Script

	markersMu sync.Mutex
	markers   []string // state marker keys, one per master; see markerKeys
	markersAt time.Time
	// markerRefresh is how long a Cluster's marker keys are used before
	// its masters are looked at again. Default: a second.
	markerRefresh time.Duration
}

// monthTTL is how long a month's pool and usage hashes live after they were
// created: the month plus late events within any dedupe window.
const monthTTL = 62 * 24 * time.Hour

// New returns an engine on rdb: a *redis.Client, *redis.ClusterClient or
// *redis.Ring. It does not contact Redis.
func New(rdb redis.UniversalClient, opts ...Option) (*Engine, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalid)
	}
	loc, err := policy.LoadZone(policy.DefaultZone)
	if err != nil {
		return nil, err
	}
	e := &Engine{
		rdb:           rdb,
		loc:           loc,
		now:           time.Now,
		dedupeTTL:     24 * time.Hour,
		thresholds:    policy.DefaultThresholds(),
		sizes:         DefaultGrantSizes(),
		markerRefresh: time.Second,
	}
	for _, o := range opts {
		if err := o(e); err != nil {
			return nil, err
		}
	}
	if err := e.ack.check(rdb); err != nil {
		return nil, err
	}
	e.apply = redis.NewScript(e.scriptSource(applyLua))
	e.grant = redis.NewScript(e.scriptSource(grantLua))
	return e, nil
}

// scriptSource is a script (apply.lua, grant.lua) with the parts they share
// written in where they say --[[policy.lua]], --[[limits.lua]] and
// --[[crossings.lua]], and the engine's constants: each argument of a call
// costs the server a string, a constant need not.
func (e *Engine) scriptSource(lua string) string {
	lua = strings.NewReplacer(
		"--[[policy.lua]]", policyLua,
		"--[[limits.lua]]", limitsLua,
		"--[[crossings.lua]]", crossingsLua,
		"--[[budget.lua]]", budgetLua,
	).Replace(lua)
	return strings.NewReplacer(
		"DPCS_BUCKET_TTL", strconv.FormatInt(int64(e.bucketTTL()/time.Second), 10),
		"DPCS_MONTH_TTL", strconv.FormatInt(int64(monthTTL/time.Second), 10),
		"DPCS_THRESHOLDS", e.thresholds.String(),
		"DPCS_MAX_TOTAL", strconv.FormatInt(policy.MaxBytes, 10),
		"DPCS_SHORT_RESULTS", strconv.FormatBool(!e.longResults),
		"DPCS_GRANT_DEFAULT", strconv.FormatInt(e.sizes.Default, 10),
		"DPCS_GRANT_MAX", strconv.FormatInt(e.sizes.Max, 10),
		"DPCS_GRANT_MIN", strconv.FormatInt(e.sizes.Min, 10),
	).Replace(lua)
}

// Location returns the engine's service time zone.
func (e *Engine) Location() *time.Location { return e.loc }

// Load loads the engine's scripts into Redis (every master of a cluster), so
// the first pipelined batch does not meet NOSCRIPT. Optional.
func (e *Engine) Load(ctx context.Context) error {
	for _, s := range []*redis.Script{e.apply, e.grant, poolScript, constraintsScript, stateScript, restoreScript} {
		if err := s.Load(ctx, e.rdb).Err(); err != nil {
			return fmt.Errorf("quota: load script: %w", err)
		}
	}
	return nil
}

func (e *Engine) applyCall(ev Event, bucket int64, gen string) ([]string, []any) {
	m := policy.MomentOf(ev.At, e.loc)
	f, c := ev.FamilyID, ev.CustomerID
	category := ev.Category
	if category == "" && e.catalog != nil {
		category = e.catalog.Category(ev.AppID)
	}
	ks := []string{
		e.k.family(f), e.k.constraints(f, c), e.k.pool(f, m.Month), e.k.usage(f, c, m.Month),
		e.k.events(f, bucket), e.k.events(f, bucket-1), e.k.budget(f, c, m.Day),
	}
	args := []any{c, ev.Bytes, ev.AppID, string(category), m.Minute, m.Weekday, m.Day, ev.ID, gen}
	return ks, args
}

// bucketTTL is how long a dedupe bucket lives after its first write (see
// apply.lua): the bucket of window b is written during b and looked up
// during b and b+1, so it is needed until two windows after the start of b,
// and its first write is no earlier than that start. A 24th of a window
// more covers the processors' clocks disagreeing on where windows begin
// (each event is bucketed by the clock of the engine that judges it).
// Records then live one and a half windows on average at a steady rate;
// they lived two and a half with the three windows of earlier releases.
func (e *Engine) bucketTTL() time.Duration { return 2*e.dedupeTTL + e.dedupeTTL/24 }

// bucket is the dedupe bucket of an event arriving at t: an event id is
// remembered in the bucket of its arrival until two windows after the
// bucket's first write (bucketTTL), and looked up in the current and the
// previous bucket, so a replay within the window finds it whatever its own
// timestamp.
func (e *Engine) bucket(t time.Time) int64 { return t.Unix() / int64(e.dedupeTTL/time.Second) }

// ApplyCommand returns the Redis command the engine sends to judge ev: the
// EVALSHA arguments (script SHA1, keys, args) exactly as ApplyBatch sends them.
// It is for measuring the server's ceiling with an external load generator
// (redis-benchmark) on the engine's own script and key layout; ev is not
// validated and nothing is sent.
func (e *Engine) ApplyCommand(ev Event) (sha string, keys []string, args []any) {
	keys, args = e.applyCall(ev, e.bucket(e.now()), "")
	return e.apply.Hash(), keys, args
}

// Apply judges one usage event atomically: dedupe by event id, the member's
// constraints in policy.Evaluate's order, the family pool, deduction from the
// pool and the member's day and month counters (all or nothing), and threshold
// crossings.
func (e *Engine) Apply(ctx context.Context, ev Event) (Result, error) {
	rs, err := e.ApplyBatch(ctx, []Event{ev})
	if err != nil {
		return Result{}, err
	}
	return rs[0], nil
}

// ApplyBatch judges events in order in one pipeline (one round trip per
// Redis node). Events of one family keep their order, on a Cluster too: they
// share a slot. On a Redis error no result is returned, but earlier events of
// the batch may have been applied; applying the batch again is safe, since
// applied events come back as duplicates with their original results.
// With WithReplicaAck it returns results only once enough replicas
// acknowledged the batch's writes, else a *NotReplicatedError.
//
// ApplyBatch trusts the Redis state it finds; ApplyMarked checks it first.
func (e *Engine) ApplyBatch(ctx context.Context, evs []Event) (results []Result, err error) {
	results, _, err = e.judgeBatch(ctx, "", nil, evs, nil)
	return results, err
}

// ApplyMarked is ApplyBatch for a consumer that must not judge from a Redis
// state that lost writes (doc/architecture.md, "Never trust Redis blindly").
// In the same pipeline, on every Redis node, it judges the events, then in
// one call checks the node's state marker — generation gen, the node the
// generation was named on, and no stream's watermark below its mark's From —
// and raises the watermarks to each mark's To. If the check fails (Redis
// lost writes, or a rebuild began), or a family was restored by another
// generation, it returns a *StaleError (errors.Is
// ErrStale) and no results: the caller must not use any decision of this
// batch, and must not judge again until Redis is rebuilt (see BeginRebuild).
// The batch's scripts may still have run on the untrusted state; the rebuild
// replaces every key they touched.
func (e *Engine) ApplyMarked(ctx context.Context, gen string, marks []Mark, evs []Event) ([]Result, error) {
	results, _, err := e.JudgeMarked(ctx, gen, marks, evs, nil)
	return results, err
}

// JudgeMarked is ApplyMarked for a batch of events and grant steps judged
// in one pipeline (the events first, then the steps, each in order): what a
// group commit of synchronous decisions and grants sends. An
// *UnrestoredError names the events (Pending) and steps (GrantPending) not
// judged.
func (e *Engine) JudgeMarked(ctx context.Context, gen string, marks []Mark, evs []Event, ops []GrantOp) ([]Result, []GrantResult, error) {
	if gen == "" {
		return nil, nil, fmt.Errorf("%w: empty state generation", ErrInvalid)
	}
	if err := validMarks(marks); err != nil {
		return nil, nil, err
	}
	return e.judgeBatch(ctx, gen, marks, evs, ops)
}

// call is one script call of a batch: an event's apply.lua or a grant
// step's grant.lua.
type call struct {
	fid    int64
	script *redis.Script
	keys   []string
	args   []any
}

func (e *Engine) judgeBatch(ctx context.Context, gen string, marks []Mark, evs []Event, ops []GrantOp) (results []Result, grants []GrantResult, err error) {
	var replicas int
	if e.hooks.OnApply != nil {
		start := time.Now()
		defer func() {
			e.hooks.OnApply(ApplyInfo{Events: len(evs), Grants: len(ops), Duration: time.Since(start), Err: err, Replicas: replicas})
		}()
	}
	for i, ev := range evs {
		if err := ev.validate(); err != nil {
			return nil, nil, &EventError{Index: i, Err: err}
		}
	}
	for i, op := range ops {
		if err := op.Validate(); err != nil {
			return nil, nil, &GrantError{Index: i, Err: err}
		}
	}
	guarded := gen != ""
	if len(evs)+len(ops) == 0 && !guarded {
		return nil, nil, nil
	}
	var markers []string
	if guarded {
		if markers, err = e.markerKeys(ctx); err != nil {
			return nil, nil, err
		}
	}
	bucket := e.bucket(e.now())
	calls := make([]call, 0, len(evs)+len(ops))
	for _, ev := range evs {
		ks, args := e.applyCall(ev, bucket, gen)
		calls = append(calls, call{ev.FamilyID, e.apply, ks, args})
	}
	if len(ops) > 0 {
		accepted, _, _ := e.AcceptedMonths()
		for _, op := range ops {
			ks, args := e.grantCall(op, bucket, gen, accepted)
			calls = append(calls, call{op.FamilyID, e.grant, ks, args})
		}
	}
	var cmds []*redis.Cmd
	if e.ack.replicas > 0 && len(calls) > 0 {
		if cmds, err = e.runAckedMarked(ctx, gen, marks, markers, calls, &replicas); err != nil {
			return nil, nil, err
		}
	} else if cmds, err = e.runBatch(ctx, gen, marks, markers, calls); err != nil {
		return nil, nil, err
	}
	return e.results(cmds, evs, ops, gen)
}

// runBatch runs calls in one pipeline, followed when guarded (markers set)
// by one state script call per marker that checks the marker and advances
// it (state.lua's guard: one round trip and one script call per node
// beside the batch's own, doc/redis-keys.md), and reads the guard.
func (e *Engine) runBatch(ctx context.Context, gen string, marks []Mark, markers []string, calls []call) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	guards := make([]*redis.Cmd, len(markers))
	run := func(idx []int) error {
		_, err := e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range idx {
				c := calls[i]
				cmds[i] = c.script.EvalSha(ctx, p, c.keys, c.args...)
			}
			for i, k := range markers {
				guards[i] = stateScript.EvalSha(ctx, p, []string{k}, markArgs("guard", gen, k, marks)...)
			}
			return nil
		})
		return err
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	if err := run(all); err != nil {
		noScript := func(c *redis.Cmd) bool { return c.Err() != nil && redis.HasErrorPrefix(c.Err(), "NOSCRIPT") }
		var missing []int
		for i, c := range cmds {
			if noScript(c) {
				missing = append(missing, i)
			}
		}
		if len(missing) == 0 && !slices.ContainsFunc(guards, noScript) {
			return nil, fmt.Errorf("quota: apply: %w", err)
		}
		// Redis lost its scripts (a restart): load them and run again what
		// did not run; the guard runs again after it.
		for _, s := range []*redis.Script{e.apply, e.grant, stateScript} {
			if err := s.Load(ctx, e.rdb).Err(); err != nil {
				return nil, fmt.Errorf("quota: load scripts: %w", err)
			}
		}
		if err := run(missing); err != nil {
			return nil, fmt.Errorf("quota: apply: %w", err)
		}
	}
	if len(markers) > 0 {
		if err := guardResult("guard", guards); err != nil {
			return nil, err
		}
	}
	return cmds, nil
}

// results reads a batch's replies: the events' (apply.lua), then the grant
// steps'. An event or step of a family another generation restored (or
// none, in a generation restored on touch) was not judged: in a generation
// restored on touch (OnTouch) that is an *UnrestoredError listing them,
// with the others' results; else the state is stale.
func (e *Engine) results(cmds []*redis.Cmd, evs []Event, ops []GrantOp, gen string) ([]Result, []GrantResult, error) {
	results := make([]Result, len(evs))
	grants := make([]GrantResult, len(ops))
	var un *UnrestoredError
	unrestored := func(fid int64, by string) error {
		if !OnTouch(gen) && FamilyNeeds(gen, by) != NeedSettle {
			return &StaleError{Reason: fmt.Sprintf("family %d was restored by state generation %s, not %s", fid, by, gen)}
		}
		if un == nil {
			un = &UnrestoredError{Generation: gen, Results: results, GrantResults: grants, Seen: map[int64]string{}}
		}
		if !slices.Contains(un.Families, fid) {
			un.Families = append(un.Families, fid)
			un.Seen[fid] = by
		}
		return nil
	}
	for i, ev := range evs {
		r, err := parseApply(cmds[i])
		if err != nil {
			return nil, nil, fmt.Errorf("quota: event %d: %w", i, err)
		}
		if r.unrestored {
			if err := unrestored(ev.FamilyID, r.restoredBy); err != nil {
				return nil, nil, err
			}
			un.Pending = append(un.Pending, i)
			continue
		}
		results[i] = r.Result
	}
	for i, op := range ops {
		r, err := e.parseGrantReply(cmds[len(evs)+i])
		if err != nil {
			return nil, nil, fmt.Errorf("quota: grant step %d: %w", i, err)
		}
		if r.unrestored {
			if err := unrestored(op.FamilyID, r.restoredBy); err != nil {
				return nil, nil, err
			}
			un.GrantPending = append(un.GrantPending, i)
			continue
		}
		grants[i] = r.GrantResult
	}
	if un != nil {
		return nil, nil, un
	}
	return results, grants, nil
}

// granted is one grant script's reply, as applied is an apply script's.
type granted struct {
	GrantResult
	unrestored bool
	restoredBy string
}

func (e *Engine) parseGrantReply(c *redis.Cmd) (granted, error) {
	code, s, err := scriptReply(c)
	if err != nil {
		return granted{}, err
	}
	if code == 2 {
		return granted{unrestored: true, restoredBy: s}, nil
	}
	r, err := decodeGrantResult(s, e.loc)
	r.Duplicate = code == 1
	return granted{GrantResult: r}, err
}

// scriptReply reads a script's {code, string} reply.
func scriptReply(c *redis.Cmd) (int64, string, error) {
	v, err := c.Slice()
	if err != nil {
		return 0, "", err
	}
	if len(v) != 2 {
		return 0, "", fmt.Errorf("unexpected script reply %v", v)
	}
	code, _ := v[0].(int64)
	s, _ := v[1].(string)
	return code, s, nil
}

// applied is one apply script's reply: a result, or, when the script
// refused to judge, the generation that restored the family ("" for none).
type applied struct {
	Result
	unrestored bool
	restoredBy string
}

func parseApply(c *redis.Cmd) (applied, error) {
	code, s, err := scriptReply(c)
	if err != nil {
		return applied{}, err
	}
	if code == 2 {
		return applied{unrestored: true, restoredBy: s}, nil
	}
	r, err := decodeResult(s)
	r.Duplicate = code == 1
	return applied{Result: r}, err
}
