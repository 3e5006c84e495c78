package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
)

// The fast path of POST /decisions. huma validates a request body by
// decoding it into a map, walking the schema over it and decoding it again
// into the struct: for a gateway's small, well-formed requests that was as
// much CPU as judging them (doc/benchmarks.md, Wave 2). decideFast reads a
// body it understands completely — exactly the members of the schema, no
// string escapes or non-ASCII in the strings it keeps, integers without
// fraction or exponent, every value within its bounds — in one pass, judges
// it and writes the answer as huma would. Anything else (an error of any
// kind, an unknown or misspelt member, a value out of bounds, another media
// type) goes to huma's own path with the body untouched, so every error
// answer is huma's by construction. TestDecideFastMatchesHuma and
// FuzzDecideFast hold the two paths equal.

// The decision operation's body limits, as huma applies them.
const (
	decideMaxBody     = 1 << 20
	decideReadTimeout = 5 * time.Second
)

// decideFast is the decision operation's middleware: the fast path, or
// next with the body restored.
func (a *Server) decideFast(ctx huma.Context, next func(huma.Context)) {
	if a.decideSlow || a.cfg.Decisions == nil || !jsonMediaType(ctx.Header("Content-Type")) || !acceptsJSON(ctx.Header("Accept")) {
		next(ctx)
		return
	}
	_ = ctx.SetReadDeadline(time.Now().Add(decideReadTimeout))
	body, err := io.ReadAll(io.LimitReader(ctx.BodyReader(), decideMaxBody+1))
	if err != nil || int64(len(body)) > decideMaxBody {
		// huma reads the rest and answers (408, 413, …) as it always does.
		rest := io.Reader(readerError{err})
		if err == nil {
			rest = ctx.BodyReader()
		}
		next(bodyContext{ctx, io.MultiReader(bytes.NewReader(body), rest)})
		return
	}
	_ = ctx.SetReadDeadline(time.Time{})
	envs, ok := decodeDecisionAsk(body)
	if !ok {
		next(bodyContext{ctx, bytes.NewReader(body)})
		return
	}
	a.decidedFast.Add(1)
	results, err := a.cfg.Decisions.Decide(ctx.Context(), envs)
	if err != nil {
		writeProblem(a.api, ctx, a.problem(ctx.Context(), err, "body"))
		return
	}
	out := make([]byte, 0, 64+200*len(results))
	out = append(out, `{"decisions":[`...)
	for i, r := range results {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendDecision(out, envs[i].EventID, r)
	}
	out = append(out, "]}\n"...)
	ctx.SetHeader("Content-Type", "application/json")
	ctx.SetStatus(http.StatusOK)
	_, _ = ctx.BodyWriter().Write(out)
}

// writeProblem writes err as huma writes an error a handler returned.
func writeProblem(api huma.API, ctx huma.Context, err error) {
	var em *huma.ErrorModel
	if !errors.As(err, &em) {
		_ = huma.WriteErr(api, ctx, http.StatusInternalServerError, "internal error")
		return
	}
	errs := make([]error, len(em.Errors))
	for i, d := range em.Errors {
		errs[i] = d
	}
	_ = huma.WriteErr(api, ctx, em.Status, em.Detail, errs...)
}

// bodyContext is a huma.Context whose body is r: what decideFast read,
// handed on to huma's own path.
type bodyContext struct {
	humaContext
	r io.Reader
}

// humaContext names the embedded huma.Context (a field named Context would
// hide its Context method).
type humaContext = huma.Context

func (c bodyContext) BodyReader() io.Reader { return c.r }

type readerError struct{ err error }

func (r readerError) Read([]byte) (int, error) { return 0, r.err }

// jsonMediaType reports whether a request of this Content-Type is decoded as
// JSON by huma (an absent one is: the operation's only media type).
func jsonMediaType(ct string) bool {
	if ct == "" || ct == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// acceptsJSON reports whether huma answers a request with this Accept
// header in JSON; anything unusual takes huma's path.
func acceptsJSON(accept string) bool {
	switch accept {
	case "", "*/*", "application/json":
		return true
	}
	return false
}

// appendDecision appends one EventDecision as encoding/json writes it
// (field order, omitempty, no HTML escaping: huma's JSON format).
func appendDecision(b []byte, id string, r quota.Result) []byte {
	b = append(b, `{"eventId":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"decision":`...)
	b = appendJSONString(b, string(r.Decision))
	if r.Rule != "" {
		b = append(b, `,"rule":`...)
		b = appendJSONString(b, r.Rule)
	}
	b = append(b, `,"duplicate":`...)
	b = strconv.AppendBool(b, r.Duplicate)
	b = append(b, `,"remainingBytes":`...)
	b = strconv.AppendInt(b, r.Remaining, 10)
	b = append(b, `,"totalBytes":`...)
	b = strconv.AppendInt(b, r.Total, 10)
	b = append(b, `,"dailyUsedBytes":`...)
	b = strconv.AppendInt(b, r.DailyUsed, 10)
	b = append(b, `,"monthlyUsedBytes":`...)
	b = strconv.AppendInt(b, r.MonthlyUsed, 10)
	if r.ThrottleKbps != 0 {
		b = append(b, `,"throttleKbps":`...)
		b = strconv.AppendInt(b, r.ThrottleKbps, 10)
	}
	return append(b, '}')
}

// appendJSONString appends s quoted: plain printable ASCII as it is,
// anything else through encoding/json (without HTML escaping, as huma).
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(s)
			return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// decodeDecisionAsk reads a DecisionAsk body in one pass; ok is false for
// anything it does not understand completely or that the schema refuses.
func decodeDecisionAsk(data []byte) (envs []envelope.Envelope[envelope.UsagePayload], ok bool) {
	s := askScanner{b: data}
	if !s.byte('{') {
		return nil, false
	}
	seen := false
	if !s.byte('}') {
		for {
			name, ok := s.name()
			if !ok || name != "events" || seen || !s.byte(':') {
				return nil, false
			}
			seen = true
			if envs, ok = s.events(); !ok {
				return nil, false
			}
			if !s.byte(',') {
				break
			}
		}
	}
	if !s.byte('}') || !seen || !s.end() {
		return nil, false
	}
	return envs, true
}

// askScanner reads the JSON of a DecisionAsk.
type askScanner struct {
	b []byte
	i int
}

func (s *askScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// byte skips white space and c.
func (s *askScanner) byte(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *askScanner) end() bool {
	s.ws()
	return s.i == len(s.b)
}

// raw reads a string of printable ASCII without escapes; it returns its
// bytes in the input.
func (s *askScanner) raw() ([]byte, bool) {
	if !s.byte('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c == '\\' || c < 0x20 || c > 0x7e:
			return nil, false
		}
		s.i++
	}
	return nil, false
}

func (s *askScanner) name() (string, bool) {
	b, ok := s.raw()
	return string(b), ok
}

// str reads a string member's value of 1..200 characters.
func (s *askScanner) str() (string, bool) {
	b, ok := s.raw()
	if !ok || len(b) < 1 || len(b) > 200 {
		return "", false
	}
	return string(b), true
}

// int reads an integer in min..max: digits with an optional minus sign, no
// leading zeros, fraction or exponent.
func (s *askScanner) int(min, max int64) (int64, bool) {
	s.ws()
	neg := s.i < len(s.b) && s.b[s.i] == '-'
	if neg {
		s.i++
	}
	digits := s.i
	var n int64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		if s.i-digits >= 18 {
			return 0, false
		}
		n = n*10 + int64(s.b[s.i]-'0')
		s.i++
	}
	if s.i == digits || (s.b[digits] == '0' && s.i-digits > 1) {
		return 0, false
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	if neg {
		n = -n
	}
	return n, n >= min && n <= max
}

// events reads the events array: 1..maxDecisionEvents events.
func (s *askScanner) events() ([]envelope.Envelope[envelope.UsagePayload], bool) {
	if !s.byte('[') || s.byte(']') {
		return nil, false
	}
	var envs []envelope.Envelope[envelope.UsagePayload]
	for {
		if len(envs) == maxDecisionEvents {
			return nil, false
		}
		env, ok := s.event()
		if !ok {
			return nil, false
		}
		envs = append(envs, env)
		if !s.byte(',') {
			break
		}
	}
	return envs, s.byte(']')
}

// The members of an event, as bits.
const (
	memEventID = 1 << iota
	memTimestamp
	memFamilyID
	memCustomerID
	memAppID
	memBytesUsed
	memMetadata
	memRequired = memEventID | memTimestamp | memFamilyID | memCustomerID | memAppID | memBytesUsed
)

// event reads one UsageEvent object with every required member once.
func (s *askScanner) event() (envelope.Envelope[envelope.UsagePayload], bool) {
	var (
		e    UsageEvent
		seen int
		zero envelope.Envelope[envelope.UsagePayload]
	)
	if !s.byte('{') || s.byte('}') {
		return zero, false
	}
	for {
		name, ok := s.raw()
		if !ok || !s.byte(':') {
			return zero, false
		}
		var m int
		switch string(name) {
		case "eventId":
			m = memEventID
			e.EventID, ok = s.str()
		case "timestamp":
			m = memTimestamp
			var b []byte
			if b, ok = s.raw(); ok {
				// encoding/json's own (strict RFC 3339) parse, which huma's
				// date-time check accepts too.
				ok = e.Timestamp.UnmarshalText(b) == nil
			}
		case "familyId":
			m = memFamilyID
			e.FamilyID, ok = s.int(1, math.MaxInt64)
		case "customerId":
			m = memCustomerID
			e.CustomerID, ok = s.int(1, math.MaxInt64)
		case "appId":
			m = memAppID
			e.AppID, ok = s.str()
		case "bytesUsed":
			m = memBytesUsed
			e.BytesUsed, ok = s.int(0, policy.MaxBytes)
		case "metadata":
			m = memMetadata
			e.Metadata, ok = s.metadata()
		default:
			return zero, false
		}
		if !ok || seen&m != 0 {
			return zero, false
		}
		seen |= m
		if !s.byte(',') {
			break
		}
	}
	if !s.byte('}') || seen&memRequired != memRequired {
		return zero, false
	}
	return envelope.New(e.EventID, e.Timestamp, envelope.UsagePayload{FamilyID: e.FamilyID,
		CustomerID: e.CustomerID, AppID: e.AppID, BytesUsed: e.BytesUsed, Metadata: e.Metadata}), true
}

// metadata reads the optional metadata object through encoding/json, as
// huma's path decodes it: the object's bytes are found first.
func (s *askScanner) metadata() (map[string]any, bool) {
	s.ws()
	start := s.i
	if !s.skipValue(0) || s.b[start] != '{' {
		return nil, false
	}
	var m map[string]any
	if err := json.Unmarshal(s.b[start:s.i], &m); err != nil {
		return nil, false
	}
	return m, true
}

// skipValue skips one JSON value (any), at most 32 levels deep; syntax is
// checked again by encoding/json.
func (s *askScanner) skipValue(depth int) bool {
	if depth > 32 {
		return false
	}
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; c {
	case '{', '[':
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		s.i++
		if s.byte(closing) {
			return true
		}
		for {
			if c == '{' {
				if !s.skipString() || !s.byte(':') {
					return false
				}
			}
			if !s.skipValue(depth + 1) {
				return false
			}
			if !s.byte(',') {
				return s.byte(closing)
			}
		}
	case '"':
		return s.skipString()
	default:
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return true
			}
			s.i++
		}
		return true
	}
}

// skipString skips a string, escapes included.
func (s *askScanner) skipString() bool {
	if !s.byte('"') {
		return false
	}
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			s.i += 2
			continue
		case '"':
			s.i++
			return true
		}
		s.i++
	}
	return false
}
