package service

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/store"
)

// TestSystemCatalogEdits: the judges name events' categories from the app
// catalog the back office edits — an admin's edit at once in its own
// process, another process's edit (written to SQL) within
// DPCS_CATALOG_REFRESH.
func TestSystemCatalogEdits(t *testing.T) {
	ctx := context.Background()
	cfg, err := LoadSystemConfig(env(map[string]string{
		"DPCS_DATA_DIR": t.TempDir(), "DPCS_EMBEDDED_KAFKA_PORT": "0", "DPCS_HTTP_ADDR": "127.0.0.1:0",
		"DPCS_SIMULATOR_ADDR": "127.0.0.1:0", "DPCS_DEMO_FAMILIES": "0", "DPCS_CATALOG_REFRESH": "1s",
	}))
	if err != nil {
		t.Fatal(err)
	}
	s, err := StartSystem(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	base := "http://" + s.HTTPAddr
	const dad, child = 1000, 1002
	do(t, "PATCH", base+"/families/100/members/1002/policies", demoLogin(t, base, dad), `{"set":{"BLOCK:CATEGORY:GAME":"1"}}`, http.StatusOK)
	n := 0
	decide := func() policy.Decision {
		t.Helper()
		n++
		rs, err := s.Decisions.Decide(ctx, []envelope.Envelope[envelope.UsagePayload]{envelope.New(fmt.Sprint("evt_cat_", n), time.Now(),
			envelope.UsagePayload{FamilyID: DemoFamilyID, CustomerID: child, AppID: "com.zepeto.global", BytesUsed: 1})})
		if err != nil {
			t.Fatal(err)
		}
		return rs[0].Decision
	}
	if d := decide(); d != policy.Allowed {
		t.Fatalf("an app the catalog does not know: %s", d)
	}
	do(t, "PUT", base+"/admin/catalog/apps/com.zepeto.global", demoLogin(t, base, DemoAdminID), `{"category":"GAME","name":"제페토"}`, http.StatusOK)
	if d := decide(); d != policy.BlockedApp {
		t.Errorf("right after the admin put it in GAME: %s, want BLOCKED_APP", d)
	}
	// Another process removes it (straight in SQL): within the refresh.
	if err := s.Store.DeleteApp(ctx, "com.zepeto.global", store.System); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for decide() != policy.Allowed {
		if time.Now().After(deadline) {
			t.Fatal("the judges still name the removed app's category 15 s after it was removed")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
