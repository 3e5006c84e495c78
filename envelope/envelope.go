package envelope

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"time"
)

// EventType selects the payload of an envelope ("eventType" on the wire).
type EventType string

// The event types of DPCS.
const (
	TypeDataUsage     EventType = "DATA_USAGE"     // UsagePayload, topic usage-events
	TypePolicyUpdated EventType = "POLICY_UPDATED" // PolicyUpdatedPayload, topic policy-updated
	TypeUsagePersist  EventType = "USAGE_PERSIST"  // UsagePersistPayload, topic usage-persist
	TypeNotification  EventType = "NOTIFICATION"   // a Notification, topic notification-events
)

// SubType refines an event type ("subType" on the wire); only NOTIFICATION
// has subtypes. The empty SubType means none and is not written.
type SubType string

// The NOTIFICATION subtypes.
const (
	SubQuotaUpdated    SubType = "QUOTA_UPDATED"    // QuotaUpdated
	SubCustomerBlocked SubType = "CUSTOMER_BLOCKED" // CustomerBlocked
	SubThresholdAlert  SubType = "THRESHOLD_ALERT"  // ThresholdAlert
	// SubDataRequested and SubDataRequestAnswered are "ask for more": a member
	// asked its family's owners for extra data, and an owner answered.
	SubDataRequested       SubType = "DATA_REQUESTED"        // DataRequested
	SubDataRequestAnswered SubType = "DATA_REQUEST_ANSWERED" // DataRequestAnswered
	// SubDataGifted is a gift of data between two members ("선물하기"), told
	// to each of them.
	SubDataGifted SubType = "DATA_GIFTED" // DataGifted
)

// Payload is implemented by every payload type. The built-in payloads have
// value receivers; a type registered with Registry.Register should too (see
// there).
type Payload interface {
	// EventType and SubType are the constants the payload is sent under
	// (SubType "" when none); New copies them into the envelope.
	EventType() EventType
	SubType() SubType
	// FamilyKey is the familyId, the Kafka record key of every topic: the
	// events of one family stay in one partition, in order.
	FamilyKey() int64
	// Validate reports every invalid field as a *FieldError whose path is
	// relative to the payload ("bytesUsed"), joined with errors.Join.
	Validate() error
}

// Envelope is the one wire format of every topic:
//
//	{"eventId":"evt_…","eventType":"DATA_USAGE","timestamp":"2026-02-06T14:30:00Z","payload":{…}}
//
// T is a concrete payload type (Envelope[UsagePayload]) when the type is
// known at compile time, or the Payload interface (Event) when it is not.
type Envelope[T Payload] struct {
	EventID   string    // "eventId": non-empty, e.g. NewID(PrefixEvent)
	EventType EventType // "eventType": the payload's EventType()
	SubType   SubType   // "subType": the payload's SubType(); written only when non-empty
	Timestamp time.Time // "timestamp": when the event happened; written in UTC
	Payload   T         // "payload"
}

// Event is an envelope whose payload type is known only at run time, as
// returned by Decode: switch on Payload's dynamic type (UsagePayload,
// QuotaUpdated, …).
type Event = Envelope[Payload]

// New returns an envelope for p with its EventType and SubType filled in from
// p. id is usually NewID(prefix) for a new event, or DerivedID(…) for one
// derived from another event; at is when the event happened.
func New[T Payload](id string, at time.Time, p T) Envelope[T] {
	e := Envelope[T]{EventID: id, Timestamp: at, Payload: p}
	if !isNil(p) {
		e.EventType, e.SubType = p.EventType(), p.SubType()
	}
	return e
}

// Validate reports every problem as a *FieldError, joined: eventId
// non-empty, eventType and subType those of the payload, timestamp set and
// within years 0000–9999, payload present and valid (its errors prefixed
// "payload.").
func (e Envelope[T]) Validate() error {
	errs := make([]error, 0, 5) // one per member at most; no allocation when valid
	if e.EventID == "" {
		errs = append(errs, required("eventId"))
	}
	p := Payload(e.Payload)
	nilPayload := isNil(p)
	switch {
	case e.EventType == "":
		errs = append(errs, required("eventType"))
	case !nilPayload && e.EventType != p.EventType():
		errs = append(errs, invalid("eventType", "%q does not match the payload (%s)", e.EventType, p.EventType()))
	}
	if !nilPayload && e.SubType != p.SubType() {
		switch {
		case p.SubType() == "":
			errs = append(errs, invalid("subType", "must be empty for %s", p.EventType()))
		case e.SubType == "":
			errs = append(errs, invalid("subType", "required for %s (%s)", p.EventType(), p.SubType()))
		default:
			errs = append(errs, invalid("subType", "%q does not match the payload (%s)", e.SubType, p.SubType()))
		}
	}
	errs = append(errs, validTime("timestamp", e.Timestamp))
	if nilPayload {
		errs = append(errs, required("payload"))
	} else {
		errs = append(errs, prefixed("payload", p.Validate()))
	}
	return errors.Join(errs...)
}

// wireEnvelope is the JSON layout; field order is the seed's.
type wireEnvelope struct {
	EventID   string    `json:"eventId"`
	EventType EventType `json:"eventType"`
	SubType   SubType   `json:"subType,omitempty"`
	Timestamp string    `json:"timestamp"`
	Payload   Payload   `json:"payload"`
}

// MarshalJSON validates e and writes its canonical encoding: members in the
// order eventId, eventType, subType (only when set), timestamp (UTC, "Z",
// fraction only when non-zero), payload; no HTML escaping. It is Encode, so
// json.Marshal of an envelope never produces something Decode rejects.
func (e Envelope[T]) MarshalJSON() ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	// Encoded on the stack and copied out: one allocation of the exact size.
	var buf [512]byte
	if b, ok := appendEnvelope(buf[:0], e.EventID, e.EventType, e.SubType, e.Timestamp, e.Payload); ok {
		return bytes.Clone(b), nil
	}
	return e.marshalSlow()
}

// marshalSlow is MarshalJSON through encoding/json, for the payloads
// appendEnvelope does not know and for every encoding error.
func (e Envelope[T]) marshalSlow() ([]byte, error) {
	b, err := marshal(wireEnvelope{
		EventID:   e.EventID,
		EventType: e.EventType,
		SubType:   e.SubType,
		Timestamp: formatTime(e.Timestamp),
		Payload:   e.Payload,
	})
	if err != nil { // a payload (its metadata, say) that JSON cannot represent
		return nil, &FieldError{Field: "payload", Msg: err.Error(), Err: err}
	}
	return b, nil
}

// UnmarshalJSON is DecodeAs[T] (built-in payloads only), so an envelope can
// be a member of a larger JSON document.
func (e *Envelope[T]) UnmarshalJSON(data []byte) error {
	if e == nil {
		return errors.New("envelope: UnmarshalJSON on nil pointer")
	}
	v, err := DecodeAs[T](data)
	if err != nil {
		return err
	}
	*e = v
	return nil
}

// Encode validates e and returns its canonical JSON (see MarshalJSON).
func Encode[T Payload](e Envelope[T]) ([]byte, error) { return e.MarshalJSON() }

// Decode decodes and validates an envelope of any built-in type. Errors name
// the field (*FieldError) and wrap ErrMalformed for bytes that are not the
// expected JSON and ErrUnknownType for an eventType/subType without a
// payload. On error the Event is the zero value.
func Decode(data []byte) (Event, error) { return builtins.Decode(data) }

// DecodeAs is Decode for callers that expect one payload type T: a concrete
// payload (UsagePayload), a pointer to one (*UsagePayload), or an interface
// (Notification). An event of another type is an error wrapping
// ErrUnknownType.
func DecodeAs[T Payload](data []byte) (Envelope[T], error) {
	ev, err := Decode(data)
	if err != nil {
		return Envelope[T]{}, err
	}
	p, ok := as[T](ev.Payload)
	if !ok {
		return Envelope[T]{}, &FieldError{
			Field: "eventType",
			Msg:   fmt.Sprintf("%s cannot be decoded as %s", typeName(ev.EventType, ev.SubType), reflect.TypeFor[T]()),
			Err:   ErrUnknownType,
		}
	}
	return Envelope[T]{EventID: ev.EventID, EventType: ev.EventType, SubType: ev.SubType, Timestamp: ev.Timestamp, Payload: p}, nil
}

// as converts a decoded payload (a value) to T, taking its address when T is
// the pointer type.
func as[T Payload](p Payload) (T, bool) {
	if t, ok := p.(T); ok || p == nil {
		return t, ok
	}
	v := reflect.ValueOf(p)
	ptr := reflect.New(v.Type())
	ptr.Elem().Set(v)
	t, ok := ptr.Interface().(T)
	return t, ok
}

func typeName(t EventType, s SubType) string {
	if s == "" {
		return string(t)
	}
	return string(t) + "/" + string(s)
}

// isNil reports whether p is nil or a nil pointer, on which calling a method
// with a value receiver would panic.
func isNil(p Payload) bool {
	if p == nil {
		return true
	}
	v := reflect.ValueOf(p)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
