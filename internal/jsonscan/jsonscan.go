// Package jsonscan reads JSON in one pass for the module's fast decoders:
// the envelope's (envelope.Decode's fast path) and the synchronous
// decisions' request body (service/api's POST /decisions). Each decoder
// reads only what it understands completely with a Scanner and hands
// anything else to its slow path (encoding/json, huma), which answers
// exactly as before; the decoders' differential fuzzers hold the two paths
// equal.
package jsonscan

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// Scanner reads JSON in one pass. It accepts only input whose meaning is
// unambiguous and that encoding/json would read byte for byte the same way:
// every method reports false for anything else (invalid JSON, escapes in
// strings it returns, invalid UTF-8, numbers that do not fit, nesting deeper
// than MaxDepth), and the caller then gives the input to its slow path,
// which produces the error or the value exactly as before. So false means
// "not sure", never "invalid".
type Scanner struct {
	// Data is the input; Pos the offset of the next byte to read (a caller
	// may save it and return to it).
	Data []byte
	Pos  int
}

// MaxDepth bounds the nesting of skipped and free-form values. Deeper
// input goes to the slow path (encoding/json allows 10000 levels).
const MaxDepth = 64

// Peek skips JSON white space and returns the next byte, or 0 at the end.
func (s *Scanner) Peek() byte {
	if s.Pos < len(s.Data) && s.Data[s.Pos] > ' ' { // no white space: the common case, inlined
		return s.Data[s.Pos]
	}
	return s.skipSpace()
}

func (s *Scanner) skipSpace() byte {
	for s.Pos < len(s.Data) {
		switch c := s.Data[s.Pos]; c {
		case ' ', '\t', '\n', '\r':
			s.Pos++
		default:
			return c
		}
	}
	return 0
}

// Consume reads the byte c (never 0) after optional white space.
func (s *Scanner) Consume(c byte) bool {
	if s.Peek() != c {
		return false
	}
	s.Pos++
	return true
}

// End reports whether only white space is left.
func (s *Scanner) End() bool { return s.Peek() == 0 && s.Pos == len(s.Data) }

// Literal reads the keyword lit ("null", "true", "false").
func (s *Scanner) Literal(lit string) bool {
	if s.Peek() != lit[0] || len(s.Data)-s.Pos < len(lit) || string(s.Data[s.Pos:s.Pos+len(lit)]) != lit {
		return false
	}
	s.Pos += len(lit)
	return true
}

// Null reads a null if one is next.
func (s *Scanner) Null() bool { return s.Peek() == 'n' && s.Literal("null") }

// Object reads an object, calling member with each key positioned before
// its value, which member must read. Keys must be plain strings (see str).
func (s *Scanner) Object(member func(key []byte) bool) bool {
	if !s.Consume('{') {
		return false
	}
	if s.Consume('}') {
		return true
	}
	for {
		key, ok := s.Str()
		if !ok || !s.Consume(':') || !member(key) {
			return false
		}
		if !s.Consume(',') {
			return s.Consume('}')
		}
	}
}

// Array reads an array, calling elem positioned before each element, which
// elem must read.
func (s *Scanner) Array(elem func() bool) bool {
	if !s.Consume('[') {
		return false
	}
	if s.Consume(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if !s.Consume(',') {
			return s.Consume(']')
		}
	}
}

// Str reads a string and returns its contents, for strings encoding/json
// would return unchanged: no escapes, valid UTF-8.
func (s *Scanner) Str() ([]byte, bool) {
	if !s.Consume('"') {
		return nil, false
	}
	d, start := s.Data, s.Pos
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
	s.Pos = i + 1
	return d[start:i], true
}

// ASCII reads a string of printable ASCII (0x20 to 0x7e) without escapes
// and returns its contents: a string whose length in bytes is its length in
// characters.
func (s *Scanner) ASCII() ([]byte, bool) {
	if !s.Consume('"') {
		return nil, false
	}
	d, start := s.Data, s.Pos
	i := start
	for i < len(d) && plainASCII[d[i]] && d[i] != 0x7f {
		i++
	}
	if i >= len(d) || d[i] != '"' {
		return nil, false
	}
	s.Pos = i + 1
	return d[start:i], true
}

// IsPlain reports whether a string can hold c as itself, without escaping
// or UTF-8 decoding: ASCII but control characters, '"' and '\\'.
func IsPlain(c byte) bool { return plainASCII[c] }

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

// SkipString reads any valid JSON string, escapes included, without
// decoding it.
func (s *Scanner) SkipString() bool {
	if !s.Consume('"') {
		return false
	}
	d := s.Data
	for i := s.Pos; i < len(d); i++ {
		switch c := d[i]; {
		case c == '"':
			s.Pos = i + 1
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

// Number reads a JSON number and returns its text.
func (s *Scanner) Number() ([]byte, bool) {
	s.Peek()
	d, start, i := s.Data, s.Pos, s.Pos
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
	s.Pos = i
	return d[start:i], true
}

// Skip reads any JSON value without decoding it; depth is its nesting level.
func (s *Scanner) Skip(depth int) bool {
	switch s.Peek() {
	case '{':
		return depth < MaxDepth && s.Object(func([]byte) bool { return s.Skip(depth + 1) })
	case '[':
		return depth < MaxDepth && s.Array(func() bool { return s.Skip(depth + 1) })
	case '"':
		return s.SkipString()
	case 't':
		return s.Literal("true")
	case 'f':
		return s.Literal("false")
	case 'n':
		return s.Literal("null")
	}
	_, ok := s.Number()
	return ok
}

// Int64 reads an integer (no fraction, no exponent) that fits in an int64,
// as strconv.ParseInt would.
func (s *Scanner) Int64() (int64, bool) {
	tok, ok := s.Number()
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

// AnyObject reads an object into encoding/json's generic types, as
// json.Unmarshal into a map[string]any does ({} is an empty map; the last
// of duplicate keys wins); depth is its nesting level.
func (s *Scanner) AnyObject(depth int) (map[string]any, bool) {
	if depth >= MaxDepth || s.Peek() != '{' {
		return nil, false
	}
	m := make(map[string]any)
	ok := s.Object(func(key []byte) bool {
		v, ok := s.AnyValue(depth + 1)
		m[string(key)] = v // the last of duplicate keys wins, as in encoding/json
		return ok
	})
	return m, ok
}

// AnyValue reads a value into encoding/json's generic types: float64, string,
// bool, nil, []any (non-nil, even when empty) and map[string]any.
func (s *Scanner) AnyValue(depth int) (any, bool) {
	switch s.Peek() {
	case '{':
		return s.AnyObject(depth)
	case '[':
		if depth >= MaxDepth {
			return nil, false
		}
		a := make([]any, 0)
		ok := s.Array(func() bool {
			v, ok := s.AnyValue(depth + 1)
			a = append(a, v)
			return ok
		})
		return a, ok
	case '"':
		b, ok := s.Str()
		return string(b), ok
	case 't':
		return true, s.Literal("true")
	case 'f':
		return false, s.Literal("false")
	case 'n':
		return nil, s.Literal("null")
	}
	tok, ok := s.Number()
	if !ok {
		return nil, false
	}
	f, err := strconv.ParseFloat(string(tok), 64)
	return f, err == nil
}
