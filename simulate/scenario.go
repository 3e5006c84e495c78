package simulate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/policy"
)

// StepKind says what a scenario step does.
type StepKind string

// The step kinds.
const (
	// StepUsage sends a DATA_USAGE event (topic usage-events).
	StepUsage StepKind = "USAGE"
	// StepPolicy is an owner replacing a member's constraints: a
	// POLICY_UPDATED event (topic policy-updated) carrying the whole new
	// constraint map and the next version.
	StepPolicy StepKind = "POLICY"
	// StepReplay sends an earlier step's usage event again, same eventId.
	StepReplay StepKind = "REPLAY"
)

// Scenario is a scripted acceptance story (doc/testing.md): a family to
// provision and steps to play in order, each with the outcome the system must
// produce. It is plain data (and JSON), so a test, the CLI and an end-to-end
// harness can all play it: provision Setup, send each step, and compare what
// the system decided with Step.Expect (Step.Check, or Run with a Target).
type Scenario struct {
	Name        string `json:"name"`  // e.g. "last-10mb"
	Story       int    `json:"story"` // the story's number in doc/testing.md
	Title       string `json:"title"`
	Description string `json:"description"`
	Setup       Setup  `json:"setup"`
	Steps       []Step `json:"steps"`
}

// Setup is the state to provision before the first step.
type Setup struct {
	FamilyID int64 `json:"familyId"`
	// PoolBytes is the family's monthly plan.
	PoolBytes int64 `json:"poolBytes"`
	// Thresholds are the family's alert levels; nil means the default 50/30/10.
	Thresholds policy.Thresholds `json:"thresholds,omitempty"`
	Members    []ScenarioMember  `json:"members"`
}

// ScenarioMember is a member to provision.
type ScenarioMember struct {
	CustomerID int64       `json:"customerId"`
	Name       string      `json:"name"` // "dad", "child1", …
	Role       policy.Role `json:"role"`
	// Constraints are the member's constraints at version 1 (none when empty).
	Constraints map[string]string `json:"constraints,omitempty"`
}

// Step is one action of a scenario.
type Step struct {
	Kind       StepKind  `json:"kind"`
	Note       string    `json:"note"`
	CustomerID int64     `json:"customerId"`
	At         time.Time `json:"at"` // the event's timestamp
	// EventID is the envelope's eventId: evt_… for usage, pol_… for policy.
	EventID string `json:"eventId"`
	// Usage: the app and the bytes used.
	AppID string `json:"appId,omitempty"`
	Bytes int64  `json:"bytes,omitempty"`
	// Policy: the member's whole constraint map after the change, its
	// version, and the owner who changed it.
	Constraints map[string]string `json:"constraints,omitempty"`
	Version     int64             `json:"version,omitempty"`
	ChangedBy   int64             `json:"changedBy,omitempty"`
	// Replay: the index of the step whose event is sent again.
	ReplayOf int    `json:"replayOf,omitempty"`
	Expect   Expect `json:"expect"`
}

// Expect is the outcome a step must have.
type Expect struct {
	// Decision is the decision on a usage event or replay; for a policy step,
	// the member's status right after the change (a blocked status must be
	// reported at once: retroactive enforcement).
	Decision policy.Decision `json:"decision"`
	// Remaining is the family pool after the event, when checked.
	Remaining *int64 `json:"remaining,omitempty"`
	// Crossed lists the thresholds (percent remaining, descending) the event
	// crossed; a replay reports its original result.
	Crossed []int `json:"crossed,omitempty"`
	// Duplicate is set for a replay.
	Duplicate bool `json:"duplicate,omitempty"`
	// Notify lists notifications the step must deliver to the family
	// (others, such as QUOTA_UPDATED, may come too). A duplicate must deliver
	// none: the processor may re-emit the original's notifications under
	// the same ids, and the notifier drops them.
	Notify []envelope.SubType `json:"notify,omitempty"`
}

// Outcome is what a system decided on one step.
type Outcome struct {
	Decision  policy.Decision
	Remaining int64
	Crossed   []int
	Duplicate bool
	// Notifications delivered to the family because of the step (after
	// deduplication); nil when the target does not observe notifications
	// (they are then not checked).
	Notifications []envelope.SubType
}

// Mismatch is a step whose outcome differs from its expectation.
type Mismatch struct {
	Step  int
	Note  string
	Field string // decision, remaining, crossed, duplicate, notifications
	Want  any
	Got   any
}

func (m *Mismatch) Error() string {
	return fmt.Sprintf("step %d (%s): %s: want %v, got %v", m.Step, m.Note, m.Field, m.Want, m.Got)
}

// Check compares got with the step's expectation and returns every
// difference as a *Mismatch, joined (Step is left 0; Run fills it in).
func (st Step) Check(got Outcome) error {
	var errs []error
	miss := func(field string, want, got any) {
		errs = append(errs, &Mismatch{Note: st.Note, Field: field, Want: want, Got: got})
	}
	e := st.Expect
	if got.Decision != e.Decision {
		miss("decision", e.Decision, got.Decision)
	}
	if e.Remaining != nil && got.Remaining != *e.Remaining {
		miss("remaining", *e.Remaining, got.Remaining)
	}
	if st.Kind != StepPolicy && !slices.Equal(e.Crossed, got.Crossed) {
		miss("crossed", e.Crossed, got.Crossed)
	}
	if got.Duplicate != e.Duplicate {
		miss("duplicate", e.Duplicate, got.Duplicate)
	}
	if got.Notifications != nil {
		switch {
		case e.Duplicate && len(got.Notifications) > 0:
			miss("notifications", "none", got.Notifications)
		default:
			for _, n := range e.Notify {
				if !slices.Contains(got.Notifications, n) {
					miss("notifications", e.Notify, got.Notifications)
					break
				}
			}
		}
	}
	return errors.Join(errs...)
}

// Target is a system a scenario runs against: the quota engine in a test, or
// the whole pipeline in an end-to-end harness.
type Target interface {
	// Provision creates the family of setup: pool, thresholds, members and
	// their version 1 constraints.
	Provision(ctx context.Context, setup Setup) error
	// Usage judges a usage event (also for replays).
	Usage(ctx context.Context, ev Event) (Outcome, error)
	// Policy applies a policy update and reports the member's status after
	// it as Outcome.Decision.
	Policy(ctx context.Context, ev envelope.Envelope[envelope.PolicyUpdatedPayload]) (Outcome, error)
}

// Run provisions the scenario on t and plays every step. It returns an error
// from t at once (wrapped with the step), and otherwise every *Mismatch,
// joined; nil means the system behaved as the story says.
func (s Scenario) Run(ctx context.Context, t Target) error {
	if err := t.Provision(ctx, s.Setup); err != nil {
		return fmt.Errorf("scenario %s: provision: %w", s.Name, err)
	}
	var errs []error
	for i, st := range s.Steps {
		var got Outcome
		var err error
		switch st.Kind {
		case StepUsage, StepReplay:
			var ev Event
			if ev, err = s.UsageEvent(i); err == nil {
				got, err = t.Usage(ctx, ev)
			}
		case StepPolicy:
			var ev envelope.Envelope[envelope.PolicyUpdatedPayload]
			if ev, err = s.PolicyEvent(i); err == nil {
				got, err = t.Policy(ctx, ev)
			}
		default:
			err = invalidf("unknown step kind %q", st.Kind)
		}
		if err != nil {
			return fmt.Errorf("scenario %s: step %d (%s): %w", s.Name, i, st.Note, err)
		}
		if err := st.Check(got); err != nil {
			for _, e := range unjoin(err) {
				var m *Mismatch
				if errors.As(e, &m) {
					m.Step = i
				}
				errs = append(errs, e)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("scenario %s: %w", s.Name, errors.Join(errs...))
	}
	return nil
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// UsageEvent returns the DATA_USAGE envelope of step i (a usage step, or a
// replay: the replayed step's event, same id).
func (s Scenario) UsageEvent(i int) (Event, error) {
	if i < 0 || i >= len(s.Steps) {
		return Event{}, invalidf("no step %d", i)
	}
	st := s.Steps[i]
	if st.Kind == StepReplay {
		if st.ReplayOf < 0 || st.ReplayOf >= i || s.Steps[st.ReplayOf].Kind != StepUsage {
			return Event{}, invalidf("step %d replays %d, not an earlier usage step", i, st.ReplayOf)
		}
		st = s.Steps[st.ReplayOf]
	}
	if st.Kind != StepUsage {
		return Event{}, invalidf("step %d is not a usage step", i)
	}
	return envelope.New(st.EventID, st.At, envelope.UsagePayload{
		FamilyID: s.Setup.FamilyID, CustomerID: st.CustomerID, AppID: st.AppID, BytesUsed: st.Bytes,
		Metadata: map[string]any{"deviceId": "device_scenario_" + strconv.FormatInt(st.CustomerID, 10), "networkType": "5G"},
	}), nil
}

// PolicyEvent returns the POLICY_UPDATED envelope of policy step i: the whole
// new constraint map with its version; PolicyKey, OldValue and NewValue are
// filled in when exactly one key changed.
func (s Scenario) PolicyEvent(i int) (envelope.Envelope[envelope.PolicyUpdatedPayload], error) {
	if i < 0 || i >= len(s.Steps) || s.Steps[i].Kind != StepPolicy {
		return envelope.Envelope[envelope.PolicyUpdatedPayload]{}, invalidf("step %d is not a policy step", i)
	}
	st := s.Steps[i]
	old := s.constraintsBefore(i, st.CustomerID)
	p := envelope.PolicyUpdatedPayload{
		FamilyID: s.Setup.FamilyID, TargetCustomerID: st.CustomerID, ChangedBy: st.ChangedBy,
		Version: st.Version, Constraints: maps.Clone(st.Constraints),
	}
	if p.Constraints == nil {
		p.Constraints = map[string]string{}
	}
	var changed []string
	for k := range keysOf(old, p.Constraints) {
		ov, inOld := old[k]
		nv, inNew := p.Constraints[k]
		if inOld != inNew || ov != nv {
			changed = append(changed, k)
		}
	}
	if len(changed) == 1 {
		k := changed[0]
		p.PolicyKey = k
		if v, ok := old[k]; ok {
			p.OldValue = &v
		}
		if v, ok := p.Constraints[k]; ok {
			p.NewValue = &v
		}
	}
	return envelope.New(st.EventID, st.At, p), nil
}

func keysOf(a, b map[string]string) map[string]struct{} {
	out := make(map[string]struct{}, len(a)+len(b))
	for k := range a {
		out[k] = struct{}{}
	}
	for k := range b {
		out[k] = struct{}{}
	}
	return out
}

// constraintsBefore is the member's constraint map before step i.
func (s Scenario) constraintsBefore(i int, cid int64) map[string]string {
	var c map[string]string
	for _, m := range s.Setup.Members {
		if m.CustomerID == cid {
			c = m.Constraints
		}
	}
	for _, st := range s.Steps[:i] {
		if st.Kind == StepPolicy && st.CustomerID == cid {
			c = st.Constraints
		}
	}
	return c
}

// Records returns the Kafka record of every step, in order: usage steps and
// replays to usage-events, policy steps to policy-updated, all keyed by the
// family (kafkarecord.New). Sending them in order and waiting for each
// decision plays the scenario through the real pipeline.
func (s Scenario) Records() ([]*kgo.Record, error) {
	out := make([]*kgo.Record, 0, len(s.Steps))
	for i, st := range s.Steps {
		var r *kgo.Record
		var err error
		if st.Kind == StepPolicy {
			var ev envelope.Envelope[envelope.PolicyUpdatedPayload]
			if ev, err = s.PolicyEvent(i); err == nil {
				r, err = kafkarecord.New(envelope.TopicPolicyUpdated, ev)
			}
		} else {
			var ev Event
			if ev, err = s.UsageEvent(i); err == nil {
				r, err = kafkarecord.New(envelope.TopicUsageEvents, ev)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("scenario %s: step %d: %w", s.Name, i, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// ScenarioConfig places the scenarios in time and in the id space.
type ScenarioConfig struct {
	// Now is the scenario's present: every step is at or before Now and less
	// than 24 h before it, so a consumer's dedupe window and future-event
	// check accept them. Zero: time.Now().
	Now time.Time
	// Location is the service time zone the night block is judged in.
	// Nil: Asia/Seoul.
	Location *time.Location
	// FamilyID is the family of the first scenario; scenario i (in the order
	// of ScenarioNames) uses FamilyID+i, and its members the customer ids of
	// CustomerID. Zero: 900,000,001, outside the default population.
	FamilyID int64
}

// DefaultScenarioFamilyID is the family of the first scenario by default.
const DefaultScenarioFamilyID = 900_000_001

// ScenarioNames lists the scenarios in order.
func ScenarioNames() []string {
	return []string{"last-10mb", "limit-cut-while-over", "night-block", "thresholds"}
}

// Scenarios builds every scenario. Event ids are fresh random ids on every
// call, so playing a scenario again is not mistaken for replays.
func Scenarios(cfg ScenarioConfig) ([]Scenario, error) {
	if cfg.Now.IsZero() {
		cfg.Now = time.Now()
	}
	cfg.Now = cfg.Now.Truncate(time.Millisecond)
	if cfg.Location == nil {
		loc, err := policy.LoadZone(policy.DefaultZone)
		if err != nil {
			return nil, err
		}
		cfg.Location = loc
	}
	if cfg.FamilyID == 0 {
		cfg.FamilyID = DefaultScenarioFamilyID
	}
	if cfg.FamilyID < 1 || cfg.FamilyID > 1<<50 {
		return nil, invalidf("scenario family id out of range: %d", cfg.FamilyID)
	}
	return []Scenario{
		last10MB(cfg, cfg.FamilyID),
		limitCut(cfg, cfg.FamilyID+1),
		nightBlock(cfg, cfg.FamilyID+2),
		thresholds(cfg, cfg.FamilyID+3),
	}, nil
}

// ScenarioByName builds the scenario called name (see ScenarioNames).
func ScenarioByName(name string, cfg ScenarioConfig) (Scenario, error) {
	all, err := Scenarios(cfg)
	if err != nil {
		return Scenario{}, err
	}
	for _, s := range all {
		if s.Name == name {
			return s, nil
		}
	}
	return Scenario{}, fmt.Errorf("%w: scenario %q (have %v)", ErrNotFound, name, ScenarioNames())
}

const (
	kib int64 = 1 << 10
	mib int64 = 1 << 20
	gib int64 = 1 << 30
)

func ptr(n int64) *int64 { return &n }

// family is the usual four: two parents (owners) and two children.
func family(fid int64) []ScenarioMember {
	return []ScenarioMember{
		{CustomerID: CustomerID(fid, 0), Name: "dad", Role: policy.RoleOwner},
		{CustomerID: CustomerID(fid, 1), Name: "mom", Role: policy.RoleOwner},
		{CustomerID: CustomerID(fid, 2), Name: "child1", Role: policy.RoleMember},
		{CustomerID: CustomerID(fid, 3), Name: "child2", Role: policy.RoleMember},
	}
}

func usage(note string, cid int64, at time.Time, app string, bytes int64, want Expect) Step {
	return Step{Kind: StepUsage, Note: note, CustomerID: cid, At: at, EventID: envelope.NewID(envelope.PrefixEvent),
		AppID: app, Bytes: bytes, Expect: want}
}

func policyStep(note string, cid, by, version int64, at time.Time, c map[string]string, want Expect) Step {
	return Step{Kind: StepPolicy, Note: note, CustomerID: cid, At: at, EventID: envelope.NewID(envelope.PrefixPolicy),
		Constraints: c, Version: version, ChangedBy: by, Expect: want}
}

func blocked() []envelope.SubType { return []envelope.SubType{envelope.SubCustomerBlocked} }
func alert() []envelope.SubType   { return []envelope.SubType{envelope.SubThresholdAlert} }

func last10MB(cfg ScenarioConfig, fid int64) Scenario {
	m := family(fid)
	now := cfg.Now
	return Scenario{
		Name: "last-10mb", Story: 1, Title: "Last 10 MB",
		Description: "A 10 MB pool; dad uses 5, mom 3, child1 8 and child2 4 MB in that order. " +
			"The first two are allowed (2 MB left); the others are blocked whole, never partly granted, " +
			"and get CUSTOMER_BLOCKED.",
		Setup: Setup{FamilyID: fid, PoolBytes: 10 * mib, Members: m},
		Steps: []Step{
			usage("dad 5 MB", m[0].CustomerID, now, "com.android.chrome", 5*mib,
				Expect{Decision: policy.Allowed, Remaining: ptr(5 * mib), Crossed: []int{50}, Notify: alert()}),
			usage("mom 3 MB", m[1].CustomerID, now, "com.kakao.talk", 3*mib,
				Expect{Decision: policy.Allowed, Remaining: ptr(2 * mib), Crossed: []int{30}, Notify: alert()}),
			usage("child1 8 MB", m[2].CustomerID, now, "com.youtube.app", 8*mib,
				Expect{Decision: policy.BlockedFamilyQuota, Remaining: ptr(2 * mib), Notify: blocked()}),
			usage("child2 4 MB", m[3].CustomerID, now, "com.roblox.client", 4*mib,
				Expect{Decision: policy.BlockedFamilyQuota, Remaining: ptr(2 * mib), Notify: blocked()}),
		},
	}
}

func limitCut(cfg ScenarioConfig, fid int64) Scenario {
	m := family(fid)
	child, dad := m[2].CustomerID, m[0].CustomerID
	now := cfg.Now
	pool := 100 * gib
	twoGB := map[string]string{policy.KeyLimitMonthly: strconv.FormatInt(2*gib, 10)}
	m[2].Constraints = maps.Clone(twoGB)
	s := Scenario{
		Name: "limit-cut-while-over", Story: 2, Title: "Limit cut while over",
		Description: "child1 has used 1.2 GB this month under a 2 GB monthly limit; dad cuts the limit to 500 MB. " +
			"child1 is reported blocked at once (status and CUSTOMER_BLOCKED) and the next event is " +
			"BLOCKED_LIMIT_MONTHLY; raising the limit back to 2 GB unblocks.",
		Setup: Setup{FamilyID: fid, PoolBytes: pool, Members: m},
	}
	step := gib / 10
	used := int64(0)
	for i := range 12 {
		used += step
		s.Steps = append(s.Steps, usage(fmt.Sprintf("child1 usage %d/12", i+1), child, now, "com.youtube.app", step,
			Expect{Decision: policy.Allowed, Remaining: ptr(pool - used)}))
	}
	s.Steps = append(s.Steps,
		policyStep("dad cuts the monthly limit to 500 MB", child, dad, 2, now,
			map[string]string{policy.KeyLimitMonthly: strconv.FormatInt(500*mib, 10)},
			Expect{Decision: policy.BlockedLimitMonthly, Notify: blocked()}),
		usage("child1 next event", child, now, "com.kakao.talk", mib,
			Expect{Decision: policy.BlockedLimitMonthly, Remaining: ptr(pool - used), Notify: blocked()}),
		policyStep("dad raises the limit back to 2 GB", child, dad, 3, now, twoGB,
			Expect{Decision: policy.Allowed}),
		usage("child1 after the raise", child, now, "com.kakao.talk", mib,
			Expect{Decision: policy.Allowed, Remaining: ptr(pool - used - mib)}),
	)
	return s
}

// latest returns the latest time at or before now that is hh:mm in loc.
func latest(now time.Time, loc *time.Location, hh, mm int) time.Time {
	n := now.In(loc)
	t := time.Date(n.Year(), n.Month(), n.Day(), hh, mm, 0, 0, loc)
	if t.After(now) {
		t = time.Date(n.Year(), n.Month(), n.Day()-1, hh, mm, 0, 0, loc)
	}
	return t
}

func nightBlock(cfg ScenarioConfig, fid int64) Scenario {
	m := family(fid)
	child := m[2].CustomerID
	m[2].Constraints = map[string]string{policy.KeyBlockTimeStart: "2200", policy.KeyBlockTimeEnd: "0700"}
	at := func(hh, mm int) time.Time { return latest(cfg.Now, cfg.Location, hh, mm) }
	step := func(hh, mm int, want policy.Decision) Step {
		e := Expect{Decision: want}
		if want.Blocked() {
			e.Notify = blocked()
		}
		return usage(fmt.Sprintf("child1 at %02d:%02d", hh, mm), child, at(hh, mm), "com.youtube.app", mib, e)
	}
	return Scenario{
		Name: "night-block", Story: 3, Title: "Night block 22:00–07:00",
		Description: "child1 has a night block from 22:00 to 07:00 in the service zone: events at 21:59 and 07:00 " +
			"are allowed, 22:00, 00:00 and 06:59 are BLOCKED_TIME. Each time is its latest occurrence before now, " +
			"judged at the event's own timestamp.",
		Setup: Setup{FamilyID: fid, PoolBytes: 10 * gib, Members: m},
		Steps: []Step{
			step(21, 59, policy.Allowed),
			step(22, 0, policy.BlockedTime),
			step(0, 0, policy.BlockedTime),
			step(6, 59, policy.BlockedTime),
			step(7, 0, policy.Allowed),
		},
	}
}

func thresholds(cfg ScenarioConfig, fid int64) Scenario {
	m := family(fid)
	dad, child := m[0].CustomerID, m[2].CustomerID
	now := cfg.Now
	pool := 100 * mib
	s := Scenario{
		Name: "thresholds", Story: 4, Title: "Threshold alerts",
		Description: "A 100 MB pool with alerts at 50, 30 and 10 % remaining: each fires exactly once, " +
			"also when the pool hovers just below a boundary and when an event is replayed.",
		Setup: Setup{FamilyID: fid, PoolBytes: pool, Thresholds: policy.DefaultThresholds(), Members: m},
	}
	rem := pool
	add := func(note string, cid, bytes int64, crossed ...int) {
		rem -= bytes
		want := Expect{Decision: policy.Allowed, Remaining: ptr(rem), Crossed: crossed}
		if len(crossed) > 0 {
			want.Notify = alert()
		}
		s.Steps = append(s.Steps, usage(note, cid, now, "com.youtube.app", bytes, want))
	}
	add("49 MB: 51 % left", child, 49*mib)
	add("1 MB: exactly 50 % left", child, mib, 50)
	add("1 byte: hovering below 50 %", dad, 1)
	add("1 KiB: still hovering", dad, kib)
	s.Steps = append(s.Steps, Step{Kind: StepReplay, Note: "replay of the 50 % event", CustomerID: child, At: now,
		ReplayOf: 1, EventID: s.Steps[1].EventID,
		Expect: Expect{Decision: policy.Allowed, Crossed: []int{50}, Duplicate: true}})
	add("20 MB: below 30 %", child, 20*mib, 30)
	add("25 MB: below 10 %", child, 25*mib, 10)
	add("3 MB: hovering below 10 %", dad, 3*mib)
	s.Steps = append(s.Steps, usage("2 MB more than is left", child, now, "com.youtube.app", 2*mib,
		Expect{Decision: policy.BlockedFamilyQuota, Remaining: ptr(rem), Notify: blocked()}))
	return s
}
