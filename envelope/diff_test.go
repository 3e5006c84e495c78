package envelope_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/dabom/dpcs/envelope"
)

// Decode reads built-in events in one pass and hands anything unusual to the
// encoding/json decoder it replaced (envelope.DecodeSlow). These tests check
// that the two never disagree: same event, or same error.

// sameDecode fails unless Decode and DecodeSlow agree on data: identical
// events (reflect.DeepEqual: same dynamic payload types, same time.Time
// representation), or identical errors: text, sentinels, and the type and
// path of every problem.
func sameDecode(t interface{ Fatalf(string, ...any) }, data []byte) {
	got, gotErr := envelope.Decode(data)
	want, wantErr := envelope.DecodeSlow(data)
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("Decode and DecodeSlow disagree (-slow +fast):\n%s\nin: %q", cmp.Diff(want, got), data)
	}
	if diff := cmp.Diff(problems(wantErr), problems(gotErr)); diff != "" {
		t.Fatalf("Decode and DecodeSlow errors differ (-slow +fast):\n%s\nin: %q", diff, data)
	}
}

// problems describes err for comparison: its text, the sentinels it wraps
// and each of its (joined) problems.
func problems(err error) []string {
	if err == nil {
		return nil
	}
	out := []string{err.Error(), fmt.Sprint(errors.Is(err, envelope.ErrMalformed), errors.Is(err, envelope.ErrUnknownType))}
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		out = append(out, fmt.Sprintf("%T %q", err, err))
		if fe, ok := err.(*envelope.FieldError); ok {
			out = append(out, fmt.Sprintf("field %q msg %q cause %T %v", fe.Field, fe.Msg, fe.Err, fe.Err))
		}
	}
	walk(err)
	return out
}

// corpus returns the seed inputs of the decoding tests: the goldens, the
// FuzzDecode corpus in testdata/fuzz when there is one, and hand-written
// inputs aimed at the fast path's corners.
func corpus(tb testing.TB) [][]byte {
	tb.Helper()
	var out [][]byte
	goldens, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		tb.Fatal(err)
	}
	for _, path := range goldens {
		out = append(out, readFile(tb, path))
	}
	out = append(out, memberMatrix(tb, goldens)...)
	fuzzed, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzDecode*", "*"))
	if err != nil {
		tb.Fatal(err)
	}
	for _, path := range fuzzed {
		out = append(out, readCorpusFile(tb, path)...)
	}
	const usage = `{"eventId":"evt_1","eventType":"DATA_USAGE","timestamp":"2026-02-06T14:30:00Z","payload":{"familyId":100,"customerId":12345,"appId":"a","bytesUsed":5}}`
	const blocked = `{"eventId":"n","eventType":"NOTIFICATION","subType":"CUSTOMER_BLOCKED","timestamp":"2026-02-06T14:30:00Z","payload":{"familyId":1,"customerId":2,"blockReason":"r","blockedAt":"2026-02-06T14:32:00Z","decision":null}}`
	const quota = `{"eventId":"n","eventType":"NOTIFICATION","subType":"QUOTA_UPDATED","timestamp":"2026-02-06T14:30:00Z","payload":{"familyId":1,"customerId":2,"familyRemainingBytes":3,"familyUsedPercent":50.5,"customerUsedBytesToday":4}}`
	const persist = `{"eventId":"p","eventType":"USAGE_PERSIST","timestamp":"2026-02-06T14:30:00Z","payload":{"originEventId":"e","familyId":1,"customerId":2,"bytesUsed":3,"appId":"a","processResult":"ALLOWED","remainingAfter":4,"eventTime":"2026-02-06T14:30:00Z","crossed":[{"percent":50,"arm":1}]}}`
	// The threshold crossings of usage-persist: every shape of the array,
	// its elements and their members.
	for _, c := range []string{
		`null`, `[]`, ` [ ] `, `[{"percent":50,"arm":1},{"percent":30,"arm":2}]`, `[{"arm":1,"percent":50}]`,
		`[{"percent":50,"arm":1,"note":{"a":[null]}}]`, `[{"percent":50,"arm":1},]`, `[{"percent":50,"arm":1}`, `[{"percent":50,"arm":1}}`,
		`[{"percent":50}]`, `[{"arm":1}]`, `[{"percent":null,"arm":1}]`, `[{"percent":50,"arm":null}]`, `[{}]`,
		`[{"percent":50,"percent":30,"arm":1}]`, `[{"percent":50,"arm":1,"arm":2}]`, `[{"perc\u0065nt":50,"arm":1}]`,
		`[{"percent":"50","arm":1}]`, `[{"percent":50.0,"arm":1}]`, `[{"percent":5e1,"arm":1}]`, `[{"percent":50,"arm":9223372036854775808}]`,
		`[{"percent":0,"arm":1}]`, `[{"percent":101,"arm":1}]`, `[{"percent":-1,"arm":0}]`, `[{"percent":100,"arm":9223372036854775807}]`,
		`[null]`, `[1]`, `["x"]`, `[[]]`, `[{"percent":50,"arm":1},null]`, `{}`, `{"percent":50,"arm":1}`, `"50:1"`, `1`, `true`,
	} {
		out = append(out, []byte(strings.Replace(persist, `[{"percent":50,"arm":1}]`, c, 1)))
	}
	// A grant step's member: every shape of it and of its members.
	const grant = `{"grantId":"g","grantedBytes":5,"open":true}`
	for _, g := range []string{
		`null`, `{}`, `[]`, `1`, `"g"`, grant, `{"grantedBytes":5}`, `{"grantId":"g"}`, `{"grantId":null,"grantedBytes":5}`,
		`{"grantId":"g","grantedBytes":null}`, `{"grantId":"g","grantId":"h","grantedBytes":5}`, `{"grantId":"g","grantedBytes":5,"grantedBytes":6}`,
		`{"gr\u0061ntId":"g","grantedBytes":5}`, `{"grantId":"g\u00e9","grantedBytes":5}`,
	} {
		out = append(out, []byte(strings.Replace(persist, `"crossed"`, `"grant":`+g+`,"crossed"`, 1)))
	}
	for _, m := range []string{
		`"previousStep":"p"`, `"previousStep":null`, `"previousStep":1`, `"open":false`, `"open":null`, `"open":"true"`, `"open":tru`,
		`"final":true`, `"final":false`, `"final":1`, `"overageBytes":0`, `"overageBytes":-1`, `"overageBytes":1.5`,
		`"reservedBytes":9223372036854775808`, `"reservedBytes":null`, `"validUntil":"2026-02-06T14:30:00Z"`, `"validUntil":null`,
		`"validUntil":"2026-02-06"`, `"validUntil":0`, `"reclaim":[]`, `"reclaim":null`, `"reclaim":["a","b"]`, `"reclaim":["a",null]`,
		`"reclaim":[""]`, `"reclaim":["a",1]`, `"reclaim":"a"`, `"reclaim":["\u0061"]`, `"reclaim":["a",]`, `"x":{"y":[null]}`,
	} {
		out = append(out, []byte(strings.Replace(persist, `"crossed"`, `"grant":`+strings.Replace(grant, `"open":true`, `"open":true,`+m, 1)+`,"crossed"`, 1)))
	}
	for _, m := range []string{"totalBytes", "dailyUsedBytes", "monthlyUsedBytes", "throttleKbps", "grantChargedBytes"} {
		for _, v := range []string{`null`, `0`, `-0`, `-1`, `1`, `9223372036854775807`, `9223372036854775808`, `1.5`, `"1"`, `[]`} {
			out = append(out, []byte(strings.Replace(persist, `"crossed"`, `"`+m+`":`+v+`,"crossed"`, 1)))
		}
	}
	// Numbers, valid and not, where integers, floats, free-form and
	// skipped values go.
	for _, n := range []string{`0`, `-0`, `1`, `-1`, `1.`, `.5`, `-.5`, `1.e5`, `1e`, `1e+`, `1E-2`, `1.5e+3`, `01`, `-01`, `00`, `-`, `+1`, `1_0`, `0x10`, `Infinity`, `NaN`, `1e400`, `4.9e-324`, `1e-400`, `99.999999999999999999`} {
		out = append(out,
			[]byte(strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":`+n, 1)),
			[]byte(strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":5,"metadata":{"n":`+n+`}`, 1)),
			[]byte(strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":5,"metadata":{"n":[`+n+`]}`, 1)),
			[]byte(strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":5,"unknown":`+n, 1)),
			[]byte(strings.Replace(quota, `50.5`, n, 1)),
		)
	}
	for _, s := range []string{
		usage,
		blocked,
		quota,
		// Order, duplicates, null.
		`{"payload":{"familyId":1,"customerId":2,"blockReason":"r","blockedAt":"2026-02-06T14:32:00Z"},"subType":"CUSTOMER_BLOCKED","eventType":"NOTIFICATION","eventId":"n","timestamp":"2026-02-06T14:30:00Z"}`,
		`{"eventId":"n","eventType":"NOTIFICATION","payload":{"familyId":1,"customerId":2,"blockReason":"r","blockedAt":"2026-02-06T14:32:00Z"},"subType":"CUSTOMER_BLOCKED","timestamp":"2026-02-06T14:30:00Z"}`,
		`{"eventId":"e","eventType":"DATA_USAGE","payload":{"familyId":1,"customerId":2,"appId":"a","bytesUsed":5},"subType":"QUOTA_UPDATED","timestamp":"2026-02-06T14:30:00Z"}`,
		strings.Replace(usage, `"eventId":"evt_1"`, `"eventId":"evt_1","eventId":"evt_2"`, 1),
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":5,"bytesUsed":null`, 1),
		strings.Replace(usage, `"appId":"a"`, `"appId":null`, 1),
		strings.Replace(usage, `"eventId":"evt_1"`, `"eventId":""`, 1),
		strings.Replace(usage, `"eventType":"DATA_USAGE"`, `"eventType":""`, 1),
		strings.Replace(usage, `"eventType":"DATA_USAGE"`, `"eventType":"DATA_USAGE","subType":""`, 1),
		strings.Replace(usage, `"eventType":"DATA_USAGE"`, `"eventType":"DATA_USAGE","subType":null`, 1),
		// Numbers.
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":-0`, 1),
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":9223372036854775807`, 1),
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":-9223372036854775808`, 1),
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":9223372036854775808`, 1),
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":18446744073709551616`, 1),
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":05`, 1),
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":5.0`, 1),
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":5e0`, 1),
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":-`, 1),
		// Strings: escapes, invalid UTF-8, control characters.
		strings.Replace(usage, `"appId":"a"`, `"appId":"\u0061"`, 1),
		strings.Replace(usage, `"appId":"a"`, `"app\u0049d":"a"`, 1),
		strings.Replace(usage, `"appId":"a"`, "\"appId\":\"a\xff\"", 1),
		strings.Replace(usage, `"appId":"a"`, "\"appId\":\"a\t\"", 1),
		strings.Replace(usage, `"appId":"a"`, `"appId":"가족 \u2028"`, 1),
		strings.Replace(usage, `"appId":"a"`, "\"appId\":\"\xed\xa0\x80\"", 1),
		strings.Replace(usage, `"eventType"`, `"x":"\uZZZZ","eventType"`, 1),
		strings.Replace(usage, `"eventType"`, "\"x\":\"\x1f\",\"eventType\"", 1),
		strings.Replace(usage, `"eventType"`, "\"x\":[\"\x00\"],\"eventType\"", 1),
		strings.Replace(usage, `"eventType"`, "\"x\":{\"\x7f\xff\":\"\xff\"},\"eventType\"", 1),
		strings.Replace(usage, `"eventType"`, `"x":"\ud800\n\"","eventType"`, 1),
		// Metadata.
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":5,"metadata":{}`, 1),
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":5,"metadata":{"a":[],"b":{},"c":[1,"x",true,false,null,{"d":-0.5e-3}],"a":1}`, 1),
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":5,"metadata":{"n":1e400}`, 1),
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":5,"metadata":`+strings.Repeat("[", 100)+strings.Repeat("]", 100), 1),
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":5,"metadata":{"a":`+strings.Repeat("[", 100)+strings.Repeat("]", 100)+`}`, 1),
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":5,"metadata":null`, 1),
		strings.Replace(usage, `"bytesUsed":5`, `"bytesUsed":5,"x":`+strings.Repeat(`{"a":`, 100)+"1"+strings.Repeat("}", 100), 1),
		// Times.
		strings.Replace(usage, `14:30:00Z`, `14:30:00.123456789Z`, 1),
		strings.Replace(usage, `14:30:00Z`, `14:30:00.1234567891Z`, 1),
		strings.Replace(usage, `14:30:00Z`, `14:30:00.Z`, 1),
		strings.Replace(usage, `14:30:00Z`, `14:30:60Z`, 1),
		strings.Replace(usage, `14:30:00Z`, `24:00:00Z`, 1),
		strings.Replace(usage, `2026-02-06`, `2024-02-29`, 1),
		strings.Replace(usage, `2026-02-06`, `2100-02-29`, 1),
		strings.Replace(usage, `2026-02-06`, `0000-01-01`, 1),
		strings.Replace(usage, `2026-02-06`, `0001-01-01`, 1)[:0] + strings.Replace(usage, `2026-02-06T14:30:00Z`, `0001-01-01T00:00:00Z`, 1),
		strings.Replace(usage, `14:30:00Z`, `14:30:00+09:00`, 1),
		strings.Replace(usage, `14:30:00Z`, `14:30:00.000000000Z`, 1),
		strings.Replace(usage, `14:30:00Z`, `14:30:00.1234567891Z`, 1),
		strings.Replace(usage, `14:30:00Z`, `14:30:00.123456789xZ`, 1),
		strings.Replace(usage, `14:30:00Z`, `14:30:00.12345678xZ`, 1),
		strings.Replace(usage, `14:30:00Z`, `14:30:00.5z`, 1),
		strings.Replace(usage, `14:30:00Z`, `14:30:00.-5Z`, 1),
		strings.Replace(usage, `14:30:00Z`, `14:3a:00Z`, 1),
		strings.Replace(usage, `2026-02-06`, `2026-02-29`, 1),
		strings.Replace(usage, `2026-02-06`, `2023-02-29`, 1),
		strings.Replace(usage, `2026-02-06`, `1900-02-29`, 1),
		strings.Replace(usage, `2026-02-06`, `2000-02-29`, 1),
		strings.Replace(usage, `2026-02-06`, `2026-04-31`, 1),
		strings.Replace(usage, `2026-02-06`, `2026-12-31`, 1),
		strings.Replace(usage, `2026-02-06`, `2026-13-01`, 1),
		strings.Replace(usage, `2026-02-06`, `2026-00-10`, 1),
		strings.Replace(usage, `2026-02-06`, `2026-01-00`, 1),
		strings.Replace(usage, `2026-02-06`, `2026-01-32`, 1),
		strings.Replace(usage, `2026-02-06`, `+026-01-01`, 1),
		strings.Replace(usage, `2026-02-06`, `2026/02/06`, 1),
		strings.Replace(usage, `14:30:00Z`, `14:30:00z`, 1),
		// Everything else.
		usage + " \n",
		usage + "x",
		"\ufeff" + usage,
		``, `null`, `{}`, `[]`, `{"payload":null}`, `{"a":1,}`, `{"a" 1}`, `{"a":tru}`,
	} {
		out = append(out, []byte(s))
	}
	return out
}

// memberMatrix returns the goldens with each member of the envelope and the
// payload deleted or replaced by a value of each JSON type, alone and
// together with another problem: decoding errors hide validation errors, so
// both paths must find the same ones.
func memberMatrix(tb testing.TB, goldens []string) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, path := range goldens {
		data := readFile(tb, path)
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(data, &doc); err != nil {
			tb.Fatal(err)
		}
		var payload map[string]json.RawMessage
		if err := json.Unmarshal(doc["payload"], &payload); err != nil {
			tb.Fatal(err)
		}
		encode := func(env, pay map[string]json.RawMessage) []byte {
			p, err := json.Marshal(pay)
			if err != nil {
				tb.Fatal(err)
			}
			env = maps.Clone(env)
			env["payload"] = p
			b, err := json.Marshal(env)
			if err != nil {
				tb.Fatal(err)
			}
			return b
		}
		for _, other := range []map[string]json.RawMessage{nil, {"familyId": json.RawMessage(`0`)}, {"customerId": json.RawMessage(`"1"`)}} {
			for _, inPayload := range []bool{false, true} {
				obj := doc
				if inPayload {
					obj = payload
				}
				for name := range obj {
					for _, v := range []string{absent, `null`, `""`, `"x"`, `-1`, `0`, `1.5`, `true`, `{}`, `[]`} {
						env, pay := maps.Clone(doc), maps.Clone(payload)
						maps.Copy(pay, other)
						m := env
						if inPayload {
							m = pay
						}
						if v == absent {
							delete(m, name)
						} else {
							m[name] = json.RawMessage(v)
						}
						out = append(out, encode(env, pay))
					}
				}
			}
		}
	}
	return out
}

// readCorpusFile reads a "go test fuzz v1" file of []byte values.
func readCorpusFile(tb testing.TB, path string) [][]byte {
	tb.Helper()
	lines := strings.Split(strings.TrimSpace(string(readFile(tb, path))), "\n")
	var out [][]byte
	for _, l := range lines[1:] {
		q, ok := strings.CutPrefix(l, "[]byte(")
		q, ok2 := strings.CutSuffix(q, ")")
		s, err := strconv.Unquote(q)
		if !ok || !ok2 || err != nil {
			tb.Fatalf("%s: cannot read %q", path, l)
		}
		out = append(out, []byte(s))
	}
	return out
}

func TestDecodeDifferential(t *testing.T) {
	for _, in := range corpus(t) {
		sameDecode(t, in)
	}
	// Every prefix of the goldens: truncated records, and every syntax
	// error on the way.
	goldens, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	stride := 1
	if testing.Short() { // make test: every 7th prefix; make check every one
		stride = 7
	}
	for _, path := range goldens {
		in := readFile(t, path)
		for i := 0; i < len(in); i += stride {
			sameDecode(t, in[:i])
		}
	}
}

// genMutation changes a JSON document: raw byte edits (mostly invalid JSON),
// or, on a parsed copy, a member replaced, deleted or added (valid JSON whose
// members come out in sorted order, not the canonical one).
func genMutation(t *rapid.T, data []byte) []byte {
	values := []string{`null`, `0`, `-1`, `1`, `1.5`, `1e2`, `9223372036854775808`, `""`, `"x"`, `"\u0041"`, `"2026-02-06T14:30:00Z"`,
		`"2026-02-06T14:30:00+09:00"`, `"2026-02-29T14:30:00Z"`, `"2024-02-29T14:30:00.25Z"`, `"2026-02-06T14:30:60Z"`, `true`, `{}`, `[]`, `{"a":"b"}`, `{"a":1}`, `"DATA_USAGE"`, `"NOTIFICATION"`, `"QUOTA_UPDATED"`, `"USAGE_PERSIST"`,
		`[{"percent":50,"arm":1}]`, `[{"percent":50,"arm":1},{"arm":2,"percent":30,"x":[1]}]`, `[{"percent":0,"arm":1}]`, `[{"percent":50}]`, `[null]`, `[1]`}
	switch rapid.IntRange(0, 3).Draw(t, "how") {
	case 0: // insert a token
		tokens := append(values, ` `, `,`, `:`, `{`, `}`, `[`, `]`, `"`, `\`, "\xff", `,"eventId":"x"`, `,"payload":{}`, `,"x":1`)
		i := rapid.IntRange(0, len(data)).Draw(t, "at")
		tok := rapid.SampledFrom(tokens).Draw(t, "token")
		return append(data[:i:i], append([]byte(tok), data[i:]...)...)
	case 1: // delete a range
		i := rapid.IntRange(0, len(data)).Draw(t, "from")
		j := rapid.IntRange(i, min(len(data), i+8)).Draw(t, "to")
		return append(data[:i:i], data[j:]...)
	case 2: // change a byte
		if len(data) == 0 {
			return data
		}
		out := bytes.Clone(data)
		out[rapid.IntRange(0, len(out)-1).Draw(t, "byte")] = rapid.Byte().Draw(t, "value")
		return out
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc map[string]any
	if dec.Decode(&doc) != nil || doc == nil {
		return data
	}
	obj := doc
	if p, ok := doc["payload"].(map[string]any); ok && rapid.Bool().Draw(t, "inPayload") {
		obj = p
	}
	names := []string{"eventId", "eventType", "subType", "timestamp", "payload", "familyId", "customerId", "appId", "bytesUsed",
		"metadata", "targetCustomerId", "policyKey", "oldValue", "newValue", "changedBy", "version", "constraints", "originEventId",
		"processResult", "remainingAfter", "eventTime", "rule", "familyRemainingBytes", "familyUsedPercent", "customerUsedBytesToday",
		"blockReason", "blockedAt", "decision", "thresholdPercent", "message", "period", "totalBytes", "dailyUsedBytes",
		"monthlyUsedBytes", "throttleKbps", "grantChargedBytes", "crossed", "generation", "unknown"}
	name := rapid.SampledFrom(names).Draw(t, "member")
	if rapid.IntRange(0, 4).Draw(t, "delete") == 0 {
		delete(obj, name)
	} else {
		obj[name] = json.RawMessage(rapid.SampledFrom(values).Draw(t, "value"))
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDecodeDifferentialProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ev := genEvent.Draw(t, "event")
		data, err := envelope.Encode(ev)
		if err != nil {
			t.Skip("invalid event")
		}
		for range rapid.IntRange(0, 3).Draw(t, "mutations") {
			data = genMutation(t, data)
		}
		sameDecode(t, data)
	})
}

// FuzzDecodeDifferential checks that Decode and DecodeSlow agree on
// arbitrary bytes.
func FuzzDecodeDifferential(f *testing.F) {
	for _, in := range corpus(f) {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, data []byte) { sameDecode(t, data) })
}

// sameEncode fails unless Encode and EncodeSlow write the same bytes, or
// fail with the same error.
func sameEncode[T envelope.Payload](t interface{ Fatalf(string, ...any) }, e envelope.Envelope[T]) {
	got, gotErr := envelope.Encode(e)
	want, wantErr := envelope.EncodeSlow(e)
	if diff := cmp.Diff(problems(wantErr), problems(gotErr)); diff != "" {
		t.Fatalf("Encode and EncodeSlow errors differ (-slow +fast):\n%s", diff)
	}
	if !bytes.Equal(want, got) {
		t.Fatalf("Encode and EncodeSlow disagree:\nslow: %s\nfast: %s", want, got)
	}
}

// genOddMetadata is metadata encoding/json writes differently from the
// generic types, or not at all: the fast encoder must leave it to the slow
// one.
var genOddMetadata = rapid.SampledFrom([]any{
	1, int64(-5), uint8(7), float32(0.1), json.Number("12"), []string{"a"}, map[string]int{"b": 1},
	map[string]any(nil), []any(nil), []any{}, map[string]any{}, math.NaN(), math.Inf(-1), 1e21, 1e-7, -0.0,
	struct{ A int }{1}, (*int)(nil), func() {}, "<&>\u2028\u2029\x7f\xff",
})

func TestEncodeDifferentialProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ev := genEvent.Draw(t, "event")
		if p, ok := ev.Payload.(envelope.UsagePayload); ok && rapid.IntRange(0, 4).Draw(t, "odd") == 0 {
			p.Metadata = map[string]any{"k": map[string]any{"odd": genOddMetadata.Draw(t, "value")}, "n": 1.5}
			ev.Payload = p
		}
		sameEncode(t, ev)
		// The same payload as a typed envelope and through a pointer.
		switch p := ev.Payload.(type) {
		case envelope.UsagePayload:
			sameEncode(t, envelope.Envelope[envelope.UsagePayload]{EventID: ev.EventID, EventType: ev.EventType, SubType: ev.SubType, Timestamp: ev.Timestamp, Payload: p})
			sameEncode(t, envelope.Envelope[*envelope.UsagePayload]{EventID: ev.EventID, EventType: ev.EventType, SubType: ev.SubType, Timestamp: ev.Timestamp, Payload: &p})
		case envelope.PolicyUpdatedPayload:
			sameEncode(t, envelope.Event{EventID: ev.EventID, EventType: ev.EventType, Timestamp: ev.Timestamp, Payload: &p})
		case envelope.UsagePersistPayload:
			sameEncode(t, envelope.Event{EventID: ev.EventID, EventType: ev.EventType, Timestamp: ev.Timestamp, Payload: &p})
		case envelope.QuotaUpdated:
			sameEncode(t, envelope.Event{EventID: ev.EventID, EventType: ev.EventType, SubType: ev.SubType, Timestamp: ev.Timestamp, Payload: &p})
		case envelope.CustomerBlocked:
			sameEncode(t, envelope.Event{EventID: ev.EventID, EventType: ev.EventType, SubType: ev.SubType, Timestamp: ev.Timestamp, Payload: &p})
		case envelope.ThresholdAlert:
			sameEncode(t, envelope.Envelope[envelope.Notification]{EventID: ev.EventID, EventType: ev.EventType, SubType: ev.SubType, Timestamp: ev.Timestamp, Payload: &p})
		}
	})
}

// Floats at encoding/json's format boundaries, through QuotaUpdated (whose
// Validate takes 0–100) and metadata (any value).
func TestEncodeDifferentialFloats(t *testing.T) {
	ts := at("2026-02-06T14:30:00Z")
	for _, f := range []float64{0, -0.0, 1e-6, 9.99999e-7, 1e-7, 5e-324, 1e20, 1e21, 123456789e13, 100, 50.5, 1.0 / 3, math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64} {
		sameEncode(t, envelope.New("n", ts, envelope.QuotaUpdated{FamilyID: 1, CustomerID: 1, FamilyUsedPercent: f}))
		sameEncode(t, envelope.New("e", ts, envelope.UsagePayload{FamilyID: 1, CustomerID: 1, AppID: "a", Metadata: map[string]any{"f": f, "g": []any{f, -f}}}))
	}
}

// FuzzEncodeDifferential checks Encode against EncodeSlow on strings and
// numbers the fuzzer chooses, for every payload.
func FuzzEncodeDifferential(f *testing.F) {
	f.Add("evt_1", "com.youtube.app", "가족\u2028<&>\"\\\x00\x7f\xff", int64(100), 50.5, int64(1770388200123456789))
	f.Fuzz(func(t *testing.T, id, s1, s2 string, n int64, pct float64, nanos int64) {
		ts := time.Unix(0, nanos)
		for _, p := range []envelope.Payload{
			envelope.UsagePayload{FamilyID: n, CustomerID: 1, AppID: s1, BytesUsed: n, Metadata: map[string]any{s1: s2, s2: []any{pct, s1, nil, true}}},
			envelope.PolicyUpdatedPayload{FamilyID: n, TargetCustomerID: 1, PolicyKey: s1, OldValue: &s2, NewValue: &s1, ChangedBy: n, Version: n, Constraints: map[string]string{s1: s2, s2: s1, "": ""}},
			envelope.UsagePersistPayload{OriginEventID: id, FamilyID: n, CustomerID: n, BytesUsed: n, AppID: s1, ProcessResult: s2, RemainingAfter: n, EventTime: ts, Rule: s2},
			envelope.UsagePersistPayload{OriginEventID: id, FamilyID: n, CustomerID: n, BytesUsed: n, AppID: s1, ProcessResult: s2, RemainingAfter: n, EventTime: ts,
				TotalBytes: n, DailyUsedBytes: n / 2, MonthlyUsedBytes: -n, ThrottleKbps: n % 4096, GrantChargedBytes: n,
				Crossed: []envelope.Crossing{{Percent: int(n % 101), Arm: int(n)}, {Percent: 10, Arm: 1}}},
			envelope.UsagePersistPayload{OriginEventID: id, FamilyID: n, CustomerID: n, BytesUsed: n, AppID: s1, ProcessResult: s2, RemainingAfter: n, EventTime: ts,
				Grant: &envelope.GrantStep{GrantID: s1, PreviousStep: s2, GrantedBytes: n, Open: n%2 == 0, Final: n%3 == 0, OverageBytes: -n,
					ReservedBytes: n, ValidUntil: ts, Reclaim: []string{s1, s2, ""}}},
			envelope.QuotaUpdated{FamilyID: n, CustomerID: n, FamilyRemainingBytes: n, FamilyUsedPercent: pct, CustomerUsedBytesToday: n},
			envelope.CustomerBlocked{FamilyID: n, CustomerID: n, BlockReason: s1, BlockedAt: ts, Decision: s2},
			envelope.ThresholdAlert{FamilyID: n, ThresholdPercent: int(n % 100), Message: s1, Period: s2},
		} {
			sameEncode(t, envelope.New(id, ts, p))
		}
	})
}

// Every ASCII byte, the separators encoding/json escapes, and invalid UTF-8.
func TestEncodeDifferentialStrings(t *testing.T) {
	ts := at("2026-02-06T14:30:00Z")
	var ascii []byte
	for c := range 128 {
		ascii = append(ascii, byte(c))
	}
	for _, s := range []string{
		string(ascii), "\u2028", "\u2029", "a\u2029b\u2028c", "\xff", "a\xffb", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x80", "가족", "\U0001F600", "<script>&amp;</script>",
	} {
		sameEncode(t, envelope.New(s, ts, envelope.UsagePayload{FamilyID: 1, CustomerID: 1, AppID: s, Metadata: map[string]any{s: s}}))
		sameEncode(t, envelope.New(s, ts, envelope.PolicyUpdatedPayload{FamilyID: 1, TargetCustomerID: 1, Version: 1, PolicyKey: s, Constraints: map[string]string{s: s}}))
	}
}
