package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/simulate"
)

// Acceptance stories 1–5 (doc/testing.md) on the whole system
// (service.StartSystem), once per backend: stories 1–4 are the simulator's
// scenarios, played step by step with every step's decision, pool, crossings,
// duplicate flag and notifications compared with the scenario's expectation;
// story 5 delivers every event three times. After each story the SQL history,
// Redis, the inbox, the SSE stream and the API's reports must agree
// (pipeline.verify).
func TestStories(t *testing.T) {
	testenv.SkipShort(t, "the acceptance stories on the whole system (make e2e runs them on real servers too)")
	t.Parallel()
	var runs []subtest
	for _, b := range backends() {
		runs = append(runs, subtest{b.name, func(t *testing.T) {
			s := startStack(t, b)
			scenarios, err := simulate.Scenarios(simulate.ScenarioConfig{Now: time.Now(), Location: s.zone, FamilyID: s.base})
			if err != nil {
				t.Fatal(err)
			}
			// The stories run at the same time, each in its own family, as
			// families do.
			var stories []subtest
			for _, sc := range scenarios {
				stories = append(stories, subtest{fmt.Sprintf("%d-%s", sc.Story, sc.Name), func(t *testing.T) { playScenario(t, s, sc) }})
			}
			stories = append(stories, subtest{"5-duplicates", func(t *testing.T) { storyDuplicates(t, s) }})
			concurrently(t, stories)
		}})
	}
	concurrently(t, runs)
}

// subtest is a named test function.
type subtest struct {
	name string
	fn   func(*testing.T)
}

// concurrently runs the subtests at the same time and returns when all
// returned. t.Run may be called from several goroutines; unlike t.Parallel
// this does not wait for a -parallel slot (GOMAXPROCS), which matters
// because the stories mostly wait — for Kafka, and for the write-behind's
// 5 s batches.
func concurrently(t *testing.T, tests []subtest) {
	var wg sync.WaitGroup
	for _, st := range tests {
		wg.Go(func() { t.Run(st.name, st.fn) })
	}
	wg.Wait()
}

// playScenario plays sc through a pipeline and verifies what it left behind.
func playScenario(t *testing.T, s *stack, sc simulate.Scenario) {
	ctx := context.Background()
	p := newPipeline(s)
	defer p.close()
	if err := sc.Run(ctx, p); err != nil {
		t.Error(err)
	}
	if err := p.verify(ctx); err != nil {
		t.Errorf("after the story:\n%v", err)
	}
	if t.Failed() {
		t.Logf("story %d %q, family %d, step by step:\n%s", sc.Story, sc.Title, sc.Setup.FamilyID, p.steps(sc))
	}
}

// duplicatesScenario is story 5's family and events: a 100 MiB pool, ten
// 10 MiB events (crossing 50, 30 and 10 % on the way to empty) and a last
// 1 MiB one that no longer fits. Delivered three times each, any event
// counted twice would empty the pool early and change the decisions.
func duplicatesScenario(s *stack) simulate.Scenario {
	fid := s.base + 4
	members := []simulate.ScenarioMember{
		{CustomerID: simulate.CustomerID(fid, 0), Name: "dad", Role: policy.RoleOwner},
		{CustomerID: simulate.CustomerID(fid, 1), Name: "mom", Role: policy.RoleOwner},
		{CustomerID: simulate.CustomerID(fid, 2), Name: "child1", Role: policy.RoleMember},
		{CustomerID: simulate.CustomerID(fid, 3), Name: "child2", Role: policy.RoleMember},
	}
	sc := simulate.Scenario{Name: "duplicates", Story: 5, Title: "Duplicates",
		Setup: simulate.Setup{FamilyID: fid, PoolBytes: 100 << 20, Members: members}}
	now := time.Now().Truncate(time.Millisecond)
	crossings := map[int64][]int{50: {50}, 30: {30}, 10: {10}}
	for i := range 10 {
		rem := int64(90-10*i) << 20
		e := simulate.Expect{Decision: policy.Allowed, Remaining: &rem, Crossed: crossings[rem>>20]}
		if e.Crossed != nil {
			e.Notify = []envelope.SubType{envelope.SubThresholdAlert}
		}
		sc.Steps = append(sc.Steps, simulate.Step{Kind: simulate.StepUsage, Note: fmt.Sprintf("%s 10 MiB", members[i%4].Name),
			CustomerID: members[i%4].CustomerID, At: now, EventID: envelope.NewID(envelope.PrefixEvent),
			AppID: "com.youtube.app", Bytes: 10 << 20, Expect: e})
	}
	zero := int64(0)
	sc.Steps = append(sc.Steps, simulate.Step{Kind: simulate.StepUsage, Note: "child2 1 MiB, more than is left",
		CustomerID: members[3].CustomerID, At: now, EventID: envelope.NewID(envelope.PrefixEvent),
		AppID: "com.roblox.client", Bytes: 1 << 20,
		Expect: simulate.Expect{Decision: policy.BlockedFamilyQuota, Remaining: &zero,
			Notify: []envelope.SubType{envelope.SubCustomerBlocked}}})
	return sc
}

// Story 5: the same event delivered three times is deducted once,
// persisted once and notified once. The first two copies of every event go
// in one burst (the processor sees them in one poll); the third copies come
// once the first were judged, persisted and notified, so the write-behind
// and the notifier meet them against stored state.
func storyDuplicates(t *testing.T, s *stack) {
	ctx := context.Background()
	sc := duplicatesScenario(s)
	p := newPipeline(s)
	defer p.close()
	if err := p.Provision(ctx, sc.Setup); err != nil {
		t.Fatal(err)
	}
	evs := make([]simulate.Event, len(sc.Steps))
	for i := range sc.Steps {
		ev, err := sc.UsageEvent(i)
		if err != nil {
			t.Fatal(err)
		}
		evs[i] = ev
	}
	replays, err := deliverThrice(ctx, s, p, evs)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := replays, int64(2*len(evs)); got != want {
		t.Errorf("processor recognised %d replays, want %d", got, want)
	}
	for i, st := range sc.Steps {
		o, err := p.judged(evs[i].EventID)
		if err != nil {
			t.Fatal(err)
		}
		// Per-step notifications and the duplicate flag cannot be told
		// apart in a burst; verify counts the inbox and the stream.
		p.trace = append(p.trace, fmt.Sprintf("%s rem %s crossed %v (3 deliveries)", o.Decision, mib(o.Remaining), o.Crossed))
		if err := st.Check(o); err != nil {
			t.Errorf("step %d: %v", i, err)
		}
	}
	if err := p.verify(ctx); err != nil {
		t.Errorf("after the story:\n%v", err)
	}
	if t.Failed() {
		t.Logf("story 5, family %d, every event delivered 3 times:\n%s", sc.Setup.FamilyID, p.steps(sc))
	}
}

// deliverThrice delivers evs three times and returns how many replays the
// processor recognised meanwhile: two copies of each in one burst, then,
// once those were judged, notified and persisted, the third copies.
func deliverThrice(ctx context.Context, s *stack, p *pipeline, evs []simulate.Event) (int64, error) {
	var twice []simulate.Event
	for _, ev := range evs {
		twice = append(twice, ev, ev)
	}
	n, err := replaysDuring(ctx, s, func() error { return p.deliver(ctx, twice...) })
	if err != nil {
		return n, err
	}
	if err := s.settle(ctx, true); err != nil {
		return n, err
	}
	m, err := replaysDuring(ctx, s, func() error { return p.deliver(ctx, evs...) })
	return n + m, err
}

// replaysDuring runs deliver, waits until the processor judged it, and
// returns how many replays the processor counted meanwhile. It holds the
// stack's replay counter exclusively.
func replaysDuring(ctx context.Context, s *stack, deliver func() error) (int64, error) {
	s.replays.Lock()
	defer s.replays.Unlock()
	before, err := s.duplicates(ctx)
	if err != nil {
		return 0, err
	}
	if err := deliver(); err != nil {
		return 0, err
	}
	if err := s.settle(ctx, false); err != nil {
		return 0, err
	}
	after, err := s.duplicates(ctx)
	return after - before, err
}
