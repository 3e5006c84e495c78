package envelope_test

import (
	"testing"

	"github.com/dabom/dpcs/envelope"
)

func BenchmarkDecode(b *testing.B) {
	data := readFile(b, "testdata/data_usage.json")
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := envelope.Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeAs(b *testing.B) {
	data := readFile(b, "testdata/data_usage.canonical.json")
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := envelope.DecodeAs[envelope.UsagePayload](data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	ev, err := envelope.Decode(readFile(b, "testdata/usage_persist.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := envelope.Encode(ev); err != nil {
			b.Fatal(err)
		}
	}
}

// The write-behind decodes every usage-persist record.
func BenchmarkDecodeAsPersist(b *testing.B) {
	data := readFile(b, "testdata/usage_persist.canonical.json")
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := envelope.DecodeAs[envelope.UsagePersistPayload](data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeNotification(b *testing.B) {
	data := readFile(b, "testdata/notification_quota_updated.canonical.json")
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := envelope.Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeUsage(b *testing.B) {
	ev, err := envelope.DecodeAs[envelope.UsagePayload](readFile(b, "testdata/data_usage.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := envelope.Encode(ev); err != nil {
			b.Fatal(err)
		}
	}
}
