package charging_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/internal/backoff"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/charging"
)

const token = "charging-test-credential-0123456789abcdef"

// h2c is a client speaking HTTP/2 cleartext with prior knowledge, as an
// SMF's SBI client does.
func h2c() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}
}

// serve serves svc's routes on a loopback port; it returns the API root.
func serve(t *testing.T, svc *charging.Service) string { return serveB(t, svc) }

func serveB(t testing.TB, svc *charging.Service) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := charging.NewServer(charging.Handler(svc, charging.HandlerConfig{Tokens: []string{token}}), nil, nil)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return "http://" + ln.Addr().String() + charging.BasePath
}

// reply is an HTTP answer read whole.
type reply struct {
	status int
	proto  string
	header http.Header
	body   []byte
}

func post(t *testing.T, c *http.Client, url, tok string, body []byte) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{status: resp.StatusCode, proto: resp.Proto, header: resp.Header, body: b}
}

// notice is a notification an SMF received.
type notice struct {
	path  string
	proto string
	body  []byte
	at    time.Time
}

// smf is a simulated SMF's notification endpoint, speaking HTTP/2
// cleartext (and HTTP/1.1): every notification it receives goes to got;
// hold, while set, keeps its answers waiting.
type smf struct {
	URL  string
	got  chan notice
	hold chan struct{}
}

func newSMF(t *testing.T, holding bool) *smf {
	t.Helper()
	s := &smf{got: make(chan notice, 64)}
	if holding {
		s.hold = make(chan struct{})
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.got <- notice{path: r.URL.Path, proto: r.Proto, body: b, at: time.Now()}
		if s.hold != nil {
			select {
			case <-s.hold:
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(func() {
		if s.hold != nil {
			close(s.hold)
		}
		srv.Close()
	})
	s.URL = srv.URL
	return s
}

// answer lets the notification the SMF holds be answered, failing the
// test if none is held within 10 s.
func (s *smf) answer(t *testing.T) {
	t.Helper()
	select {
	case s.hold <- struct{}{}:
	case <-time.After(10 * time.Second):
		t.Fatal("no notification held to answer")
	}
}

// wait returns the next notification within d.
func (s *smf) wait(t *testing.T, d time.Duration) notice {
	t.Helper()
	select {
	case n := <-s.got:
		return n
	case <-time.After(d):
		t.Fatalf("no notification within %v", d)
	}
	return notice{}
}

func mustJSON(t *testing.T, v any) []byte { return mustJSONB(t, v) }

func mustJSONB(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A simulated SMF over HTTP/2: create → update at the threshold → a parent
// blocks the child → REAUTHORIZATION reaches the SMF → the next update is
// answered TERMINATE → release returns the rest; retries are answered
// identically; what is malformed or unknown is refused with the field or
// cause named.
func TestSMFOverHTTP2(t *testing.T) {
	e := newEnv(t, charging.WithNotifyNetworks(true))
	api := serve(t, e.svc)
	c := h2c()
	node := newSMF(t, false)

	// Create.
	create := readRequest(t, "request-create.json", charging.OpCreate)
	create.NotifyURI = node.URL + "/nsmf-callback/v1/charging/pdu-5"
	r := post(t, c, api+"/chargingdata", token, mustJSON(t, create))
	if r.status != http.StatusCreated || r.proto != "HTTP/2.0" {
		t.Fatalf("create: %d %s %s", r.status, r.proto, r.body)
	}
	loc := r.header.Get("Location")
	ref, ok := strings.CutPrefix(loc, api+"/chargingdata/")
	if !ok || ref == "" {
		t.Fatalf("Location %q", loc)
	}
	var resp charging.ChargingDataResponse
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatal(err)
	}
	u := unit(t, &resp, 10)
	grant, threshold := granted(u), *u.VolumeQuotaThreshold

	// Update when the threshold is reached: what is left is the threshold.
	upd := request("imsi-"+childIMSI, 1, ask(10, 0, int64(grant-threshold)))
	r = post(t, c, api+"/chargingdata/"+ref+"/update", token, mustJSON(t, upd))
	if r.status != http.StatusOK {
		t.Fatalf("update: %d %s", r.status, r.body)
	}
	again := post(t, c, api+"/chargingdata/"+ref+"/update", token, mustJSON(t, upd))
	if again.status != http.StatusOK || !bytes.Equal(again.body, r.body) {
		t.Errorf("the update's retry: %d %s, first %s", again.status, again.body, r.body)
	}
	if _, used, _ := e.fake.Pool(family); used != int64(grant-threshold) {
		t.Errorf("used %d after an update and its retry, want %d", used, grant-threshold)
	}

	// A parent blocks the child: the session is asked to report again.
	e.fake.Block(child, policy.BlockedAccess)
	changed := time.Now()
	if err := e.svc.Reauthorize(e.ctx, family, child); err != nil {
		t.Fatal(err)
	}
	n := node.wait(t, 10*time.Second)
	t.Logf("change → REAUTHORIZATION received: %v", n.at.Sub(changed))
	if n.proto != "HTTP/2.0" || n.path != "/nsmf-callback/v1/charging/pdu-5" {
		t.Errorf("notification: %s %s", n.proto, n.path)
	}
	var note any
	if err := json.Unmarshal(n.body, &note); err != nil {
		t.Fatal(err)
	}
	golden(t, "notify-reauthorization.json", note)

	r = post(t, c, api+"/chargingdata/"+ref+"/update", token, mustJSON(t, request("imsi-"+childIMSI, 2, ask(10, 0, 1*mib))))
	if r.status != http.StatusOK {
		t.Fatalf("update after the block: %d %s", r.status, r.body)
	}
	resp = charging.ChargingDataResponse{}
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatal(err)
	}
	if u := unit(t, &resp, 10); u.ResultCode != charging.ResultEndUserServiceDenied || granted(u) != 0 ||
		u.FinalUnitIndication == nil || u.FinalUnitIndication.FinalUnitAction != charging.ActionTerminate {
		t.Errorf("after the block: %+v", u)
	}

	// Release: rating group 1 still holds its grant; the release returns it.
	if e.fake.Reserved(charging.GrantID(ref, 1)) == 0 {
		t.Fatal("rating group 1 holds nothing before the release")
	}
	rel := mustJSON(t, request("imsi-"+childIMSI, 3, report(1, 4096)))
	for range 2 {
		if r := post(t, c, api+"/chargingdata/"+ref+"/release", token, rel); r.status != http.StatusNoContent || len(r.body) != 0 {
			t.Fatalf("release: %d %s", r.status, r.body)
		}
	}
	if _, _, reserved := e.fake.Pool(family); reserved != 0 {
		t.Errorf("%d bytes still reserved after the release", reserved)
	}
	if r := post(t, c, api+"/chargingdata/"+ref+"/update", token, mustJSON(t, request("imsi-"+childIMSI, 4, ask(10, 0, 0)))); r.status != http.StatusNotFound {
		t.Errorf("update after the release: %d %s", r.status, r.body)
	}

	// Refusals.
	for _, tc := range []struct {
		name, path, tok string
		body            []byte
		status          int
		cause, param    string
	}{
		{"malformed volume", "/chargingdata", token, []byte(`{"subscriberIdentifier":"imsi-` + childIMSI + `",` + base +
			`,"multipleUnitUsage":[{"ratingGroup":10,"requestedUnit":{"totalVolume":"lots"}}]}`), 400, charging.CauseOptionalIEIncorrect,
			"/multipleUnitUsage/0/requestedUnit/totalVolume"},
		{"missing sequence", "/chargingdata/" + ref + "/update", token, []byte(`{"nfConsumerIdentification":{"nodeFunctionality":"SMF"},"invocationTimeStamp":"2026-11-27T10:00:00Z"}`),
			400, charging.CauseMandatoryIEMissing, "/invocationSequenceNumber"},
		{"unknown subscriber", "/chargingdata", token, mustJSON(t, request("msisdn-821099990000", 0, ask(10, 0, -1))), 404, charging.CauseUserUnknown, ""},
		{"unknown session", "/chargingdata/nope/update", token, mustJSON(t, request("", 1)), 404, charging.CauseResourceContextNotFound, ""},
		{"no such path", "/chargingdata/" + ref + "/terminate", token, mustJSON(t, request("", 1)), 404, charging.CauseResourceURIStructNotFound, ""},
		{"no credential", "/chargingdata", "", mustJSON(t, create), 401, "", ""},
		{"wrong credential", "/chargingdata", strings.Repeat("x", 40), mustJSON(t, create), 401, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := post(t, c, api+tc.path, tc.tok, tc.body)
			var p charging.ProblemDetails
			if err := json.Unmarshal(r.body, &p); err != nil {
				t.Fatalf("%d %q: %v", r.status, r.body, err)
			}
			param := ""
			if len(p.InvalidParams) > 0 {
				param = p.InvalidParams[0].Param
			}
			if r.status != tc.status || p.Status != tc.status || p.Cause != tc.cause || param != tc.param ||
				r.header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("%d %s: %s", r.status, r.header.Get("Content-Type"), r.body)
			}
		})
	}
	req, _ := http.NewRequest(http.MethodGet, api+"/chargingdata", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if resp, err := c.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// HTTP/1.1 is served too.
	h1 := &http.Client{Timeout: 10 * time.Second}
	if r := post(t, h1, api+"/chargingdata", token, mustJSON(t, request("msisdn-821012345678", 0, ask(10, 0, -1)))); r.status != http.StatusCreated || r.proto != "HTTP/1.1" {
		t.Errorf("HTTP/1.1 create: %d %s", r.status, r.proto)
	}
}

// One SMF that never answers holds up no other SMF's notifications: each
// destination has its own queue and worker.
func TestSlowSMFDelaysNoOther(t *testing.T) {
	e := newEnv(t, charging.WithNotifyNetworks(true), charging.WithNotifyDelivery(5*time.Second, 2,
		backoff.Policy{Min: 10 * time.Millisecond, Max: 10 * time.Millisecond}, 64))
	slow, fast := newSMF(t, true), newSMF(t, false)
	var refs []string
	for i, sub := range []string{"imsi-" + childIMSI, "imsi-" + childIMSI, "imsi-" + childIMSI, "msisdn-821012345678"} {
		req := request(sub, 0, ask(10, 0, -1))
		req.NotifyURI = slow.URL + "/n/" + sub
		if i == 3 {
			req.NotifyURI = fast.URL + "/n/dad"
		}
		ref, _, err := e.svc.Create(e.ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	start := time.Now()
	if err := e.svc.ReauthorizeFamily(e.ctx, family); err != nil {
		t.Fatal(err)
	}
	slow.wait(t, 10*time.Second) // the slow SMF holds its first notification
	n := fast.wait(t, 10*time.Second)
	took := n.at.Sub(start)
	t.Logf("the fast SMF's notification took %v while the slow one's hang", took)
	if bound := testenv.LatencyBound(t, 500*time.Millisecond); took > bound {
		t.Errorf("the fast SMF waited %v (bound %v): it waited for the slow one", took, bound)
	}
	select {
	case extra := <-slow.got:
		t.Errorf("the slow SMF got a second notification while its first hangs: %s", extra.path)
	default:
	}
}

// Delivery retries what failed for a while, then gives up; a 404 (the SMF
// no longer knows the session) is not retried; every end is reported.
func TestNotificationRetries(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls[r.URL.Path]++
		k := calls[r.URL.Path]
		mu.Unlock()
		switch {
		case r.URL.Path == "/gone":
			w.WriteHeader(http.StatusNotFound)
		case r.URL.Path == "/flaky" && k < 3:
			w.WriteHeader(http.StatusServiceUnavailable)
		case r.URL.Path == "/down":
			w.WriteHeader(http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(srv.Close)
	ends := make(chan charging.NotifyInfo, 8)
	var p http.Protocols
	p.SetHTTP1(true)
	e := newEnv(t, charging.WithNotifyClient(&http.Client{Transport: &http.Transport{Protocols: &p}}),
		charging.WithNotifyDelivery(time.Second, 4, backoff.Policy{Min: time.Millisecond, Max: 5 * time.Millisecond}, 8),
		charging.WithHooks(charging.Hooks{OnNotify: func(i charging.NotifyInfo) { ends <- i }}))
	for i, path := range []string{"/gone", "/flaky", "/down"} {
		req := request("imsi-"+childIMSI, 0, ask(10, 0, -1))
		req.NotifyURI = srv.URL + path
		req.ChargingID = u32(uint32(i))
		if _, _, err := e.svc.Create(e.ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.svc.ReauthorizeFamily(e.ctx, family); err != nil {
		t.Fatal(err)
	}
	got := map[string]charging.NotifyInfo{}
	for range 3 {
		select {
		case i := <-ends:
			got[filepath.Base(i.URI)] = i
		case <-time.After(10 * time.Second):
			t.Fatalf("ends: %+v", got)
		}
	}
	want := map[string][3]any{"gone": {1, 404, false}, "flaky": {3, 204, true}, "down": {4, 500, false}}
	for k, w := range want {
		i := got[k]
		if g := [3]any{i.Attempts, i.Status, i.Delivered}; !cmp.Equal(w, g) {
			t.Errorf("%s: attempts, status, delivered = %v, want %v", k, g, w)
		}
	}
}

// Notifications go only where the guard lets them: not to loopback or a
// private network unless the operator named it.
func TestNotificationsAreGuarded(t *testing.T) {
	node := newSMF(t, false)
	ends := make(chan charging.NotifyInfo, 1)
	e := newEnv(t, charging.WithHooks(charging.Hooks{OnNotify: func(i charging.NotifyInfo) { ends <- i }}))
	req := request("imsi-"+childIMSI, 0, ask(10, 0, -1))
	req.NotifyURI = node.URL + "/n"
	if _, _, err := e.svc.Create(e.ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Reauthorize(e.ctx, family, child); err != nil {
		t.Fatal(err)
	}
	select {
	case i := <-ends:
		if i.Delivered || i.Attempts != 1 {
			t.Errorf("a loopback notification: %+v", i)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no end reported")
	}
	select {
	case n := <-node.got:
		t.Errorf("the guard let a notification reach loopback: %s", n.path)
	default:
	}
}

// Changed (the application layer's hook) reauthorizes in the background:
// the member named, or every member when none is.
func TestChangedReauthorizes(t *testing.T) {
	e := newEnv(t, charging.WithNotifyNetworks(true))
	node := newSMF(t, false)
	for _, sub := range []string{"imsi-" + childIMSI, "msisdn-821012345678"} {
		req := request(sub, 0, ask(10, 0, -1))
		req.NotifyURI = node.URL + "/n/" + sub
		if _, _, err := e.svc.Create(e.ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	e.svc.Changed(family, child)
	if n := node.wait(t, 10*time.Second); n.path != "/n/imsi-"+childIMSI {
		t.Errorf("notified %s, want the child's session", n.path)
	} else {
		t.Logf("Changed → REAUTHORIZATION received: %v", n.at.Sub(start))
	}
	e.svc.Changed(family)
	got := map[string]bool{node.wait(t, 10*time.Second).path: true, node.wait(t, 10*time.Second).path: true}
	if !got["/n/imsi-"+childIMSI] || !got["/n/msisdn-821012345678"] {
		t.Errorf("a family-wide change notified %v", got)
	}
	select {
	case n := <-node.got:
		t.Errorf("an extra notification: %s", n.path)
	case <-time.After(50 * time.Millisecond):
	}
}

// With a certificate the interface serves HTTPS, HTTP/2 by ALPN.
func TestServesHTTP2OverTLS(t *testing.T) {
	e := newEnv(t)
	dummy := httptest.NewTLSServer(http.NotFoundHandler()) // for its certificate, made for 127.0.0.1
	defer dummy.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := charging.NewServer(charging.Handler(e.svc, charging.HandlerConfig{Tokens: []string{token}}),
		&tls.Config{Certificates: dummy.TLS.Certificates, MinVersion: tls.VersionTLS12}, nil)
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(dummy.Certificate())
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}, Timeout: 10 * time.Second}
	r := post(t, c, "https://"+ln.Addr().String()+charging.BasePath+"/chargingdata", token, mustJSON(t, request("imsi-"+childIMSI, 0, ask(10, 0, -1))))
	if r.status != http.StatusCreated || r.proto != "HTTP/2.0" || !strings.HasPrefix(r.header.Get("Location"), "https://") {
		t.Errorf("create over TLS: %d %s %s", r.status, r.proto, r.header.Get("Location"))
	}
}

// Grants the engine names as holding more than their fair share
// (GrantResult.Reclaim) are asked to report again, naming just them; the
// session whose step named them is not.
func TestReclaimedGrantsReauthorized(t *testing.T) {
	e := newEnv(t, charging.WithNotifyNetworks(true))
	node := newSMF(t, false)
	var refs []string
	for _, sub := range []string{"imsi-" + childIMSI, "msisdn-821012345678"} {
		req := request(sub, 0, ask(10, 0, -1), ask(20, 0, -1))
		req.NotifyURI = node.URL + "/n/" + sub
		ref, _, err := e.svc.Create(e.ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	e.fake.ReclaimNext(charging.GrantID(refs[0], 20))
	if _, err := e.svc.Update(e.ctx, refs[1], request("msisdn-821012345678", 1, ask(10, 0, 1))); err != nil {
		t.Fatal(err)
	}
	n := node.wait(t, 10*time.Second)
	if n.path != "/n/imsi-"+childIMSI || !strings.Contains(string(n.body), `"reauthorizationDetails":[{"ratingGroup":20}]`) {
		t.Errorf("notified %s: %s", n.path, n.body)
	}
	select {
	case extra := <-node.got:
		t.Errorf("an extra notification: %s %s", extra.path, extra.body)
	case <-time.After(50 * time.Millisecond):
	}
}

// A session the sweep closes is told so: ABORT_CHARGING at its notifyUri
// (TS 32.290: the SMF ends the session), also when a REAUTHORIZATION of
// it was still waiting in the queue, which the abort replaces. A closed
// session gets no REAUTHORIZATION after.
func TestSweepAbortsCharging(t *testing.T) {
	// A delivery waits as long as the test holds it (no retry on a busy
	// machine).
	e := newEnv(t, charging.WithNotifyNetworks(true), charging.WithValidity(10*time.Minute), charging.WithQuotaHoldingTime(time.Minute),
		charging.WithNotifyDelivery(time.Minute, 1, backoff.Policy{Min: time.Millisecond, Max: time.Millisecond}, 64))
	node := newSMF(t, true) // its answers wait: the first notification holds the queue
	for i, sub := range []string{"imsi-" + childIMSI, "msisdn-821012345678"} {
		req := request(sub, 0, ask(10, 0, -1))
		req.NotifyURI = node.URL + "/n/" + strconv.Itoa(i)
		if _, _, err := e.svc.Create(e.ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.svc.Reauthorize(e.ctx, family, 0); err != nil {
		t.Fatal(err)
	}
	first := node.wait(t, 10*time.Second) // under way; the other session's waits
	e.clock.Add(12 * time.Minute)
	if info, err := e.svc.Sweep(e.ctx); err != nil || info.Closed != 2 {
		t.Fatalf("sweep: %+v, %v", info, err)
	}
	node.answer(t) // the first answered
	types := map[string]string{}
	var abort []byte
	var n charging.ChargingNotifyRequest
	if err := json.Unmarshal(first.body, &n); err != nil {
		t.Fatal(err)
	}
	types[first.path] = n.NotificationType
	for range 2 {
		got := node.wait(t, 10*time.Second)
		node.answer(t)
		var n charging.ChargingNotifyRequest
		if err := json.Unmarshal(got.body, &n); err != nil {
			t.Fatal(err)
		}
		if got.path == first.path && types[got.path] == n.NotificationType {
			t.Errorf("%s notified %s twice", got.path, n.NotificationType)
		}
		if got.path != first.path {
			types[got.path] = n.NotificationType
		} else if n.NotificationType != charging.NotificationAbortCharging {
			t.Errorf("%s's second notification is %s, want ABORT_CHARGING", got.path, n.NotificationType)
		}
		if n.NotificationType == charging.NotificationAbortCharging {
			abort = got.body
		}
	}
	other := "/n/1"
	if first.path == other {
		other = "/n/0"
	}
	if types[other] != charging.NotificationAbortCharging {
		t.Errorf("the session whose REAUTHORIZATION waited got %s, want ABORT_CHARGING in its place", types[other])
	}
	golden(t, "notify-abort-charging.json", json.RawMessage(abort))
	if err := e.svc.Reauthorize(e.ctx, family, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-node.got:
		t.Errorf("a closed session notified again: %s %s", n.path, n.body)
	case <-time.After(50 * time.Millisecond):
	}
}

// gatedCharger holds every Charge until the test lets it go, saying when
// one arrives.
type gatedCharger struct {
	charging.Charger
	in   chan struct{}
	gate chan struct{}
}

func (g *gatedCharger) Charge(ctx context.Context, ops []quota.GrantOp) ([]quota.GrantResult, error) {
	g.in <- struct{}{}
	<-g.gate
	return g.Charger.Charge(ctx, ops)
}

// Overload control (TS 29.500 §6.4): past HandlerConfig.MaxInFlight
// requests answered at once, a request is refused at once with 503
// NF_CONGESTION and Retry-After, charging nothing; the one in flight
// finishes.
func TestOverloadRefusedAtOnce(t *testing.T) {
	e := newEnv(t)
	g := &gatedCharger{Charger: e.fake, in: make(chan struct{}, 4), gate: make(chan struct{})}
	svc := e.service(g, e.st.S)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := charging.NewServer(charging.Handler(svc, charging.HandlerConfig{Tokens: []string{token}, MaxInFlight: 1}), nil, nil)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	api := "http://" + ln.Addr().String() + charging.BasePath
	c := h2c()
	done := make(chan reply, 1)
	go func() {
		done <- post(t, c, api+"/chargingdata", token, mustJSON(t, request("imsi-"+childIMSI, 0, ask(10, 1*mib, -1))))
	}()
	select {
	case <-g.in: // in flight, held in the Charger
	case r := <-done:
		t.Fatalf("the first request ended before its step: %d %s", r.status, r.body)
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never reached the Charger")
	}
	r := post(t, c, api+"/chargingdata", token, mustJSON(t, request("msisdn-821012345678", 0, ask(10, 1*mib, -1))))
	var p struct {
		Cause string `json:"cause"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil || r.status != http.StatusServiceUnavailable || p.Cause != charging.CauseNFCongestion ||
		r.header.Get("Retry-After") == "" {
		t.Errorf("a second at once: %d %s (Retry-After %q)", r.status, r.body, r.header.Get("Retry-After"))
	}
	close(g.gate)
	if r := <-done; r.status != http.StatusCreated {
		t.Errorf("the request in flight: %d %s", r.status, r.body)
	}
	if _, used, reserved := e.fake.Pool(family); used != 0 || reserved != 1*mib {
		t.Errorf("used %d reserved %d: want the first step's 1 MiB only", used, reserved)
	}
}

// An update that names another notifyUri moves the session's
// notifications there (the SMF instance that took the session over, or
// the SMF back on a new address): the next REAUTHORIZATION reaches the
// new endpoint, not the old; an update naming none keeps it, and a retry
// of the last update from yet another endpoint moves them there.
func TestNotificationsFollowTheSMF(t *testing.T) {
	e := newEnv(t, charging.WithNotifyNetworks(true))
	before, between, after := newSMF(t, false), newSMF(t, false), newSMF(t, false)
	req := request("imsi-"+childIMSI, 0, ask(10, 0, -1))
	req.NotifyURI = before.URL + "/n/1"
	ref, _, err := e.svc.Create(e.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	up := request("imsi-"+childIMSI, 1, ask(10, 0, 1))
	up.NotifyURI = between.URL + "/n/1"
	if _, err := e.svc.Update(e.ctx, ref, up); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Update(e.ctx, ref, request("imsi-"+childIMSI, 2, ask(10, 0, 1))); err != nil {
		t.Fatal(err)
	}
	retry := request("imsi-"+childIMSI, 2, ask(10, 0, 1))
	retry.NotifyURI = after.URL + "/n/1"
	if _, err := e.svc.Update(e.ctx, ref, retry); err != nil {
		t.Fatal(err)
	}
	e.svc.Changed(family, child)
	if n := after.wait(t, 10*time.Second); n.path != "/n/1" {
		t.Errorf("notified %s", n.path)
	}
	select {
	case n := <-before.got:
		t.Errorf("the SMF the session left was notified: %s", n.path)
	case n := <-between.got:
		t.Errorf("the endpoint the retry left was notified: %s", n.path)
	case <-time.After(50 * time.Millisecond):
	}
	if sess, err := e.st.S.ChargingSession(e.ctx, ref); err != nil || sess.NotifyURI != after.URL+"/n/1" {
		t.Errorf("SQL holds %q (%v)", sess.NotifyURI, err)
	}
}
