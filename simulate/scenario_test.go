package simulate_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/simulate"
)

// quotaTarget plays scenarios against the real Lua quota engine (on
// miniredis): it proves the scenarios' expectations are those of the engine.
type quotaTarget struct {
	e       *quota.Engine
	catalog policy.Catalog
}

func newQuotaTarget(t *testing.T, now time.Time) *quotaTarget {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	e, err := quota.New(rdb, quota.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	return &quotaTarget{e: e, catalog: policy.NewCatalog(policy.DefaultApps())}
}

func (q *quotaTarget) Provision(ctx context.Context, s simulate.Setup) error {
	if _, err := q.e.SetPlan(ctx, s.FamilyID, s.PoolBytes); err != nil {
		return err
	}
	if s.Thresholds != nil {
		if err := q.e.SetThresholds(ctx, s.FamilyID, s.Thresholds); err != nil {
			return err
		}
	}
	for _, m := range s.Members {
		if err := q.e.AddMember(ctx, s.FamilyID, m.CustomerID); err != nil {
			return err
		}
		if len(m.Constraints) > 0 {
			if _, err := q.e.SetConstraints(ctx, s.FamilyID, m.CustomerID, 1, m.Constraints); err != nil {
				return err
			}
		}
	}
	return nil
}

func (q *quotaTarget) Usage(ctx context.Context, ev simulate.Event) (simulate.Outcome, error) {
	p := ev.Payload
	r, err := q.e.Apply(ctx, quota.Event{ID: ev.EventID, FamilyID: p.FamilyID, CustomerID: p.CustomerID, Bytes: p.BytesUsed,
		AppID: p.AppID, Category: q.catalog.Category(p.AppID), At: ev.Timestamp})
	return simulate.Outcome{Decision: r.Decision, Remaining: r.Remaining, Crossed: r.Crossed, Duplicate: r.Duplicate}, err
}

func (q *quotaTarget) Policy(ctx context.Context, ev envelope.Envelope[envelope.PolicyUpdatedPayload]) (simulate.Outcome, error) {
	p := ev.Payload
	rules, err := policy.ParseConstraints(p.Constraints)
	if err != nil {
		return simulate.Outcome{}, err
	}
	enf, err := q.e.Enforce(ctx, p.FamilyID, p.TargetCustomerID, p.Version, rules)
	if err == nil && !enf.Applied {
		err = errors.New("policy update not applied")
	}
	return simulate.Outcome{Decision: enf.Status.Decision}, err
}

func kst(t *testing.T, s string) time.Time {
	t.Helper()
	loc, _ := policy.LoadZone(policy.DefaultZone)
	tm, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// Every scenario, at several moments of the day (including just after
// midnight on the 1st, and in the middle of the night block), matches the
// quota engine step by step.
func TestScenariosAgainstQuotaEngine(t *testing.T) {
	for _, now := range []string{"2026-02-06 14:30", "2026-03-01 00:05", "2026-02-07 23:30", "2026-02-07 03:00", "2026-02-07 07:00"} {
		at := kst(t, now)
		all, err := simulate.Scenarios(simulate.ScenarioConfig{Now: at})
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != len(simulate.ScenarioNames()) {
			t.Fatalf("%d scenarios", len(all))
		}
		for i, s := range all {
			t.Run(now+"/"+s.Name, func(t *testing.T) {
				if s.Name != simulate.ScenarioNames()[i] || s.Story != i+1 || s.Setup.FamilyID != simulate.DefaultScenarioFamilyID+int64(i) {
					t.Errorf("scenario %d: %s story %d family %d", i, s.Name, s.Story, s.Setup.FamilyID)
				}
				for _, st := range s.Steps {
					if st.At.After(at) || at.Sub(st.At) >= 24*time.Hour {
						t.Errorf("step %q at %s: not within the 24 h before %s", st.Note, st.At, at)
					}
				}
				if err := s.Run(context.Background(), newQuotaTarget(t, at)); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

// A target that decides differently gets every mismatch reported with the
// step and the field.
func TestScenarioReportsMismatches(t *testing.T) {
	at := kst(t, "2026-02-06 14:30")
	s, err := simulate.ScenarioByName("last-10mb", simulate.ScenarioConfig{Now: at})
	if err != nil {
		t.Fatal(err)
	}
	q := newQuotaTarget(t, at)
	lying := liar{q}
	err = s.Run(context.Background(), lying)
	var m *simulate.Mismatch
	if !errors.As(err, &m) || m.Step != 0 || m.Field != "decision" {
		t.Fatalf("Run: %v", err)
	}
	for _, want := range []string{"step 0 (dad 5 MB): decision", "step 1", "notifications", "crossed", "remaining"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	// A target error stops the run.
	if err := s.Run(context.Background(), failing{}); err == nil || !strings.Contains(err.Error(), "provision") {
		t.Errorf("provision failure: %v", err)
	}
	if _, err := simulate.ScenarioByName("nope", simulate.ScenarioConfig{}); !errors.Is(err, simulate.ErrNotFound) {
		t.Errorf("unknown scenario: %v", err)
	}
	if _, err := simulate.Scenarios(simulate.ScenarioConfig{FamilyID: -1}); !errors.Is(err, simulate.ErrInvalid) {
		t.Errorf("bad family: %v", err)
	}
}

type liar struct{ *quotaTarget }

func (l liar) Usage(ctx context.Context, ev simulate.Event) (simulate.Outcome, error) {
	o, err := l.quotaTarget.Usage(ctx, ev)
	o.Decision, o.Remaining, o.Crossed = policy.BlockedAccess, -1, []int{99}
	o.Notifications = []envelope.SubType{}
	return o, err
}

type failing struct{}

func (failing) Provision(context.Context, simulate.Setup) error { return errors.New("down") }
func (failing) Usage(context.Context, simulate.Event) (simulate.Outcome, error) {
	return simulate.Outcome{}, nil
}
func (failing) Policy(context.Context, envelope.Envelope[envelope.PolicyUpdatedPayload]) (simulate.Outcome, error) {
	return simulate.Outcome{}, nil
}

func TestStepCheckNotifications(t *testing.T) {
	st := simulate.Step{Kind: simulate.StepUsage, Expect: simulate.Expect{Decision: policy.BlockedFamilyQuota,
		Notify: []envelope.SubType{envelope.SubCustomerBlocked}}}
	ok := simulate.Outcome{Decision: policy.BlockedFamilyQuota,
		Notifications: []envelope.SubType{envelope.SubQuotaUpdated, envelope.SubCustomerBlocked}}
	if err := st.Check(ok); err != nil {
		t.Error(err)
	}
	if err := st.Check(simulate.Outcome{Decision: policy.BlockedFamilyQuota, Notifications: []envelope.SubType{}}); err == nil {
		t.Error("missing CUSTOMER_BLOCKED not reported")
	}
	if err := st.Check(simulate.Outcome{Decision: policy.BlockedFamilyQuota}); err != nil {
		t.Errorf("unobserved notifications checked: %v", err)
	}
	dup := simulate.Step{Kind: simulate.StepReplay, Expect: simulate.Expect{Decision: policy.Allowed, Duplicate: true}}
	if err := dup.Check(simulate.Outcome{Decision: policy.Allowed, Duplicate: true, Notifications: []envelope.SubType{envelope.SubThresholdAlert}}); err == nil {
		t.Error("a duplicate's notification not reported")
	}
}

// Records: usage steps and replays to usage-events, policy steps to
// policy-updated, all keyed by the family; replays reuse the id; policy
// events name the single changed key.
func TestScenarioRecords(t *testing.T) {
	cfg := simulate.ScenarioConfig{Now: kst(t, "2026-02-06 14:30")}
	all, _ := simulate.Scenarios(cfg)
	again, _ := simulate.Scenarios(cfg)
	for i, s := range all {
		rs, err := s.Records()
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != len(s.Steps) {
			t.Fatalf("%s: %d records", s.Name, len(rs))
		}
		for j, r := range rs {
			ev, err := kafkarecord.Decode(r)
			if err != nil {
				t.Fatal(err)
			}
			st := s.Steps[j]
			wantTopic := envelope.TopicUsageEvents
			if st.Kind == simulate.StepPolicy {
				wantTopic = envelope.TopicPolicyUpdated
			}
			if r.Topic != wantTopic || string(r.Key) != "90000000"+string(rune('1'+i)) || ev.EventID != st.EventID {
				t.Errorf("%s step %d: topic %s key %s id %s", s.Name, j, r.Topic, r.Key, ev.EventID)
			}
			if st.Kind == simulate.StepReplay && ev.EventID != s.Steps[st.ReplayOf].EventID {
				t.Errorf("replay id %s", ev.EventID)
			}
			if st.EventID == again[i].Steps[j].EventID {
				t.Errorf("event ids repeat across builds")
			}
		}
		// Plain data: JSON round trip.
		data, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back simulate.Scenario
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(s, back); diff != "" {
			t.Errorf("%s JSON round trip:\n%s", s.Name, diff)
		}
	}
	cut, _ := simulate.ScenarioByName("limit-cut-while-over", cfg)
	for i, st := range cut.Steps {
		if st.Kind != simulate.StepPolicy {
			continue
		}
		ev, err := cut.PolicyEvent(i)
		if err != nil {
			t.Fatal(err)
		}
		p := ev.Payload
		if p.PolicyKey != policy.KeyLimitMonthly || p.OldValue == nil || p.NewValue == nil || *p.NewValue != p.Constraints[policy.KeyLimitMonthly] || p.ChangedBy != simulate.CustomerID(cut.Setup.FamilyID, 0) {
			t.Errorf("policy event %+v", p)
		}
	}
	if _, err := cut.PolicyEvent(0); !errors.Is(err, simulate.ErrInvalid) {
		t.Errorf("PolicyEvent of a usage step: %v", err)
	}
	if _, err := cut.UsageEvent(12); !errors.Is(err, simulate.ErrInvalid) {
		t.Errorf("UsageEvent of a policy step: %v", err)
	}
	if _, err := cut.UsageEvent(99); !errors.Is(err, simulate.ErrInvalid) {
		t.Errorf("UsageEvent(99): %v", err)
	}
	bad := simulate.Scenario{Steps: []simulate.Step{{Kind: simulate.StepReplay, ReplayOf: 0}}}
	if _, err := bad.Records(); !errors.Is(err, simulate.ErrInvalid) {
		t.Errorf("replay of itself: %v", err)
	}
	if err := (simulate.Scenario{Steps: []simulate.Step{{Kind: "NAP"}}}).Run(context.Background(), failingOK{}); err == nil {
		t.Error("unknown kind accepted")
	}
}

type failingOK struct{ failing }

func (failingOK) Provision(context.Context, simulate.Setup) error { return nil }
