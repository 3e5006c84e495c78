package charging_test

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dabom/dpcs/service/charging"
)

const base = `"nfConsumerIdentification":{"nodeFunctionality":"SMF"},"invocationTimeStamp":"2026-11-27T10:00:00Z","invocationSequenceNumber":1`

// The decoder ignores what it does not know, and names what it refuses by
// its JSON pointer with the cause TS 29.500 gives it.
func TestDecodeRequest(t *testing.T) {
	for _, tc := range []struct {
		name, body   string
		op           charging.Op
		cause, param string
	}{
		{"minimal update", `{` + base + `}`, charging.OpUpdate, "", ""},
		{"unknown attributes", `{` + base + `,"vendorExtension":{"x":[1,2]},"sMSChargingInformation":{"anything":true},"multipleUnitUsage":[{"ratingGroup":1,"future":1}]}`, charging.OpUpdate, "", ""},
		{"uint64 volumes", `{` + base + `,"multipleUnitUsage":[{"ratingGroup":4294967295,"requestedUnit":{"totalVolume":18446744073709551615}}]}`, charging.OpUpdate, "", ""},
		{"nulls", `{` + base + `,"notifyUri":null,"multipleUnitUsage":null,"pDUSessionChargingInformation":null}`, charging.OpUpdate, "", ""},
		{"not json", `{"a":`, charging.OpUpdate, charging.CauseInvalidMsgFormat, ""},
		{"not an object", `[1]`, charging.OpUpdate, charging.CauseInvalidMsgFormat, ""},
		{"two values", `{` + base + `} {}`, charging.OpUpdate, charging.CauseInvalidMsgFormat, ""},
		{"no consumer", `{"invocationTimeStamp":"2026-11-27T10:00:00Z","invocationSequenceNumber":1}`, charging.OpUpdate, charging.CauseMandatoryIEMissing, "/nfConsumerIdentification"},
		{"no node functionality", `{"nfConsumerIdentification":{"nFName":"x"},"invocationTimeStamp":"2026-11-27T10:00:00Z","invocationSequenceNumber":1}`, charging.OpUpdate, charging.CauseMandatoryIEMissing, "/nfConsumerIdentification/nodeFunctionality"},
		{"no time", `{"nfConsumerIdentification":{"nodeFunctionality":"SMF"},"invocationSequenceNumber":1}`, charging.OpUpdate, charging.CauseMandatoryIEMissing, "/invocationTimeStamp"},
		{"no sequence", `{"nfConsumerIdentification":{"nodeFunctionality":"SMF"},"invocationTimeStamp":"2026-11-27T10:00:00Z"}`, charging.OpUpdate, charging.CauseMandatoryIEMissing, "/invocationSequenceNumber"},
		{"create without subscriber", `{` + base + `}`, charging.OpCreate, charging.CauseMandatoryIEMissing, "/subscriberIdentifier"},
		{"bad time", `{"nfConsumerIdentification":{"nodeFunctionality":"SMF"},"invocationTimeStamp":"yesterday","invocationSequenceNumber":1}`, charging.OpUpdate, charging.CauseMandatoryIEIncorrect, "/invocationTimeStamp"},
		{"negative sequence", `{"nfConsumerIdentification":{"nodeFunctionality":"SMF"},"invocationTimeStamp":"2026-11-27T10:00:00Z","invocationSequenceNumber":-1}`, charging.OpUpdate, charging.CauseMandatoryIEIncorrect, "/invocationSequenceNumber"},
		{"sequence over uint32", `{"nfConsumerIdentification":{"nodeFunctionality":"SMF"},"invocationTimeStamp":"2026-11-27T10:00:00Z","invocationSequenceNumber":4294967296}`, charging.OpUpdate, charging.CauseMandatoryIEIncorrect, "/invocationSequenceNumber"},
		{"volume over uint64", `{` + base + `,"multipleUnitUsage":[{"ratingGroup":1},{"ratingGroup":2,"usedUnitContainer":[{"localSequenceNumber":1},{"localSequenceNumber":2,"totalVolume":18446744073709551616}]}]}`, charging.OpUpdate, charging.CauseOptionalIEIncorrect, "/multipleUnitUsage/1/usedUnitContainer/1/totalVolume"},
		{"fractional volume", `{` + base + `,"multipleUnitUsage":[{"ratingGroup":1,"requestedUnit":{"totalVolume":1.5}}]}`, charging.OpUpdate, charging.CauseOptionalIEIncorrect, "/multipleUnitUsage/0/requestedUnit/totalVolume"},
		{"string rating group", `{` + base + `,"multipleUnitUsage":[{"ratingGroup":"10"}]}`, charging.OpUpdate, charging.CauseMandatoryIEIncorrect, "/multipleUnitUsage/0/ratingGroup"},
		{"no rating group", `{` + base + `,"multipleUnitUsage":[{"requestedUnit":{}}]}`, charging.OpUpdate, charging.CauseMandatoryIEMissing, "/multipleUnitUsage/0/ratingGroup"},
		{"rating group twice", `{` + base + `,"multipleUnitUsage":[{"ratingGroup":1},{"ratingGroup":1}]}`, charging.OpUpdate, charging.CauseMandatoryIEIncorrect, "/multipleUnitUsage/1/ratingGroup"},
		{"no local sequence", `{` + base + `,"multipleUnitUsage":[{"ratingGroup":1,"usedUnitContainer":[{"totalVolume":5}]}]}`, charging.OpUpdate, charging.CauseMandatoryIEMissing, "/multipleUnitUsage/0/usedUnitContainer/0/localSequenceNumber"},
		{"usage not an array", `{` + base + `,"multipleUnitUsage":{"ratingGroup":1}}`, charging.OpUpdate, charging.CauseMandatoryIEIncorrect, "/multipleUnitUsage"},
		{"bad notify uri", `{` + base + `,"notifyUri":"ftp://x/y"}`, charging.OpUpdate, charging.CauseOptionalIEIncorrect, "/notifyUri"},
		{"notify uri too long", `{` + base + `,"notifyUri":"http://smf.example/` + strings.Repeat("n", 2048) + `"}`, charging.OpUpdate, charging.CauseOptionalIEIncorrect, "/notifyUri"},
		{"trigger without category", `{` + base + `,"triggers":[{"triggerType":"FINAL"}]}`, charging.OpUpdate, charging.CauseMandatoryIEMissing, "/triggers/0/triggerCategory"},
		{"bad pdu session id", `{` + base + `,"pDUSessionChargingInformation":{"pduSessionInformation":{"pduSessionID":256}}}`, charging.OpUpdate, charging.CauseOptionalIEIncorrect, "/pDUSessionChargingInformation/pduSessionInformation/pduSessionID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := charging.DecodeRequest([]byte(tc.body), tc.op)
			if tc.cause == "" {
				if err != nil || req == nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			wantProblem(t, err, http.StatusBadRequest, tc.cause, tc.param)
		})
	}
	req, err := charging.DecodeRequest([]byte(`{`+base+`,"multipleUnitUsage":[{"ratingGroup":1,"requestedUnit":{"totalVolume":18446744073709551615}}]}`), charging.OpUpdate)
	if err != nil || *req.MultipleUnitUsage[0].RequestedUnit.TotalVolume != math.MaxUint64 {
		t.Errorf("uint64 max: %v", err)
	}
}

// Every golden request decodes.
func TestGoldenRequestsDecode(t *testing.T) {
	files, _ := filepath.Glob("testdata/golden/request-*.json")
	for _, f := range files {
		op := charging.OpUpdate
		if strings.Contains(f, "create") {
			op = charging.OpCreate
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := charging.DecodeRequest(b, op); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// FuzzDecodeRequest: whatever the body, the decoder answers a request that
// passed its checks or a 400 naming its cause; never a panic, never another
// status.
func FuzzDecodeRequest(f *testing.F) {
	files, _ := filepath.Glob("testdata/golden/request-*.json")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{` + base + `,"multipleUnitUsage":[{"ratingGroup":1,"usedUnitContainer":[{"localSequenceNumber":1,"totalVolume":-1}]}]}`))
	f.Add([]byte(`{` + base + `,"invocationTimeStamp":"2026-13-40T99:00:00Z"}`))
	f.Add([]byte(`{"multipleUnitUsage":[{"ratingGroup":1,"requestedUnit":{"totalVolume":1e40}}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, op := range []charging.Op{charging.OpCreate, charging.OpUpdate} {
			req, err := charging.DecodeRequest(body, op)
			if err != nil {
				var p *charging.Problem
				if !errors.As(err, &p) || p.Status != http.StatusBadRequest || p.Cause == "" {
					t.Fatalf("refusal %v is not a 400 with a cause", err)
				}
				if len(p.InvalidParams) > 0 && !strings.HasPrefix(p.InvalidParams[0].Param, "/") {
					t.Fatalf("param %q is not a JSON pointer", p.InvalidParams[0].Param)
				}
				continue
			}
			if req.NfConsumerIdentification == nil || req.InvocationSequenceNumber == nil || req.InvocationTimeStamp == nil ||
				(op == charging.OpCreate && req.SubscriberIdentifier == "") {
				t.Fatalf("accepted without a mandatory attribute: %s", body)
			}
			for _, u := range req.MultipleUnitUsage {
				if u.RatingGroup == nil {
					t.Fatalf("accepted a rating group without its number: %s", body)
				}
			}
			if _, err := json.Marshal(req); err != nil {
				t.Fatalf("accepted request does not encode: %v", err)
			}
		}
	})
}
