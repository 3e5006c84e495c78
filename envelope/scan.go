package envelope

import (
	"math"
	"time"
	"unicode/utf8"
)

// scanner reads JSON in one pass for the fast path of Decode (see
// decodeFast). It accepts only input whose meaning is unambiguous and that
// encoding/json would read byte for byte the same way: every method reports
// false for anything else (invalid JSON, escapes in strings it returns,
// invalid UTF-8, numbers that do not fit, nesting deeper than maxScanDepth),
// and the caller then gives the input to the slow path, which produces the
// error or the value exactly as before. So false means "not sure", never
// "invalid".
type scanner struct {
	data []byte
	pos  int
}

// maxScanDepth bounds the nesting of skipped and free-form values. Deeper
// input goes to the slow path (encoding/json allows 10000 levels).
const maxScanDepth = 64

// peek skips JSON white space and returns the next byte, or 0 at the end.
func (s *scanner) peek() byte {
	if s.pos < len(s.data) && s.data[s.pos] > ' ' { // no white space: the common case, inlined
		return s.data[s.pos]
	}
	return s.skipSpace()
}

func (s *scanner) skipSpace() byte {
	for s.pos < len(s.data) {
		switch c := s.data[s.pos]; c {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return c
		}
	}
	return 0
}

// consume reads the byte c (never 0) after optional white space.
func (s *scanner) consume(c byte) bool {
	if s.peek() != c {
		return false
	}
	s.pos++
	return true
}

// end reports whether only white space is left.
func (s *scanner) end() bool { return s.peek() == 0 && s.pos == len(s.data) }

// literal reads the keyword lit ("null", "true", "false").
func (s *scanner) literal(lit string) bool {
	if s.peek() != lit[0] || len(s.data)-s.pos < len(lit) || string(s.data[s.pos:s.pos+len(lit)]) != lit {
		return false
	}
	s.pos += len(lit)
	return true
}

// null reads a null if one is next; on this wire format null means absent.
func (s *scanner) null() bool { return s.peek() == 'n' && s.literal("null") }

// object reads an object, calling member with each key positioned before
// its value, which member must read. Keys must be plain strings (see str).
func (s *scanner) object(member func(key []byte) bool) bool {
	if !s.consume('{') {
		return false
	}
	if s.consume('}') {
		return true
	}
	for {
		key, ok := s.str()
		if !ok || !s.consume(':') || !member(key) {
			return false
		}
		if !s.consume(',') {
			return s.consume('}')
		}
	}
}

// array reads an array, calling elem positioned before each element, which
// elem must read.
func (s *scanner) array(elem func() bool) bool {
	if !s.consume('[') {
		return false
	}
	if s.consume(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if !s.consume(',') {
			return s.consume(']')
		}
	}
}

// str reads a string and returns its contents, for strings encoding/json
// would return unchanged: no escapes, valid UTF-8.
func (s *scanner) str() ([]byte, bool) {
	if !s.consume('"') {
		return nil, false
	}
	d, start := s.data, s.pos
	i := start
	for i < len(d) && plainASCII[d[i]] {
		i++
	}
	if i < len(d) && d[i] >= utf8.RuneSelf { // rare: the rest, with UTF-8 checks
		for i < len(d) && d[i] != '"' && d[i] != '\\' && d[i] >= 0x20 {
			i++
		}
		if i < len(d) && !utf8.Valid(d[start:i]) {
			return nil, false
		}
	}
	if i >= len(d) || d[i] != '"' {
		return nil, false
	}
	s.pos = i + 1
	return d[start:i], true
}

// plainASCII holds the bytes a string can contain as themselves, without
// escaping or UTF-8 decoding: ASCII but control characters, '"' and '\\'.
var plainASCII = [256]bool{
	0x20: true, 0x21: true, 0x23: true, 0x24: true, 0x25: true, 0x26: true, 0x27: true, 0x28: true,
	0x29: true, 0x2a: true, 0x2b: true, 0x2c: true, 0x2d: true, 0x2e: true, 0x2f: true, 0x30: true,
	0x31: true, 0x32: true, 0x33: true, 0x34: true, 0x35: true, 0x36: true, 0x37: true, 0x38: true,
	0x39: true, 0x3a: true, 0x3b: true, 0x3c: true, 0x3d: true, 0x3e: true, 0x3f: true, 0x40: true,
	0x41: true, 0x42: true, 0x43: true, 0x44: true, 0x45: true, 0x46: true, 0x47: true, 0x48: true,
	0x49: true, 0x4a: true, 0x4b: true, 0x4c: true, 0x4d: true, 0x4e: true, 0x4f: true, 0x50: true,
	0x51: true, 0x52: true, 0x53: true, 0x54: true, 0x55: true, 0x56: true, 0x57: true, 0x58: true,
	0x59: true, 0x5a: true, 0x5b: true, 0x5d: true, 0x5e: true, 0x5f: true, 0x60: true, 0x61: true,
	0x62: true, 0x63: true, 0x64: true, 0x65: true, 0x66: true, 0x67: true, 0x68: true, 0x69: true,
	0x6a: true, 0x6b: true, 0x6c: true, 0x6d: true, 0x6e: true, 0x6f: true, 0x70: true, 0x71: true,
	0x72: true, 0x73: true, 0x74: true, 0x75: true, 0x76: true, 0x77: true, 0x78: true, 0x79: true,
	0x7a: true, 0x7b: true, 0x7c: true, 0x7d: true, 0x7e: true, 0x7f: true,
}

// skipString reads any valid JSON string, escapes included, without
// decoding it.
func (s *scanner) skipString() bool {
	if !s.consume('"') {
		return false
	}
	d := s.data
	for i := s.pos; i < len(d); i++ {
		switch c := d[i]; {
		case c == '"':
			s.pos = i + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			i++
			if i >= len(d) {
				return false
			}
			switch d[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(d)-i <= 4 || !isHex(d[i+1]) || !isHex(d[i+2]) || !isHex(d[i+3]) || !isHex(d[i+4]) {
					return false
				}
				i += 4
			default:
				return false
			}
		}
	}
	return false
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// number reads a JSON number and returns its text.
func (s *scanner) number() ([]byte, bool) {
	s.peek()
	d, start, i := s.data, s.pos, s.pos
	digits := func() bool {
		n := i
		for i < len(d) && isDigit(d[i]) {
			i++
		}
		return i > n
	}
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case !digits():
		return nil, false
	}
	if i < len(d) && d[i] == '.' {
		i++
		if !digits() {
			return nil, false
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if !digits() {
			return nil, false
		}
	}
	s.pos = i
	return d[start:i], true
}

// skip reads any JSON value without decoding it; depth is its nesting level.
func (s *scanner) skip(depth int) bool {
	switch s.peek() {
	case '{':
		return depth < maxScanDepth && s.object(func([]byte) bool { return s.skip(depth + 1) })
	case '[':
		return depth < maxScanDepth && s.array(func() bool { return s.skip(depth + 1) })
	case '"':
		return s.skipString()
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	}
	_, ok := s.number()
	return ok
}

// int64 reads an integer (no fraction, no exponent) that fits in an int64,
// as strconv.ParseInt would.
func (s *scanner) int64() (int64, bool) {
	tok, ok := s.number()
	if !ok {
		return 0, false
	}
	neg := tok[0] == '-'
	if neg {
		tok = tok[1:]
	}
	if len(tok) > 19 { // more than int64 holds; 19 digits fit in a uint64
		return 0, false
	}
	var n uint64
	for _, c := range tok {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	switch {
	case !neg && n <= math.MaxInt64:
		return int64(n), true
	case neg && n <= math.MaxInt64:
		return -int64(n), true
	case neg && n == 1<<63:
		return math.MinInt64, true
	}
	return 0, false
}

// time reads a timestamp string as parseTime does. The canonical form
// (2026-02-06T14:30:00Z, with up to nine fraction digits) is parsed here;
// anything else goes through parseTime itself.
func (s *scanner) time() (time.Time, bool) {
	b, ok := s.str()
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
