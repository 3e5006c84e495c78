// Package readable checks that a text a family or a care agent reads is
// written for people (doc/frontends.md, "Words a person reads"): no package
// id, no constraint key, no signed byte count, no ISO timestamp (a UTC time
// as the wire carries it), no particle pair such as 을(를) after a Korean
// word, and no English sentence in a Korean text. The
// notify texts' tests and the front-ends' browser stories use it.
package readable

import (
	"fmt"
	"regexp"
	"strings"
)

// rule is one thing a person should never read.
type rule struct {
	name string
	re   *regexp.Regexp
}

var rules = []rule{
	{"a package id", regexp.MustCompile(`\b(?:com|org|net|jp|kr)\.[a-z0-9_]+\.`)},
	{"a constraint key", regexp.MustCompile(`\b(?:LIMIT|BLOCK|ALLOW|EXCEPT|THROTTLE):`)},
	{"a signed byte count", regexp.MustCompile(`-[0-9]{6,}`)},
	{"an ISO timestamp", regexp.MustCompile(`\b\d{4}-\d\d-\d\dT\d\d:\d\d`)},
	{"a decision code", regexp.MustCompile(`\b(?:ALLOWED|BLOCKED_[A-Z_]+)\b`)},
	// A particle pair left to the reader after a word whose last sound
	// says which one it takes ("데이터 양을(를)"): the front-ends' t()
	// picks it.
	{"a particle pair", regexp.MustCompile(`[가-힣0-9][”"’']?(?:은\(는\)|을\(를\)|이\(가\)|과\(와\)|\(으\)로)`)},
	// Four English words in a row in a Korean text: a sentence the
	// server wrote, not a name ("YouTube Music", "Samsung Internet").
	{"an English sentence", regexp.MustCompile(`\b[A-Za-z][a-z']+(?:[ ,:;]+[A-Za-z][a-z']+){3,}`)},
}

// Problems returns what is wrong with text, each as "<rule>: …<context>…";
// none when it reads as written for people.
func Problems(text string) []string {
	var out []string
	for _, r := range rules {
		for _, loc := range r.re.FindAllStringIndex(text, -1) {
			from, to := max(0, loc[0]-20), min(len(text), loc[1]+20)
			out = append(out, fmt.Sprintf("%s: …%s…", r.name, strings.ToValidUTF8(text[from:to], "")))
		}
	}
	return out
}
