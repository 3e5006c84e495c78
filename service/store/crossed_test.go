package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/service/store"
)

func TestFormatParseCrossed(t *testing.T) {
	for _, tt := range []struct {
		s  string
		cs []envelope.Crossing
	}{
		{"", nil},
		{"50:1", []envelope.Crossing{{Percent: 50, Arm: 1}}},
		{"50:1,30:2", []envelope.Crossing{{Percent: 50, Arm: 1}, {Percent: 30, Arm: 2}}},
		{"100:1,1:2147483647", []envelope.Crossing{{Percent: 100, Arm: 1}, {Percent: 1, Arm: 2147483647}}},
		{"10:3,10:4", []envelope.Crossing{{Percent: 10, Arm: 3}, {Percent: 10, Arm: 4}}}, // kept as written
	} {
		if got := store.FormatCrossed(tt.cs); got != tt.s {
			t.Errorf("FormatCrossed(%v) = %q, want %q", tt.cs, got, tt.s)
		}
		got, err := store.ParseCrossed(tt.s)
		if err != nil {
			t.Errorf("ParseCrossed(%q): %v", tt.s, err)
		}
		if diff := cmp.Diff(tt.cs, got); diff != "" {
			t.Errorf("ParseCrossed(%q) (-want +got):\n%s", tt.s, diff)
		}
	}
	if got := store.FormatCrossed([]envelope.Crossing{}); got != "" {
		t.Errorf("FormatCrossed(empty) = %q", got)
	}
	for _, s := range []string{
		",", "50", "50:", ":1", "50:1,", ",50:1", "50:1,,30:2", "50:1:2", "50;1", " 50:1", "50:1 ", "50 :1",
		"0:1", "101:1", "50:0", "-50:1", "50:-1", "+50:1", "050:1", "50:01", "5e1:1", "50:1.0", "x:1",
		"50:99999999999999999999", "1000000000000000000:1",
	} {
		cs, err := store.ParseCrossed(s)
		var fe *store.FieldError
		if !errors.Is(err, store.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "crossed" {
			t.Errorf("ParseCrossed(%q) = %v, %v; want ErrInvalid naming crossed", s, cs, err)
		}
	}
}

// Valid crossings survive the column; what ParseCrossed accepts is exactly
// what FormatCrossed writes.
func TestCrossedProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var cs []envelope.Crossing
		for range rapid.IntRange(0, 12).Draw(t, "n") {
			cs = append(cs, envelope.Crossing{
				Percent: rapid.IntRange(1, 100).Draw(t, "percent"),
				Arm:     rapid.IntRange(1, 1<<40).Draw(t, "arm"),
			})
		}
		got, err := store.ParseCrossed(store.FormatCrossed(cs))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(cs, got); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}

		s := rapid.StringOfN(rapid.SampledFrom([]rune("0123456789:,-+ ")), 0, 16, -1).Draw(t, "s")
		if cs, err := store.ParseCrossed(s); err == nil {
			if back := store.FormatCrossed(cs); back != s {
				t.Fatalf("ParseCrossed(%q) = %v, formatted back as %q", s, cs, back)
			}
			if err := store.ValidCrossed(cs); err != nil {
				t.Fatalf("ParseCrossed(%q) = %v: %v", s, cs, err)
			}
		}
	})
}

func TestValidateResult(t *testing.T) {
	ok := usageRows(1, 0)[0]
	ok.TotalBytes, ok.DailyUsed, ok.MonthlyUsed, ok.ThrottleKbps = 1<<30, 5, 7, 1024
	ok.Crossed = []envelope.Crossing{{Percent: 50, Arm: 1}, {Percent: 100, Arm: 3}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid row: %v", err)
	}
	tooMany := make([]envelope.Crossing, 20) // 20 × "100:123456789," > 255 characters
	for i := range tooMany {
		tooMany[i] = envelope.Crossing{Percent: 100, Arm: 123456789}
	}
	for _, tt := range []struct {
		name   string
		change func(*store.UsageRecord)
		fields []string
	}{
		{"negative counts", func(u *store.UsageRecord) { u.TotalBytes, u.DailyUsed, u.MonthlyUsed, u.ThrottleKbps = -1, -1, -1, -1 },
			[]string{"payload.totalBytes", "payload.dailyUsedBytes", "payload.monthlyUsedBytes", "payload.throttleKbps"}},
		{"bad crossings", func(u *store.UsageRecord) {
			u.Crossed = []envelope.Crossing{{Percent: 0, Arm: 1}, {Percent: 101, Arm: 0}}
		},
			[]string{"payload.crossed[0].percent", "payload.crossed[1].percent", "payload.crossed[1].arm"}},
		{"too many crossings", func(u *store.UsageRecord) { u.Crossed = tooMany }, []string{"payload.crossed"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := ok
			tt.change(&u)
			if diff := cmp.Diff(tt.fields, fieldsOf(u.Validate())); diff != "" {
				t.Errorf("Validate fields (-want +got):\n%s", diff)
			}
		})
	}
	if n := len(store.FormatCrossed(tooMany)); n <= store.MaxCrossedLen {
		t.Fatalf("test setup: %d characters fit the column", n)
	}
}

// fieldsOf lists the fields of the *envelope.FieldErrors joined in err.
func fieldsOf(err error) []string {
	var out []string
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var fe *envelope.FieldError
		if errors.As(err, &fe) {
			out = append(out, fe.Field)
		} else if err != nil {
			out = append(out, "not a field error: "+strings.TrimSpace(err.Error()))
		}
	}
	walk(err)
	return out
}
