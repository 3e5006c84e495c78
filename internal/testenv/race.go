//go:build race

package testenv

// Race reports whether the test binary was built with -race, which makes
// Go code several times slower: a test that checks a latency goal widens its
// bound by RaceSlowdown and says so, rather than failing on the detector's cost.
const Race = true
