package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

const (
	testToken              = "gw_test_0123456789abcdef0123456789abcdef"
	famA, famB             = int64(100), int64(200)
	ownerA, childA, childB = int64(1001), int64(1002), int64(2002)
	mib                    = int64(1) << 20
	failID                 = "judge-down"
)

var errJudgeDown = errors.New("gateway test: the judge is down")

// fakeDecider answers each event from its fields alone (the same event,
// the same answer), with rules that need JSON escapes; an event with id
// failID fails the whole call.
type fakeDecider struct{}

func (fakeDecider) Decide(_ context.Context, envs []envelope.Envelope[envelope.UsagePayload]) ([]quota.Result, error) {
	out := make([]quota.Result, len(envs))
	for i, e := range envs {
		if e.EventID == failID {
			return nil, errJudgeDown
		}
		p := e.Payload
		r := quota.Result{Decision: policy.Allowed, Remaining: 1<<40 - p.BytesUsed, Total: 1 << 40, DailyUsed: p.BytesUsed,
			MonthlyUsed: 3 * p.BytesUsed, Duplicate: strings.HasSuffix(e.EventID, "2")}
		switch {
		case p.FamilyID == famB && p.CustomerID != childB:
			r = quota.Result{Decision: policy.BlockedNotMember, Rule: `NOT_MEMBER "<family>" & 가족`}
		case p.BytesUsed%2 == 1:
			r.Decision, r.Rule, r.Remaining = policy.BlockedApp, policy.KeyBlockAppPrefix+p.AppID+"\\\t\u2028", 0
		case p.CustomerID == ownerA:
			r.ThrottleKbps = 512
		}
		out[i] = r
	}
	return out, nil
}

// testRoute is the route on a huma API configured as the service's
// (no $schema links), behind its own authentication; slow sends every
// request through huma's own body path.
func testRoute(t *testing.T, d Decider, slow bool) (*Route, http.Handler) {
	t.Helper()
	mux := http.NewServeMux()
	hc := huma.DefaultConfig("gateway test", "1.0.0")
	hc.CreateHooks = nil
	hc.Components.SecuritySchemes = map[string]*huma.SecurityScheme{Scheme: SecurityScheme()}
	api := humago.New(mux, hc)
	var r *Route
	api.UseMiddleware(func(ctx huma.Context, next func(huma.Context)) { r.Authenticate(ctx, next) })
	r = Register(api, Config{Decisions: d, Tokens: []string{" ", testToken}, Problem: func(_ context.Context, err error, loc string) error {
		if errors.Is(err, errJudgeDown) {
			return huma.Error503ServiceUnavailable("cannot decide now: nothing granted, retry with the same event ids")
		}
		return huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: loc, Message: "refused"})
	}})
	r.slow = slow
	return r, mux
}

// post sends body to POST /decisions with token and the header pairs hdr.
func post(t *testing.T, h http.Handler, token, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/decisions", strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	resp := w.Result()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, data
}

// TestDecideFastMatchesHuma sends the same requests to two routes on the
// same decider, one answering through the fast path where it can, one
// always through huma's own body path: every answer must be the same, byte
// for byte, and the fast path must have answered exactly the requests it
// is for.
func TestDecideFastMatchesHuma(t *testing.T) {
	fastR, fast := testRoute(t, fakeDecider{}, false)
	slowR, slow := testRoute(t, fakeDecider{}, true)
	now := time.Date(2026, 2, 10, 12, 0, 0, 0, time.UTC)
	ts := now.Format(time.RFC3339Nano)
	ev := func(id string, fid, cid, bytes int64, extra string) string {
		return fmt.Sprintf(`{"eventId":%q,"timestamp":%q,"familyId":%d,"customerId":%d,"appId":"com.youtube.app","bytesUsed":%d%s}`,
			id, ts, fid, cid, bytes, extra)
	}
	many := make([]string, maxDecisionEvents+1)
	for i := range many {
		many[i] = ev(fmt.Sprintf("m%d", i), famA, childA, 1, "")
	}
	for _, c := range []struct {
		name, body string
		hdr        []string
		fast       bool
	}{
		{name: "one event", body: `{"events":[` + ev("a1", famA, childA, mib, "") + `]}`, fast: true},
		{name: "a batch", body: `{"events":[` + ev("a2", famA, childA, mib, "") + "," + ev("a3", famA, ownerA, 2*mib, "") + "," +
			ev("a4", famA, 5555, 1, "") + "," + ev("a5", famB, childB, 0, "") + `]}`, fast: true},
		{name: "a retry", body: `{"events":[` + ev("a2", famA, childA, mib, "") + `]}`, fast: true},
		{name: "white space and member order", body: " {\n \"events\" : [ {\"bytesUsed\" : 5 , \"appId\":\"x\",\t\"customerId\":" +
			fmt.Sprint(childA) + ",\"familyId\":" + fmt.Sprint(famA) + ",\"timestamp\":\"" + ts + "\",\"eventId\":\"a6\"} ] }\r\n", fast: true},
		{name: "metadata", body: `{"events":[` + ev("a7", famA, childA, 1, `,"metadata":{"deviceId":"d\"1","n":1.5,"deep":{"a":[1,true,null,"\u00e9"]}}`) + `]}`, fast: true},
		{name: "empty metadata", body: `{"events":[` + ev("a8", famA, childA, 1, `,"metadata":{}`) + `]}`, fast: true},
		{name: "charset", body: `{"events":[` + ev("a9", famA, childA, 1, "") + `]}`, hdr: []string{"Content-Type", "application/json; charset=utf-8"}, fast: true},
		{name: "accept any", body: `{"events":[` + ev("a10", famA, childA, 1, "") + `]}`, hdr: []string{"Accept", "*/*"}, fast: true},
		{name: "largest bytes", body: `{"events":[` + ev("a11", famB, childB, 1<<46, "") + `]}`, fast: true},
		{name: "zero as -0", body: `{"events":[` + ev("a12", famA, childA, 0, "") + `]}`, fast: true},
		{name: "too old (the judge's to refuse)", body: `{"events":[` + strings.Replace(ev("a13", famA, childA, 1, ""), ts,
			now.Add(-24*time.Hour).Format(time.RFC3339), 1) + `]}`, fast: true},
		{name: "the judge fails", body: `{"events":[` + ev(failID, famA, childA, 1, "") + `]}`, fast: true},
		{name: "not a member", body: `{"events":[` + ev("a14", famB, childA, 1, "") + `]}`, fast: true},

		{name: "non-ASCII id", body: `{"events":[` + ev("évt", famA, childA, 1, "") + `]}`},
		{name: "escaped id", body: `{"events":[` + strings.Replace(ev("b1", famA, childA, 1, ""), `"b1"`, `"b\u0031x"`, 1) + `]}`},
		{name: "no body members", body: `{}`},
		{name: "no events", body: `{"events":[]}`},
		{name: "null events", body: `{"events":null}`},
		{name: "too many events", body: `{"events":[` + strings.Join(many, ",") + `]}`},
		{name: "unknown member", body: `{"events":[` + ev("b2", famA, childA, 1, "") + `],"x":1}`},
		{name: "unknown event member", body: `{"events":[` + ev("b3", famA, childA, 1, `,"extra":1`) + `]}`},
		{name: "member name's case", body: `{"events":[` + strings.Replace(ev("b4", famA, childA, 1, ""), "eventId", "EventID", 1) + `]}`},
		{name: "duplicate member", body: `{"events":[` + ev("b5", famA, childA, 1, `,"bytesUsed":2`) + `]}`},
		{name: "duplicate events", body: `{"events":[` + ev("b6", famA, childA, 1, "") + `],"events":[` + ev("b7", famA, childA, 1, "") + `]}`},
		{name: "string family", body: `{"events":[` + strings.Replace(ev("b8", famA, childA, 1, ""), fmt.Sprintf(`"familyId":%d`, famA), fmt.Sprintf(`"familyId":"%d"`, famA), 1) + `]}`},
		{name: "fraction", body: `{"events":[` + strings.Replace(ev("b9", famA, childA, 1, ""), `"bytesUsed":1`, `"bytesUsed":1.5`, 1) + `]}`},
		{name: "integral fraction", body: `{"events":[` + strings.Replace(ev("b10", famA, childA, 1, ""), `"bytesUsed":1`, `"bytesUsed":1.0`, 1) + `]}`},
		{name: "exponent", body: `{"events":[` + strings.Replace(ev("b11", famA, childA, 1, ""), `"bytesUsed":1`, `"bytesUsed":1e3`, 1) + `]}`},
		{name: "leading zero", body: `{"events":[` + strings.Replace(ev("b12", famA, childA, 1, ""), `"bytesUsed":1`, `"bytesUsed":01`, 1) + `]}`},
		{name: "negative bytes", body: `{"events":[` + ev("b13", famA, childA, -1, "") + `]}`},
		{name: "bytes over the maximum", body: `{"events":[` + ev("b14", famA, childA, 1<<46+1, "") + `]}`},
		{name: "family 0", body: `{"events":[` + ev("b15", 0, childA, 1, "") + `]}`},
		{name: "empty id", body: `{"events":[` + ev("", famA, childA, 1, "") + `]}`},
		{name: "long id", body: `{"events":[` + ev(strings.Repeat("x", 201), famA, childA, 1, "") + `]}`},
		{name: "longest id", body: `{"events":[` + ev(strings.Repeat("y", 200), famA, childA, 1, "") + `]}`, fast: true},
		{name: "bad timestamp", body: `{"events":[` + strings.Replace(ev("b16", famA, childA, 1, ""), ts, "2026-13-01T00:00:00Z", 1) + `]}`},
		{name: "no timestamp", body: `{"events":[{"eventId":"b17","familyId":1,"customerId":1,"appId":"a","bytesUsed":1}]}`},
		{name: "metadata not an object", body: `{"events":[` + ev("b18", famA, childA, 1, `,"metadata":[1]`) + `]}`},
		{name: "null metadata", body: `{"events":[` + ev("b19", famA, childA, 1, `,"metadata":null`) + `]}`},
		{name: "trailing data", body: `{"events":[` + ev("b20", famA, childA, 1, "") + `]} x`},
		{name: "not JSON", body: `{"events":[`},
		{name: "empty body", body: ``},
		{name: "another media type", body: `{"events":[` + ev("b21", famA, childA, 1, "") + `]}`, hdr: []string{"Content-Type", "text/plain"}},
		{name: "another accept", body: `{"events":[` + ev("b22", famA, childA, 1, "") + `]}`, hdr: []string{"Accept", "application/cbor"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := fastR.fast.Load()
			var got [2]*http.Response
			var body [2][]byte
			for i, h := range []http.Handler{fast, slow} {
				got[i], body[i] = post(t, h, testToken, c.body, c.hdr...)
			}
			if got[0].StatusCode != got[1].StatusCode || got[0].Header.Get("Content-Type") != got[1].Header.Get("Content-Type") ||
				!bytes.Equal(body[0], body[1]) {
				t.Fatalf("fast path: %d %s %s\nhuma: %d %s %s", got[0].StatusCode, got[0].Header.Get("Content-Type"), body[0],
					got[1].StatusCode, got[1].Header.Get("Content-Type"), body[1])
			}
			if n := fastR.fast.Load() - before; n != map[bool]int64{true: 1}[c.fast] {
				t.Errorf("the fast path answered %d requests, want it to answer: %v (status %d: %s)", n, c.fast, got[0].StatusCode, body[0])
			}
			if slowR.fast.Load() != 0 {
				t.Error("the slow API took the fast path")
			}
		})
	}
}

// FuzzDecideFast: whatever the body, the fast decoder accepts only what
// huma's path accepts (schema validation, then decoding into DecisionAsk),
// and decodes it to the same events.
func FuzzDecideFast(f *testing.F) {
	ts := "2026-02-10T12:00:00Z"
	for _, s := range []string{
		`{"events":[{"eventId":"e1","timestamp":"` + ts + `","familyId":1,"customerId":2,"appId":"a","bytesUsed":3}]}`,
		`{"events":[{"eventId":"e1","timestamp":"` + ts + `","familyId":1,"customerId":2,"appId":"a","bytesUsed":3,"metadata":{"k":[1,{"x":"y"}]}}]}`,
		`{"events":[{"eventId":"e1","timestamp":"2026-02-10T12:00:00.123+09:00","familyId":1,"customerId":2,"appId":"a","bytesUsed":0},` +
			`{"eventId":"e2","timestamp":"` + ts + `","familyId":9,"customerId":9,"appId":"b","bytesUsed":70368744177664}]}`,
		`{"events":[]}`, `{}`, `{"events":[{"eventId":"e1"}]}`, ` { "events" : [ ] } `,
	} {
		f.Add([]byte(s))
	}
	reg := huma.NewMapRegistry("#/components/schemas/", huma.DefaultSchemaNamer)
	schema := reg.Schema(reflect.TypeOf(DecisionAsk{}), true, "DecisionAsk")
	f.Fuzz(func(t *testing.T, data []byte) {
		envs, ok := decodeDecisionAsk(data)
		if !ok {
			return
		}
		var parsed any
		if err := json.Unmarshal(data, &parsed); err != nil {
			t.Fatalf("fast path accepted what is not JSON: %v", err)
		}
		res := &huma.ValidateResult{}
		pb := huma.NewPathBuffer([]byte{}, 0)
		pb.Push("body")
		huma.Validate(reg, schema, pb, huma.ModeWriteToServer, parsed, res)
		if len(res.Errors) > 0 {
			t.Fatalf("fast path accepted what the schema refuses: %v", res.Errors)
		}
		var ask DecisionAsk
		if err := json.Unmarshal(data, &ask); err != nil {
			t.Fatalf("fast path accepted what huma cannot decode: %v", err)
		}
		if len(ask.Events) != len(envs) {
			t.Fatalf("%d events, huma %d", len(envs), len(ask.Events))
		}
		for i, e := range ask.Events {
			want := envelope.New(e.EventID, e.Timestamp, envelope.UsagePayload{FamilyID: e.FamilyID,
				CustomerID: e.CustomerID, AppID: e.AppID, BytesUsed: e.BytesUsed, Metadata: e.Metadata})
			if diff := cmp.Diff(want, envs[i]); diff != "" {
				t.Fatalf("event %d (-huma +fast):\n%s", i, diff)
			}
		}
	})
}

// BenchmarkDecodeDecisionAsk is the fast path's decoder on a gateway's
// usual bodies: one event, and a batch of 16 with metadata on one.
func BenchmarkDecodeDecisionAsk(b *testing.B) {
	ev := func(i int, extra string) string {
		return fmt.Sprintf(`{"eventId":"evt_550e8400-e29b-41d4-a716-4466554400%02d","timestamp":"2026-02-10T12:00:00Z",`+
			`"familyId":100,"customerId":%d,"appId":"com.youtube.app","bytesUsed":1048576%s}`, i, 1+i%4, extra)
	}
	batch := make([]string, 16)
	for i := range batch {
		batch[i] = ev(i, "")
	}
	batch[3] = ev(3, `,"metadata":{"deviceId":"d-1","cell":"450-05-1234"}`)
	for _, c := range []struct{ name, body string }{
		{"one", `{"events":[` + ev(0, "") + `]}`},
		{"batch16", `{"events":[` + strings.Join(batch, ",") + `]}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			data := []byte(c.body)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := decodeDecisionAsk(data); !ok {
					b.Fatal("not decoded")
				}
			}
		})
	}
}

// TestAuthenticate: only a configured credential opens the route (a blank
// one configured is none), and a refusal says which scheme is wanted.
func TestAuthenticate(t *testing.T) {
	_, h := testRoute(t, fakeDecider{}, false)
	body := `{"events":[{"eventId":"a","timestamp":"2026-02-10T12:00:00Z","familyId":1,"customerId":1,"appId":"a","bytesUsed":0}]}`
	for _, tok := range []string{"", " ", "gw_test", testToken + "x", strings.ToUpper(testToken)} {
		resp, data := post(t, h, tok, body)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "dpcs-gateway") {
			t.Errorf("token %q: %d %q %s", tok, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), data)
		}
	}
	if resp, data := post(t, h, testToken, body); resp.StatusCode != http.StatusOK {
		t.Errorf("the credential: %d %s", resp.StatusCode, data)
	}
}

// TestDecideDisabled: without a Decider the route answers 503 on both paths.
func TestDecideDisabled(t *testing.T) {
	_, h := testRoute(t, nil, false)
	resp, data := post(t, h, testToken, `{"events":[{"eventId":"a","timestamp":"2026-02-10T12:00:00Z","familyId":1,"customerId":1,"appId":"a","bytesUsed":0}]}`)
	if resp.StatusCode != http.StatusServiceUnavailable || !bytes.Contains(data, []byte("not enabled")) {
		t.Errorf("%d %s", resp.StatusCode, data)
	}
}
