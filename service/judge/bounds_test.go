package judge

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/store"
)

// Whatever a judge accepts, the truth can store: an event at every bound
// of the one rule (checkUsage, the processor's and the synchronous
// decisions') is judged — blocked by a rule naming its app too — and its
// usage-persist record is one the write-behind stores
// (store.DecodeUsageRecord); one past a bound is refused before it is
// judged. It failed before: an app id of 256 characters was judged and
// charged, and its record dead-lettered by the write-behind, so a rebuild
// judged its replay afresh.
func TestWhatTheJudgeAcceptsTheTruthStores(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	eng, err := quota.New(rdb, quota.WithLocation(time.UTC), quota.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := newProcessorConfig([]ProcessorOpt{WithClock(func() time.Time { return now }), WithLocation(time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	s := &cfg.common
	longest := strings.Repeat("a", policy.MaxAppIDLen)
	if _, err := eng.SetPlan(ctx, 1, 1<<30); err != nil {
		t.Fatal(err)
	}
	for _, cid := range []int64{2, 3} {
		if err := eng.AddMember(ctx, 1, cid); err != nil {
			t.Fatal(err)
		}
	}
	// Member 3 has the longest app blocked, and excepted keys of the
	// longest prefix name it too.
	if _, err := eng.SetConstraints(ctx, 1, 3, 1, map[string]string{policy.KeyBlockAppPrefix + longest: "1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := policy.ParseConstraints(map[string]string{policy.KeyExceptAppPrefix + longest: "202611201300"}); err != nil {
		t.Fatalf("an exception for the longest app id: %v", err)
	}
	usage := func(id string, cid int64, app string) envelope.Envelope[envelope.UsagePayload] {
		return envelope.New(id, now, envelope.UsagePayload{FamilyID: 1, CustomerID: cid, AppID: app, BytesUsed: 1000})
	}
	for _, tc := range []struct {
		name     string
		ev       envelope.Envelope[envelope.UsagePayload]
		decision policy.Decision
	}{
		{"longest app id", usage("evt_app", 2, longest), policy.Allowed},
		{"longest app id, blocked by a rule naming it", usage("evt_blocked", 3, longest), policy.BlockedApp},
		{"longest app id in Korean", usage("evt_ko", 2, strings.Repeat("앱", policy.MaxAppIDLen/len("앱"))), policy.Allowed},
		{"longest event id", usage(strings.Repeat("e", quota.MaxEventIDLen), 2, "com.youtube.app"), policy.Allowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.checkUsage(tc.ev, now); err != nil {
				t.Fatalf("refused: %v", err)
			}
			res, err := eng.ApplyBatch(ctx, []quota.Event{s.event(tc.ev)})
			if err != nil {
				t.Fatal(err)
			}
			if res[0].Decision != tc.decision {
				t.Fatalf("decision %s (rule %q), want %s", res[0].Decision, res[0].Rule, tc.decision)
			}
			recs, err := usageOutputs(tc.ev, tc.ev.Payload.BytesUsed, res[0], "t:bounds", time.UTC, policy.ThresholdAlertText)
			if err != nil {
				t.Fatal(err)
			}
			if recs[0].Topic != envelope.TopicUsagePersist {
				t.Fatalf("first record on %s, want %s", recs[0].Topic, envelope.TopicUsagePersist)
			}
			if _, err := store.DecodeUsageRecord(recs[0]); err != nil {
				t.Errorf("judged and charged, but the truth refuses its record: %v", err)
			}
		})
	}
	for _, tc := range []struct {
		name, app string
	}{
		{"one byte past the bound", longest + "a"},
		{"past usage_record.app_id", strings.Repeat("a", 256)},
		{"past the bound in Korean", strings.Repeat("앱", policy.MaxAppIDLen/len("앱")+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := usage("evt_long", 2, tc.app)
			var ie *InvalidEventError
			if err := s.checkUsage(ev, now); !errors.As(err, &ie) || ie.Field != "payload.appId" {
				t.Errorf("checkUsage: %v, want an *InvalidEventError at payload.appId", err)
			}
			if _, err := eng.ApplyBatch(ctx, []quota.Event{s.event(ev)}); !errors.Is(err, quota.ErrInvalid) {
				t.Errorf("the engine judged it: %v, want ErrInvalid", err)
			}
		})
	}
}
