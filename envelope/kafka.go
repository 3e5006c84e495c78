package envelope

import (
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Topics (SPEC §7). Every record is keyed by the decimal familyId, and
// partitioned by kgo's default partitioner, which hashes keys exactly like
// Kafka's Java client (murmur2), so producers in any language co-partition.
const (
	TopicUsageEvents        = "usage-events"        // DATA_USAGE: simulator / network → processor
	TopicPolicyUpdated      = "policy-updated"      // POLICY_UPDATED: api (outbox) → processor
	TopicUsagePersist       = "usage-persist"       // USAGE_PERSIST: processor → write-behind
	TopicNotificationEvents = "notification-events" // NOTIFICATION: processor → notifier
)

// DLT returns the dead-letter topic of topic, where consumers put records
// they cannot process.
func DLT(topic string) string { return topic + ".DLT" }

// Record header keys set by ToRecord. Headers let tools route or filter
// without parsing the value; the value is authoritative.
const (
	HeaderEventType = "eventType"
	HeaderSubType   = "subType"
)

// ToRecord validates and encodes e as a record for topic: Key is the decimal
// familyId (Payload.FamilyKey), Value the canonical JSON, and headers
// eventType and, when set, subType. The Timestamp is left for the client to
// set at produce time; the event's own time is in the value.
func ToRecord[T Payload](topic string, e Envelope[T]) (*kgo.Record, error) {
	value, err := Encode(e)
	if err != nil {
		return nil, err
	}
	r := &kgo.Record{
		Topic:   topic,
		Key:     strconv.AppendInt(nil, Payload(e.Payload).FamilyKey(), 10),
		Value:   value,
		Headers: []kgo.RecordHeader{{Key: HeaderEventType, Value: []byte(e.EventType)}},
	}
	if e.SubType != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderSubType, Value: []byte(e.SubType)})
	}
	return r, nil
}

// FromRecord decodes the value of r with Decode. Key and headers are not
// consulted: a record from a plain Kafka client (kcat, a Java producer
// without headers) decodes the same.
func FromRecord(r *kgo.Record) (Event, error) {
	if r == nil {
		return Event{}, fmt.Errorf("%w: nil record", ErrMalformed)
	}
	return Decode(r.Value)
}
