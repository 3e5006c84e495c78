package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
)

// object is a JSON object whose members are read by their exact,
// case-sensitive names (encoding/json's struct decoding would also accept
// "FamilyId" or "FAMILYID"). Problems are collected as FieldErrors with paths
// relative to the object; members nobody reads are ignored.
type object struct {
	m    map[string]json.RawMessage
	errs []error
}

// errNotObject is returned by parseObject for valid JSON that is not an object.
var errNotObject = errors.New("must be a JSON object")

// parseObject decodes data as a JSON object. It returns a *json.SyntaxError
// (or another encoding/json error) for invalid JSON and errNotObject for any
// other JSON value, including null.
func parseObject(data []byte) (*object, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, errNotObject
		}
		return nil, err
	}
	if m == nil {
		return nil, errNotObject
	}
	return &object{m: m}, nil
}

// parseNested is parseObject for a member whose JSON syntax is already known
// to be valid: every failure means "not an object".
func parseNested(field string, data []byte) (*object, error) {
	o, err := parseObject(data)
	if err != nil {
		return nil, malformed(field, errNotObject.Error())
	}
	return o, nil
}

func (o *object) add(err error) { o.errs = append(o.errs, err) }

// err returns every collected problem, joined, or nil.
func (o *object) err() error { return errors.Join(o.errs...) }

// raw returns the member's JSON, or nil when it is absent or null: on this
// wire format null and absent mean the same thing.
func (o *object) raw(name string) json.RawMessage {
	r := bytes.TrimSpace(o.m[name])
	if len(r) == 0 || string(r) == "null" {
		return nil
	}
	return r
}

// present reports whether a member is there and not null, recording
// "required" when it must be and is not.
func (o *object) present(name string, required bool) (json.RawMessage, bool) {
	r := o.raw(name)
	if r == nil {
		if required {
			o.add(&FieldError{Field: name, Msg: "required"})
		}
		return nil, false
	}
	return r, true
}

func (o *object) str(name string, required bool) string {
	r, ok := o.present(name, required)
	if !ok {
		return ""
	}
	var s string
	if r[0] != '"' || json.Unmarshal(r, &s) != nil {
		o.add(malformed(name, "must be a string"))
		return ""
	}
	return s
}

// optStr reads a nullable string: nil when absent or null.
func (o *object) optStr(name string) *string {
	if o.raw(name) == nil {
		return nil
	}
	s := o.str(name, false)
	return &s
}

func isNumber(r json.RawMessage) bool { return r[0] == '-' || (r[0] >= '0' && r[0] <= '9') }

func (o *object) int64(name string, required bool) int64 {
	r, ok := o.present(name, required)
	if !ok {
		return 0
	}
	if !isNumber(r) {
		o.add(malformed(name, "must be an integer"))
		return 0
	}
	n, err := strconv.ParseInt(string(r), 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			o.add(malformed(name, "out of range"))
		} else {
			o.add(malformed(name, "must be an integer"))
		}
		return 0
	}
	return n
}

func (o *object) int(name string, required bool) int {
	n := o.int64(name, required)
	if int64(int(n)) != n {
		o.add(malformed(name, "out of range"))
		return 0
	}
	return int(n)
}

func (o *object) float64(name string, required bool) float64 {
	r, ok := o.present(name, required)
	if !ok {
		return 0
	}
	if !isNumber(r) {
		o.add(malformed(name, "must be a number"))
		return 0
	}
	f, err := strconv.ParseFloat(string(r), 64)
	if err != nil {
		o.add(malformed(name, "out of range"))
		return 0
	}
	return f
}

func (o *object) time(name string, required bool) time.Time {
	r, ok := o.present(name, required)
	if !ok {
		return time.Time{}
	}
	var s string
	if r[0] != '"' || json.Unmarshal(r, &s) != nil {
		o.add(malformed(name, timeFormatMsg))
		return time.Time{}
	}
	t, err := parseTime(s)
	if err != nil {
		o.add(malformed(name, err.Error()))
		return time.Time{}
	}
	return t
}

// strMap reads an object whose members are all strings. An empty object is an
// empty, non-nil map. A bad member is named as name["key"].
func (o *object) strMap(name string, required bool) map[string]string {
	r, ok := o.present(name, required)
	if !ok {
		return nil
	}
	in, err := parseNested(name, r)
	if err != nil {
		o.add(err)
		return nil
	}
	out := make(map[string]string, len(in.m))
	for _, k := range slices.Sorted(maps.Keys(in.m)) {
		var v string
		if rv := bytes.TrimSpace(in.m[k]); len(rv) == 0 || rv[0] != '"' || json.Unmarshal(rv, &v) != nil {
			o.add(malformed(fmt.Sprintf("%s[%q]", name, k), "must be a string"))
			continue
		}
		out[k] = v
	}
	return out
}

// anyMap reads a free-form object with encoding/json's usual Go types
// (float64, string, bool, nil, []any, map[string]any). An empty object reads
// as nil, so that it encodes (omitted) and decodes back the same.
func (o *object) anyMap(name string) map[string]any {
	r, ok := o.present(name, false)
	if !ok {
		return nil
	}
	if r[0] != '{' {
		o.add(malformed(name, errNotObject.Error()))
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(r, &m); err != nil {
		o.add(malformed(name, err.Error()))
		return nil
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// crossings reads an optional array of threshold crossings, each an object
// with the required integers "percent" and "arm". An empty array reads as
// nil, so that it encodes (omitted) and decodes back the same. A bad element
// is named as name[i], a bad member of it as name[i].percent.
func (o *object) crossings(name string) []Crossing {
	r, ok := o.present(name, false)
	if !ok {
		return nil
	}
	var elems []json.RawMessage
	if r[0] != '[' || json.Unmarshal(r, &elems) != nil {
		o.add(malformed(name, "must be an array"))
		return nil
	}
	var out []Crossing
	for i, raw := range elems {
		path := fmt.Sprintf("%s[%d]", name, i)
		e, err := parseNested(path, raw)
		if err != nil {
			o.add(err)
			continue
		}
		c := Crossing{Percent: e.int("percent", true), Arm: e.int("arm", true)}
		if err := e.err(); err != nil {
			o.add(prefixed(path, err))
			continue
		}
		out = append(out, c)
	}
	return out
}

// bool reads an optional boolean (false when absent or null).
func (o *object) bool(name string) bool {
	r, ok := o.present(name, false)
	if !ok {
		return false
	}
	switch string(r) {
	case "true":
		return true
	case "false":
		return false
	}
	o.add(malformed(name, "must be true or false"))
	return false
}

// strings reads an optional array of strings; an empty array reads as nil.
func (o *object) strings(name string) []string {
	r, ok := o.present(name, false)
	if !ok {
		return nil
	}
	var out []string
	if r[0] != '[' || json.Unmarshal(r, &out) != nil {
		o.add(malformed(name, "must be an array of strings"))
		return nil
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// grantStep reads an optional grant step (UsagePersistPayload.Grant); a
// bad member is named as name.member.
func (o *object) grantStep(name string) *GrantStep {
	r, ok := o.present(name, false)
	if !ok {
		return nil
	}
	e, err := parseNested(name, r)
	if err != nil {
		o.add(err)
		return nil
	}
	g := &GrantStep{
		GrantID:       e.str("grantId", true),
		PreviousStep:  e.str("previousStep", false),
		GrantedBytes:  e.int64("grantedBytes", true),
		Open:          e.bool("open"),
		Final:         e.bool("final"),
		OverageBytes:  e.int64("overageBytes", false),
		ReservedBytes: e.int64("reservedBytes", false),
		ValidUntil:    e.time("validUntil", false),
		Reclaim:       e.strings("reclaim"),
		Category:      e.str("category", false),
	}
	if err := e.err(); err != nil {
		o.add(prefixed(name, err))
		return nil
	}
	return g
}

const timeFormatMsg = "must be an RFC 3339 timestamp such as 2026-02-06T14:30:00Z"

// parseTime parses an RFC 3339 timestamp (offsets and fractions allowed) and
// returns it in UTC, rejecting instants whose UTC year is outside 0000–9999
// because they cannot be written back as RFC 3339.
func parseTime(s string) (time.Time, error) {
	// RFC 3339 allows "t" and "z" in lower case; time.Parse does not.
	if len(s) > 10 && (s[10] == 't' || s[len(s)-1] == 'z') {
		b := []byte(s)
		if b[10] == 't' {
			b[10] = 'T'
		}
		if b[len(b)-1] == 'z' {
			b[len(b)-1] = 'Z'
		}
		s = string(b)
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, errors.New(timeFormatMsg)
	}
	t = t.UTC()
	if err := checkTimeRange(t); err != nil {
		return time.Time{}, err
	}
	return t, nil
}

func checkTimeRange(t time.Time) error {
	if y := t.UTC().Year(); y < 0 || y > 9999 {
		return fmt.Errorf("year %d out of range 0000–9999", y)
	}
	return nil
}

// formatTime is the one way times are written: UTC, "Z", fraction only when
// non-zero (time.RFC3339Nano drops trailing zeros).
func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// validTime reports problems with a required timestamp.
func validTime(field string, t time.Time) error {
	if t.IsZero() {
		return required(field)
	}
	if err := checkTimeRange(t); err != nil {
		return invalid(field, "%s", err.Error())
	}
	return nil
}

// marshal is json.Marshal without HTML escaping: the wire carries "<" and
// "&" as themselves, the way Jackson writes them.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
