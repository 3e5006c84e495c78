// Package outbox is the transactional outbox of the service's SQL store and
// its ordered relay to Kafka.
//
// A change and the event announcing it are written in one transaction:
// the store calls Enqueue with its *sql.Tx, so the event exists exactly when
// the change does. A Relay publishes the outbox in id order: it reads the
// rows after its cursor, publishes them, and advances the cursor past what
// Kafka acknowledged; a row that fails is retried with backoff and holds the
// rows behind it (a family's events are never published out of order) until
// it is older than the max age, when it moves to outbox_failed for an
// operator. A lease row lets any number of relays run with one publishing.
//
//	r, err := outbox.New(db, kgoClient, outbox.WithLogger(log))
//	go r.Run(ctx)
//	// after a write: r.Wake()
//
// The tables (outbox, outbox_cursor, outbox_failed) are created by
// service/store's migrations, which own every table of the service; see
// doc/store.md, "Outbox relay".
package outbox
