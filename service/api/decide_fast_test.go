package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
)

// TestDecideFastMatchesHuma sends the same requests to two APIs on the same
// state, one answering POST /decisions through the fast path where it can,
// one always through huma's own body path: every answer must be the same,
// byte for byte, and the fast path must have answered exactly the requests
// it is for.
func TestDecideFastMatchesHuma(t *testing.T) {
	fast, slow := newDecideFixture(t), newDecideFixture(t)
	slow.api.decideSlow = true
	ts := fast.clock().Format(time.RFC3339Nano)
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
		{name: "too old (the engine's check)", body: `{"events":[` + strings.Replace(ev("a13", famA, childA, 1, ""), ts,
			fast.clock().Add(-24*time.Hour).Format(time.RFC3339), 1) + `]}`, fast: true},
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
			before := fast.api.decidedFast.Load()
			var got [2]*http.Response
			var body [2][]byte
			for i, f := range []*decideFixture{fast, slow} {
				var b any
				if c.body != "" {
					b = c.body
				}
				got[i], body[i] = f.do(http.MethodPost, "/decisions", testGateway, b, c.hdr...)
			}
			if got[0].StatusCode != got[1].StatusCode || got[0].Header.Get("Content-Type") != got[1].Header.Get("Content-Type") ||
				!bytes.Equal(body[0], body[1]) {
				t.Fatalf("fast path: %d %s %s\nhuma: %d %s %s", got[0].StatusCode, got[0].Header.Get("Content-Type"), body[0],
					got[1].StatusCode, got[1].Header.Get("Content-Type"), body[1])
			}
			if n := fast.api.decidedFast.Load() - before; n != map[bool]int64{true: 1}[c.fast] {
				t.Errorf("the fast path answered %d requests, want it to answer: %v (status %d: %s)", n, c.fast, got[0].StatusCode, body[0])
			}
			if slow.api.decidedFast.Load() != 0 {
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
