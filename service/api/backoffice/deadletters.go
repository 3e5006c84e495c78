package backoffice

import (
	"context"

	"github.com/dabom/dpcs/service/kafkaops"
)

// DeadLetters reads the dead-letter topics and replays their records: the
// back office's dead-letter browser (Config.DeadLetters).
type DeadLetters interface {
	// List returns a page of records of q.Topics, newest first.
	List(ctx context.Context, q kafkaops.DeadLetterQuery) (kafkaops.DeadLetterPage, error)
	// Get returns the record at offset of the DLT partition, or
	// kafkaops.ErrDeadLetterNotFound.
	Get(ctx context.Context, tp kafkaops.TopicPartition, offset int64) (kafkaops.DeadLetter, error)
	// Replay produces d's key, value and original headers (without the
	// dlt-* ones) to d.Origin and returns once the broker acknowledged it.
	Replay(ctx context.Context, d kafkaops.DeadLetter) error
}

// KafkaStats reads what the operations view shows of Kafka
// (Config.KafkaStats).
type KafkaStats interface {
	// Lag returns each group's lag (records not yet committed) per topic.
	Lag(ctx context.Context, groups ...string) (map[string]map[string]int64, error)
	// Records returns how many records each topic holds (end minus start
	// offsets, over its partitions).
	Records(ctx context.Context, topics ...string) (map[string]int64, error)
}
