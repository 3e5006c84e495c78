package pipebench

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/dabom/dpcs/service"
	"github.com/dabom/dpcs/simulate"
)

// With the notifier, every step reports the notifications it handled and
// their latency to the live subscribers, across a change of the processor
// count (new deployables, new hub, subscribers attached again).
func TestRunWithNotifier(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the pipeline")
	}
	ctx := context.Background()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(service.DefaultPartitions, service.Topics()...))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
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
}
