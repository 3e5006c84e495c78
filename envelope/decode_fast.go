package envelope

import (
	"strconv"
	"time"

	"github.com/dabom/dpcs/internal/jsonscan"
)

// The fast path of Decode. Decoding through encoding/json (a syntax check,
// a map of raw members, then one Unmarshal per member) dominated the CPU
// profile of every consumer, so a built-in event is first read in a single
// pass by decodeFast. It succeeds only for input it understands completely
// and then returns exactly what the slow path (Registry.decodeSlow) would
// decode; for anything else — any error, escapes in strings it keeps,
// duplicate members, unknown types, numbers out of range — it gives up and
// the slow path runs, so error texts are the slow path's by construction.
// TestDecodeDifferential and FuzzDecodeDifferential check the equivalence.

// kind is a built-in payload type.
type kind uint8

const (
	kindNone kind = iota
	kindUsage
	kindPolicy
	kindPersist
	kindQuota
	kindBlocked
	kindThreshold
)

// kindOf returns the built-in payload of t/s, or kindNone when the pair is
// not a built-in one (the slow path then reports it, or finds a type
// registered later).
func kindOf(t EventType, s SubType) kind {
	switch {
	case t == TypeDataUsage && s == "":
		return kindUsage
	case t == TypePolicyUpdated && s == "":
		return kindPolicy
	case t == TypeUsagePersist && s == "":
		return kindPersist
	case t == TypeNotification && s == SubQuotaUpdated:
		return kindQuota
	case t == TypeNotification && s == SubCustomerBlocked:
		return kindBlocked
	case t == TypeNotification && s == SubThresholdAlert:
		return kindThreshold
	}
	return kindNone
}

// members records the known members an object had. A member that appears
// twice makes the fast path give up: encoding/json keeps the last one, and
// the slow path does that faithfully.
type members uint32

// first marks member m as seen and reports whether it was not seen before.
func (ms *members) first(m members) bool {
	if *ms&m != 0 {
		return false
	}
	*ms |= m
	return true
}

// decodeFast decodes a built-in event without validating it; ok is false
// when the slow path must decide.
func decodeFast(data []byte) (ev Event, ok bool) {
	s := scanner{jsonscan.Scanner{Data: data}}
	const (
		mID members = 1 << iota
		mType
		mSubType
		mTimestamp
		mPayload
		required = mID | mType | mTimestamp | mPayload
	)
	var (
		seen      members
		guess     kind // the payload type as known when "payload" was read
		payloadAt int
	)
	ok = s.Object(func(key []byte) bool {
		switch string(key) {
		case "eventId":
			return seen.first(mID) && s.stringMember(&ev.EventID, true)
		case "eventType":
			return seen.first(mType) && s.eventType(&ev.EventType)
		case "subType":
			return seen.first(mSubType) && s.subType(&ev.SubType)
		case "timestamp":
			return seen.first(mTimestamp) && s.timeMember(&ev.Timestamp)
		case "payload":
			if !seen.first(mPayload) || s.Peek() != '{' {
				return false
			}
			payloadAt = s.Pos
			// Members usually come in the canonical order, type first; when
			// they do not, the payload is read again below.
			if guess = kindOf(ev.EventType, ev.SubType); guess == kindNone {
				return s.Skip(0)
			}
			var ok bool
			ev.Payload, ok = s.payload(guess)
			return ok
		}
		return s.Skip(0)
	})
	if !ok || seen&required != required || !s.End() {
		return Event{}, false
	}
	k := kindOf(ev.EventType, ev.SubType)
	if k == kindNone {
		return Event{}, false
	}
	if k != guess {
		s.Pos = payloadAt
		if ev.Payload, ok = s.payload(k); !ok {
			return Event{}, false
		}
	}
	return ev, true
}

// payload reads a payload object of kind k.
func (s *scanner) payload(k kind) (Payload, bool) {
	switch k {
	case kindUsage:
		return s.usage()
	case kindPolicy:
		return s.policy()
	case kindPersist:
		return s.persist()
	case kindQuota:
		return s.quota()
	case kindBlocked:
		return s.blocked()
	case kindThreshold:
		return s.threshold()
	}
	return nil, false
}

// The payload readers mirror the UnmarshalJSON methods in payloads.go:
// every required member must be present and not null, optional ones may be
// null.

func (s *scanner) usage() (Payload, bool) {
	var p UsagePayload
	var seen members
	const required = 1<<4 - 1
	ok := s.Object(func(key []byte) bool {
		switch string(key) {
		case "familyId":
			return seen.first(1<<0) && s.intMember(&p.FamilyID, true)
		case "customerId":
			return seen.first(1<<1) && s.intMember(&p.CustomerID, true)
		case "appId":
			return seen.first(1<<2) && s.stringMember(&p.AppID, true)
		case "bytesUsed":
			return seen.first(1<<3) && s.intMember(&p.BytesUsed, true)
		case "metadata":
			return seen.first(1<<4) && s.metadata(&p.Metadata)
		}
		return s.Skip(0)
	})
	return p, ok && seen&required == required
}

func (s *scanner) policy() (Payload, bool) {
	var p PolicyUpdatedPayload
	var seen members
	const required = 1<<0 | 1<<1 | 1<<6 | 1<<7
	ok := s.Object(func(key []byte) bool {
		switch string(key) {
		case "familyId":
			return seen.first(1<<0) && s.intMember(&p.FamilyID, true)
		case "targetCustomerId":
			return seen.first(1<<1) && s.intMember(&p.TargetCustomerID, true)
		case "policyKey":
			return seen.first(1<<2) && s.stringMember(&p.PolicyKey, false)
		case "oldValue":
			return seen.first(1<<3) && s.optStringMember(&p.OldValue)
		case "newValue":
			return seen.first(1<<4) && s.optStringMember(&p.NewValue)
		case "changedBy":
			return seen.first(1<<5) && s.intMember(&p.ChangedBy, false)
		case "version":
			return seen.first(1<<6) && s.intMember(&p.Version, true)
		case "constraints":
			return seen.first(1<<7) && s.constraints(&p.Constraints)
		}
		return s.Skip(0)
	})
	return p, ok && seen&required == required
}

func (s *scanner) persist() (Payload, bool) {
	var p UsagePersistPayload
	var seen members
	const required = 1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<5 | 1<<6 | 1<<7
	ok := s.Object(func(key []byte) bool {
		switch string(key) {
		case "originEventId":
			return seen.first(1<<0) && s.stringMember(&p.OriginEventID, true)
		case "familyId":
			return seen.first(1<<1) && s.intMember(&p.FamilyID, true)
		case "customerId":
			return seen.first(1<<2) && s.intMember(&p.CustomerID, true)
		case "bytesUsed":
			return seen.first(1<<3) && s.intMember(&p.BytesUsed, true)
		case "appId":
			return seen.first(1<<4) && s.stringMember(&p.AppID, false)
		case "processResult":
			return seen.first(1<<5) && s.stringMember(&p.ProcessResult, true)
		case "remainingAfter":
			return seen.first(1<<6) && s.intMember(&p.RemainingAfter, true)
		case "eventTime":
			return seen.first(1<<7) && s.timeMember(&p.EventTime)
		case "rule":
			return seen.first(1<<8) && s.stringMember(&p.Rule, false)
		case "totalBytes":
			return seen.first(1<<9) && s.intMember(&p.TotalBytes, false)
		case "dailyUsedBytes":
			return seen.first(1<<10) && s.intMember(&p.DailyUsedBytes, false)
		case "monthlyUsedBytes":
			return seen.first(1<<11) && s.intMember(&p.MonthlyUsedBytes, false)
		case "throttleKbps":
			return seen.first(1<<12) && s.intMember(&p.ThrottleKbps, false)
		case "crossed":
			return seen.first(1<<13) && s.crossings(&p.Crossed)
		case "grant":
			return seen.first(1<<14) && s.grant(&p.Grant)
		case "generation":
			return seen.first(1<<15) && s.stringMember(&p.Generation, false)
		case "notifies":
			return seen.first(1<<16) && s.stringArray(&p.Notifies)
		case "grantChargedBytes":
			return seen.first(1<<17) && s.intMember(&p.GrantChargedBytes, false)
		}
		return s.Skip(0)
	})
	return p, ok && seen&required == required
}

func (s *scanner) quota() (Payload, bool) {
	var p QuotaUpdated
	var seen members
	const required = 1<<5 - 1
	ok := s.Object(func(key []byte) bool {
		switch string(key) {
		case "familyId":
			return seen.first(1<<0) && s.intMember(&p.FamilyID, true)
		case "customerId":
			return seen.first(1<<1) && s.intMember(&p.CustomerID, true)
		case "familyRemainingBytes":
			return seen.first(1<<2) && s.intMember(&p.FamilyRemainingBytes, true)
		case "familyUsedPercent":
			return seen.first(1<<3) && s.floatMember(&p.FamilyUsedPercent)
		case "customerUsedBytesToday":
			return seen.first(1<<4) && s.intMember(&p.CustomerUsedBytesToday, true)
		}
		return s.Skip(0)
	})
	return p, ok && seen&required == required
}

func (s *scanner) blocked() (Payload, bool) {
	var p CustomerBlocked
	var seen members
	const required = 1<<4 - 1
	ok := s.Object(func(key []byte) bool {
		switch string(key) {
		case "familyId":
			return seen.first(1<<0) && s.intMember(&p.FamilyID, true)
		case "customerId":
			return seen.first(1<<1) && s.intMember(&p.CustomerID, true)
		case "blockReason":
			return seen.first(1<<2) && s.stringMember(&p.BlockReason, true)
		case "blockedAt":
			return seen.first(1<<3) && s.timeMember(&p.BlockedAt)
		case "decision":
			return seen.first(1<<4) && s.stringMember(&p.Decision, false)
		}
		return s.Skip(0)
	})
	return p, ok && seen&required == required
}

func (s *scanner) threshold() (Payload, bool) {
	var p ThresholdAlert
	var seen members
	const required = 1<<3 - 1
	ok := s.Object(func(key []byte) bool {
		switch string(key) {
		case "familyId":
			return seen.first(1<<0) && s.intMember(&p.FamilyID, true)
		case "thresholdPercent":
			return seen.first(1<<1) && s.intMemberInt(&p.ThresholdPercent)
		case "message":
			return seen.first(1<<2) && s.stringMember(&p.Message, true)
		case "period":
			return seen.first(1<<3) && s.stringMember(&p.Period, false)
		}
		return s.Skip(0)
	})
	return p, ok && seen&required == required
}

// crossings reads an optional array of {"percent":…,"arm":…} objects as
// object.crossings does; [] reads as nil.
func (s *scanner) crossings(dst *[]Crossing) bool {
	if s.Null() {
		return true
	}
	var out []Crossing
	ok := s.Array(func() bool {
		var c Crossing
		var seen members
		ok := s.Object(func(key []byte) bool {
			switch string(key) {
			case "percent":
				return seen.first(1<<0) && s.intMemberInt(&c.Percent)
			case "arm":
				return seen.first(1<<1) && s.intMemberInt(&c.Arm)
			}
			return s.Skip(1)
		})
		out = append(out, c)
		return ok && seen == 1<<2-1
	})
	*dst = out
	return ok
}

// grant reads an optional grant step as object.grantStep does.
func (s *scanner) grant(dst **GrantStep) bool {
	if s.Null() {
		return true
	}
	var g GrantStep
	var seen members
	const required = 1<<0 | 1<<2
	ok := s.Object(func(key []byte) bool {
		switch string(key) {
		case "grantId":
			return seen.first(1<<0) && s.stringMember(&g.GrantID, true)
		case "previousStep":
			return seen.first(1<<1) && s.stringMember(&g.PreviousStep, false)
		case "grantedBytes":
			return seen.first(1<<2) && s.intMember(&g.GrantedBytes, true)
		case "open":
			return seen.first(1<<3) && s.boolMember(&g.Open)
		case "final":
			return seen.first(1<<4) && s.boolMember(&g.Final)
		case "overageBytes":
			return seen.first(1<<5) && s.intMember(&g.OverageBytes, false)
		case "reservedBytes":
			return seen.first(1<<6) && s.intMember(&g.ReservedBytes, false)
		case "validUntil":
			return seen.first(1<<7) && (s.Null() || s.timeMember(&g.ValidUntil))
		case "reclaim":
			return seen.first(1<<8) && s.stringArray(&g.Reclaim)
		case "category":
			return seen.first(1<<9) && s.stringMember(&g.Category, false)
		}
		return s.Skip(1)
	})
	*dst = &g
	return ok && seen&required == required
}

// boolMember reads an optional boolean (null leaves false).
func (s *scanner) boolMember(dst *bool) bool {
	switch {
	case s.Null():
		return true
	case s.Peek() == 't':
		*dst = true
		return s.Literal("true")
	case s.Peek() == 'f':
		return s.Literal("false")
	}
	return false
}

// stringArray reads an optional array of strings; [] reads as nil. A null
// element is left to the slow path.
func (s *scanner) stringArray(dst *[]string) bool {
	if s.Null() {
		return true
	}
	var out []string
	ok := s.Array(func() bool {
		b, ok := s.Str()
		out = append(out, string(b))
		return ok
	})
	*dst = out
	return ok
}

// Member readers. A required member that is null is an error ("required"),
// so they give up on it; an optional null leaves the zero value.

func (s *scanner) stringMember(dst *string, required bool) bool {
	if s.Null() {
		return !required
	}
	b, ok := s.Str()
	*dst = string(b)
	return ok
}

func (s *scanner) optStringMember(dst **string) bool {
	if s.Null() {
		return true
	}
	b, ok := s.Str()
	v := string(b)
	*dst = &v
	return ok
}

func (s *scanner) intMember(dst *int64, required bool) bool {
	if s.Null() {
		return !required
	}
	var ok bool
	*dst, ok = s.Int64()
	return ok
}

// intMemberInt reads a required integer that fits in an int.
func (s *scanner) intMemberInt(dst *int) bool {
	var n int64
	ok := s.intMember(&n, true) && int64(int(n)) == n
	*dst = int(n)
	return ok
}

// floatMember reads a required number as encoding/json does (strconv.ParseFloat
// of the number's text); out-of-range numbers are left to the slow path.
func (s *scanner) floatMember(dst *float64) bool {
	tok, ok := s.Number()
	if !ok {
		return false
	}
	f, err := strconv.ParseFloat(string(tok), 64)
	*dst = f
	return err == nil
}

func (s *scanner) timeMember(dst *time.Time) bool {
	var ok bool
	*dst, ok = s.time()
	return ok
}

// eventType reads a built-in event type without allocating; a type that is
// not built in is left to the slow path.
func (s *scanner) eventType(dst *EventType) bool {
	b, ok := s.Str()
	for _, t := range [...]EventType{TypeDataUsage, TypePolicyUpdated, TypeUsagePersist, TypeNotification} {
		if ok && string(b) == string(t) {
			*dst = t
			return true
		}
	}
	return false
}

// subType reads null, "" or a built-in subtype without allocating.
func (s *scanner) subType(dst *SubType) bool {
	if s.Null() {
		return true
	}
	b, ok := s.Str()
	for _, t := range [...]SubType{"", SubQuotaUpdated, SubCustomerBlocked, SubThresholdAlert} {
		if ok && string(b) == string(t) {
			*dst = t
			return true
		}
	}
	return false
}

// constraints reads a required object of strings; {} is an empty map.
func (s *scanner) constraints(dst *map[string]string) bool {
	m := make(map[string]string)
	*dst = m
	return s.Object(func(key []byte) bool {
		v, ok := s.Str()
		m[string(key)] = string(v) // the last of duplicate keys wins, as in encoding/json
		return ok
	})
}

// metadata reads an optional free-form object the way json.Unmarshal into a
// map[string]any does; {} reads as nil (see object.anyMap).
func (s *scanner) metadata(dst *map[string]any) bool {
	if s.Null() {
		return true
	}
	m, ok := s.AnyObject(0)
	if len(m) > 0 {
		*dst = m
	}
	return ok
}
