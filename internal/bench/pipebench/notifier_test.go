package pipebench

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service"
	"github.com/dabom/dpcs/service/judge"
	"github.com/dabom/dpcs/simulate"
)

// With the notifier, every step reports the notifications it handled and
// their latency to the live subscribers, across a change of the processor
// count (new deployables, new hub, subscribers attached again).
func TestRunWithNotifier(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the pipeline")
	}
	testenv.AwayFromMidnight(t)
	ctx := context.Background()
	kc := testenv.Kafka(t)
	_, rdb := testenv.Redis(t)
	db, err := service.Config{SQLitePath: filepath.Join(t.TempDir(), "n.db")}.SQL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pop, err := simulate.NewPopulation(7, simulate.WithFamilies(20), simulate.WithFirstFamilyID(7000))
	if err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	rep, err := Run(ctx, Config{
		Brokers: kc.ListenAddrs(), Redis: rdb, DB: db,
		Steps: []StepSpec{
			{Label: "30", Rate: 30, Population: pop, Processors: 1},
			{Label: "30, 2 proc.", Rate: 30, Population: pop, Processors: 2},
		},
		Warmup: 300 * time.Millisecond, Duration: 1500 * time.Millisecond, MaxBacklog: 100,
		Progress: &progress, CheckFamilies: 20, Notifier: true, NotifyFamilies: 20,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if rep.InvariantsErr != nil {
		t.Fatal(rep.InvariantsErr)
	}
	for _, s := range rep.Steps {
		if s.Notified <= 0 || s.Live == 0 || s.LiveP50 <= 0 || s.LiveP99 < s.LiveP50 {
			t.Errorf("step %s: notifier %.1f/s, %d live, p50 %s p99 %s\n%s", s.Label, s.Notified, s.Live, s.LiveP50, s.LiveP99, progress.String())
		}
	}
	if md := rep.Markdown("pipebench", ""); !strings.Contains(md, "| notifications/s |") || !strings.Contains(md, "| 30 | ") {
		t.Errorf("the report has no notifier table:\n%s", md)
	}
}

// The notifier benchmark's alert families: in a population a hundred times
// bigger, the first n families get AlertPlan, so a median event crosses
// their thresholds and the next ones block; smaller populations (the 1k
// comparison) and the other families keep their plans.
func TestAlertFamilies(t *testing.T) {
	ctx := context.Background()
	_, rdb := testenv.Redis(t)
	engine, err := quota.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := judge.NewState(engine)
	if err != nil {
		t.Fatal(err)
	}
	big, err := simulate.NewPopulation(1, simulate.WithFamilies(300), simulate.WithFirstFamilyID(10_000))
	if err != nil {
		t.Fatal(err)
	}
	small, err := simulate.NewPopulation(1, simulate.WithFamilies(100), simulate.WithFirstFamilyID(20_000))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*simulate.Population{big, small} {
		if _, err := Provision(ctx, eng, p, 2); err != nil {
			t.Fatal(err)
		}
	}
	if err := alertFamilies(ctx, eng, []*simulate.Population{big, small}, 3); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		fid   int64
		alert bool
	}{{10_000, true}, {10_002, true}, {10_003, false}, {20_000, false}} {
		fs, err := engine.Family(ctx, tc.fid)
		if err != nil {
			t.Fatal(err)
		}
		if (fs.Plan == AlertPlan) != tc.alert {
			t.Errorf("family %d: plan %d, alert family %v", tc.fid, fs.Plan, tc.alert)
		}
	}
	f, err := big.Family(10_000)
	if err != nil {
		t.Fatal(err)
	}
	ev := quota.Event{ID: "e1", FamilyID: f.ID, CustomerID: f.Members[0].CustomerID, Bytes: 1 << 20, AppID: "com.youtube.app", At: time.Now()}
	r, err := engine.Apply(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	if r.Decision != policy.Allowed || len(r.Crossed) == 0 {
		t.Errorf("a median event on an alert family: %+v, want ALLOWED with a threshold crossed", r)
	}
	ev.ID, ev.Bytes = "e2", 2<<20
	if r, err = engine.Apply(ctx, ev); err != nil || r.Decision != policy.BlockedFamilyQuota {
		t.Errorf("the next event: %+v, %v, want BLOCKED_FAMILY_QUOTA", r, err)
	}
}
