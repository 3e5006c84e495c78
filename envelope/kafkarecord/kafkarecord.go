package kafkarecord

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope"
)

// Record header keys set by New. Headers let tools route or filter without
// parsing the value; the value is authoritative.
const (
	HeaderEventType = "eventType"
	HeaderSubType   = "subType"
	// HeaderNotifies is set on a usage-persist record that stands for its
	// decision's notifications (envelope.UsagePersistPayload.Notifies):
	// their sub types, comma-separated ("QUOTA_UPDATED"), so the notifier
	// can pass over a live-only one no one watches without decoding it.
	HeaderNotifies = "notifies"
)

// New validates and encodes e as a record for topic: Key is the decimal
// familyId (Payload.FamilyKey), Value the canonical JSON (envelope.Encode),
// and headers eventType and, when set, subType, and for a usage-persist
// record standing for notifications, notifies. The Timestamp is left for the
// client to set at produce time; the event's own time is in the value.
func New[T envelope.Payload](topic string, e envelope.Envelope[T]) (*kgo.Record, error) {
	value, err := envelope.Encode(e)
	if err != nil {
		return nil, err
	}
	// One allocation for the record and its headers, one for the key and
	// the header values: producers call this for every event.
	rh := &recordWithHeaders{}
	small := make([]byte, 0, 20+len(e.EventType)+len(e.SubType))
	small = strconv.AppendInt(small, envelope.Payload(e.Payload).FamilyKey(), 10)
	key := small[:len(small):len(small)]
	small = append(small[len(small):], e.EventType...)
	eventType := small[:len(small):len(small)]
	subType := append(small[len(small):], e.SubType...)
	rh.headers[0] = kgo.RecordHeader{Key: HeaderEventType, Value: eventType}
	n := 1
	if e.SubType != "" {
		rh.headers[1] = kgo.RecordHeader{Key: HeaderSubType, Value: subType}
		n = 2
	}
	if ns := notifies(&e.Payload); len(ns) > 0 {
		rh.headers[n] = kgo.RecordHeader{Key: HeaderNotifies, Value: []byte(strings.Join(ns, ","))}
		n++
	}
	rh.Record = kgo.Record{Topic: topic, Key: key, Value: value, Headers: rh.headers[:n:n]}
	return &rh.Record, nil
}

// notifies is the member notifies of a usage-persist payload, typed or
// behind the Payload interface (an envelope.Event's); nil for another.
func notifies[T envelope.Payload](p *T) []string {
	switch v := any(p).(type) {
	case *envelope.UsagePersistPayload:
		return v.Notifies
	case *envelope.Payload:
		if pp, ok := (*v).(envelope.UsagePersistPayload); ok {
			return pp.Notifies
		}
	}
	return nil
}

type recordWithHeaders struct {
	kgo.Record
	headers [3]kgo.RecordHeader
}

// Decode decodes the value of r with envelope.Decode. Key and headers are
// not consulted: a record from a plain Kafka client (kcat, a Java producer
// without headers) decodes the same. A nil record is an error wrapping
// envelope.ErrMalformed.
func Decode(r *kgo.Record) (envelope.Event, error) {
	if r == nil {
		return envelope.Event{}, fmt.Errorf("%w: nil record", envelope.ErrMalformed)
	}
	return envelope.Decode(r.Value)
}

// Headers a dead-letter record carries besides the original record's own.
const (
	HeaderDLTReason    = "dlt-reason"    // why the record could not be processed
	HeaderDLTTopic     = "dlt-topic"     // the topic it came from
	HeaderDLTPartition = "dlt-partition" // its partition, decimal
	HeaderDLTOffset    = "dlt-offset"    // its offset, decimal
)

// DeadLetter returns the record to send to dlt (usually
// envelope.DLT(src.Topic)) for src: the same key, value and headers, plus the
// reason and the origin (topic, partition, offset) and any extra headers.
// Every DPCS consumer dead-letters through it, so operators read one format.
func DeadLetter(src *kgo.Record, dlt, reason string, extra ...kgo.RecordHeader) *kgo.Record {
	h := make([]kgo.RecordHeader, 0, len(src.Headers)+4+len(extra))
	h = append(h, src.Headers...)
	h = append(h,
		kgo.RecordHeader{Key: HeaderDLTReason, Value: []byte(reason)},
		kgo.RecordHeader{Key: HeaderDLTTopic, Value: []byte(src.Topic)},
		kgo.RecordHeader{Key: HeaderDLTPartition, Value: strconv.AppendInt(nil, int64(src.Partition), 10)},
		kgo.RecordHeader{Key: HeaderDLTOffset, Value: strconv.AppendInt(nil, src.Offset, 10)},
	)
	h = append(h, extra...)
	return &kgo.Record{Topic: dlt, Key: src.Key, Value: src.Value, Headers: h}
}
