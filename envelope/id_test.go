package envelope_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dabom/dpcs/envelope"
)

func TestNewID(t *testing.T) {
	seen := make(map[string]bool)
	for _, prefix := range []string{envelope.PrefixEvent, envelope.PrefixPolicy, envelope.PrefixPersist, envelope.PrefixNotification, ""} {
		for range 100 {
			id := envelope.NewID(prefix)
			rest, ok := strings.CutPrefix(id, prefix)
			if !ok {
				t.Fatalf("NewID(%q) = %q", prefix, id)
			}
			u, err := uuid.Parse(rest)
			if err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 || u.String() != rest {
				t.Fatalf("NewID(%q) = %q: not a canonical v7 UUID (%v)", prefix, id, err)
			}
			if seen[id] {
				t.Fatalf("NewID repeated %q", id)
			}
			seen[id] = true
		}
	}
}

// NewID's ids are time-ordered: each sorts after the one made before it,
// and carries the time it was made, to the millisecond.
func TestNewIDTimeOrdered(t *testing.T) {
	prev := envelope.NewID(envelope.PrefixEvent)
	for range 10_000 {
		before := time.Now().UnixMilli()
		id := envelope.NewID(envelope.PrefixEvent)
		after := time.Now().UnixMilli()
		if id <= prev {
			t.Fatalf("NewID gave %q after %q", id, prev)
		}
		prev = id
		u := uuid.MustParse(strings.TrimPrefix(id, envelope.PrefixEvent))
		sec, nsec := u.Time().UnixTime()
		// A v7 id's millisecond may run ahead of the clock by one for
		// every 4,096 ids made faster than the library's 256 ns step
		// (google/uuid keeps them increasing): at most 3 in 10,000.
		if ms := sec*1000 + nsec/1e6; ms < before || ms > after+3 {
			t.Fatalf("NewID %q carries %d ms, made between %d and %d", id, ms, before, after)
		}
	}
}

func TestIDNamespace(t *testing.T) {
	want := uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/dabom/dpcs/envelope"))
	if envelope.IDNamespace != want.String() {
		t.Errorf("IDNamespace = %s, want %s", envelope.IDNamespace, want)
	}
}

func TestDerivedID(t *testing.T) {
	const origin = "evt_550e8400-e29b-41d4-a716-446655440000"
	id := envelope.DerivedID(envelope.PrefixPersist, origin, "persist")

	// Pinned: other producers (and stored data) depend on this exact value.
	const pinned = "persist_ffc403c7-b717-5467-b23c-a1aee8022cc7"
	if id != pinned {
		t.Fatalf("DerivedID = %q, want %q", id, pinned)
	}
	if want := envelope.PrefixPersist + uuid.NewSHA1(uuid.MustParse(envelope.IDNamespace), []byte(origin+"\x00persist")).String(); id != want {
		t.Fatalf("DerivedID = %q, want UUID v5 of origin NUL purpose: %q", id, want)
	}
	u, err := uuid.Parse(strings.TrimPrefix(id, envelope.PrefixPersist))
	if err != nil || u.Version() != 5 || u.Variant() != uuid.RFC4122 {
		t.Fatalf("DerivedID = %q: not a v5 UUID (%v)", id, err)
	}
	for range 3 {
		if again := envelope.DerivedID(envelope.PrefixPersist, origin, "persist"); again != id {
			t.Fatalf("DerivedID not deterministic: %q then %q", id, again)
		}
	}

	// Every input matters; the prefix only prefixes.
	others := map[string]string{
		"other purpose": envelope.DerivedID(envelope.PrefixPersist, origin, "quota-updated"),
		"other origin":  envelope.DerivedID(envelope.PrefixPersist, "evt_550e8400-e29b-41d4-a716-446655440001", "persist"),
		"empty purpose": envelope.DerivedID(envelope.PrefixPersist, origin, ""),
		"split moved":   envelope.DerivedID(envelope.PrefixPersist, origin+"p", "ersist"),
	}
	for name, other := range others {
		if other == id {
			t.Errorf("%s: same id %q", name, id)
		}
	}
	if ntf := envelope.DerivedID(envelope.PrefixNotification, origin, "persist"); strings.TrimPrefix(ntf, envelope.PrefixNotification) != strings.TrimPrefix(id, envelope.PrefixPersist) {
		t.Errorf("prefix changed the UUID: %q vs %q", ntf, id)
	}
}
