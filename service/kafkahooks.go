package service

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// KafkaHooks returns the options that instrument one Kafka client: franz-go's
// kprom metrics (dpcs_kafka_*: connections; records, batches and bytes
// produced and fetched by topic; request, write-wait and throttle latency
// histograms; buffered records) on reg, labelled client=name. Every DPCS client built by a deployable gets its options from
// here; nil reg gives none. name must be unique among the clients alive on
// one registry (kprom unregisters a client's metrics when it closes): a
// second live client with the same name is not exported rather than failing.
func KafkaHooks(reg prometheus.Registerer, name string) []kgo.Opt {
	if reg == nil {
		return nil
	}
	m := kprom.NewMetrics("dpcs", kprom.Subsystem("kafka"), kprom.Registerer(lenientRegisterer{reg}),
		kprom.WithStaticLabel(prometheus.Labels{"client": name}),
		kprom.FetchAndProduceDetail(kprom.ByNode, kprom.ByTopic, kprom.Records, kprom.Batches,
			kprom.UncompressedBytes, kprom.CompressedBytes, kprom.ConsistentNaming),
		kprom.Histograms(kprom.RequestDurationE2E, kprom.WriteWait, kprom.RequestThrottled),
		kprom.Buckets(latencyBuckets))
	return []kgo.Opt{kgo.WithHooks(m)}
}

// lenientRegisterer turns kprom's MustRegister (a panic inside
// kgo.NewClient on a duplicate) into a registration that may fail quietly.
type lenientRegisterer struct{ prometheus.Registerer }

func (r lenientRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}
