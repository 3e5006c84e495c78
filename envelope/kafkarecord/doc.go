// Package kafkarecord carries DPCS envelopes in franz-go records
// (*kgo.Record): New encodes an envelope as a record keyed by its family,
// Decode reads one back, DeadLetter builds the record a consumer sends to a
// dead-letter topic.
//
// It is a package of its own so that importing envelope, a JSON codec, links
// no Kafka client: only code that talks to Kafka imports this one.
//
//	e := envelope.New(envelope.NewID(envelope.PrefixEvent), time.Now(), envelope.UsagePayload{
//		FamilyID: 100, CustomerID: 12345, AppID: "com.youtube.app", BytesUsed: 5242880,
//	})
//	rec, err := kafkarecord.New(envelope.TopicUsageEvents, e) // key "100", value JSON, eventType header
//	if err != nil {
//		return err // a *envelope.FieldError naming the invalid field
//	}
//	client.Produce(ctx, rec, nil)
//
// and on the consuming side:
//
//	ev, err := kafkarecord.Decode(rec)
//	if err != nil {
//		dlt := kafkarecord.DeadLetter(rec, envelope.DLT(rec.Topic), err.Error())
//		client.Produce(ctx, dlt, nil)
//	}
//
// Headers (eventType, subType) are informational; the value is
// authoritative, so a record from a plain client such as kcat decodes the
// same. kgo's default partitioner hashes keys with murmur2 exactly like
// Kafka's Java client; producers in other languages must do the same
// (librdkafka/kcat: topic.partitioner=murmur2_random).
package kafkarecord
