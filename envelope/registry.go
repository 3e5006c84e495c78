package envelope

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
)

// Registry maps eventType/subType to payload types for decoding. The zero
// Registry is empty and ready to use; NewRegistry returns one holding the
// built-in types, to which a team can add its own. A Registry is safe for
// concurrent use.
type Registry struct {
	mu    sync.RWMutex
	types map[EventType]map[SubType]func() Payload
	// builtin is set by NewRegistry: the registry holds the built-in pairs,
	// which Register cannot replace, so Decode may read them with
	// decodeFast.
	builtin bool
}

// builtins is the registry of the package-level Decode: built once, never
// registered into.
var builtins = NewRegistry()

// NewRegistry returns a registry holding the built-in payload types.
func NewRegistry() *Registry {
	return &Registry{builtin: true, types: map[EventType]map[SubType]func() Payload{
		TypeDataUsage:     {"": func() Payload { return new(UsagePayload) }},
		TypePolicyUpdated: {"": func() Payload { return new(PolicyUpdatedPayload) }},
		TypeUsagePersist:  {"": func() Payload { return new(UsagePersistPayload) }},
		TypeNotification: {
			SubQuotaUpdated:        func() Payload { return new(QuotaUpdated) },
			SubCustomerBlocked:     func() Payload { return new(CustomerBlocked) },
			SubThresholdAlert:      func() Payload { return new(ThresholdAlert) },
			SubDataRequested:       func() Payload { return new(DataRequested) },
			SubDataRequestAnswered: func() Payload { return new(DataRequestAnswered) },
			SubDataGifted:          func() Payload { return new(DataGifted) },
		},
	}}
}

// Register adds a payload type under t and s (s "" for a type without
// subtypes). newPayload must return a new non-nil pointer to a zero payload,
// which Decode fills with json.Unmarshal and checks with Validate; when the
// pointed-to type is itself a Payload (value receivers, like the built-ins)
// the decoded Event carries the value, otherwise the pointer. The payload's
// EventType and SubType must be t and s. A pair can be registered once;
// built-in pairs cannot be replaced.
func (r *Registry) Register(t EventType, s SubType, newPayload func() Payload) error {
	if t == "" {
		return errors.New("envelope: Register: empty event type")
	}
	if newPayload == nil {
		return fmt.Errorf("envelope: Register %s: nil constructor", typeName(t, s))
	}
	p := newPayload()
	if p == nil || reflect.ValueOf(p).Kind() != reflect.Pointer || reflect.ValueOf(p).IsNil() {
		return fmt.Errorf("envelope: Register %s: constructor must return a non-nil pointer, got %T", typeName(t, s), p)
	}
	if p.EventType() != t || p.SubType() != s {
		return fmt.Errorf("envelope: Register %s: %T reports %s", typeName(t, s), p, typeName(p.EventType(), p.SubType()))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.types[t][s]; dup {
		return fmt.Errorf("envelope: Register %s: already registered", typeName(t, s))
	}
	if r.types == nil {
		r.types = make(map[EventType]map[SubType]func() Payload)
	}
	if r.types[t] == nil {
		r.types[t] = make(map[SubType]func() Payload)
	}
	r.types[t][s] = newPayload
	return nil
}

// lookup returns the constructor for t/s, or a FieldError wrapping
// ErrUnknownType naming eventType or subType.
func (r *Registry) lookup(t EventType, s SubType) (func() Payload, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	subs, ok := r.types[t]
	if !ok {
		return nil, &FieldError{Field: "eventType", Msg: fmt.Sprintf("unknown event type %q", t), Err: ErrUnknownType}
	}
	if f, ok := subs[s]; ok {
		return f, nil
	}
	if s == "" {
		return nil, &FieldError{Field: "subType", Msg: fmt.Sprintf("required for %s", t)}
	}
	return nil, &FieldError{Field: "subType", Msg: fmt.Sprintf("unknown subType %q for %s", s, t), Err: ErrUnknownType}
}

// Decode decodes and validates an envelope whose payload type is registered
// in r; see the package-level Decode for the errors.
func (r *Registry) Decode(data []byte) (Event, error) {
	if r.builtin {
		if ev, ok := decodeFast(data); ok {
			// decodeFast read what decodeSlow would have, without error, so
			// what is left is decodeSlow's validation.
			if err := ev.Validate(); err != nil {
				return Event{}, err
			}
			return ev, nil
		}
	}
	return r.decodeSlow(data)
}

// decodeSlow is Decode through encoding/json: it decodes anything a
// registered payload's UnmarshalJSON accepts and is the one place that words
// decoding errors.
func (r *Registry) decodeSlow(data []byte) (Event, error) {
	o, err := parseObject(data)
	if err != nil {
		if errors.Is(err, errNotObject) {
			return Event{}, fmt.Errorf("%w: the envelope must be a JSON object", ErrMalformed)
		}
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	ev := Event{
		EventID:   o.str("eventId", true),
		EventType: EventType(o.str("eventType", true)),
		SubType:   SubType(o.str("subType", false)),
		Timestamp: o.time("timestamp", true),
	}
	errs := o.errs
	var newPayload func() Payload
	if ev.EventType != "" {
		newPayload, err = r.lookup(ev.EventType, ev.SubType)
		errs = append(errs, err)
	}
	switch raw, present := o.present("payload", false); {
	case !present:
		errs = append(errs, required("payload"))
	case raw[0] != '{':
		errs = append(errs, malformed("payload", errNotObject.Error()))
	case newPayload != nil:
		ev.Payload, err = decodePayload(newPayload, raw)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return Event{}, err
	}
	if err := ev.Validate(); err != nil {
		return Event{}, err
	}
	return ev, nil
}

// decodePayload unmarshals raw into a new payload and returns the payload
// value when it is a Payload itself (see Register).
func decodePayload(newPayload func() Payload, raw []byte) (Payload, error) {
	p := newPayload()
	v := reflect.ValueOf(p)
	if p == nil || v.Kind() != reflect.Pointer || v.IsNil() {
		return nil, &FieldError{Field: "payload", Msg: fmt.Sprintf("registered constructor returned %T, not a non-nil pointer", p)}
	}
	if err := json.Unmarshal(raw, p); err != nil {
		return nil, prefixed("payload", err)
	}
	if v, ok := v.Elem().Interface().(Payload); ok {
		return v, nil
	}
	return p, nil
}
