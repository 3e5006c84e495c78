package envelope

import (
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/dabom/dpcs/internal/jsonscan"
)

// The fast path of Encode: the canonical JSON of a built-in payload written
// by hand, byte for byte what encoding/json writes for the same value
// (marshalSlow) — member order, omitempty, string escaping, float format.
// Payloads it does not know (registered types) and metadata values other
// than encoding/json's generic types go to marshalSlow, which also words
// every encoding error. TestEncodeDifferential checks the equivalence.

// appendEnvelope appends the canonical JSON of a valid envelope, or reports
// false when marshalSlow must write it.
func appendEnvelope(b []byte, id string, t EventType, s SubType, ts time.Time, p Payload) ([]byte, bool) {
	b = append(b, `{"eventId":`...)
	b = appendString(b, id)
	b = append(b, `,"eventType":`...)
	b = appendString(b, string(t))
	if s != "" {
		b = append(b, `,"subType":`...)
		b = appendString(b, string(s))
	}
	b = append(b, `,"timestamp":`...)
	b = appendTime(b, ts)
	b = append(b, `,"payload":`...)
	b, ok := appendPayload(b, p)
	return append(b, '}'), ok
}

// appendPayload appends a built-in payload, value or non-nil pointer.
func appendPayload(b []byte, p Payload) ([]byte, bool) {
	switch p := p.(type) {
	case UsagePayload:
		return p.appendJSON(b)
	case *UsagePayload:
		return p.appendJSON(b)
	case PolicyUpdatedPayload:
		return p.appendJSON(b), true
	case *PolicyUpdatedPayload:
		return p.appendJSON(b), true
	case UsagePersistPayload:
		return p.appendJSON(b), true
	case *UsagePersistPayload:
		return p.appendJSON(b), true
	case QuotaUpdated:
		return p.appendJSON(b)
	case *QuotaUpdated:
		return p.appendJSON(b)
	case CustomerBlocked:
		return p.appendJSON(b), true
	case *CustomerBlocked:
		return p.appendJSON(b), true
	case ThresholdAlert:
		return p.appendJSON(b), true
	case *ThresholdAlert:
		return p.appendJSON(b), true
	}
	return b, false
}

// The appendJSON methods follow the struct fields' order and json tags in
// payloads.go, and the MarshalJSON methods there for the times: the
// embedded struct's members first, then the time.

func (p *UsagePayload) appendJSON(b []byte) ([]byte, bool) {
	b = appendInt(b, `{"familyId":`, p.FamilyID)
	b = appendInt(b, `,"customerId":`, p.CustomerID)
	b = append(b, `,"appId":`...)
	b = appendString(b, p.AppID)
	b = appendInt(b, `,"bytesUsed":`, p.BytesUsed)
	ok := true
	if len(p.Metadata) > 0 {
		b = append(b, `,"metadata":`...)
		b, ok = appendAny(b, p.Metadata, 0)
	}
	return append(b, '}'), ok
}

func (p *PolicyUpdatedPayload) appendJSON(b []byte) []byte {
	b = appendInt(b, `{"familyId":`, p.FamilyID)
	b = appendInt(b, `,"targetCustomerId":`, p.TargetCustomerID)
	if p.PolicyKey != "" {
		b = append(b, `,"policyKey":`...)
		b = appendString(b, p.PolicyKey)
	}
	if p.OldValue != nil {
		b = append(b, `,"oldValue":`...)
		b = appendString(b, *p.OldValue)
	}
	if p.NewValue != nil {
		b = append(b, `,"newValue":`...)
		b = appendString(b, *p.NewValue)
	}
	b = appendInt(b, `,"changedBy":`, p.ChangedBy)
	b = appendInt(b, `,"version":`, p.Version)
	b = append(b, `,"constraints":`...)
	if p.Constraints == nil { // Validate rejects it; written as encoding/json would
		b = append(b, "null"...)
	} else {
		b = append(b, '{')
		var buf [16]string
		for i, k := range sortedKeys(buf[:0], p.Constraints) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, p.Constraints[k])
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

func (p *UsagePersistPayload) appendJSON(b []byte) []byte {
	b = append(b, `{"originEventId":`...)
	b = appendString(b, p.OriginEventID)
	b = appendInt(b, `,"familyId":`, p.FamilyID)
	b = appendInt(b, `,"customerId":`, p.CustomerID)
	b = appendInt(b, `,"bytesUsed":`, p.BytesUsed)
	b = append(b, `,"appId":`...)
	b = appendString(b, p.AppID)
	b = append(b, `,"processResult":`...)
	b = appendString(b, p.ProcessResult)
	b = appendInt(b, `,"remainingAfter":`, p.RemainingAfter)
	if p.Rule != "" {
		b = append(b, `,"rule":`...)
		b = appendString(b, p.Rule)
	}
	if p.TotalBytes != 0 {
		b = appendInt(b, `,"totalBytes":`, p.TotalBytes)
	}
	if p.DailyUsedBytes != 0 {
		b = appendInt(b, `,"dailyUsedBytes":`, p.DailyUsedBytes)
	}
	if p.MonthlyUsedBytes != 0 {
		b = appendInt(b, `,"monthlyUsedBytes":`, p.MonthlyUsedBytes)
	}
	if p.ThrottleKbps != 0 {
		b = appendInt(b, `,"throttleKbps":`, p.ThrottleKbps)
	}
	if len(p.Crossed) > 0 {
		b = append(b, `,"crossed":[`...)
		for i, c := range p.Crossed {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendInt(b, `{"percent":`, int64(c.Percent))
			b = appendInt(b, `,"arm":`, int64(c.Arm))
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if p.Grant != nil {
		b = append(b, `,"grant":`...)
		b = p.Grant.appendJSON(b)
	}
	if p.GrantChargedBytes != 0 {
		b = appendInt(b, `,"grantChargedBytes":`, p.GrantChargedBytes)
	}
	if p.Generation != "" {
		b = append(b, `,"generation":`...)
		b = appendString(b, p.Generation)
	}
	if len(p.Notifies) > 0 {
		b = append(b, `,"notifies":[`...)
		for i, k := range p.Notifies {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
		}
		b = append(b, ']')
	}
	b = append(b, `,"eventTime":`...)
	b = appendTime(b, p.EventTime)
	return append(b, '}')
}

func (g *GrantStep) appendJSON(b []byte) []byte {
	b = append(b, `{"grantId":`...)
	b = appendString(b, g.GrantID)
	if g.PreviousStep != "" {
		b = append(b, `,"previousStep":`...)
		b = appendString(b, g.PreviousStep)
	}
	b = appendInt(b, `,"grantedBytes":`, g.GrantedBytes)
	b = append(b, `,"open":`...)
	b = strconv.AppendBool(b, g.Open)
	if g.Final {
		b = append(b, `,"final":true`...)
	}
	if g.OverageBytes != 0 {
		b = appendInt(b, `,"overageBytes":`, g.OverageBytes)
	}
	if g.ReservedBytes != 0 {
		b = appendInt(b, `,"reservedBytes":`, g.ReservedBytes)
	}
	if !g.ValidUntil.IsZero() {
		b = append(b, `,"validUntil":`...)
		b = appendTime(b, g.ValidUntil)
	}
	if len(g.Reclaim) > 0 {
		b = append(b, `,"reclaim":[`...)
		for i, id := range g.Reclaim {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, id)
		}
		b = append(b, ']')
	}
	if g.Category != "" {
		b = append(b, `,"category":`...)
		b = appendString(b, g.Category)
	}
	return append(b, '}')
}

func (p *QuotaUpdated) appendJSON(b []byte) ([]byte, bool) {
	b = appendInt(b, `{"familyId":`, p.FamilyID)
	b = appendInt(b, `,"customerId":`, p.CustomerID)
	b = appendInt(b, `,"familyRemainingBytes":`, p.FamilyRemainingBytes)
	b = append(b, `,"familyUsedPercent":`...)
	b, ok := appendFloat(b, p.FamilyUsedPercent)
	b = appendInt(b, `,"customerUsedBytesToday":`, p.CustomerUsedBytesToday)
	return append(b, '}'), ok
}

func (p *CustomerBlocked) appendJSON(b []byte) []byte {
	b = appendInt(b, `{"familyId":`, p.FamilyID)
	b = appendInt(b, `,"customerId":`, p.CustomerID)
	b = append(b, `,"blockReason":`...)
	b = appendString(b, p.BlockReason)
	if p.Decision != "" {
		b = append(b, `,"decision":`...)
		b = appendString(b, p.Decision)
	}
	b = append(b, `,"blockedAt":`...)
	b = appendTime(b, p.BlockedAt)
	return append(b, '}')
}

func (p *ThresholdAlert) appendJSON(b []byte) []byte {
	b = appendInt(b, `{"familyId":`, p.FamilyID)
	b = appendInt(b, `,"thresholdPercent":`, int64(p.ThresholdPercent))
	b = append(b, `,"message":`...)
	b = appendString(b, p.Message)
	if p.Period != "" {
		b = append(b, `,"period":`...)
		b = appendString(b, p.Period)
	}
	return append(b, '}')
}

// appendInt appends a member name (with its separator) and an integer.
func appendInt(b []byte, name string, v int64) []byte {
	return strconv.AppendInt(append(b, name...), v, 10)
}

// appendTime appends formatTime(t) as a JSON string; it never needs
// escaping.
func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendFloat is encoding/json's float64 encoding: like strconv 'f', or 'e'
// for very small and very large magnitudes, with e-07 shortened to e-7.
// NaN and infinities cannot be written (encoding/json reports them).
func appendFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

const hexDigits = "0123456789abcdef"

// appendString is encoding/json's string encoding without HTML escaping:
// '"', '\\' and control characters escaped (\b \f \n \r \t by name), invalid
// UTF-8 as \ufffd, U+2028 and U+2029 escaped, everything else as itself.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if jsonscan.IsPlain(c) {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// maxEncodeDepth bounds the nesting of metadata written here; deeper values
// (or cyclic ones, which encoding/json reports) go to marshalSlow.
const maxEncodeDepth = 64

// appendAny appends a metadata value of encoding/json's generic types, keys
// sorted as encoding/json sorts them; ok is false for any other type, and
// for values encoding/json rejects (NaN, infinities).
func appendAny(b []byte, v any, depth int) ([]byte, bool) {
	if depth >= maxEncodeDepth {
		return b, false
	}
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), true
	case string:
		return appendString(b, v), true
	case float64:
		return appendFloat(b, v)
	case bool:
		return strconv.AppendBool(b, v), true
	case map[string]any:
		if v == nil {
			return append(b, "null"...), true
		}
		b = append(b, '{')
		var buf [16]string
		for i, k := range sortedKeys(buf[:0], v) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			var ok bool
			if b, ok = appendAny(b, v[k], depth+1); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	case []any:
		if v == nil {
			return append(b, "null"...), true
		}
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendAny(b, e, depth+1); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	}
	return b, false
}

// sortedKeys returns the keys of m in encoding/json's order (by bytes),
// appended to buf.
func sortedKeys[V any](buf []string, m map[string]V) []string {
	for k := range m {
		buf = append(buf, k)
	}
	slices.Sort(buf)
	return buf
}
