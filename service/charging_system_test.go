package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/internal/testenv/chargertest"
	"github.com/dabom/dpcs/service/charging"
	"github.com/dabom/dpcs/service/store"
)

// The all-in-one serves the charging interface over HTTP/2 cleartext with
// its generated credential, and a family change made through the
// application layer reaches the member's live session as a
// REAUTHORIZATION. (The grant steps are the in-memory engine's here: cfg.Charger.)
func TestSystemServesCharging(t *testing.T) {
	ctx := context.Background()
	cfg := testSystemConfig(t)
	cfg.Charging.Addr = "127.0.0.1:0"
	fake := chargertest.New()
	fake.SetPool(DemoFamilyID, 10<<20)
	for f := range int64(50) {
		fake.SetPool(demoFirstFamily+f, 1<<30)
	}
	cfg.Charger = fake
	cfg.SimulatorSessions = 5
	s, err := StartSystem(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if s.Charging == nil || !strings.HasPrefix(s.Charging.Token, "chf_") {
		t.Fatalf("charging interface: %+v", s.Charging)
	}
	smfURL, got := smfEndpoint(t)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	c := &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}
	body := `{"subscriberIdentifier":"msisdn-821000000100","nfConsumerIdentification":{"nodeFunctionality":"SMF"},` +
		`"invocationTimeStamp":"2026-11-27T10:00:00Z","invocationSequenceNumber":0,"notifyUri":"` + smfURL + `/n",` +
		`"multipleUnitUsage":[{"ratingGroup":10,"requestedUnit":{"totalVolume":1048576}}]}`
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.Charging.Addr+charging.BasePath+"/chargingdata", bytes.NewBufferString(body))
	req.Header.Set("Authorization", "Bearer "+s.Charging.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var answer charging.ChargingDataResponse
	if resp.StatusCode != http.StatusCreated || resp.Proto != "HTTP/2.0" || json.Unmarshal(b, &answer) != nil ||
		len(answer.MultipleUnitInformation) != 1 || *answer.MultipleUnitInformation[0].GrantedUnit.TotalVolume != 1<<20 {
		t.Fatalf("create: %d %s %s", resp.StatusCode, resp.Proto, b)
	}
	owner := int64(DemoFamilyID * 10)
	if _, err := s.Family.ChangePolicy(ctx, store.PolicyChange{FamilyID: DemoFamilyID, CustomerID: owner,
		Set: map[string]string{"BLOCK:ACCESS": "1"}, By: store.System}); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if !strings.Contains(string(n), `"notificationType":"REAUTHORIZATION"`) {
			t.Errorf("notification: %s", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no REAUTHORIZATION after the owner was blocked")
	}
	// The demo's simulated SMFs charge the simulated members (their phones
	// are seeded), and release everything when the system stops.
	for deadline := time.Now().Add(60 * time.Second); s.SMFs.Stats().Creates < 5; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("simulated SMFs: %+v", s.SMFs.Stats())
		}
	}
	if st := s.SMFs.Stats(); st.GrantedBytes == 0 || st.Errors != 0 {
		t.Errorf("simulated SMFs: %+v", st)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// What stays held is the session made by hand above, never released.
	if n := fake.Outstanding(); n != 1 {
		t.Errorf("%d grants held after the simulated SMFs stopped, want the 1 made by hand", n)
	}
}

// smfEndpoint is an SMF's notification endpoint, speaking HTTP/2
// cleartext as SBI endpoints do, until the test ends: its URL, and the
// bodies it receives.
func smfEndpoint(t *testing.T) (string, chan []byte) {
	t.Helper()
	got := make(chan []byte, 4)
	smf := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
		w.WriteHeader(http.StatusNoContent)
	}))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	smf.Config.Protocols = &p
	smf.Start()
	t.Cleanup(smf.Close)
	return smf.URL, got
}

// DPCS_CHARGING_MAX_CONNECTIONS bounds the connections open at once to the
// charging interface: one past it is closed as soon as it is accepted and
// counted in dpcs_charging_connections_refused_total; the one within goes
// on being served. Out of range, the setting is refused by name.
func TestSystemChargingConnectionBound(t *testing.T) {
	for _, name := range []string{"DPCS_CHARGING_MAX_CONNECTIONS", "DPCS_CHARGING_MAX_CONNECTIONS_PER_PEER"} {
		for _, bad := range []string{"0", "1048577", "many"} {
			if _, err := LoadSystemConfig(env(map[string]string{"DPCS_DATA_DIR": t.TempDir(), name: bad})); err == nil ||
				!strings.Contains(err.Error(), name+":") {
				t.Errorf("%s=%q: error %v does not name it", name, bad, err)
			}
		}
	}
	s := startDemoFamily(t, map[string]string{"DPCS_CHARGING_ADDR": "127.0.0.1:0", "DPCS_CHARGING_MAX_CONNECTIONS": "1",
		"DPCS_SIMULATOR_SESSIONS": "0", "DPCS_ADMIN_ADDR": "127.0.0.1:0"})
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	c := &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}
	call := func() int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.Charging.Addr+charging.BasePath+"/chargingdata/none/update", bytes.NewBufferString("{}"))
		req.Header.Set("Authorization", "Bearer "+s.Charging.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := call(); got != http.StatusBadRequest { // the client's one connection, kept
		t.Fatalf("a call within the bound: %d", got)
	}
	extra, err := net.Dial("tcp", s.Charging.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	_ = extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := extra.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a second connection at once: read %d, %v; want it closed", n, err)
	}
	if got := call(); got != http.StatusBadRequest {
		t.Errorf("a call on the first connection after: %d", got)
	}
	if m := testenv.Get(t, "http://"+s.AdminAddr+"/metrics"); !strings.Contains(m, "dpcs_charging_connections_refused_total 1") {
		t.Errorf("/metrics does not count the refused connection")
	}
}
