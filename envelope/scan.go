package envelope

import (
	"time"

	"github.com/dabom/dpcs/internal/jsonscan"
)

// scanner reads JSON in one pass for the fast path of Decode (see
// decodeFast): internal/jsonscan's Scanner (false means "not sure", never
// "invalid": the slow path decides) with the envelope's own readers.
type scanner struct {
	jsonscan.Scanner
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// time reads a timestamp string as parseTime does. The canonical form
// (2026-02-06T14:30:00Z, with up to nine fraction digits) is parsed here;
// anything else goes through parseTime itself.
func (s *scanner) time() (time.Time, bool) {
	b, ok := s.Str()
	if !ok {
		return time.Time{}, false
	}
	if t, ok := parseCanonicalTime(b); ok {
		return t, true
	}
	t, err := parseTime(string(b))
	return t, err == nil
}

// parseCanonicalTime parses YYYY-MM-DDTHH:MM:SS[.fffffffff]Z with every
// field in range, giving the same Time as time.Parse(time.RFC3339, s).UTC().
// Any other form is reported as not parsed, not as invalid.
func parseCanonicalTime(b []byte) (time.Time, bool) {
	const layout = "0000-00-00T00:00:00"
	if len(b) < len(layout)+1 || b[len(b)-1] != 'Z' {
		return time.Time{}, false
	}
	for i := range len(layout) {
		if layout[i] == '0' && !isDigit(b[i]) || layout[i] != '0' && b[i] != layout[i] {
			return time.Time{}, false
		}
	}
	num := func(i, n int) int {
		v := 0
		for _, c := range b[i : i+n] {
			v = v*10 + int(c-'0')
		}
		return v
	}
	year, month, day := num(0, 4), num(5, 2), num(8, 2)
	hour, minute, sec := num(11, 2), num(14, 2), num(17, 2)
	if month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	nsec := 0
	if frac := b[len(layout) : len(b)-1]; len(frac) > 0 {
		if len(frac) < 2 || len(frac) > 10 || frac[0] != '.' {
			return time.Time{}, false
		}
		for i := 1; i < 10; i++ {
			nsec *= 10
			if i < len(frac) {
				if !isDigit(frac[i]) {
					return time.Time{}, false
				}
				nsec += int(frac[i] - '0')
			}
		}
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), true
}

// daysIn returns the number of days of month in year (proleptic Gregorian).
func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
