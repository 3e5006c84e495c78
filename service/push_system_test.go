package service

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/internal/pushtest"
	"github.com/dabom/dpcs/notify"
	"github.com/dabom/dpcs/service/api"
)

// Web Push through the all-in-one: with no keys configured it generates a
// pair and serves its public key; a child and an owner subscribe through
// the API; the owner blocks the child and the child's next usage event
// makes a CUSTOMER_BLOCKED that reaches both browsers, VAPID-signed and
// encrypted for each (the push service verifies and decrypts); after a
// restart on the same data dir the key and the subscriptions are the same.
func TestSystemWebPush(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg, err := LoadSystemConfig(env(map[string]string{
		"DPCS_DATA_DIR": dir, "DPCS_EMBEDDED_KAFKA_PORT": "0", "DPCS_HTTP_ADDR": "127.0.0.1:0",
		"DPCS_SIMULATOR_ADDR": "off", "DPCS_DEMO_FAMILIES": "0", "DPCS_SIMULATOR_RATE": "0", "DPCS_ADMIN_ADDR": "off",
	}))
	if err != nil {
		t.Fatal(err)
	}
	cfg.AllowLoopbackPush = true
	s, err := StartSystem(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.HTTPAddr
	var key api.VAPIDPublicKey
	if err := json.Unmarshal([]byte(do(t, "GET", base+"/push/vapid-public-key", "", "", 200)), &key); err != nil || key.PublicKey == "" {
		s.Close(ctx)
		t.Fatalf("vapid key: %+v %v", key, err)
	}
	ps := pushtest.New(t, key.PublicKey)
	owner, child := demoLogin(t, base, 1000), demoLogin(t, base, 1002)
	for path, tok := range map[string]string{"/owner": owner, "/child": child} {
		e, p, a := ps.Subscribe(path)
		do(t, "POST", base+"/families/100/push-subscriptions", tok,
			fmt.Sprintf(`{"endpoint":%q,"expirationTime":null,"keys":{"p256dh":%q,"auth":%q}}`, e, p, a), 201)
	}
	do(t, "PATCH", base+"/families/100/members/1002/policies", owner, `{"set":{"BLOCK:ACCESS":"1"}}`, 200)
	rec, err := kafkarecord.New(envelope.TopicUsageEvents, envelope.New("evt_push_1", time.Now(),
		envelope.UsagePayload{FamilyID: 100, CustomerID: 1002, AppID: "com.youtube.app", BytesUsed: 1000}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var got []pushtest.Delivery
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var bad []string
		got, bad = ps.Deliveries()
		if len(bad) > 0 {
			t.Fatalf("push service refused: %q", bad)
		}
		if len(got) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for the CUSTOMER_BLOCKED push to the owner and the child; got %d: %+v", len(got), got)
		}
	}
	paths := map[string]notify.PushMessage{}
	for _, d := range got {
		var m notify.PushMessage
		if err := json.Unmarshal(d.JSON, &m); err != nil {
			t.Fatal(err)
		}
		if d.Urgency != "high" || d.TTL == "" || d.TTL == "0" {
			t.Errorf("%s: urgency %q TTL %q", d.Path, d.Urgency, d.TTL)
		}
		paths[d.Path] = m
	}
	for _, p := range []string{"/owner", "/child"} {
		m := paths[p]
		if m.Kind != envelope.SubCustomerBlocked || m.FamilyID != 100 || m.MemberID != 1002 || m.Title != "자녀1님 데이터 차단" ||
			m.Body != "보호자가 데이터 사용을 차단했습니다." || m.URL != "/app/#inbox" || m.Lang != notify.Korean || m.Tag != m.EventID {
			t.Errorf("%s got %+v", p, m)
		}
	}
	before, err := s.Store.PushRecipients(ctx, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	s, err = StartSystem(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if k := do(t, "GET", "http://"+s.HTTPAddr+"/push/vapid-public-key", "", "", 200); !strings.Contains(k, key.PublicKey) {
		t.Errorf("after a restart the key is %s, want %s", k, key.PublicKey)
	}
	after, err := s.Store.PushRecipients(ctx, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" || len(after) != 2 {
		t.Errorf("subscriptions across a restart (-before +after):\n%s", diff)
	}
}
