package quota

import (
	"maps"
	"slices"
	"strings"

	"github.com/dabom/dpcs/policy"
)

// fieldCompiled and fieldWindows are the constraints hash's compiled form,
// its first two fields, written with the constraints whenever there are any,
// so that apply.lua reads four fields for every constraint an event may meet
// (with its app and category blocks: one HMGET) and parses no HHMM or day
// list. fieldCompiled is
//
//	<access><extras><daily>,<monthly>,<throttle>
//
// access '1' when BLOCK:ACCESS is "1" else '0'; extras a digit of two
// flags, '0' + 1 when any LIMIT:DATA:EXTRA:<period> or
// LIMIT:DATA:GIFT:<month> is set (the script then reads its day's and
// month's extras and its month's gifts) + 2 when any LIMIT:DATA:APP:<app>
// or LIMIT:DATA:CATEGORY:<c> is (the script then reads the event's app's
// and category's budgets; an earlier engine wrote '0' or '1'); daily, monthly and throttle the values of LIMIT:DATA:DAILY,
// LIMIT:DATA:MONTHLY and THROTTLE:SPEED as stored ("" when unset): at most
// 42 bytes, so a compact (listpack) hash stays compact. fieldWindows is the
// time windows, one entry per window, the night window (BLOCK:TIME:START/END)
// first, then the named windows in byte order of their keys (the order the
// rule is chosen in), each
//
//	<start><end><days><name><space>
//
// start and end being minutes of the day as two characters each, '0' + m/40
// and '0' + m%40 (read with string.byte: no string is made per event), days
// seven '0'/'1' characters, Monday first, and name the rule key after
// BLOCK:TIME: (START for the night window); "" when there is no window. A
// constraints hash without fieldCompiled (written by an earlier engine) is
// read whole, as before. Neither is a constraint: readers drop them.
const (
	fieldCompiled = "#c"
	fieldWindows  = "#w"
)

// constraintFields returns the constraints hash's fields for valid
// constraints: fieldCompiled and fieldWindows first (found at once in a
// compact hash), then the canonical map's entries in key order; none when
// there are no constraints.
func constraintFields(c policy.Constraints) []any {
	canon := c.Map()
	if len(canon) == 0 {
		return nil
	}
	out := make([]any, 0, 2*len(canon)+4)
	out = append(out, fieldCompiled, compile(canon, c), fieldWindows, compileWindows(c))
	for _, k := range slices.Sorted(maps.Keys(canon)) {
		out = append(out, k, canon[k])
	}
	return out
}

// compile is fieldCompiled's value for a valid canonical constraint map and
// its parsed form (the map's limits and throttle are integers as strconv
// writes them: no comma to confuse the script, and what '%d' would write).
func compile(canon map[string]string, c policy.Constraints) string {
	var b strings.Builder
	flag := func(on bool) {
		if on {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
	}
	flag(c.BlockAccess)
	flags := byte('0')
	if len(c.Extras) > 0 || len(c.Gifts) > 0 {
		flags++
	}
	if c.Budgets() {
		flags += 2
	}
	b.WriteByte(flags)
	b.WriteString(canon[policy.KeyLimitDaily])
	b.WriteByte(',')
	b.WriteString(canon[policy.KeyLimitMonthly])
	b.WriteByte(',')
	b.WriteString(canon[policy.KeyThrottleSpeed])
	return b.String()
}

func compileWindows(c policy.Constraints) string {
	var b strings.Builder
	add := func(w policy.Window, name string) {
		b.WriteByte(byte('0' + w.Start/40))
		b.WriteByte(byte('0' + w.Start%40))
		b.WriteByte(byte('0' + w.End/40))
		b.WriteByte(byte('0' + w.End%40))
		for wd := 1; wd <= 7; wd++ {
			if w.Days.Has(wd) {
				b.WriteByte('1')
			} else {
				b.WriteByte('0')
			}
		}
		b.WriteString(name)
		b.WriteByte(' ')
	}
	if c.Night != nil {
		add(policy.Window{Start: c.Night.Start, End: c.Night.End}, policy.KeyBlockTimeStart[len(policy.KeyBlockTimePrefix):])
	}
	for _, name := range slices.Sorted(maps.Keys(c.Windows)) {
		add(c.Windows[name], name)
	}
	return b.String()
}
