package quota

import (
	"maps"
	"slices"
	"strings"

	"github.com/dabom/dpcs/policy"
)

// fieldWindows is the constraints hash's compiled time windows, written with
// the constraints whenever there are any, so that apply.lua reads only the
// fields an event needs (HMGET) and parses no HHMM or day list: one entry per
// window, the night window (BLOCK:TIME:START/END) first, then the named
// windows in byte order of their keys (the order the rule is chosen in),
// each
//
//	<start><end><days><name><space>
//
// start and end being minutes of the day as two characters each, '0' + m/40
// and '0' + m%40 (read with string.byte: no string is made per event), days
// seven '0'/'1' characters, Monday first, and name the rule key after
// BLOCK:TIME: (START for the night window). "" when there is no window. A
// constraints hash without it (written by an earlier engine) is read whole,
// as before. It is not a constraint: readers drop it.
const fieldWindows = "#w"

// constraintFields returns the constraints hash's fields for a canonical
// constraint map: its entries in key order, then fieldWindows; none for an
// empty map.
func constraintFields(canon map[string]string) ([]any, error) {
	if len(canon) == 0 {
		return nil, nil
	}
	c, err := policy.ParseConstraints(canon)
	if err != nil {
		return nil, err
	}
	out := make([]any, 0, 2*len(canon)+2)
	for _, k := range slices.Sorted(maps.Keys(canon)) {
		out = append(out, k, canon[k])
	}
	return append(out, fieldWindows, compileWindows(c)), nil
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
