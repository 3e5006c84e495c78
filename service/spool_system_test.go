package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/service/recovery"
)

// The deployable's POST /decisions has no configuration without the spool
// (issue #36, item 5: without one, a batch Kafka does not take waits, and a
// server stopped then leaves the charge in Redis alone until a rebuild).
// Kafka refuses every record (NOT_ENOUGH_REPLICAS, a partition short of
// in-sync replicas): the decision is still answered, its records are in the
// SQL outbox, and once Kafka takes records again the relay publishes them
// and SQL holds the charge the caller was told — Redis = SQL.
func TestSystemDecisionsSpoolWhileKafkaRefuses(t *testing.T) {
	testenv.SkipShort(t, "the all-in-one with its Kafka refusing records")
	testenv.AwayFromMidnight(t) // the invariants compare this month's counters
	ctx := context.Background()
	cfg := testSystemConfig(t)
	cfg.SimulatorRate = 0 // only the gateway's decision
	s, err := StartSystem(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	base := "http://" + s.HTTPAddr
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the all-in-one is not ready after 30 s")
		}
	}
	var down atomic.Bool
	down.Store(true)
	testenv.RefuseProduces(s.kafka, kerr.NotEnoughReplicas.Code, down.Load)
	const id = "evt_spooled_system"
	body := fmt.Sprintf(`{"events":[{"eventId":%q,"timestamp":%q,"familyId":100,"customerId":1002,"appId":"com.kakao.talk","bytesUsed":1048576}]}`,
		id, time.Now().UTC().Format(time.RFC3339Nano))
	got := do(t, "POST", base+"/decisions", s.GatewayToken, body, http.StatusOK)
	var ans struct {
		Decisions []struct{ Decision string }
	}
	if err := json.Unmarshal([]byte(got), &ans); err != nil || len(ans.Decisions) != 1 || ans.Decisions[0].Decision != "ALLOWED" {
		t.Fatalf("the decision while Kafka refuses records: %s (%v)", got, err)
	}
	if !s.Decisions.Spooling() {
		t.Error("answered while Kafka refuses records, but not spooling")
	}
	var rows int
	if err := s.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox WHERE topic = ? AND payload LIKE ?`,
		envelope.TopicUsagePersist, "%"+id+"%").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows == 0 {
		t.Fatalf("no outbox row of %s: answered, but its records are neither in Kafka nor in SQL", id)
	}
	down.Store(false)
	// The relay publishes the spooled rows and the write-behind stores the
	// charge: SQL holds what the caller was told.
	var last error
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var n int
		if last = s.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM usage_record WHERE event_id = ?`, id).Scan(&n); last == nil && n == 1 {
			if last = recovery.CheckInvariants(ctx, s.State, s.DB, []int64{100}); last == nil {
				break
			}
		} else if last == nil {
			last = fmt.Errorf("%d usage_record rows of %s", n, id)
		}
		if time.Now().After(deadline) {
			t.Fatalf("60 s after Kafka took records again: %v", last)
		}
	}
	if strings.Contains(got, `"duplicate":true`) {
		t.Errorf("the first answer is flagged duplicate: %s", got)
	}
}
