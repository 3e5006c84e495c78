// Package kafkaops is the back office's side of Kafka: it pages through
// the dead-letter topics newest first, reads one dead letter, replays it to
// the topic it came from, and counts consumer lags and the records a topic
// holds (BackOffice, over franz-go). The API's dead-letter browser and
// operations view use it through their own interfaces (backoffice.DeadLetters,
// backoffice.KafkaStats, in service/api/backoffice).
package kafkaops
