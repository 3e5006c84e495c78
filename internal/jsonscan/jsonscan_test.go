package jsonscan

import "testing"

// ASCII takes printable ASCII only: what is left goes to the slow path.
// (The other readers are held equal to encoding/json by the envelope's
// FuzzDecodeDifferential and the API's FuzzDecideFast.)
func TestASCII(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
		ok   bool
	}{
		{`"evt_1"`, "evt_1", true},
		{` "a b~" `, "a b~", true},
		{`""`, "", true},
		{"\"a\x7f\"", "", false},
		{`"é"`, "", false},
		{`"a\"b"`, "", false},
		{"\"a\tb\"", "", false},
		{`"open`, "", false},
		{`1`, "", false},
	} {
		s := Scanner{Data: []byte(c.in)}
		got, ok := s.ASCII()
		if ok != c.ok || string(got) != c.want {
			t.Errorf("ASCII(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}
