package envelope_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dabom/dpcs/envelope"
)

// FuzzDecode feeds arbitrary bytes to Decode. It must never panic; what it
// rejects must be ErrMalformed or name a field; what it accepts must encode,
// decode back equal, and encode to the same bytes (the encoding is canonical).
// make fuzz runs it.
func FuzzDecode(f *testing.F) {
	all, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		f.Fatal(err)
	}
	for _, path := range all {
		data := readFile(f, path)
		f.Add(data)
		// Mutations the fuzzer would take a while to find from the goldens.
		f.Add(data[:len(data)/2])
		f.Add(bytes.Replace(data, []byte(`"familyId": 100`), []byte(`"familyId": "100"`), 1))
		f.Add(bytes.Replace(data, []byte(`"familyId": 100`), []byte(`"familyId": 1e2`), 1))
		f.Add(bytes.Replace(data, []byte(`"familyId": 100`), []byte(`"familyId": 99999999999999999999`), 1))
		f.Add(bytes.Replace(data, []byte(`Z"`), []byte(`+14:00"`), 1))
		f.Add(bytes.Replace(data, []byte(`T14:`), []byte(`t14:`), 1))
		f.Add(bytes.Replace(data, []byte(`"payload"`), []byte(`"Payload"`), 1))
		f.Add(bytes.Replace(data, []byte(`"eventType"`), []byte(`"x":null,"eventType"`), 1))
	}
	for _, s := range []string{
		``, `null`, `{}`, `[]`, `{"payload":null}`, "{\"eventId\":\"\xff\"}",
		`{"eventId":"e","eventType":"DATA_USAGE","timestamp":"0000-01-01T00:00:00-23:59","payload":{"familyId":1,"customerId":1,"appId":"a","bytesUsed":0,"metadata":{"a":[{},[],-0,1e308,"\u0000"]}}}`,
		`{"eventId":"e","eventType":"NOTIFICATION","subType":"QUOTA_UPDATED","timestamp":"9999-12-31T23:59:59.999999999Z","payload":{"familyId":1,"customerId":1,"familyRemainingBytes":0,"familyUsedPercent":-0,"customerUsedBytesToday":0}}`,
		`{"eventId":"e","eventType":"POLICY_UPDATED","timestamp":"2026-02-06T14:35:00.1234567891Z","payload":{"familyId":1,"targetCustomerId":1,"version":1,"constraints":{},"oldValue":null}}`,
	} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := envelope.Decode(data)
		if err != nil {
			if !errors.Is(err, envelope.ErrMalformed) {
				fieldErrors(t, err) // fails unless every problem names a field
			}
			if diff := cmp.Diff(envelope.Event{}, ev); diff != "" {
				t.Fatalf("non-zero Event with error %v:\n%s", err, diff)
			}
			return
		}
		b, err := envelope.Encode(ev)
		if err != nil {
			t.Fatalf("decoded but cannot encode: %v\nin:  %q", err, data)
		}
		ev2, err := envelope.Decode(b)
		if err != nil {
			t.Fatalf("re-encoding does not decode: %v\nin:  %q\nout: %s", err, data, b)
		}
		if diff := cmp.Diff(ev, ev2, exact); diff != "" {
			t.Fatalf("round trip changed the event (-first +second):\n%s\nin:  %q\nout: %s", diff, data, b)
		}
		b2, err := envelope.Encode(ev2)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("encoding not canonical (%v):\n%s\n%s", err, b, b2)
		}
	})
}
