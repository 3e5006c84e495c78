package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dabom/dpcs/envelope/kafkarecord"
	"github.com/dabom/dpcs/internal/sqldialect"
)

// Spool keeps records that Kafka did not acknowledge as outbox rows, for the
// Relay to publish in order once Kafka takes them again: the synchronous
// decisions' fallback (judge.WithSpool), so a decision is answered only once
// its records are in Kafka or in SQL. Give the relay WithKeep for the topics
// spooled whose rows must never expire (usage-persist). Safe for concurrent
// use.
type Spool struct {
	db   *sql.DB
	d    sqldialect.Dialect
	now  func() time.Time
	wake func()
}

// NewSpool returns a Spool writing to db's outbox in dialect d; wake, if not
// nil, is called after each spooled batch (Relay.Wake).
func NewSpool(db *sql.DB, d sqldialect.Dialect, wake func()) (*Spool, error) {
	if db == nil {
		return nil, invalid("spool", "db is required")
	}
	if d == sqldialect.Unknown {
		var err error
		if d, err = sqldialect.Detect(db); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return &Spool{db: db, d: d, now: time.Now, wake: wake}, nil
}

var spoolCols = []string{"aggregate_key", "topic", "event_id", "event_type", "payload", "created_at", "attempts"}

// Spool writes recs as outbox rows in one transaction, in order. A record
// whose event id is in the outbox already (spooled before, or published) is
// skipped: ids are deterministic, so it is the same record. Every record
// must carry a DPCS envelope (kafkarecord.New); one that does not decode is
// an error wrapping ErrInvalid and nothing is written.
func (s *Spool) Spool(ctx context.Context, recs []*kgo.Record) error {
	if len(recs) == 0 {
		return nil
	}
	args := make([]any, 0, len(recs)*len(spoolCols))
	now := s.d.Time(s.now())
	for i, r := range recs {
		ev, err := kafkarecord.Decode(r)
		if err != nil {
			return fmt.Errorf("%w: record %d (topic %s): %w", ErrInvalid, i, r.Topic, err)
		}
		args = append(args, string(r.Key), r.Topic, ev.EventID, string(ev.EventType), string(r.Value), now, 0)
	}
	per := max(1, min(len(recs), s.d.MaxParams()/len(spoolCols)))
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outbox: spool: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	for from := 0; from < len(recs); from += per {
		n := min(per, len(recs)-from)
		q := s.d.InsertIgnore("outbox", spoolCols, n)
		if _, err := tx.ExecContext(ctx, q, args[from*len(spoolCols):(from+n)*len(spoolCols)]...); err != nil {
			return fmt.Errorf("outbox: spool: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outbox: spool: %w", err)
	}
	if s.wake != nil {
		s.wake()
	}
	return nil
}

// Pending returns how many rows of topic the relay has not handled yet
// (those after its cursor).
func Pending(ctx context.Context, db *sql.DB, topic string) (int64, error) {
	var n int64
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox o, outbox_cursor c
		WHERE c.id = 1 AND o.id > c.last_id AND o.topic = ?`, topic).Scan(&n); err != nil {
		return 0, fmt.Errorf("outbox: pending: %w", err)
	}
	return n, nil
}
