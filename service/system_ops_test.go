package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/api/backoffice"
)

// TestSystemBackOffice: the all-in-one wires the back office: the
// operations view reads the processor's metrics from the shared registry
// and Kafka's lags; a malformed usage event the processor dead-letters shows
// in the dead-letter browser with its reason and origin, and its replay is
// judged again (and dead-lettered again, naming the record replayed).
func TestSystemBackOffice(t *testing.T) {
	testenv.SkipShort(t, "the all-in-one's back office under simulated traffic")
	ctx := context.Background()
	s, err := StartSystem(ctx, testSystemConfig(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	base := "http://" + s.HTTPAddr
	var tok struct{ AccessToken string }
	if err := json.Unmarshal([]byte(do(t, "POST", base+"/auth/token", "", fmt.Sprintf(`{"login":"%d","password":"%s"}`, DemoAdminID, DemoPassword), http.StatusOK)), &tok); err != nil {
		t.Fatal(err)
	}
	admin := tok.AccessToken

	// Family search by a phone typed without its hyphens.
	if fs := do(t, "GET", base+"/admin/families?q=01000000100", admin, "", http.StatusOK); !strings.Contains(fs, fmt.Sprintf(`"id":%d`, DemoFamilyID)) {
		t.Errorf("search by phone: %s", fs)
	}

	// Rates need two samples at least a second apart: ask until the view
	// has a window and decisions in it, and Kafka answered in time (on a
	// loaded machine it may not, once).
	var v backoffice.OperationsView
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		v = backoffice.OperationsView{}
		if err := json.Unmarshal([]byte(do(t, "GET", base+"/admin/operations", admin, "", http.StatusOK)), &v); err != nil {
			t.Fatal(err)
		}
		if v.WindowSeconds > 0 && v.DecisionsPerSecond[string(policy.Allowed)] > 0 && v.Kafka == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 60 s for a view with ALLOWED decisions per second and Kafka figures; last: %+v", v)
		}
	}
	if v.ProcessorLag == nil || v.RedisStale == nil || *v.RedisStale || len(v.Sources) != 1 || !v.Sources[0].OK {
		t.Errorf("operations view %+v", v)
	}

	// A malformed usage event is dead-lettered by the processor (the
	// simulator stopped, so it does not wait behind its backlog).
	if err := s.Simulator.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.producer.ProduceSync(ctx, &kgo.Record{Topic: envelope.TopicUsageEvents, Key: []byte("bad"), Value: []byte(`{"not":"an envelope"}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	list := func() backoffice.DeadLetterList {
		t.Helper()
		var l backoffice.DeadLetterList
		if err := json.Unmarshal([]byte(do(t, "GET", base+"/admin/dead-letters?topic=usage-events.DLT", admin, "", http.StatusOK)), &l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	waitRecords := func(n int) backoffice.DeadLetterList {
		t.Helper()
		var l backoffice.DeadLetterList
		// 4 min: behind the simulator's backlog, under -race on a loaded
		// machine (2 min was seen passed at a load average of 15).
		for deadline := time.Now().Add(4 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
			if l = list(); len(l.Records) >= n {
				return l
			}
			if time.Now().After(deadline) {
				t.Fatalf("waited 4 min for %d records in usage-events.DLT; saw %+v", n, l.Records)
			}
		}
	}
	first := waitRecords(1).Records[0]
	if first.OriginTopic != envelope.TopicUsageEvents || first.Reason == "" || first.Payload != `{"not":"an envelope"}` || first.Key != "bad" {
		t.Fatalf("dead letter %+v", first)
	}
	sel := fmt.Sprintf(`{"records":[{"topic":%q,"partition":%d,"offset":%d}]}`, first.Topic, first.Partition, first.Offset)
	if r := do(t, "POST", base+"/admin/dead-letters/replay", admin, sel, http.StatusOK); !strings.Contains(r, `"status":"replayed"`) {
		t.Fatalf("replay: %s", r)
	}
	again := waitRecords(2).Records[0]
	if again.Offset == first.Offset && again.Partition == first.Partition || again.OriginOffset == first.OriginOffset && again.OriginPartition == first.OriginPartition {
		t.Errorf("the replayed record was not judged again: %+v", again)
	}
	if again.OriginPartition != first.OriginPartition {
		t.Errorf("replayed to partition %d, read from %d", again.OriginPartition, first.OriginPartition)
	}
	if want := fmt.Sprintf("%s/%d/%d", first.Topic, first.Partition, first.Offset); again.ReplayedFrom != want {
		t.Errorf("replayedFrom %q, want %q", again.ReplayedFrom, want)
	}
	if r := do(t, "POST", base+"/admin/dead-letters/replay", admin, sel, http.StatusOK); !strings.Contains(r, `"status":"already-replayed"`) {
		t.Errorf("second replay: %s", r)
	}
}
