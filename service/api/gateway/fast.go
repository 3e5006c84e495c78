package gateway

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
	"github.com/dabom/dpcs/internal/jsonscan"
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
func (r *Route) decideFast(ctx huma.Context, next func(huma.Context)) {
	if r.slow || r.cfg.Decisions == nil || !jsonMediaType(ctx.Header("Content-Type")) || !acceptsJSON(ctx.Header("Accept")) {
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
	r.fast.Add(1)
	results, err := r.cfg.Decisions.Decide(ctx.Context(), envs)
	if err != nil {
		writeProblem(r.api, ctx, r.cfg.Problem(ctx.Context(), err, "body"))
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

// decodeDecisionAsk reads a DecisionAsk body in one pass (internal/jsonscan);
// ok is false for anything it does not understand completely or that the
// schema refuses.
func decodeDecisionAsk(data []byte) (envs []envelope.Envelope[envelope.UsagePayload], ok bool) {
	s := jsonscan.Scanner{Data: data}
	seen := false
	ok = s.Object(func(key []byte) bool {
		if string(key) != "events" || seen {
			return false
		}
		seen = true
		envs, ok = askEvents(&s)
		return ok
	})
	if !ok || !seen || !s.End() {
		return nil, false
	}
	return envs, true
}

// askEvents reads the events array: 1..maxDecisionEvents events.
func askEvents(s *jsonscan.Scanner) ([]envelope.Envelope[envelope.UsagePayload], bool) {
	var envs []envelope.Envelope[envelope.UsagePayload]
	ok := s.Array(func() bool {
		if len(envs) == maxDecisionEvents {
			return false
		}
		env, ok := askEvent(s)
		envs = append(envs, env)
		return ok
	})
	return envs, ok && len(envs) > 0
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

// askEvent reads one UsageEvent object with every required member once.
func askEvent(s *jsonscan.Scanner) (envelope.Envelope[envelope.UsagePayload], bool) {
	var (
		e    UsageEvent
		seen int
	)
	ok := s.Object(func(name []byte) bool {
		var m int
		ok := false
		switch string(name) {
		case "eventId":
			m = memEventID
			e.EventID, ok = askString(s)
		case "timestamp":
			m = memTimestamp
			var b []byte
			if b, ok = s.ASCII(); ok {
				// encoding/json's own (strict RFC 3339) parse, which huma's
				// date-time check accepts too.
				ok = e.Timestamp.UnmarshalText(b) == nil
			}
		case "familyId":
			m = memFamilyID
			e.FamilyID, ok = askInt(s, 1, math.MaxInt64)
		case "customerId":
			m = memCustomerID
			e.CustomerID, ok = askInt(s, 1, math.MaxInt64)
		case "appId":
			m = memAppID
			e.AppID, ok = askString(s)
		case "bytesUsed":
			m = memBytesUsed
			e.BytesUsed, ok = askInt(s, 0, policy.MaxBytes)
		case "metadata":
			m = memMetadata
			e.Metadata, ok = askMetadata(s)
		}
		if !ok || seen&m != 0 {
			return false
		}
		seen |= m
		return true
	})
	if !ok || seen&memRequired != memRequired {
		return envelope.Envelope[envelope.UsagePayload]{}, false
	}
	return envelope.New(e.EventID, e.Timestamp, envelope.UsagePayload{FamilyID: e.FamilyID,
		CustomerID: e.CustomerID, AppID: e.AppID, BytesUsed: e.BytesUsed, Metadata: e.Metadata}), true
}

// askMetadata reads the optional metadata object as huma's path decodes it,
// json.Unmarshal into a map[string]any: jsonscan.AnyObject reads the same
// in one pass when the object's strings have no escapes, and
// json.Unmarshal reads the object's bytes when they have.
func askMetadata(s *jsonscan.Scanner) (map[string]any, bool) {
	start := s.Pos
	if s.Peek() != '{' {
		return nil, false
	}
	if m, ok := s.AnyObject(0); ok {
		return m, true
	}
	s.Pos = start
	if s.Peek() != '{' || !s.Skip(0) {
		return nil, false
	}
	var m map[string]any
	if err := json.Unmarshal(s.Data[start:s.Pos], &m); err != nil {
		return nil, false
	}
	return m, true
}

// askString reads a string member's value of 1..200 characters, printable
// ASCII without escapes (so its length in bytes is huma's in characters).
func askString(s *jsonscan.Scanner) (string, bool) {
	b, ok := s.ASCII()
	if !ok || len(b) < 1 || len(b) > 200 {
		return "", false
	}
	return string(b), true
}

// askInt reads an integer in min..max (no fraction, no exponent).
func askInt(s *jsonscan.Scanner, min, max int64) (int64, bool) {
	n, ok := s.Int64()
	return n, ok && n >= min && n <= max
}
