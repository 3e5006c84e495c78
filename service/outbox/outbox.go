package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/internal/sqldialect"
)

// ErrInvalid is wrapped by every error about a bad argument: an option
// value, an event that does not encode.
var ErrInvalid = errors.New("outbox: invalid")

func invalid(field, msg string) error { return fmt.Errorf("%w: %s: %s", ErrInvalid, field, msg) }

// Execer runs a statement: the caller's *sql.Tx (or *sql.DB).
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Enqueue writes env as the next outbox row for topic, keyed as its Kafka
// record will be (envelope/kafkarecord: the family id), with d's encoding
// of now as its creation time. Call it inside the transaction that makes the
// change the event announces (the transactional outbox): the event is
// published, in order, by a Relay once the transaction commits, and never
// if it rolls back. It returns the row's id, its publication position.
func Enqueue[T envelope.Payload](ctx context.Context, tx Execer, d sqldialect.Dialect, now time.Time, topic string, env envelope.Envelope[T]) (int64, error) {
	rec, err := kafkarecord.New(topic, env)
	if err != nil {
		return 0, fmt.Errorf("%w: event: %w", ErrInvalid, err)
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO outbox (aggregate_key, topic, event_id, event_type, payload, created_at, attempts)
		VALUES (?, ?, ?, ?, ?, ?, 0)`, string(rec.Key), topic, env.EventID, string(env.EventType), string(rec.Value), d.Time(now))
	if err != nil {
		return 0, fmt.Errorf("outbox: enqueue: %w", err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("outbox: enqueue: %w", err)
	}
	return id, nil
}
