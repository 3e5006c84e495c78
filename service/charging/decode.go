package charging

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/dabom/dpcs/service/store"
)

// MaxRequestBytes bounds a request body. An SMF's ChargingDataRequest is a
// few kilobytes.
const MaxRequestBytes = 256 << 10

// Op is the operation a ChargingDataRequest is sent to.
type Op string

// The three operations of a charging data resource.
const (
	OpCreate  Op = "create"
	OpUpdate  Op = "update"
	OpRelease Op = "release"
)

// DecodeRequest reads a ChargingDataRequest for op from body, as TS 29.501
// asks: attributes DPCS does not know are ignored; the ones it knows must
// have their schema's type, and the mandatory ones must be there. A
// refusal is a *Problem naming the attribute as a JSON pointer
// ("/multipleUnitUsage/0/requestedUnit/totalVolume").
func DecodeRequest(body []byte, op Op) (*ChargingDataRequest, error) {
	// What the fast path reads completely decodes in one pass
	// (decode_fast.go); any other well-formed object decodes once; anything
	// else is read as a tree too, to say what is wrong where.
	if req, ok := decodeFast(body); ok {
		if p := req.check(op); p != nil {
			return nil, p
		}
		return req, nil
	}
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' {
		var req ChargingDataRequest
		if json.Unmarshal(body, &req) == nil {
			if p := req.check(op); p != nil {
				return nil, p
			}
			return &req, nil
		}
	}
	var tree any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&tree); err != nil {
		return nil, &Problem{Status: 400, Cause: CauseInvalidMsgFormat, Detail: "the body is not JSON: " + jsonErrText(err), Err: err}
	}
	if dec.More() {
		return nil, &Problem{Status: 400, Cause: CauseInvalidMsgFormat, Detail: "the body holds more than one JSON value"}
	}
	if _, ok := tree.(map[string]any); !ok {
		return nil, &Problem{Status: 400, Cause: CauseInvalidMsgFormat, Detail: "the body must be a ChargingDataRequest object"}
	}
	var req ChargingDataRequest
	if err := json.Unmarshal(body, &req); err != nil {
		// encoding/json names a field without its array indexes, and not
		// at all for a date-time that does not parse: find the attribute
		// that does not decode in the tree.
		if ptr, t := locate(tree, reflect.TypeFor[ChargingDataRequest](), ""); ptr != "" {
			return nil, badParam(ieCause(ptr), ptr, "must be "+typeWords(t))
		}
		return nil, &Problem{Status: 400, Cause: CauseInvalidMsgFormat, Detail: jsonErrText(err), Err: err}
	}
	if p := req.check(op); p != nil {
		return nil, p
	}
	return &req, nil
}

// check refuses a request that lacks a mandatory attribute or whose
// attributes contradict each other.
func (r *ChargingDataRequest) check(op Op) *Problem {
	switch {
	case r.NfConsumerIdentification == nil:
		return missing("/nfConsumerIdentification")
	case r.NfConsumerIdentification.NodeFunctionality == "":
		return missing("/nfConsumerIdentification/nodeFunctionality")
	case r.InvocationTimeStamp == nil:
		return missing("/invocationTimeStamp")
	case r.InvocationSequenceNumber == nil:
		return missing("/invocationSequenceNumber")
	case op == OpCreate && r.SubscriberIdentifier == "":
		return missing("/subscriberIdentifier")
	}
	if r.NotifyURI != "" {
		u, err := url.Parse(r.NotifyURI)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || len(r.NotifyURI) > store.MaxNotifyURILen {
			return badParam(CauseOptionalIEIncorrect, "/notifyUri", fmt.Sprintf("must be an absolute http or https URI of at most %d bytes", store.MaxNotifyURILen))
		}
	}
	for i, u := range r.MultipleUnitUsage {
		at := "/multipleUnitUsage/" + strconv.Itoa(i)
		if u.RatingGroup == nil {
			return missing(at + "/ratingGroup")
		}
		for _, v := range r.MultipleUnitUsage[:i] {
			if *v.RatingGroup == *u.RatingGroup && v.UPFID == u.UPFID {
				return badParam(CauseMandatoryIEIncorrect, at+"/ratingGroup", "each rating group at most once in a request (once per uPFID)")
			}
		}
		for j, c := range u.UsedUnitContainer {
			if c.LocalSequenceNumber == nil {
				return missing(at + "/usedUnitContainer/" + strconv.Itoa(j) + "/localSequenceNumber")
			}
		}
	}
	for i, t := range r.Triggers {
		if t.TriggerCategory == "" {
			return missing("/triggers/" + strconv.Itoa(i) + "/triggerCategory")
		}
	}
	return nil
}

// mandatoryIEs are the attributes whose fault is MANDATORY_IE_INCORRECT
// (pointers with array indexes replaced by *).
var mandatoryIEs = map[string]bool{
	"/subscriberIdentifier": true, "/nfConsumerIdentification": true, "/nfConsumerIdentification/nodeFunctionality": true,
	"/invocationTimeStamp": true, "/invocationSequenceNumber": true, "/multipleUnitUsage": true,
	"/multipleUnitUsage/*/ratingGroup": true, "/multipleUnitUsage/*/usedUnitContainer/*/localSequenceNumber": true,
}

func ieCause(ptr string) string {
	parts := strings.Split(ptr, "/")
	for i, p := range parts {
		if _, err := strconv.Atoi(p); err == nil && i > 0 {
			parts[i] = "*"
		}
	}
	if mandatoryIEs[strings.Join(parts, "/")] {
		return CauseMandatoryIEIncorrect
	}
	return CauseOptionalIEIncorrect
}

// locate walks the tree beside the Go type t and returns the pointer and
// the type of the first attribute that does not decode into its field.
func locate(v any, t reflect.Type, at string) (string, reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	raw := t == reflect.TypeFor[json.RawMessage]()
	switch {
	case raw:
		return "", nil
	case v == nil: // null decodes into anything
		return "", nil
	case t.Kind() == reflect.Struct && t != reflect.TypeFor[time.Time]():
		m, ok := v.(map[string]any)
		if !ok {
			return at, t
		}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			for k, e := range m {
				if strings.EqualFold(k, name) {
					if p, pt := locate(e, f.Type, at+"/"+pointerEscape(k)); p != "" {
						return p, pt
					}
				}
			}
		}
		return "", nil
	case t.Kind() == reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return at, t
		}
		for i, e := range arr {
			if p, pt := locate(e, t.Elem(), at+"/"+strconv.Itoa(i)); p != "" {
				return p, pt
			}
		}
		return "", nil
	}
	if !decodes(v, t) {
		return at, t
	}
	return "", nil
}

// decodes reports whether v (from the tree) decodes into a value of type t.
func decodes(v any, t reflect.Type) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	return json.Unmarshal(b, reflect.New(t).Interface()) == nil
}

// typeWords says what a value of Go type t must be, in the schema's words.
func typeWords(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "of the schema's type"
	}
	switch t {
	case reflect.TypeFor[json.RawMessage]():
		return "JSON"
	}
	if t.String() == "time.Time" {
		return "a date-time (RFC 3339, e.g. 2026-11-27T10:00:00Z)"
	}
	switch t.Kind() {
	case reflect.Uint64:
		return "an integer from 0 to 18446744073709551615 (Uint64)"
	case reflect.Uint32:
		return "an integer from 0 to 4294967295 (Uint32)"
	case reflect.Uint8:
		return "an integer from 0 to 255"
	case reflect.Int64, reflect.Int:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "of the schema's type"
}

// jsonErrText is err's text without the encoding/json prefix.
func jsonErrText(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (at byte %d)", strings.TrimPrefix(se.Error(), "json: "), se.Offset)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}
