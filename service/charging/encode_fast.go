package charging

import (
	"encoding/json"
	"strconv"
	"time"
)

// encodeResponse is r as json.Marshal writes it, byte for byte: the answer
// an update stores (its retry's answer) and sends, encoded once
// (doc/benchmarks.md, "The grant path over Nchf"). The members DPCS writes
// are appended in the structs' field order; a response with members it
// never writes (invocationResult, triggers) or a string or time the fast
// path does not write as encoding/json does goes to json.Marshal whole.
// TestEncodeFastMatchesEncodingJSON holds the two equal.
func encodeResponse(r *ChargingDataResponse) ([]byte, error) {
	if b, ok := appendResponse(make([]byte, 0, 256), r); ok {
		return b, nil
	}
	return json.Marshal(r)
}

// appendResponse appends r, or reports false for what only json.Marshal
// writes.
func appendResponse(b []byte, r *ChargingDataResponse) ([]byte, bool) {
	if r.InvocationResult != nil || len(r.Triggers) > 0 {
		return nil, false
	}
	ok := true
	b = append(b, `{"invocationTimeStamp":`...)
	b, ok = appendTime(b, r.InvocationTimeStamp)
	b = append(b, `,"invocationSequenceNumber":`...)
	b = strconv.AppendUint(b, uint64(r.InvocationSequenceNumber), 10)
	b, ok = appendStringMember(b, ok, `,"sessionFailover":`, r.SessionFailover)
	b, ok = appendStringMember(b, ok, `,"supportedFeatures":`, r.SupportedFeatures)
	if len(r.MultipleUnitInformation) > 0 {
		b = append(b, `,"multipleUnitInformation":[`...)
		for i := range r.MultipleUnitInformation {
			if i > 0 {
				b = append(b, ',')
			}
			var uok bool
			b, uok = appendUnit(b, &r.MultipleUnitInformation[i])
			ok = ok && uok
		}
		b = append(b, ']')
	}
	return append(b, '}'), ok
}

func appendUnit(b []byte, u *MultipleUnitInformation) ([]byte, bool) {
	if len(u.Triggers) > 0 {
		return b, false
	}
	ok := true
	b = append(b, '{')
	if u.ResultCode != "" {
		b = append(b, `"resultCode":`...)
		b, ok = appendString(b, u.ResultCode)
		b = append(b, ',')
	}
	b = append(b, `"ratingGroup":`...)
	b = strconv.AppendUint(b, uint64(u.RatingGroup), 10)
	if g := u.GrantedUnit; g != nil {
		b = append(b, `,"grantedUnit":{`...)
		n := len(b)
		if g.TariffTimeChange != nil {
			var tok bool
			b = append(b, `"tariffTimeChange":`...)
			b, tok = appendTime(b, *g.TariffTimeChange)
			ok = ok && tok
		}
		if g.Time != nil {
			b = appendMemberName(b, n, `"time":`)
			b = strconv.AppendUint(b, uint64(*g.Time), 10)
		}
		for _, v := range []struct {
			name string
			p    *uint64
		}{{`"totalVolume":`, g.TotalVolume}, {`"uplinkVolume":`, g.UplinkVolume}, {`"downlinkVolume":`, g.DownlinkVolume},
			{`"serviceSpecificUnits":`, g.ServiceSpecificUnits}} {
			if v.p != nil {
				b = appendMemberName(b, n, v.name)
				b = strconv.AppendUint(b, *v.p, 10)
			}
		}
		b = append(b, '}')
	}
	if u.ValidityTime != nil {
		b = append(b, `,"validityTime":`...)
		b = strconv.AppendInt(b, *u.ValidityTime, 10)
	}
	if u.QuotaHoldingTime != nil {
		b = append(b, `,"quotaHoldingTime":`...)
		b = strconv.AppendInt(b, *u.QuotaHoldingTime, 10)
	}
	if f := u.FinalUnitIndication; f != nil {
		b = append(b, `,"finalUnitIndication":{"finalUnitAction":`...)
		b, ok = appendAnd(b, ok, f.FinalUnitAction)
		b, ok = appendStringMember(b, ok, `,"restrictionFilterRule":`, f.RestrictionFilterRule)
		b, ok = appendStringMember(b, ok, `,"filterId":`, f.FilterID)
		if rs := f.RedirectServer; rs != nil {
			b = append(b, `,"redirectServer":{"redirectAddressType":`...)
			b, ok = appendAnd(b, ok, rs.RedirectAddressType)
			b = append(b, `,"redirectServerAddress":`...)
			b, ok = appendAnd(b, ok, rs.RedirectServerAddress)
			b = append(b, '}')
		}
		b = append(b, '}')
	}
	if u.VolumeQuotaThreshold != nil {
		b = append(b, `,"volumeQuotaThreshold":`...)
		b = strconv.AppendUint(b, *u.VolumeQuotaThreshold, 10)
	}
	b, ok = appendStringMember(b, ok, `,"uPFID":`, u.UPFID)
	return append(b, '}'), ok
}

// appendMemberName appends name, after a comma unless it is the first
// member of the object begun at n.
func appendMemberName(b []byte, n int, name string) []byte {
	if len(b) > n {
		b = append(b, ',')
	}
	return append(b, name...)
}

// appendStringMember appends name and s unless s is empty (omitempty).
func appendStringMember(b []byte, ok bool, name, s string) ([]byte, bool) {
	if s == "" {
		return b, ok
	}
	return appendAnd(append(b, name...), ok, s)
}

func appendAnd(b []byte, ok bool, s string) ([]byte, bool) {
	b, sok := appendString(b, s)
	return b, ok && sok
}

// appendString appends s quoted as encoding/json writes printable ASCII
// ('<', '>' and '&' escaped for HTML); anything else is left to it.
func appendString(b []byte, s string) ([]byte, bool) {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\':
			return b, false
		case c == '<', c == '>', c == '&':
			b = append(b, s[start:i]...)
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&0xf])
			start = i + 1
		}
	}
	b = append(b, s[start:]...)
	return append(b, '"'), true
}

// appendTime appends t as time.Time's MarshalJSON does (RFC 3339 with
// nanoseconds, years 0 to 9999).
func appendTime(b []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y > 9999 {
		return b, false
	}
	if _, off := t.Zone(); off%60 != 0 || off <= -24*3600 || off >= 24*3600 { // left to MarshalJSON
		return b, false
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), true
}
