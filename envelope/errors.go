package envelope

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrMalformed is wrapped by every error about bytes that are not the
	// expected JSON: invalid JSON, a document that is not an object, or a
	// member of the wrong JSON type ("bytesUsed": "5").
	ErrMalformed = errors.New("malformed event")

	// ErrUnknownType is wrapped when eventType/subType name no registered
	// payload, or (DecodeAs, kafkarecord.Decode callers) name a different payload
	// than the one asked for. A consumer that wants to skip events it does
	// not understand, rather than dead-letter them, tests for this.
	ErrUnknownType = errors.New("unknown event type")
)

// FieldError names the JSON member a problem was found in. Field is the
// dotted path from the envelope root ("payload.bytesUsed"); payload Validate
// methods return paths relative to the payload ("bytesUsed") and the envelope
// adds the "payload." prefix.
//
// Decode and Validate report every problem they find, joined with
// errors.Join; errors.As finds the first one.
type FieldError struct {
	Field string // JSON path, e.g. "payload.bytesUsed"
	Msg   string // what is wrong, e.g. "must be ≥ 0"
	Err   error  // optional cause: ErrMalformed, ErrUnknownType or a payload's own error
}

// Error returns "field: msg".
func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Unwrap returns the cause, so errors.Is(err, ErrMalformed) works through a
// FieldError.
func (e *FieldError) Unwrap() error { return e.Err }

func required(field string) error { return &FieldError{Field: field, Msg: "required"} }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

func malformed(field, msg string) error {
	return &FieldError{Field: field, Msg: msg, Err: ErrMalformed}
}

// joinPath joins a JSON path prefix and a member path.
func joinPath(prefix, field string) string {
	if field == "" {
		return prefix
	}
	return prefix + "." + field
}

// prefixed rewrites the paths of the FieldErrors in err (which may be a
// joined error) to be below prefix, and turns any other error into a
// FieldError naming prefix, so that every problem names a field.
// FieldErrors are copied, never modified in place.
func prefixed(prefix string, err error) error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			if e = prefixed(prefix, e); e != nil {
				out = append(out, e)
			}
		}
		return errors.Join(out...)
	}
	if fe, ok := err.(*FieldError); ok {
		c := *fe
		c.Field = joinPath(prefix, fe.Field)
		return &c
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return &FieldError{
			Field: joinPath(prefix, te.Field),
			Msg:   fmt.Sprintf("cannot decode JSON %s into %s", te.Value, te.Type),
			Err:   ErrMalformed,
		}
	}
	return &FieldError{Field: prefix, Msg: err.Error(), Err: err}
}
