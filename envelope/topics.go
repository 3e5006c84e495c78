package envelope

// Topics (doc/wire-format.md, "Topics and records"). Every record is keyed by
// the decimal familyId, and partitioned by Kafka's default (murmur2)
// partitioner, so producers in any language co-partition. Package
// envelope/kafkarecord turns envelopes into franz-go records and back.
const (
	TopicUsageEvents        = "usage-events"        // DATA_USAGE: simulator / network → processor
	TopicPolicyUpdated      = "policy-updated"      // POLICY_UPDATED: api (outbox) → processor
	TopicUsagePersist       = "usage-persist"       // USAGE_PERSIST: processor → write-behind
	TopicNotificationEvents = "notification-events" // NOTIFICATION: processor → notifier
)

// DLT returns the dead-letter topic of topic, where consumers put records
// they cannot process.
func DLT(topic string) string { return topic + ".DLT" }

// DefaultPartitions is the partition count of DPCS topics.
const DefaultPartitions = 10

// Topics lists every DPCS topic with its dead-letter topic.
func Topics() []string {
	var ts []string
	for _, t := range []string{TopicUsageEvents, TopicPolicyUpdated, TopicUsagePersist, TopicNotificationEvents} {
		ts = append(ts, t, DLT(t))
	}
	return ts
}
