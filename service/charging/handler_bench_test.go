package charging_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/httpserver"
	"github.com/dabom/dpcs/internal/testenv"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/api/gateway"
	"github.com/dabom/dpcs/service/charging"
)

// BenchmarkUpdateVsDecideHandler is the handler-level cost of an Nchf
// update beside one of POST /decisions, alternating on one caller so both
// see the same machine at the same moment. Each side is its real route
// with a real body: the charging Handler (bearer check, TS 32.291 JSON,
// the session's step and its record in SQL, the answer) on the in-memory
// grant engine, and POST /decisions (huma, the gateway's credential and
// fast path) on a decider that answers at once, so neither pays the
// door's step (which costs a decision: BenchmarkChargeVsDecide in
// service/judge). The update body is an SMF's (request-update-threshold's
// members), the decision body one event of 1 KiB.
//
// "direct" calls each handler's ServeHTTP (the handler's own CPU); "wire"
// sends each over loopback as the peers bench does — the update over h2c,
// the decision over HTTP/1.1 — so both sides' CPU includes their client's.
// Reported: CPU µs (user and system, the whole process) per update and per
// decision and their ratio. Sessions are on SQLite by default, on the
// MariaDB of DPCS_TEST_MYSQL_DSN when it is set, whose CPU per update is
// reported too when DPCS_BENCH_SQL_PID names its process (doc/benchmarks.md,
// "The grant path over Nchf").
func BenchmarkUpdateVsDecideHandler(b *testing.B) {
	b.Run("direct", func(b *testing.B) { benchmarkUpdateVsDecide(b, false) })
	b.Run("wire", func(b *testing.B) { benchmarkUpdateVsDecide(b, true) })
}

func benchmarkUpdateVsDecide(b *testing.B, wire bool) {
	e := newBenchEnv(b)
	e.fake.SetPool(family, 1<<45)
	ref, _, err := e.svc.Create(b.Context(), request("imsi-"+childIMSI, 0, ask(10, 1*mib, -1)))
	if err != nil {
		b.Fatal(err)
	}
	update := charging.Handler(e.svc, charging.HandlerConfig{Tokens: []string{token}})
	decide := decisionsRoute(b)
	updateURL, decideURL := charging.BasePath+"/chargingdata/"+ref+"/update", "/decisions"
	var updateClient, decideClient *http.Client
	if wire {
		updateURL = serveH2C(b, update) + updateURL
		decideURL = serveHTTP1(b, decide) + decideURL
		updateClient, decideClient = h2c(), &http.Client{Timeout: 10 * time.Second}
	}
	call := func(h http.Handler, c *http.Client, url, tok string, body []byte) int {
		req, _ := http.NewRequestWithContext(b.Context(), http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		if c == nil {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			return w.Code
		}
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	var updCPU, decCPU time.Duration
	sqlPID := os.Getenv("DPCS_BENCH_SQL_PID")
	sql0 := testenv.PIDCPU(b, sqlPID)
	b.ResetTimer()
	for i := range b.N {
		ub := smfUpdateBody(uint32(i+1), 1*mib, 10*mib)
		db := decisionBody("evt-"+strconv.Itoa(b.N)+"-"+strconv.Itoa(i), 1<<10)
		c0 := processCPU(b)
		if code := call(update, updateClient, updateURL, token, ub); code != http.StatusOK {
			b.Fatalf("update %d: %d", i, code)
		}
		c1 := processCPU(b)
		if code := call(decide, decideClient, decideURL, gatewayToken, db); code != http.StatusOK {
			b.Fatalf("decision %d: %d", i, code)
		}
		c2 := processCPU(b)
		updCPU, decCPU = updCPU+c1-c0, decCPU+c2-c1
	}
	b.StopTimer()
	if sqlPID != "" { // only updates write SQL
		b.ReportMetric(float64((testenv.PIDCPU(b, sqlPID)-sql0).Microseconds())/float64(b.N), "sql-cpu-µs/update")
	}
	b.ReportMetric(float64(updCPU.Microseconds())/float64(b.N), "cpu-µs/update")
	b.ReportMetric(float64(decCPU.Microseconds())/float64(b.N), "cpu-µs/decision")
	b.ReportMetric(float64(updCPU)/float64(decCPU), "update/decision")
}

const gatewayToken = "gw_bench_0123456789abcdef0123456789abcdef"

// smfUpdateBody is an update as an SMF sends it: rating group 10's usage
// with its trigger, the next grant asked for, the PDU session's charging
// information.
func smfUpdateBody(seq uint32, used, want uint64) []byte {
	b := make([]byte, 0, 1024)
	b = append(b, `{"subscriberIdentifier":"imsi-`+childIMSI+`","nfConsumerIdentification":{"nFName":"0a3b5c7d-1e2f-4a6b-8c9d-0e1f2a3b4c5d","nodeFunctionality":"SMF"},`+
		`"invocationTimeStamp":"2026-11-27T10:05:00.000Z","invocationSequenceNumber":`...)
	b = strconv.AppendUint(b, uint64(seq), 10)
	b = append(b, `,"retransmissionIndicator":false,"multipleUnitUsage":[{"ratingGroup":10,"requestedUnit":{"totalVolume":`...)
	b = strconv.AppendUint(b, want, 10)
	b = append(b, `},"usedUnitContainer":[{"quotaManagementIndicator":"ONLINE_CHARGING",`+
		`"triggers":[{"triggerType":"QUOTA_THRESHOLD","triggerCategory":"IMMEDIATE_REPORT"}],"triggerTimestamp":"2026-11-27T10:04:59.500Z","totalVolume":`...)
	b = strconv.AppendUint(b, used, 10)
	b = append(b, `,"uplinkVolume":0,"downlinkVolume":`...)
	b = strconv.AppendUint(b, used, 10)
	b = append(b, `,"localSequenceNumber":`...)
	b = strconv.AppendUint(b, uint64(seq), 10)
	b = append(b, `}]}],"triggers":[{"triggerType":"QUOTA_THRESHOLD","triggerCategory":"IMMEDIATE_REPORT"}],`+
		`"pDUSessionChargingInformation":{"chargingId":305419896,"pduSessionInformation":{"pduSessionID":5,"dnnId":"internet","ratType":"NR"}}}`...)
	return b
}

// decisionBody is POST /decisions' body for one event of n bytes.
func decisionBody(id string, n int64) []byte {
	return []byte(`{"events":[{"eventId":"` + id + `","timestamp":"2026-11-27T10:05:00Z","familyId":100,"customerId":1003,` +
		`"appId":"com.youtube.app","bytesUsed":` + strconv.FormatInt(n, 10) + `}]}`)
}

// instantDecider allows every event at once, from its fields alone.
type instantDecider struct{}

func (instantDecider) Decide(_ context.Context, envs []envelope.Envelope[envelope.UsagePayload]) ([]quota.Result, error) {
	out := make([]quota.Result, len(envs))
	for i, e := range envs {
		out[i] = quota.Result{Decision: policy.Allowed, Remaining: pool - e.Payload.BytesUsed, Total: pool,
			DailyUsed: e.Payload.BytesUsed, MonthlyUsed: e.Payload.BytesUsed}
	}
	return out, nil
}

// decisionsRoute is POST /decisions on a huma API as service/api mounts it
// (the gateway's own authentication, its fast path).
func decisionsRoute(b *testing.B) http.Handler {
	mux := http.NewServeMux()
	hc := huma.DefaultConfig("decisions bench", "1.0.0")
	hc.CreateHooks = nil
	hc.Components.SecuritySchemes = map[string]*huma.SecurityScheme{gateway.Scheme: gateway.SecurityScheme()}
	api := humago.New(mux, hc)
	var r *gateway.Route
	api.UseMiddleware(func(ctx huma.Context, next func(huma.Context)) { r.Authenticate(ctx, next) })
	r = gateway.Register(api, gateway.Config{Decisions: instantDecider{}, Tokens: []string{gatewayToken},
		Problem: func(context.Context, error, string) error { return errors.New("bench: no problem expected") }})
	return mux
}

// serveH2C serves h as the charging deployable does (NewServer: h2c and
// HTTP/1.1) on a loopback port; it returns its root.
func serveH2C(b *testing.B, h http.Handler) string {
	return serveOn(b, charging.NewServer(h, nil, nil))
}

// serveHTTP1 serves h over HTTP/1.1 on a loopback port as the API server
// serves POST /decisions (internal/httpserver, self-timed).
func serveHTTP1(b *testing.B, h http.Handler) string {
	return serveOn(b, httpserver.New(h, httpserver.Config{SelfTimed: func(*http.Request) bool { return true }}))
}

func serveOn(b *testing.B, srv *http.Server) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return "http://" + ln.Addr().String()
}
