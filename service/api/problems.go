package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// The error model's last word (doc/security.md, "Error answers"): whatever
// built a problem — a handler through problem(), huma's validation, the
// authentication middleware — the answer passes through cleanProblem before
// it is written, and request bodies are read by decodeBody. So no answer
// repeats what was sent (a password too long for its field, a whole body
// that is not JSON) and none carries encoding/json's texts, which name Go
// types and echo the literal sent.

// jsonFormat is huma's JSON format with decodeBody for request bodies.
func jsonFormat() huma.Format {
	return huma.Format{Marshal: huma.DefaultJSONFormat.Marshal, Unmarshal: decodeBody}
}

// decodeBody is json.Unmarshal whose errors are written for the caller:
// "body.<path>: <what the field takes>" for a value of the wrong kind or out
// of range (cleanProblem moves the path into the detail's location), or
// "the body is not valid JSON …"; never the value sent, never a Go type.
func decodeBody(data []byte, v any) error {
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("the body is not valid JSON (at byte %d of %d)", syn.Offset, len(data))
	case errors.As(err, &typ):
		// A number no float holds is reported at the end of the whole
		// document when decoding into any (huma's validation pass): find
		// the first such number instead. Other values are reported where
		// they end.
		at := func(_ json.Token, end int64) bool { return end >= typ.Offset }
		if k := typ.Type; k != nil && (k.Kind() == reflect.Float64 || k.Kind() == reflect.Float32) {
			at = func(tok json.Token, _ int64) bool {
				n, ok := tok.(json.Number)
				_, err := strconv.ParseFloat(string(n), k.Bits())
				return ok && err != nil
			}
		}
		loc := jsonPath(data, at)
		if loc == "" && typ.Field != "" {
			loc = "body." + typ.Field
		}
		if loc == "" {
			loc = "body"
		}
		return fmt.Errorf("%s: %s", loc, "must be "+jsonKind(typ.Type))
	}
	return errors.New("the body has a value of the wrong form")
}

// jsonKind says what a value decoded into t must be, in the words of JSON.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another kind of value"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := t.Bits()
		return fmt.Sprintf("a whole number from %d to %d", int64(-1)<<(bits-1), int64(1)<<(bits-1)-1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return fmt.Sprintf("a whole number from 0 to %s", strconv.FormatUint(math.MaxUint64>>(64-t.Bits()), 10))
	case reflect.Float32:
		return "a number of at most 3.4e38 in size"
	case reflect.Float64:
		return "a number of at most 1.8e308 in size"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "another kind of value"
}

// jsonPath returns the location ("body.set.X", "body.thresholds[1]") of
// the first value of data for which at holds, given its first token (a
// number as a json.Number) and the offset where that token ends; or "" when
// there is none or data cannot be walked that far.
func jsonPath(data []byte, at func(tok json.Token, end int64) bool) string {
	type frame struct {
		obj     bool
		key     string
		idx     int
		wantKey bool
	}
	var stack []frame
	path := func() string {
		var b strings.Builder
		b.WriteString("body")
		for _, f := range stack {
			if f.obj {
				b.WriteString("." + f.key)
			} else {
				b.WriteString("[" + strconv.Itoa(f.idx) + "]")
			}
		}
		return b.String()
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // numbers as text: one no Go number holds is read too
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			if n := len(stack); n > 0 && stack[n-1].obj {
				stack[n-1].wantKey = true
			}
			continue
		}
		if n := len(stack); n > 0 && stack[n-1].obj && stack[n-1].wantKey {
			stack[n-1].key, stack[n-1].wantKey = fmt.Sprint(tok), false
			continue
		}
		// A value starts: an element of an array, a member's value or the
		// top-level value.
		if n := len(stack); n > 0 && !stack[n-1].obj {
			stack[n-1].idx++
		}
		if at(tok, dec.InputOffset()) {
			return path()
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{obj: true, wantKey: true})
		case json.Delim('['):
			stack = append(stack, frame{idx: -1})
		default:
			if n := len(stack); n > 0 && stack[n-1].obj {
				stack[n-1].wantKey = true
			}
		}
	}
}

// cleanProblem is the API's huma transformer for problems (RFC 9457):
// every error detail loses its value; decodeBody's "body.<path>: …" texts
// become a detail at that location; a 5xx answer keeps no detail (nothing
// in it is the caller's to fix, and a handler's unmapped error would
// otherwise print its own text). Other bodies pass unchanged.
func cleanProblem(_ huma.Context, status string, v any) (any, error) {
	switch p := v.(type) {
	case *huma.ErrorModel:
		return cleanModel(p, status), nil
	case *LoginProblem:
		c := *p
		c.ErrorModel = *cleanModel(&p.ErrorModel, status)
		return &c, nil
	case *GiftProblem:
		c := *p
		c.ErrorModel = *cleanModel(&p.ErrorModel, status)
		return &c, nil
	}
	return v, nil
}

func cleanModel(m *huma.ErrorModel, status string) *huma.ErrorModel {
	c := *m
	if code, err := strconv.Atoi(status); err == nil && code >= 500 {
		c.Errors = nil
		return &c
	}
	c.Errors = make([]*huma.ErrorDetail, 0, len(m.Errors))
	for _, d := range m.Errors {
		if d == nil {
			continue
		}
		e := &huma.ErrorDetail{Location: d.Location, Message: d.Message}
		if e.Location == "body" && (strings.HasPrefix(e.Message, "body.") || strings.HasPrefix(e.Message, "body[")) {
			if loc, msg, ok := strings.Cut(e.Message, ": "); ok {
				e.Location, e.Message = loc, msg
			}
		}
		c.Errors = append(c.Errors, e)
	}
	if len(c.Errors) == 0 {
		c.Errors = nil
	}
	return &c
}
