package charging

import (
	"encoding/json"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dabom/dpcs/internal/jsonscan"
)

// The fast path of DecodeRequest. encoding/json spent more CPU decoding an
// SMF's update than the rest of the handler (doc/benchmarks.md, "The grant
// path over Nchf"). decodeFast reads a ChargingDataRequest it understands
// completely in one pass (internal/jsonscan): every member of the schema at
// most once and exactly as spelt, null only as a free-form member's bytes
// (json.RawMessage), strings without escapes,
// integers without sign, fraction or exponent where unsigned, each within
// its type; a member the schema does not name is skipped as TS 29.501 asks,
// unless encoding/json would take it for one (a key equal but for case, or
// one with non-ASCII bytes). Anything else reports false and goes to
// encoding/json with the body untouched, so every refusal is the slow
// path's. TestDecodeFastMatchesEncodingJSON and FuzzDecodeFast hold the two
// paths equal.

// decodeFast decodes body, or reports false.
func decodeFast(body []byte) (*ChargingDataRequest, bool) {
	s := &jsonscan.Scanner{Data: body}
	var r ChargingDataRequest
	if s.Peek() != '{' || !fastRequest(s, &r) || !s.End() {
		return nil, false
	}
	return &r, true
}

// fastObject reads an object whose known members are names: each key that
// is one (its index in names) is read by member, at most once; any other
// is skipped unless encoding/json would match it to one of names.
func fastObject(s *jsonscan.Scanner, names []string, member func(i int) bool) bool {
	var seen uint64
	return s.Object(func(key []byte) bool {
		for i, n := range names {
			if string(key) == n {
				if seen&(1<<i) != 0 {
					return false
				}
				seen |= 1 << i
				return member(i)
			}
		}
		for _, c := range key {
			if c >= utf8.RuneSelf {
				return false
			}
		}
		for _, n := range names {
			if strings.EqualFold(string(key), n) {
				return false
			}
		}
		return s.Skip(1)
	})
}

var requestNames = []string{"subscriberIdentifier", "tenantIdentifier", "chargingId", "mnSConsumerIdentifier",
	"nfConsumerIdentification", "invocationTimeStamp", "invocationSequenceNumber", "retransmissionIndicator",
	"oneTimeEvent", "oneTimeEventType", "notifyUri", "supportedFeatures", "serviceSpecificationInfo",
	"multipleUnitUsage", "triggers", "pDUSessionChargingInformation"}

func fastRequest(s *jsonscan.Scanner, r *ChargingDataRequest) bool {
	return fastObject(s, requestNames, func(i int) bool {
		switch i {
		case 0:
			return fastString(s, &r.SubscriberIdentifier)
		case 1:
			return fastString(s, &r.TenantIdentifier)
		case 2:
			return fastUint32(s, &r.ChargingID)
		case 3:
			return fastString(s, &r.MnSConsumerIdentifier)
		case 4:
			r.NfConsumerIdentification = &NFIdentification{}
			return fastNF(s, r.NfConsumerIdentification)
		case 5:
			return fastTime(s, &r.InvocationTimeStamp)
		case 6:
			return fastUint32(s, &r.InvocationSequenceNumber)
		case 7:
			return fastBool(s, &r.RetransmissionIndicator)
		case 8:
			return fastBool(s, &r.OneTimeEvent)
		case 9:
			return fastString(s, &r.OneTimeEventType)
		case 10:
			return fastString(s, &r.NotifyURI)
		case 11:
			return fastString(s, &r.SupportedFeatures)
		case 12:
			return fastString(s, &r.ServiceSpecificationInfo)
		case 13:
			r.MultipleUnitUsage = []MultipleUnitUsage{}
			return s.Array(func() bool {
				var u MultipleUnitUsage
				ok := fastUsage(s, &u)
				r.MultipleUnitUsage = append(r.MultipleUnitUsage, u)
				return ok
			})
		case 14:
			return fastTriggers(s, &r.Triggers)
		default:
			r.PDUSessionChargingInformation = &PDUSessionChargingInformation{}
			return fastPDUCharging(s, r.PDUSessionChargingInformation)
		}
	})
}

var nfNames = []string{"nFName", "nFIPv4Address", "nFIPv6Address", "nFPLMNID", "nodeFunctionality", "nFFqdn"}

func fastNF(s *jsonscan.Scanner, n *NFIdentification) bool {
	return fastObject(s, nfNames, func(i int) bool {
		switch i {
		case 0:
			return fastString(s, &n.NFName)
		case 1:
			return fastString(s, &n.NFIPv4Address)
		case 2:
			return fastString(s, &n.NFIPv6Address)
		case 3:
			return fastRaw(s, &n.NFPLMNID)
		case 4:
			return fastString(s, &n.NodeFunctionality)
		default:
			return fastString(s, &n.NFFqdn)
		}
	})
}

var usageNames = []string{"ratingGroup", "requestedUnit", "usedUnitContainer", "uPFID", "multihomedPDUAddress"}

func fastUsage(s *jsonscan.Scanner, u *MultipleUnitUsage) bool {
	if s.Peek() != '{' {
		return false
	}
	return fastObject(s, usageNames, func(i int) bool {
		switch i {
		case 0:
			return fastUint32(s, &u.RatingGroup)
		case 1:
			u.RequestedUnit = &RequestedUnit{}
			return fastRequested(s, u.RequestedUnit)
		case 2:
			u.UsedUnitContainer = []UsedUnitContainer{}
			return s.Array(func() bool {
				var c UsedUnitContainer
				ok := fastUsed(s, &c)
				u.UsedUnitContainer = append(u.UsedUnitContainer, c)
				return ok
			})
		case 3:
			return fastString(s, &u.UPFID)
		default:
			return fastRaw(s, &u.MultihomedPDUAddress)
		}
	})
}

var requestedNames = []string{"time", "totalVolume", "uplinkVolume", "downlinkVolume", "serviceSpecificUnits"}

func fastRequested(s *jsonscan.Scanner, r *RequestedUnit) bool {
	return fastObject(s, requestedNames, func(i int) bool {
		switch i {
		case 0:
			return fastUint32(s, &r.Time)
		case 1:
			return fastUint64(s, &r.TotalVolume)
		case 2:
			return fastUint64(s, &r.UplinkVolume)
		case 3:
			return fastUint64(s, &r.DownlinkVolume)
		default:
			return fastUint64(s, &r.ServiceSpecificUnits)
		}
	})
}

var usedNames = []string{"serviceId", "quotaManagementIndicator", "triggers", "triggerTimestamp", "time",
	"totalVolume", "uplinkVolume", "downlinkVolume", "serviceSpecificUnits", "eventTimeStamps",
	"localSequenceNumber", "pDUContainerInformation"}

func fastUsed(s *jsonscan.Scanner, c *UsedUnitContainer) bool {
	if s.Peek() != '{' {
		return false
	}
	return fastObject(s, usedNames, func(i int) bool {
		switch i {
		case 0:
			return fastUint32(s, &c.ServiceID)
		case 1:
			return fastString(s, &c.QuotaManagementIndicator)
		case 2:
			return fastTriggers(s, &c.Triggers)
		case 3:
			return fastTime(s, &c.TriggerTimestamp)
		case 4:
			return fastUint32(s, &c.Time)
		case 5:
			return fastUint64(s, &c.TotalVolume)
		case 6:
			return fastUint64(s, &c.UplinkVolume)
		case 7:
			return fastUint64(s, &c.DownlinkVolume)
		case 8:
			return fastUint64(s, &c.ServiceSpecificUnits)
		case 9:
			c.EventTimeStamps = []time.Time{}
			return s.Array(func() bool {
				var t *time.Time
				ok := s.Peek() == '"' && fastTime(s, &t)
				if ok {
					c.EventTimeStamps = append(c.EventTimeStamps, *t)
				}
				return ok
			})
		case 10:
			return fastInt64(s, &c.LocalSequenceNumber)
		default:
			return fastRaw(s, &c.PDUContainerInformation)
		}
	})
}

var triggerNames = []string{"triggerType", "triggerCategory", "timeLimit", "volumeLimit", "volumeLimit64",
	"eventLimit", "maxNumberOfccc", "tariffTimeChange"}

func fastTriggers(s *jsonscan.Scanner, ts *[]Trigger) bool {
	*ts = []Trigger{}
	return s.Array(func() bool {
		var t Trigger
		ok := s.Peek() == '{' && fastObject(s, triggerNames, func(i int) bool {
			switch i {
			case 0:
				return fastString(s, &t.TriggerType)
			case 1:
				return fastString(s, &t.TriggerCategory)
			case 2:
				return fastInt64(s, &t.TimeLimit)
			case 3:
				return fastUint32(s, &t.VolumeLimit)
			case 4:
				return fastUint64(s, &t.VolumeLimit64)
			case 5:
				return fastUint32(s, &t.EventLimit)
			case 6:
				return fastUint32(s, &t.MaxNumberOfccc)
			default:
				return fastTime(s, &t.TariffTimeChange)
			}
		})
		*ts = append(*ts, t)
		return ok
	})
}

var pduChargingNames = []string{"chargingId", "sMFchargingId", "homeProvidedChargingId", "sMFHomeProvidedChargingId",
	"userInformation", "userLocationinfo", "uetimeZone", "pduSessionInformation", "unitCountInactivityTimer"}

func fastPDUCharging(s *jsonscan.Scanner, p *PDUSessionChargingInformation) bool {
	return fastObject(s, pduChargingNames, func(i int) bool {
		switch i {
		case 0:
			return fastUint32(s, &p.ChargingID)
		case 1:
			return fastString(s, &p.SMFChargingID)
		case 2:
			return fastUint32(s, &p.HomeProvidedChargingID)
		case 3:
			return fastString(s, &p.SMFHomeProvidedChargingID)
		case 4:
			p.UserInformation = &UserInformation{}
			return fastObject(s, userNames, func(i int) bool {
				u := p.UserInformation
				switch i {
				case 0:
					return fastString(s, &u.ServedGPSI)
				case 1:
					return fastString(s, &u.ServedPEI)
				case 2:
					return fastBool(s, &u.UnauthenticatedFlag)
				default:
					return fastString(s, &u.RoamerInOut)
				}
			})
		case 5:
			return fastRaw(s, &p.UserLocationinfo)
		case 6:
			return fastString(s, &p.UETimeZone)
		case 7:
			p.PDUSessionInformation = &PDUSessionInformation{}
			return fastPDUSession(s, p.PDUSessionInformation)
		default:
			return fastInt64(s, &p.UnitCountInactivityTimer)
		}
	})
}

var userNames = []string{"servedGPSI", "servedPEI", "unauthenticatedFlag", "roamerInOut"}

var pduSessionNames = []string{"networkSlicingInfo", "pduSessionID", "pduType", "sscMode", "hPlmnId", "ratType",
	"dnnId", "chargingCharacteristics", "startTime", "stopTime", "sessionStopIndicator", "pduAddress",
	"authorizedSessionAMBR"}

func fastPDUSession(s *jsonscan.Scanner, p *PDUSessionInformation) bool {
	return fastObject(s, pduSessionNames, func(i int) bool {
		switch i {
		case 0:
			return fastRaw(s, &p.NetworkSlicingInfo)
		case 1:
			v, ok := fastUnsigned(s, math.MaxUint8)
			p.PDUSessionID = new(uint8(v))
			return ok
		case 2:
			return fastString(s, &p.PDUType)
		case 3:
			return fastString(s, &p.SSCMode)
		case 4:
			return fastRaw(s, &p.HPlmnID)
		case 5:
			return fastString(s, &p.RATType)
		case 6:
			return fastString(s, &p.DNNID)
		case 7:
			return fastString(s, &p.ChargingCharacterists)
		case 8:
			return fastTime(s, &p.StartTime)
		case 9:
			return fastTime(s, &p.StopTime)
		case 10:
			return fastBool(s, &p.SessionStopIndicator)
		case 11:
			return fastRaw(s, &p.PDUAddress)
		default:
			return fastRaw(s, &p.AuthorizedSessionAMBR)
		}
	})
}

// fastString reads a string encoding/json returns unchanged (no escapes,
// valid UTF-8).
func fastString(s *jsonscan.Scanner, dst *string) bool {
	b, ok := s.Str()
	*dst = string(b)
	return ok
}

func fastBool(s *jsonscan.Scanner, dst *bool) bool {
	switch s.Peek() {
	case 't':
		*dst = true
		return s.Literal("true")
	case 'f':
		*dst = false
		return s.Literal("false")
	}
	return false
}

// fastUnsigned reads digits alone (no sign, fraction or exponent) of a
// value at most max.
func fastUnsigned(s *jsonscan.Scanner, max uint64) (uint64, bool) {
	if c := s.Peek(); c < '0' || c > '9' {
		return 0, false
	}
	n, ok := s.Int64()
	return uint64(n), ok && n >= 0 && uint64(n) <= max
}

func fastUint32(s *jsonscan.Scanner, dst **uint32) bool {
	v, ok := fastUnsigned(s, math.MaxUint32)
	*dst = new(uint32(v))
	return ok
}

// fastUint64 reads a uint64 of at most math.MaxInt64 (a volume: larger
// ones take the slow path).
func fastUint64(s *jsonscan.Scanner, dst **uint64) bool {
	v, ok := fastUnsigned(s, math.MaxInt64)
	*dst = new(v)
	return ok
}

func fastInt64(s *jsonscan.Scanner, dst **int64) bool {
	v, ok := s.Int64()
	*dst = new(v)
	return ok
}

// fastTime reads a date-time as encoding/json does (time.Time's strict RFC
// 3339 parse of the string's bytes).
func fastTime(s *jsonscan.Scanner, dst **time.Time) bool {
	b, ok := s.ASCII()
	if !ok {
		return false
	}
	var t time.Time
	if t.UnmarshalText(b) != nil {
		return false
	}
	*dst = &t
	return true
}

// fastRaw keeps a value's bytes, as json.RawMessage does.
func fastRaw(s *jsonscan.Scanner, dst *json.RawMessage) bool {
	s.Peek()
	start := s.Pos
	if !s.Skip(1) {
		return false
	}
	*dst = append(json.RawMessage(nil), s.Data[start:s.Pos]...)
	return true
}
