package service

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/charging"
	"github.com/dabom/dpcs/service/store"
)

// TestSystemCatalogEdits: the judges name events' categories from the app
// catalog the back office edits — an admin's edit at once in its own
// process, another process's edit (written to SQL) within
// DPCS_CATALOG_REFRESH.
func TestSystemCatalogEdits(t *testing.T) {
	ctx := context.Background()
	s := startDemoFamily(t, map[string]string{"DPCS_CATALOG_REFRESH": "1s"})
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

// TestSystemCatalogEditReachesLiveGrants: an admin's catalog edit that
// moves an app into a category a parent blocked reaches the live grant of
// that app's rating group. The SMF is asked to report (REAUTHORIZATION
// naming the rating group), and its next update, judged by the door with
// the new catalog, ends the grant.
func TestSystemCatalogEditReachesLiveGrants(t *testing.T) {
	s := startDemoFamily(t, map[string]string{"DPCS_CHARGING_ADDR": "127.0.0.1:0",
		"DPCS_CHARGING_RATING_GROUPS": "10=VIDEO,77=app:com.zepeto.global", "DPCS_SIMULATOR_SESSIONS": "0"})
	base := "http://" + s.HTTPAddr
	const dad = 1000
	do(t, "PATCH", base+"/families/100/members/1002/policies", demoLogin(t, base, dad), `{"set":{"BLOCK:CATEGORY:GAME":"1"}}`, http.StatusOK)

	smfURL, got := smfEndpoint(t)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	c := &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}
	post := func(path, body string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.Charging.Addr+charging.BasePath+path, bytes.NewBufferString(body))
		req.Header.Set("Authorization", "Bearer "+s.Charging.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	step := func(seq int, usage string) string {
		return `{"subscriberIdentifier":"msisdn-821000000102","nfConsumerIdentification":{"nodeFunctionality":"SMF"},` +
			`"invocationTimeStamp":"` + time.Now().UTC().Format(time.RFC3339) + `","invocationSequenceNumber":` + fmt.Sprint(seq) +
			`,"notifyUri":"` + smfURL + `/n","multipleUnitUsage":[` + usage + `]}`
	}
	status, body, h := post("/chargingdata", step(0, `{"ratingGroup":77,"requestedUnit":{"totalVolume":1048576}}`))
	if status != http.StatusCreated || !strings.Contains(body, `"grantedUnit":{"totalVolume":1048576}`) {
		t.Fatalf("create for an app the catalog does not know: %d %s", status, body)
	}
	ref := h.Get("Location")[strings.LastIndex(h.Get("Location"), "/")+1:]

	// A periodic read of the catalog takes the edit in before the API's
	// hook does (the race CatalogWatcher.Edited's baseline is for): the
	// hook still tells the charging service what moved.
	admin := demoLogin(t, base, DemoAdminID)
	if _, err := s.Store.PutApp(t.Context(), store.CatalogApp{ID: "com.zepeto.global", Category: policy.CategoryGame, Name: "제페토"}, store.System); err != nil {
		t.Fatal(err)
	}
	read := s.catalog.Apps().Catalog()
	read["com.zepeto.global"] = policy.CategoryGame
	s.catalog.Set(read)
	do(t, "PUT", base+"/admin/catalog/apps/com.zepeto.global", admin, `{"category":"GAME","name":"제페토"}`, http.StatusOK)
	select {
	case n := <-got:
		if !strings.Contains(string(n), `"notificationType":"REAUTHORIZATION"`) || !strings.Contains(string(n), `"ratingGroup":77`) {
			t.Errorf("notification: %s", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no REAUTHORIZATION after the app moved into a blocked category")
	}
	status, body, _ = post("/chargingdata/"+ref+"/update", step(1,
		`{"ratingGroup":77,"requestedUnit":{"totalVolume":1048576},"usedUnitContainer":[{"totalVolume":1000,"localSequenceNumber":1}]}`))
	if status != http.StatusOK || !strings.Contains(body, `"finalUnitIndication"`) || strings.Contains(body, `"grantedUnit":{"totalVolume":1048576}`) {
		t.Errorf("the update after the edit: %d %s, want the grant ended", status, body)
	}
}

// startDemoFamily starts the all-in-one with the demo family alone and no
// simulated traffic, and more settings; it stops when the test ends.
func startDemoFamily(t *testing.T, more map[string]string) *System {
	t.Helper()
	vars := map[string]string{
		"DPCS_DATA_DIR": t.TempDir(), "DPCS_EMBEDDED_KAFKA_PORT": "0", "DPCS_HTTP_ADDR": "127.0.0.1:0",
		"DPCS_SIMULATOR_ADDR": "127.0.0.1:0", "DPCS_DEMO_FAMILIES": "0",
	}
	maps.Copy(vars, more)
	cfg, err := LoadSystemConfig(env(vars))
	if err != nil {
		t.Fatal(err)
	}
	s, err := StartSystem(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}
