package notify

import (
	"fmt"
	"strconv"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/twmb/franz-go/pkg/kgo"
)

// standsFor is, by r's headers alone, the notification r is or stands for:
// a NOTIFICATION record's subType, a usage-persist record's notifies
// (kafkarecord.HeaderNotifies; "" when it stands for none); "?" when the
// headers do not say (a record without them is read as any other).
func standsFor(r *kgo.Record) string {
	var et, st, ns []byte
	for _, h := range r.Headers {
		switch h.Key {
		case kafkarecord.HeaderEventType:
			et = h.Value
		case kafkarecord.HeaderSubType:
			st = h.Value
		case kafkarecord.HeaderNotifies:
			ns = h.Value
		}
	}
	switch string(et) {
	case string(envelope.TypeNotification):
		if len(st) == 0 {
			return "?"
		}
		return string(st)
	case string(envelope.TypeUsagePersist):
		return string(ns)
	}
	return "?"
}

// unwatched reports whether r is a live-only QUOTA_UPDATED (the caller
// checked that none is stored or taken by a channel) of a family no
// subscriber of this notifier's hub watches, by the record's headers and
// key alone (kafkarecord.New and the outbox set them, matching the value:
// a producer that labels another kind QUOTA_UPDATED loses it here): such a
// record would be pushed to no one, so it is not decoded (more than half of
// the notifier's own work per synchronous decision, its fetching aside).
// So is a usage-persist record standing for a QUOTA_UPDATED alone. A
// record without those headers, or whose key is not a family id, is read
// as any other.
func (n *Notifier) unwatched(r *kgo.Record) (int64, bool) {
	if standsFor(r) != string(envelope.SubQuotaUpdated) {
		return 0, false
	}
	fid, err := strconv.ParseInt(string(r.Key), 10, 64)
	if err != nil || fid <= 0 || n.hub.Subscribers(fid) > 0 {
		return 0, false
	}
	return fid, true
}

// decode reads a notification record, or the notifications a usage-persist
// record stands for (envelope.PersistNotifications; none for one that
// stands for none); reason says why they cannot be read. A usage-persist
// record the notifier cannot read is the write-behind's to dead-letter: it
// stands for nothing here (never dead-lettered by the notifier).
func (n *Notifier) decode(r *kgo.Record) ([]Notification, string) {
	ev, err := kafkarecord.Decode(r)
	if err != nil {
		if r.Topic == envelope.TopicUsagePersist {
			return nil, ""
		}
		return nil, err.Error()
	}
	var envs []envelope.Envelope[envelope.Notification]
	switch pl := ev.Payload.(type) {
	case envelope.Notification:
		envs = []envelope.Envelope[envelope.Notification]{{EventID: ev.EventID, EventType: ev.EventType,
			SubType: ev.SubType, Timestamp: ev.Timestamp, Payload: pl}}
	case envelope.UsagePersistPayload:
		envs, err = envelope.PersistNotifications(envelope.Envelope[envelope.UsagePersistPayload]{EventID: ev.EventID,
			EventType: ev.EventType, Timestamp: ev.Timestamp, Payload: pl})
		if err != nil {
			// The record itself is the write-behind's (stored, or
			// dead-lettered there); what it cannot stand for is lost
			// here, said once.
			n.cfg.log.Warn("notify: a usage-persist record names notifications that cannot be built; none derived",
				"event", ev.EventID, "err", err)
			return nil, ""
		}
	default:
		return nil, fmt.Sprintf("unexpected %s event on %s", ev.EventType, r.Topic)
	}
	notes := make([]Notification, 0, len(envs))
	for _, e := range envs {
		note, err := FromEvent(e, n.cfg.lang, n.cfg.loc)
		if err != nil {
			return nil, err.Error()
		}
		notes = append(notes, note)
	}
	return notes, ""
}
