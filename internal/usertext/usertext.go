// Package usertext is the one rule for text people write that DPCS stores
// and shows to others — names of families and members, data-request
// messages and answers, policy template names and descriptions: Unicode
// NFC, and nothing that does not show (doc/security.md, "Text people
// write").
//
// NFC gives one text one spelling, whatever the keyboard sent: "é" typed as
// e + U+0301 and Hangul typed as conjoining jamo are stored composed, so a
// search or a comparison finds them. Refused are the characters that do not
// show, or change how the text around them shows: controls (Cc: NUL, ESC,
// tab, carriage return; line feed only where the text may span lines),
// format characters (Cf: U+200B zero-width space, U+202E right-to-left
// override, U+FEFF, the tag characters), line and paragraph separators
// (U+2028, U+2029), private-use characters and the other default-ignorable
// code points (U+3164 and the other Hangul fillers, U+034F). The joiners
// U+200D and U+200C are kept where they change how visible characters
// join: inside an emoji sequence (👨‍👩‍👧), after a virama, and between
// letters of the Arabic script — the contexts RFC 5892 allows them in,
// approximated.
package usertext

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Form says whether a text may span lines.
type Form int

const (
	// Line is text of one line: a name.
	Line Form = iota
	// Lines is text that may hold line feeds (U+000A): a message.
	Lines
)

// ErrInvalidUTF8 is the error of text that is not UTF-8.
var ErrInvalidUTF8 = errors.New("must be UTF-8 text")

// Error names the first character Clean refuses. Its text is written for
// the person who sent the text (the API answers it).
type Error struct {
	// Rune is the refused character.
	Rune rune
	// At is its position in the normalised text, in characters from 1.
	At int
	// What says what kind of character it is, e.g. "a format character".
	What string
}

func (e *Error) Error() string {
	return fmt.Sprintf("must not contain control or invisible characters: U+%04X (%s) at character %d", e.Rune, e.What, e.At)
}

// Clean returns s in Unicode NFC, or an *Error naming the first character
// of it that is refused (or ErrInvalidUTF8). The empty text is clean.
func Clean(s string, f Form) (string, error) {
	if !utf8.ValidString(s) {
		return "", ErrInvalidUTF8
	}
	s = norm.NFC.String(s)
	rs := []rune(s)
	for i, r := range rs {
		if what := refused(rs, i, f); what != "" {
			return "", &Error{Rune: r, At: i + 1, What: what}
		}
	}
	return s, nil
}

const (
	zwnj = '\u200C'
	zwj  = '\u200D'
)

// refused says what kind of character rs[i] is when it is refused; "" when
// it is allowed.
func refused(rs []rune, i int, f Form) string {
	r := rs[i]
	switch {
	case r == '\n' && f == Lines:
		return ""
	case r == '\n':
		return "a line feed, in text of one line"
	case unicode.Is(unicode.Cc, r):
		return "a control character"
	case (r == zwj || r == zwnj) && joins(rs, i):
		return ""
	case unicode.Is(unicode.Cf, r):
		return "a format character"
	case r == '\u2028' || r == '\u2029':
		return "a line or paragraph separator"
	case unicode.Is(unicode.Co, r):
		return "a private-use character"
	case unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r):
		return "an invisible character"
	}
	return ""
}

// joins reports whether the joiner rs[i] stands where it changes how the
// characters around it show: U+200D between two emoji (after any emoji
// presentation selector or skin tone), either joiner after a virama or
// between two Arabic letters.
func joins(rs []rune, i int) bool {
	if i == 0 || i == len(rs)-1 {
		return false
	}
	prev, next := rs[i-1], rs[i+1]
	if virama(prev) || unicode.Is(unicode.Arabic, prev) && unicode.IsLetter(prev) && unicode.Is(unicode.Arabic, next) && unicode.IsLetter(next) {
		return true
	}
	if rs[i] != zwj {
		return false
	}
	for j := i - 1; j > 0 && (rs[j] == '\uFE0F' || rs[j] >= '\U0001F3FB' && rs[j] <= '\U0001F3FF'); j-- {
		prev = rs[j-1]
	}
	return unicode.Is(unicode.So, prev) && unicode.Is(unicode.So, next)
}

// virama reports whether r is a virama (canonical combining class 9).
func virama(r rune) bool {
	var b [utf8.UTFMax]byte
	n := utf8.EncodeRune(b[:], r)
	return norm.NFC.PropertiesString(string(b[:n])).CCC() == 9
}
