package charging

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// wireField is a member of the request's schema as the generator writes
// it: its name, its kind, and an object's or array's members.
type wireField struct {
	name, kind string
	sub        []wireField
}

var (
	wireTrigger = []wireField{{"triggerType", "str", nil}, {"triggerCategory", "str", nil}, {"timeLimit", "i64", nil},
		{"volumeLimit", "u32", nil}, {"volumeLimit64", "u64", nil}, {"eventLimit", "u32", nil},
		{"maxNumberOfccc", "u32", nil}, {"tariffTimeChange", "time", nil}}
	wireRequest = []wireField{
		{"subscriberIdentifier", "str", nil}, {"tenantIdentifier", "str", nil}, {"chargingId", "u32", nil},
		{"mnSConsumerIdentifier", "str", nil},
		{"nfConsumerIdentification", "obj", []wireField{{"nFName", "str", nil}, {"nFIPv4Address", "str", nil},
			{"nFIPv6Address", "str", nil}, {"nFPLMNID", "raw", nil}, {"nodeFunctionality", "str", nil}, {"nFFqdn", "str", nil}}},
		{"invocationTimeStamp", "time", nil}, {"invocationSequenceNumber", "u32", nil},
		{"retransmissionIndicator", "bool", nil}, {"oneTimeEvent", "bool", nil}, {"oneTimeEventType", "str", nil},
		{"notifyUri", "str", nil}, {"supportedFeatures", "str", nil}, {"serviceSpecificationInfo", "str", nil},
		{"multipleUnitUsage", "arr", []wireField{{"ratingGroup", "u32", nil},
			{"requestedUnit", "obj", []wireField{{"time", "u32", nil}, {"totalVolume", "u64", nil}, {"uplinkVolume", "u64", nil},
				{"downlinkVolume", "u64", nil}, {"serviceSpecificUnits", "u64", nil}}},
			{"usedUnitContainer", "arr", []wireField{{"serviceId", "u32", nil}, {"quotaManagementIndicator", "str", nil},
				{"triggers", "arr", wireTrigger}, {"triggerTimestamp", "time", nil}, {"time", "u32", nil},
				{"totalVolume", "u64", nil}, {"uplinkVolume", "u64", nil}, {"downlinkVolume", "u64", nil},
				{"serviceSpecificUnits", "u64", nil}, {"eventTimeStamps", "times", nil}, {"localSequenceNumber", "i64", nil},
				{"pDUContainerInformation", "raw", nil}}},
			{"uPFID", "str", nil}, {"multihomedPDUAddress", "raw", nil}}},
		{"triggers", "arr", wireTrigger},
		{"pDUSessionChargingInformation", "obj", []wireField{{"chargingId", "u32", nil}, {"sMFchargingId", "str", nil},
			{"homeProvidedChargingId", "u32", nil}, {"sMFHomeProvidedChargingId", "str", nil},
			{"userInformation", "obj", []wireField{{"servedGPSI", "str", nil}, {"servedPEI", "str", nil},
				{"unauthenticatedFlag", "bool", nil}, {"roamerInOut", "str", nil}}},
			{"userLocationinfo", "raw", nil}, {"uetimeZone", "str", nil},
			{"pduSessionInformation", "obj", []wireField{{"networkSlicingInfo", "raw", nil}, {"pduSessionID", "u8", nil},
				{"pduType", "str", nil}, {"sscMode", "str", nil}, {"hPlmnId", "raw", nil}, {"ratType", "str", nil},
				{"dnnId", "str", nil}, {"chargingCharacteristics", "str", nil}, {"startTime", "time", nil},
				{"stopTime", "time", nil}, {"sessionStopIndicator", "bool", nil}, {"pduAddress", "raw", nil},
				{"authorizedSessionAMBR", "raw", nil}}},
			{"unitCountInactivityTimer", "i64", nil}}},
	}
)

// wireGen writes a request's JSON: mostly what the fast path reads, with
// (when odd is drawn) what it must leave to encoding/json — wrong types,
// nulls, escapes, keys equal but for case, repeated members, numbers out
// of range or with a sign, fraction or exponent. clean reports whether
// nothing odd was written.
type wireGen struct {
	t     *rapid.T
	clean bool
}

func (g *wireGen) odd(label string) bool {
	if rapid.IntRange(0, 24).Draw(g.t, label) == 0 {
		g.clean = false
		return true
	}
	return false
}

func (g *wireGen) ws() string {
	return rapid.SampledFrom([]string{"", "", "", " ", "\n  ", "\t"}).Draw(g.t, "ws")
}

func (g *wireGen) object(fields []wireField) string {
	var b strings.Builder
	b.WriteString("{" + g.ws())
	n := 0
	member := func(key, value string) {
		if n > 0 {
			b.WriteString("," + g.ws())
		}
		n++
		b.WriteString(strconv.Quote(key) + g.ws() + ":" + g.ws() + value + g.ws())
	}
	for _, f := range fields {
		if !rapid.Bool().Draw(g.t, "has "+f.name) {
			continue
		}
		key := f.name
		if g.odd("case") {
			key = strings.ToUpper(key[:1]) + key[1:]
		}
		member(key, g.value(f))
		if g.odd("again") {
			member(f.name, g.value(f))
		}
		if rapid.IntRange(0, 9).Draw(g.t, "unknown") == 0 {
			member("vendor"+strconv.Itoa(n), g.anyJSON(2))
		}
	}
	b.WriteString("}")
	return b.String()
}

func (g *wireGen) value(f wireField) string {
	if g.odd("junk") {
		return rapid.SampledFrom([]string{"null", "-1", "1.5", "1e3", "-0", "18446744073709551615", "18446744073709551616",
			`"x"`, `"2026-13-01T00:00:00Z"`, "true", "[]", "{}", `"a\u00e9"`, `"\ud800"`, "01"}).Draw(g.t, "junk")
	}
	switch f.kind {
	case "str":
		return strconv.Quote(rapid.StringMatching(`[a-zA-Z0-9 .:/_-]{0,12}`).Draw(g.t, "str"))
	case "u32":
		return strconv.FormatUint(uint64(rapid.Uint32().Draw(g.t, "u32")), 10)
	case "u8":
		return strconv.FormatUint(uint64(rapid.Uint8().Draw(g.t, "u8")), 10)
	case "u64":
		return strconv.FormatUint(rapid.Uint64Range(0, 1<<63-1).Draw(g.t, "u64"), 10)
	case "i64":
		return strconv.FormatInt(rapid.Int64().Draw(g.t, "i64"), 10)
	case "bool":
		return strconv.FormatBool(rapid.Bool().Draw(g.t, "bool"))
	case "time":
		return g.time()
	case "times":
		ts := make([]string, rapid.IntRange(0, 3).Draw(g.t, "times"))
		for i := range ts {
			ts[i] = g.time()
		}
		return "[" + strings.Join(ts, ",") + "]"
	case "raw":
		return g.anyJSON(3)
	case "obj":
		return g.object(f.sub)
	}
	elems := make([]string, rapid.IntRange(0, 3).Draw(g.t, "elems"))
	for i := range elems {
		elems[i] = g.object(f.sub)
	}
	return "[" + g.ws() + strings.Join(elems, ","+g.ws()) + "]"
}

func (g *wireGen) time() string {
	return strconv.Quote(rapid.SampledFrom([]string{"2026-11-27T10:05:00.000Z", "2026-11-27T10:04:59.5Z",
		"2026-11-27T19:05:00+09:00", "2026-02-28T23:59:59.123456789-05:30"}).Draw(g.t, "time"))
}

// anyJSON is any JSON value of at most depth levels (escapes included).
func (g *wireGen) anyJSON(depth int) string {
	k := rapid.IntRange(0, 6).Draw(g.t, "any")
	if depth == 0 {
		k %= 4
	}
	switch k {
	case 0:
		return "null"
	case 1:
		return strconv.FormatFloat(rapid.Float64Range(-1e6, 1e6).Draw(g.t, "num"), 'g', -1, 64)
	case 2:
		return rapid.SampledFrom([]string{`"plain"`, `"esc\"aped\\"`, `"\u00e9t\u00e9"`, `"tab\t"`}).Draw(g.t, "s")
	case 3:
		return "true"
	case 4:
		return "[" + g.anyJSON(depth-1) + "," + g.anyJSON(depth-1) + "]"
	}
	return `{"a":` + g.anyJSON(depth-1) + `,"b` + strconv.Itoa(k) + `":` + g.anyJSON(depth-1) + "}"
}

// TestDecodeFastMatchesEncodingJSON: what the fast path decodes, it decodes
// exactly as encoding/json does (and encoding/json accepts it); and it
// decodes every request with nothing odd in it.
func TestDecodeFastMatchesEncodingJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := &wireGen{t: t, clean: true}
		body := []byte(g.ws() + g.object(wireRequest) + g.ws())
		got, ok := decodeFast(body)
		var want ChargingDataRequest
		err := json.Unmarshal(body, &want)
		if ok {
			if err != nil {
				t.Fatalf("fast path decoded what encoding/json refuses (%v):\n%s", err, body)
			}
			if !reflect.DeepEqual(*got, want) {
				t.Fatalf("fast path differs (-encoding/json +fast):\n%s\n%s", cmp.Diff(want, *got), body)
			}
		}
		if g.clean && !ok {
			t.Fatalf("fast path refused a plain request:\n%s", body)
		}
	})
}

// FuzzDecodeFast: any input the fast path decodes, encoding/json decodes
// to the same request.
func FuzzDecodeFast(f *testing.F) {
	golden, _ := filepath.Glob(filepath.Join("testdata", "golden", "request-*.json"))
	for _, p := range golden {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"invocationSequenceNumber":1,"InvocationSequenceNumber":2}`))
	f.Add([]byte(`{"multipleUnitUsage":[{"ratingGroup":1,"requestedUnit":{}}],"chargingId":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := decodeFast(body)
		if !ok {
			return
		}
		var want ChargingDataRequest
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatalf("fast path decoded what encoding/json refuses (%v): %q", err, body)
		}
		if !reflect.DeepEqual(*got, want) {
			t.Fatalf("fast path differs (-encoding/json +fast):\n%s\n%q", cmp.Diff(want, *got), body)
		}
	})
}

// TestEncodeFastMatchesEncodingJSON: encodeResponse writes every response
// byte for byte as json.Marshal does, odd strings and times included, and
// writes the usual ones itself.
func TestEncodeFastMatchesEncodingJSON(t *testing.T) {
	plain := true
	str := func(t *rapid.T, label string) string {
		if rapid.IntRange(0, 9).Draw(t, label+" odd") == 0 {
			plain = false
			return rapid.String().Draw(t, label)
		}
		return rapid.SampledFrom([]string{"", "SUCCESS", "TERMINATE", "URL", "https://app.example/blocked?reason=NIGHT&x=<1>",
			"filter-1"}).Draw(t, label)
	}
	opt := func(t *rapid.T, label string) bool { return rapid.Bool().Draw(t, label) }
	at := func(t *rapid.T, label string) time.Time {
		off := rapid.SampledFrom([]int{0, 9 * 3600, -(5*3600 + 30*60), 45, 25 * 3600}).Draw(t, label+" zone")
		secs := rapid.Int64Range(-70_000_000_000, 300_000_000_000).Draw(t, label)
		if off == 45 || off == 25*3600 || secs < -62_135_596_800+2*86400 || secs > 253_402_300_799-2*86400 {
			plain = false // a zone or a year only MarshalJSON writes
		}
		return time.Unix(secs, rapid.Int64Range(0, 999_999_999).Draw(t, label+" ns")).In(time.FixedZone("", off))
	}
	rapid.Check(t, func(t *rapid.T) {
		plain = true
		r := ChargingDataResponse{InvocationTimeStamp: at(t, "ts"), InvocationSequenceNumber: rapid.Uint32().Draw(t, "seq"),
			SessionFailover: str(t, "failover"), SupportedFeatures: str(t, "features")}
		if rapid.IntRange(0, 19).Draw(t, "result") == 0 {
			r.InvocationResult, plain = &InvocationResult{FailureHandling: "TERMINATE"}, false
		}
		if rapid.IntRange(0, 19).Draw(t, "triggers") == 0 {
			r.Triggers, plain = []Trigger{{TriggerCategory: "IMMEDIATE_REPORT"}}, false
		}
		for range rapid.IntRange(0, 3).Draw(t, "units") {
			u := MultipleUnitInformation{ResultCode: str(t, "code"), RatingGroup: rapid.Uint32().Draw(t, "rg"), UPFID: str(t, "upf")}
			if opt(t, "granted") {
				u.GrantedUnit = &GrantedUnit{}
				for _, p := range []**uint64{&u.GrantedUnit.TotalVolume, &u.GrantedUnit.UplinkVolume, &u.GrantedUnit.DownlinkVolume,
					&u.GrantedUnit.ServiceSpecificUnits} {
					if opt(t, "volume") {
						*p = new(rapid.Uint64().Draw(t, "v"))
					}
				}
				if opt(t, "time") {
					u.GrantedUnit.Time = new(rapid.Uint32().Draw(t, "secs"))
				}
				if rapid.IntRange(0, 4).Draw(t, "tariff") == 0 {
					u.GrantedUnit.TariffTimeChange = new(at(t, "tariff at"))
				}
			}
			if opt(t, "validity") {
				u.ValidityTime = new(rapid.Int64().Draw(t, "validity s"))
			}
			if opt(t, "holding") {
				u.QuotaHoldingTime = new(rapid.Int64().Draw(t, "holding s"))
			}
			if opt(t, "threshold") {
				u.VolumeQuotaThreshold = new(rapid.Uint64().Draw(t, "threshold v"))
			}
			if opt(t, "final") {
				u.FinalUnitIndication = &FinalUnitIndication{FinalUnitAction: str(t, "action"), RestrictionFilterRule: str(t, "rule"),
					FilterID: str(t, "filter")}
				if opt(t, "redirect") {
					u.FinalUnitIndication.RedirectServer = &RedirectServer{RedirectAddressType: str(t, "type"), RedirectServerAddress: str(t, "addr")}
				}
			}
			if rapid.IntRange(0, 19).Draw(t, "unit triggers") == 0 {
				u.Triggers, plain = []Trigger{{TriggerCategory: "DEFERRED_REPORT"}}, false
			}
			r.MultipleUnitInformation = append(r.MultipleUnitInformation, u)
		}
		want, wantErr := json.Marshal(&r)
		got, err := encodeResponse(&r)
		if (err != nil) != (wantErr != nil) || string(got) != string(want) {
			t.Fatalf("encodeResponse:\n got %s (%v)\nwant %s (%v)", got, err, want, wantErr)
		}
		if _, ok := appendResponse(nil, &r); plain && !ok {
			t.Fatalf("the fast path left a plain response to json.Marshal: %s", want)
		}
	})
}

// FuzzEncodeFast: encodeResponse writes any answer as json.Marshal does.
func FuzzEncodeFast(f *testing.F) {
	f.Add("SUCCESS", "TERMINATE", "https://app.example/blocked?a=1&reason=NIGHT", uint32(7), uint64(10<<20), int64(3600), int64(1_795_000_000), int64(9*3600))
	f.Add("\u2028<x>", "\xff", "\"\\", uint32(0), uint64(1<<63), int64(-1), int64(-62_200_000_000), int64(45))
	f.Fuzz(func(t *testing.T, code, action, addr string, rg uint32, v uint64, secs, unix, off int64) {
		at := time.Unix(unix, 0).In(time.FixedZone("", int(off%(48*3600))))
		r := ChargingDataResponse{InvocationTimeStamp: at, InvocationSequenceNumber: rg, SupportedFeatures: addr,
			MultipleUnitInformation: []MultipleUnitInformation{{ResultCode: code, RatingGroup: rg, GrantedUnit: &GrantedUnit{TotalVolume: &v},
				ValidityTime: &secs, VolumeQuotaThreshold: &v, UPFID: code, FinalUnitIndication: &FinalUnitIndication{FinalUnitAction: action,
					FilterID: addr, RedirectServer: &RedirectServer{RedirectAddressType: code, RedirectServerAddress: addr}}}}}
		want, wantErr := json.Marshal(&r)
		got, err := encodeResponse(&r)
		if (err != nil) != (wantErr != nil) || string(got) != string(want) {
			t.Fatalf("encodeResponse:\n got %s (%v)\nwant %s (%v)", got, err, want, wantErr)
		}
	})
}
