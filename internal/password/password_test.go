package password_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dabom/dpcs/internal/password"
)

// TestCheck: at least 8 characters (code points: 8 Korean syllables are
// enough), at most 72 bytes (what bcrypt reads), not on the embedded list
// of common and breached passwords (whatever the case), not one repeated
// character or a run, not the account's own id, phone or name.
func TestCheck(t *testing.T) {
	for _, c := range []struct {
		pw      string
		context []string
		want    error
	}{
		{"dpcs-demo", nil, nil}, // the demo accounts' password stays valid
		{"correct horse", nil, nil},
		{"가족데이터지킴이", nil, nil},
		{"x", nil, password.ErrTooShort},
		{"1234567", nil, password.ErrTooShort},
		{"가족데이터", nil, password.ErrTooShort},
		{strings.Repeat("a", 8) + strings.Repeat("가", 22), nil, password.ErrTooLong}, // 30 characters, 74 bytes
		{strings.Repeat("z", 73), nil, password.ErrTooLong},
		{"password", nil, password.ErrCommon},
		{"12345678", nil, password.ErrCommon},
		{"Password123", nil, password.ErrCommon},
		{"QWER1234", nil, password.ErrCommon},
		{"iloveyou", nil, password.ErrCommon},
		{"zzzzzzzzzz", nil, password.ErrCommon},
		{"abcdefghij", nil, password.ErrCommon},
		{"9876543210", nil, password.ErrCommon},
		{"가가가가가가가가", nil, password.ErrCommon},
		{"1000012345", []string{"1000012345", "010-5555-1234", "Jimin Kim"}, password.ErrContext},
		{"010-5555-1234", []string{"1000012345", "010-5555-1234", "Jimin Kim"}, password.ErrContext},
		{"01055551234", []string{"1000012345", "010-5555-1234", "Jimin Kim"}, password.ErrContext},
		{"jimin kim", []string{"1000012345", "010-5555-1234", "Jimin Kim"}, password.ErrContext},
		{"jimin kim's data", []string{"1000012345", "", "Jimin Kim"}, nil},
	} {
		if err := password.Check(c.pw, c.context...); !errors.Is(err, c.want) || (err == nil) != (c.want == nil) {
			t.Errorf("Check(%q, %q) = %v, want %v", c.pw, c.context, err, c.want)
		}
	}
}

// TestCommonList: the embedded list is there, lower-case, and holds only
// what the length rule would not refuse anyway.
func TestCommonList(t *testing.T) {
	n := password.CommonCount()
	if n < 10_000 {
		t.Fatalf("the common-password list holds %d passwords, want at least 10,000", n)
	}
	for _, pw := range []string{"password1", "sunshine", "baseball1", "trustno1"} {
		if !password.Common(pw) || !password.Common(strings.ToUpper(pw)) {
			t.Errorf("%q is not on the list", pw)
		}
	}
	if password.Common("dpcs-demo") || password.Common("pass") {
		t.Error("dpcs-demo, or a password shorter than 8 characters, on the list")
	}
}
