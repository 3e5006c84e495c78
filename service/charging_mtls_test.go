package service

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dabom/dpcs/internal/testenv/chargertest"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/charging"
	"github.com/dabom/dpcs/service/family"
	"github.com/dabom/dpcs/service/store"
)

// With DPCS_CHARGING_TLS_CLIENT_CA the charging interface authenticates
// SMFs by their client certificates (TS 33.501 §13.3), and needs no bearer
// credential: an SMF whose certificate the CA signed is served without
// one; a connection without a certificate, or with one another CA signed,
// fails its handshake. Without the CA, a request without a credential is
// challenged without an error code (RFC 6750 §3.1).
func TestChargingClientCertificates(t *testing.T) {
	ctx := context.Background()
	st := chargingStore(t)
	fake := chargertest.New()
	fake.SetPool(100, 1<<30)
	ca, other := newTestCA(t, "SMF CA"), newTestCA(t, "another CA")
	dir := t.TempDir()
	_, srvCert, srvKey := ca.issue(t, "chf", true)
	smfCert, _, _ := ca.issue(t, "smf-1", false)
	strangerCert, _, _ := other.issue(t, "smf-x", false)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := ChargingConfig{TLSCert: write("chf.pem", srvCert), TLSKey: write("chf.key", srvKey), TLSClientCA: write("smf-ca.pem", ca.pem),
		RatingGroups: "10=VIDEO", MinGrant: 1 << 20, Grant: 10 << 20, MaxGrant: 100 << 20, Validity: time.Hour,
		HoldingTime: 5 * time.Minute, Threshold: 20, Sweep: 30 * time.Second}
	ch, err := StartCharging(cfg, "127.0.0.1:0", ChargingDeps{Charger: fake, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close(ctx)
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	create := func(certs []tls.Certificate, seq int) (*http.Response, error) {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true,
			TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12}}}
		body := `{"subscriberIdentifier":"msisdn-821000010000","nfConsumerIdentification":{"nodeFunctionality":"SMF"},` +
			`"invocationTimeStamp":"2026-11-27T10:00:00Z","invocationSequenceNumber":` + strconv.Itoa(seq) + `,` +
			`"multipleUnitUsage":[{"ratingGroup":10,"requestedUnit":{"totalVolume":1048576}}]}`
		req, _ := http.NewRequest(http.MethodPost, "https://"+ch.Addr+charging.BasePath+"/chargingdata", bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	resp, err := create([]tls.Certificate{smfCert}, 0)
	if err != nil || resp.StatusCode != http.StatusCreated || resp.Proto != "HTTP/2.0" {
		t.Fatalf("an SMF with a certificate the CA signed, no bearer credential: %v %v", resp, err)
	}
	if _, err := create(nil, 1); err == nil {
		t.Error("a connection without a client certificate was served")
	}
	if _, err := create([]tls.Certificate{strangerCert}, 2); err == nil {
		t.Error("a client certificate another CA signed was accepted")
	}

	// Without the CA: bearer credentials, and the challenge of RFC 6750.
	cfg.TLSClientCA = ""
	if _, err := StartCharging(cfg, "127.0.0.1:0", ChargingDeps{Charger: fake, Store: st}); err == nil ||
		!strings.Contains(err.Error(), "DPCS_CHARGING_TOKENS") {
		t.Errorf("no credential and no client CA: %v, want DPCS_CHARGING_TOKENS required", err)
	}
	plain, err := StartCharging(cfg, "127.0.0.1:0", ChargingDeps{Charger: fake, Store: st, Tokens: []string{strings.Repeat("t", 32)}})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(ctx)
	ch = plain
	resp, err = create(nil, 0)
	if err != nil || resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != `Bearer realm="dpcs-charging"` {
		t.Errorf("no credential: %v %v, want 401 with a challenge without an error code", resp, err)
	}
}

// DPCS_CHARGING_TLS_CLIENT_CA asks for client certificates in the TLS
// handshake: it needs DPCS_CHARGING_TLS_CERT.
func TestChargingClientCANeedsTLS(t *testing.T) {
	env := map[string]string{"DPCS_CHARGING_TLS_CLIENT_CA": "/etc/dpcs/smf-ca.pem"}
	_, err := LoadSystemConfig(func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), "DPCS_CHARGING_TLS_CLIENT_CA") {
		t.Errorf("client CA without a certificate: %v", err)
	}
}

// A server without the charging listener (DPCS_CHARGING_ADDR off) still
// reauthorizes: a family change made there reaches the live session
// another server opened, at the SMF's notifyUri (the sessions are in SQL).
func TestReauthorizerWithoutListener(t *testing.T) {
	ctx := context.Background()
	st := chargingStore(t)
	fake := chargertest.New()
	fake.SetPool(100, 1<<30)
	cfg := ChargingConfig{RatingGroups: "10=VIDEO", MinGrant: 1 << 20, Grant: 10 << 20, MaxGrant: 100 << 20, Validity: time.Hour,
		HoldingTime: 5 * time.Minute, Threshold: 20, Sweep: 30 * time.Second}
	serving, err := StartCharging(cfg, "127.0.0.1:0", ChargingDeps{Charger: fake, Store: st, Loopback: true, Tokens: []string{strings.Repeat("t", 32)}})
	if err != nil {
		t.Fatal(err)
	}
	defer serving.Close(ctx)
	smfURL, got := smfEndpoint(t)
	req := &charging.ChargingDataRequest{}
	if err := json.Unmarshal([]byte(`{"subscriberIdentifier":"msisdn-821000010000","nfConsumerIdentification":{"nodeFunctionality":"SMF"},`+
		`"invocationTimeStamp":"2026-11-27T10:00:00Z","invocationSequenceNumber":0,"notifyUri":"`+smfURL+`/n",`+
		`"multipleUnitUsage":[{"ratingGroup":10,"requestedUnit":{}}]}`), req); err != nil {
		t.Fatal(err)
	}
	if _, _, err := serving.Service.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	other, err := startReauthorizer(cfg, ChargingDeps{Charger: fake, Store: st, Loopback: true})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if other.Addr != "" {
		t.Errorf("the reauthorizer listens on %s", other.Addr)
	}
	other.OnChange(ctx, family.Change{Kind: family.KindPolicy, FamilyID: 100, Members: []int64{1001}})
	select {
	case b := <-got:
		if !strings.Contains(string(b), `"REAUTHORIZATION"`) {
			t.Errorf("the SMF got %s", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a change made on a server without the listener reached no live session")
	}
}

// chargingStore is a store with family 100 and its member 1001 (phone
// 010-0001-0000).
func chargingStore(t *testing.T) *store.Store {
	t.Helper()
	ctx := context.Background()
	_, st := openStore(t)
	if _, err := st.CreateFamily(ctx, store.NewFamily{ID: 100, Name: "f", PlanBytes: 1 << 30}, store.System); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddMember(ctx, store.NewMember{ID: 1001, FamilyID: 100, Name: "m", Phone: "010-0001-0000", Role: policy.RoleOwner}, store.System); err != nil {
		t.Fatal(err)
	}
	return st
}

// With DPCS_CHARGING_NRF_KEYS (and no credential of its own) the interface
// takes the access tokens the NRF signed (ES256 here) and refuses others.
func TestChargingNRFAccessTokens(t *testing.T) {
	ctx := context.Background()
	st := chargingStore(t)
	fake := chargertest.New()
	fake.SetPool(100, 1<<30)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(t.TempDir(), "nrf.pem")
	if err := os.WriteFile(keys, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := ChargingConfig{NRFKeys: keys, NFInstanceID: "chf-1", RatingGroups: "10=VIDEO", MinGrant: 1 << 20, Grant: 10 << 20,
		MaxGrant: 100 << 20, Validity: time.Hour, HoldingTime: 5 * time.Minute, Threshold: 20, Sweep: 30 * time.Second}
	ch, err := StartCharging(cfg, "127.0.0.1:0", ChargingDeps{Charger: fake, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close(ctx)
	seg := func(v string) string { return base64.RawURLEncoding.EncodeToString([]byte(v)) }
	input := seg(`{"alg":"ES256"}`) + "." + seg(`{"aud":["chf-1"],"scope":"nchf-convergedcharging","exp":`+strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)+`}`)
	d := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, key, d[:])
	if err != nil {
		t.Fatal(err)
	}
	tok := input + "." + base64.RawURLEncoding.EncodeToString(append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	c := &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}
	for _, tc := range []struct {
		tok  string
		want int
	}{{tok, http.StatusCreated}, {strings.Repeat("t", 32), http.StatusUnauthorized}} {
		body := `{"subscriberIdentifier":"msisdn-821000010000","nfConsumerIdentification":{"nodeFunctionality":"SMF"},` +
			`"invocationTimeStamp":"2026-11-27T10:00:00Z","invocationSequenceNumber":0,"multipleUnitUsage":[{"ratingGroup":10,"requestedUnit":{}}]}`
		req, _ := http.NewRequest(http.MethodPost, "http://"+ch.Addr+charging.BasePath+"/chargingdata", bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tc.tok)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("token %.12s…: %d, want %d", tc.tok, resp.StatusCode, tc.want)
		}
	}
}
