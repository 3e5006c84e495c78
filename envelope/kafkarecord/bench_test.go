package kafkarecord_test

import (
	"testing"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
)

func BenchmarkNew(b *testing.B) {
	ev, err := envelope.Decode(readFile(b, "../testdata/notification_quota_updated.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := kafkarecord.New(envelope.TopicNotificationEvents, ev); err != nil {
			b.Fatal(err)
		}
	}
}
