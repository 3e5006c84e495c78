package usertext_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/internal/usertext"
)

func TestClean(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		form usertext.Form
		want string
	}{
		{"empty", "", usertext.Line, ""},
		{"Korean", "김씨 가족", usertext.Line, "김씨 가족"},
		{"decomposed accent", "Jose\u0301", usertext.Line, "Jos\u00e9"},
		{"conjoining jamo", "\u1100\u1161\u11A8", usertext.Line, "\uac01"},
		{"spaces", "a\u00A0b\u3000c", usertext.Line, "a\u00A0b\u3000c"},
		{"family emoji", "\U0001F468\u200D\U0001F469\u200D\U0001F467", usertext.Line, "\U0001F468\u200D\U0001F469\u200D\U0001F467"},
		{"emoji with skin tone and presentation", "\U0001F469\U0001F3FD\u200D\U0001F4BB \u2764\uFE0F\u200D\U0001F525", usertext.Line,
			"\U0001F469\U0001F3FD\u200D\U0001F4BB \u2764\uFE0F\u200D\U0001F525"},
		{"Persian zero-width non-joiner", "\u0645\u06CC\u200C\u062E\u0648\u0627\u0647\u0645", usertext.Line, "\u0645\u06CC\u200C\u062E\u0648\u0627\u0647\u0645"},
		{"joiner after a virama", "\u0915\u094D\u200D\u0937", usertext.Line, "\u0915\u094D\u200D\u0937"},
		{"line feeds in a message", "one\ntwo", usertext.Lines, "one\ntwo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := usertext.Clean(tc.in, tc.form)
			if err != nil || got != tc.want {
				t.Errorf("Clean(%+q) = %+q, %v; want %+q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestCleanRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		form usertext.Form
		want usertext.Error
	}{
		{"NUL", "a\x00", usertext.Lines, usertext.Error{Rune: 0, At: 2, What: "a control character"}},
		{"escape", "\x1b[31m", usertext.Line, usertext.Error{Rune: 0x1b, At: 1, What: "a control character"}},
		{"tab", "a\tb", usertext.Lines, usertext.Error{Rune: '\t', At: 2, What: "a control character"}},
		{"carriage return", "a\r\nb", usertext.Lines, usertext.Error{Rune: '\r', At: 2, What: "a control character"}},
		{"line feed in a name", "a\nb", usertext.Line, usertext.Error{Rune: '\n', At: 2, What: "a line feed, in text of one line"}},
		{"right-to-left override", "gpj.\u202Eexe", usertext.Line, usertext.Error{Rune: 0x202E, At: 5, What: "a format character"}},
		{"zero-width space", "a\u200Bb", usertext.Line, usertext.Error{Rune: 0x200B, At: 2, What: "a format character"}},
		{"byte order mark", "\uFEFFa", usertext.Line, usertext.Error{Rune: 0xFEFF, At: 1, What: "a format character"}},
		{"joiner between letters", "a\u200Db", usertext.Line, usertext.Error{Rune: 0x200D, At: 2, What: "a format character"}},
		{"joiner at the end", "\U0001F468\u200D", usertext.Line, usertext.Error{Rune: 0x200D, At: 2, What: "a format character"}},
		{"non-joiner between Latin letters", "a\u200Cb", usertext.Line, usertext.Error{Rune: 0x200C, At: 2, What: "a format character"}},
		{"tag character", "\U0001F3F4\U000E0067", usertext.Line, usertext.Error{Rune: 0xE0067, At: 2, What: "a format character"}},
		{"line separator", "a\u2028b", usertext.Lines, usertext.Error{Rune: 0x2028, At: 2, What: "a line or paragraph separator"}},
		{"private use", "\uE000", usertext.Line, usertext.Error{Rune: 0xE000, At: 1, What: "a private-use character"}},
		{"Hangul filler", "\u3164", usertext.Line, usertext.Error{Rune: 0x3164, At: 1, What: "an invisible character"}},
		{"halfwidth Hangul filler", "a\uFFA0", usertext.Line, usertext.Error{Rune: 0xFFA0, At: 2, What: "an invisible character"}},
		{"combining grapheme joiner", "a\u034Fb", usertext.Line, usertext.Error{Rune: 0x34F, At: 2, What: "an invisible character"}},
		{"position after normalisation", "e\u0301\u200B", usertext.Line, usertext.Error{Rune: 0x200B, At: 2, What: "a format character"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := usertext.Clean(tc.in, tc.form)
			var e *usertext.Error
			if !errors.As(err, &e) {
				t.Fatalf("Clean(%+q) = %+q, %v; want %+v", tc.in, got, err, tc.want)
			}
			if diff := cmp.Diff(tc.want, *e); diff != "" {
				t.Errorf("Clean(%+q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
	if _, err := usertext.Clean("a\xffb", usertext.Line); !errors.Is(err, usertext.ErrInvalidUTF8) {
		t.Errorf("invalid UTF-8: %v", err)
	}
}

func ExampleClean() {
	name, err := usertext.Clean("Jose\u0301", usertext.Line)
	fmt.Printf("%q %v\n", name, err)
	_, err = usertext.Clean("invoice\u202Eexe.pdf", usertext.Line)
	fmt.Println(err)
	// Output:
	// "José" <nil>
	// must not contain control or invisible characters: U+202E (a format character) at character 8
}
