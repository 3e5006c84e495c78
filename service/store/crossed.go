package store

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/dabom/dpcs/envelope"
)

// maxCrossedLen is the width of usage_record.crossed (VARCHAR(255)).
const maxCrossedLen = 255

// FormatCrossed writes threshold crossings as the crossed column holds
// them: "percent:arm" pairs joined by commas in their order, such as
// "50:1,30:2"; "" when there are none.
func FormatCrossed(cs []envelope.Crossing) string {
	if len(cs) == 0 {
		return ""
	}
	b := make([]byte, 0, len(cs)*6)
	for i, c := range cs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(c.Percent), 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(c.Arm), 10)
	}
	return string(b)
}

// ParseCrossed reads the crossed column: the inverse of FormatCrossed for
// valid crossings (thresholds 1–100, arms ≥ 1); "" is nil. Anything else —
// signs, leading zeros, spaces, empty pairs — is a *FieldError of kind
// ErrInvalid (field "crossed"), so every accepted value is exactly what
// FormatCrossed writes.
func ParseCrossed(s string) ([]envelope.Crossing, error) {
	if s == "" {
		return nil, nil
	}
	var out []envelope.Crossing
	for pair := range strings.SplitSeq(s, ",") {
		p, a, ok := strings.Cut(pair, ":")
		pct, okP := parseCount(p)
		arm, okA := parseCount(a)
		if !ok || !okP || !okA || pct > 100 {
			return nil, invalid("crossed", "%q: %q is not percent:arm with percent 1..100 and arm ≥ 1", s, pair)
		}
		out = append(out, envelope.Crossing{Percent: pct, Arm: arm})
	}
	return out, nil
}

// parseCount reads a positive decimal int written without sign or leading
// zeros.
func parseCount(s string) (int, bool) {
	if s == "" || s[0] == '0' || len(s) > 18 {
		return 0, false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 0)
	return int(n), err == nil
}

// validCrossed reports crossings out of range, named as in the persist
// payload (payload.crossed[i].percent).
func validCrossed(cs []envelope.Crossing) error {
	var errs []error
	for i, c := range cs {
		if c.Percent < 1 || c.Percent > 100 {
			errs = append(errs, &envelope.FieldError{Field: fmt.Sprintf("payload.crossed[%d].percent", i), Msg: "must be between 1 and 100"})
		}
		if c.Arm < 1 {
			errs = append(errs, &envelope.FieldError{Field: fmt.Sprintf("payload.crossed[%d].arm", i), Msg: "must be ≥ 1"})
		}
	}
	return errors.Join(errs...)
}
