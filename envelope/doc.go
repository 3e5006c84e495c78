// Package envelope is the wire format of every DPCS Kafka topic: one JSON
// envelope around a typed payload, with strict validation, deterministic ids
// and the topic names (package envelope/kafkarecord carries envelopes in
// Kafka records).
//
// # The envelope
//
// Every record value on usage-events, policy-updated, usage-persist and
// notification-events is one JSON object (the seed design's
// EventEnvelope<T>):
//
//	{
//	  "eventId": "evt_550e8400-e29b-41d4-a716-446655440000",
//	  "eventType": "DATA_USAGE",
//	  "subType": null,
//	  "timestamp": "2026-02-06T14:30:00Z",
//	  "payload": {
//	    "familyId": 100, "customerId": 12345, "appId": "com.youtube.app",
//	    "bytesUsed": 5242880,
//	    "metadata": { "deviceId": "device_pixel_9", "networkType": "5G" }
//	  }
//	}
//
// eventType selects the payload type, and for NOTIFICATION subType selects
// among the notifications:
//
//	eventType        subType                 payload                 topic
//	DATA_USAGE       —                       UsagePayload            usage-events
//	POLICY_UPDATED   —                       PolicyUpdatedPayload    policy-updated
//	USAGE_PERSIST    —                       UsagePersistPayload     usage-persist
//	NOTIFICATION     QUOTA_UPDATED           QuotaUpdated            notification-events
//	NOTIFICATION     CUSTOMER_BLOCKED        CustomerBlocked         notification-events
//	NOTIFICATION     THRESHOLD_ALERT         ThresholdAlert          notification-events
//	NOTIFICATION     DATA_REQUESTED          DataRequested           notification-events
//	NOTIFICATION     DATA_REQUEST_ANSWERED   DataRequestAnswered     notification-events
//	NOTIFICATION     DATA_GIFTED             DataGifted              notification-events
//
// The Kafka record key is the family id in decimal ("100"), so that the
// events of one family stay in one partition, in order. doc/wire-format.md
// in the repository lists every event's JSON and rules.
//
// # Producing
//
// Build the payload as a plain struct, wrap it with New (which fills in
// eventType and subType), and encode it:
//
//	e := envelope.New(envelope.NewID(envelope.PrefixEvent), time.Now(), envelope.UsagePayload{
//		FamilyID: 100, CustomerID: 12345, AppID: "com.youtube.app", BytesUsed: 5242880,
//	})
//	value, err := envelope.Encode(e) // the record value; the key is "100" (e.Payload.FamilyKey())
//	if err != nil {
//		return err // a *FieldError naming the invalid field
//	}
//
// Encode (and json.Marshal of an Envelope) validates first, so
// this package never writes an event it would refuse to read. The encoding is
// canonical: members in the order shown above, subType only when set,
// timestamps in UTC with "Z" and a fraction only when non-zero, no HTML
// escaping. The same envelope always encodes to the same bytes.
//
// # Consuming
//
// A consumer of one event type asks for it by type; anything else is an error
// wrapping ErrUnknownType:
//
//	e, err := envelope.DecodeAs[envelope.UsagePayload](rec.Value)
//	// e.Payload.BytesUsed, e.EventID, e.Timestamp …
//
// A consumer of several types decodes an Event and switches on the payload:
//
//	ev, err := envelope.Decode(value)
//	if err != nil {
//		return toDLT(value, err) // err names the field: "payload.bytesUsed: must be ≥ 0"
//	}
//	switch p := ev.Payload.(type) {
//	case envelope.QuotaUpdated:
//	case envelope.CustomerBlocked:
//	case envelope.ThresholdAlert:
//	}
//
// DecodeAs[Notification] accepts exactly the three notifications. Decoded
// payloads are values (UsagePayload, not *UsagePayload); timestamps are in
// UTC.
//
// # What the decoder accepts
//
// The decoder follows the seed's Java producer (Jackson with
// ignoreUnknown = true and NON_NULL) and is otherwise strict:
//
//   - Unknown members are ignored, at every level.
//   - null and absent are the same: "subType": null, a missing subType and
//     "subType": "" all mean "none".
//   - Member names are case-sensitive ("EventId" is an unknown member).
//   - Numbers must be JSON numbers, not strings; ids and byte counts must be
//     integers that fit in int64 (1.0 and 1e3 are rejected).
//   - Timestamps are RFC 3339 strings; offsets ("+09:00") and fractions are
//     accepted and converted to UTC. Years must be 0000–9999 in UTC.
//   - A required member that is missing is an error even where its zero
//     value would be valid: a usage event without "bytesUsed" is rejected,
//     one with "bytesUsed": 0 is not.
//   - Anything that is not one JSON object is rejected; trailing data too.
//
// Decode never panics, whatever the input (FuzzDecode checks this), and
// whatever it accepts encodes and decodes back to the same event.
//
// # Errors
//
// Problems are reported as *FieldError values naming the JSON path from the
// envelope root, "payload.familyId: required". Decode and Validate report
// every problem they find, joined with errors.Join; errors.As gives the
// first. Two sentinels classify them for errors.Is:
//
//   - ErrMalformed: the bytes are not the expected JSON (invalid JSON, not an
//     object, a member of the wrong JSON type).
//   - ErrUnknownType: eventType/subType name no known payload, or not the one
//     DecodeAs asked for. A consumer may skip these instead of
//     dead-lettering them, to tolerate newer producers.
//
// Anything else (a missing or out-of-range field) is a plain *FieldError.
//
// # Ids
//
// An eventId is an opaque non-empty string. DPCS producers write a prefix
// naming the kind of event and a UUID: NewID(PrefixEvent) gives
// "evt_" + a time-ordered UUID (version 7), which a store's unique index
// takes near its end. Records derived from another event — the
// usage-persist record and the notifications the processor emits for a usage
// event — use DerivedID(prefix, originEventID, purpose), a UUID v5 of the
// origin id and purpose: a replayed usage event re-emits them under the same
// ids, which downstream consumers deduplicate. The namespace, IDNamespace,
// is part of the wire contract.
//
// # Kafka
//
// This package links no Kafka client. Package envelope/kafkarecord converts
// to and from franz-go's *kgo.Record (kafkarecord.New, kafkarecord.Decode)
// and builds dead-letter records. The topic names are constants here
// (TopicUsageEvents, …); DLT names a topic's dead-letter topic. Keys are
// partitioned with murmur2 exactly like Kafka's Java client; producers in
// other languages must do the same (librdkafka/kcat:
// topic.partitioner=murmur2_random).
//
// # Extending
//
// A team with its own event types registers them in its own Registry:
//
//	r := envelope.NewRegistry() // the built-ins
//	err := r.Register("TOP_UP", "", func() envelope.Payload { return new(TopUp) })
//	ev, err := r.Decode(data)
//
// The package-level Decode, DecodeAs and Envelope.UnmarshalJSON use a
// registry of the built-in types that nobody can change.
package envelope
