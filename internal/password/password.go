// Package password holds DPCS's password rules (doc/security.md,
// "Passwords"), after NIST SP 800-63B: a length floor and no composition
// rules, a check against commonly used and breached passwords, and no
// password that is the account's own id, phone or name.
//
// The list (common.txt) is the passwords of at least 8 characters in the
// zxcvbn-ts common dictionary (@zxcvbn-ts/language-common 4.1.3, MIT,
// LICENSE-zxcvbn-ts.txt): the most frequent passwords of public breach
// corpora, lower-cased, most frequent first. Shorter ones are refused by
// length already.
package password

import (
	_ "embed"
	"errors"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// MinChars is the fewest characters (Unicode code points) a password has;
// MaxBytes the most bytes, all of which bcrypt reads.
const (
	MinChars = 8
	MaxBytes = 72
)

// The refusals of Check.
var (
	ErrTooShort = errors.New("password: shorter than 8 characters")
	ErrTooLong  = errors.New("password: longer than 72 bytes")
	ErrCommon   = errors.New("password: common, breached or easily guessed")
	ErrContext  = errors.New("password: the account's own id, phone or name")
)

// Check returns nil when pw may be a password, else one of ErrTooShort,
// ErrTooLong, ErrCommon (on the list whatever the case, or one character
// repeated, or a run such as "abcdefgh" or "98765432") and ErrContext (the
// same as one of context — the account's id, phone or name — ignoring case,
// spaces and hyphens).
func Check(pw string, context ...string) error {
	switch {
	case utf8.RuneCountInString(pw) < MinChars:
		return ErrTooShort
	case len(pw) > MaxBytes:
		return ErrTooLong
	case Common(pw) || trivial(pw):
		return ErrCommon
	}
	p := fold(pw)
	for _, c := range context {
		if c := fold(c); c != "" && c == p {
			return ErrContext
		}
	}
	return nil
}

// Common reports whether pw, lower-cased, is on the embedded list.
func Common(pw string) bool {
	_, ok := commonSet()[strings.ToLower(pw)]
	return ok
}

// CommonCount is the number of passwords on the embedded list.
func CommonCount() int { return len(commonSet()) }

//go:embed common.txt
var commonText string

// commonSet is the list as a set, built on first use and never changed.
var commonSet = sync.OnceValue(func() map[string]struct{} {
	set := make(map[string]struct{}, strings.Count(commonText, "\n"))
	for line := range strings.SplitSeq(commonText, "\n") {
		if line != "" {
			set[line] = struct{}{}
		}
	}
	return set
})

// trivial reports one character repeated, or each character one after (or
// one before) the previous: "zzzzzzzz", "abcdefgh", "98765432".
func trivial(pw string) bool {
	rs := []rune(pw)
	for _, step := range []rune{0, 1, -1} {
		run := true
		for i := 1; i < len(rs) && run; i++ {
			run = rs[i]-rs[i-1] == step
		}
		if run {
			return true
		}
	}
	return false
}

// fold is s lower-cased without spaces, hyphens and other punctuation, for
// comparing a password with the account's id, phone and name.
func fold(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}
