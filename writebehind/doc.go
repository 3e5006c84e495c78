// Package writebehind persists a stream of items in batches, for any item
// type and any table: a batching sink, a Kafka runner that commits after the
// write, and a multi-row insert-ignore SQL writer. The processor deployable
// (doc/deploy.md, "The binaries") runs it to move usage-persist records from
// Kafka into usage_record, whose schema, row type, decoder and writer are
// the store's (service/store: UsageRecord, DecodeUsageRecord,
// NewUsageWriter); this package knows no table.
//
// # Pieces
//
//   - Sink[T]: an in-memory batcher. Add items; a batch is written when it
//     holds WithBatchSize items (100) or its first item waited WithInterval
//     (5 s), on Flush and on Close (which drains). The buffer is bounded:
//     Add blocks while the writer is behind (back-pressure), honouring its
//     context.
//   - Writer[T]: the interface the caller implements (one method, Write a
//     batch). Its contract — all or error, safe to repeat, how to say that an
//     item can never be written — is on the type.
//   - Runner[T]: a Kafka consumer-group runner that decodes each record,
//     batches, writes, and commits offsets only after the write succeeded.
//     While the database fails it pauses fetching and retries the same batch
//     with backoff; records that can never be written go to "<topic>.DLT"
//     with the reason in a header. The Kafka side is package
//     envelope/consumer's lifecycle, shared with the notifier; its options
//     (group, topic, dead-letter topic, drain timeout, consumer hooks) are
//     given through WithConsumer.
//   - SQLWriter[T]: a Writer for any table with multi-row insert-ignore
//     statements, in the MySQL/MariaDB or SQLite dialect (the differences
//     live in internal/sqldialect). The caller owns the table: its schema,
//     its unique key and the RowFunc turning an item into its columns.
//
// # Use
//
// A table with a unique key (here clicks.click_id, created by the caller's
// migrations), a row type, a Decoder of its records and a RowFunc:
//
//	db, _ := sql.Open("mysql", dsn)
//	w, _ := writebehind.NewSQLWriter(db, "clicks", []string{"click_id", "user_id", "at"},
//		func(c Click) ([]any, error) { return []any{c.ID, c.User, c.At}, nil })
//	r, _ := writebehind.NewRunner(decodeClick, w, // decodeClick: func(*kgo.Record) (Click, error)
//		[]kgo.Opt{kgo.SeedBrokers("127.0.0.1:9092")}, // batches of 100 or 5 s
//		writebehind.WithConsumer(consumer.WithTopics("clicks"), consumer.WithGroup("clicks-writer")))
//	go r.Run(ctx)
//	…
//	r.Close(shutdownCtx) // writes and commits what it holds, leaves the group
//
// DPCS's own: writebehind.NewRunner(store.DecodeUsageRecord, w, kopts) with
// w from store.NewUsageWriter(db), after store.MigrateUsage (service.Workers).
//
// # Guarantees
//
//   - Nothing is dropped: a failed write is retried, same batch, same order,
//     with exponential backoff (100 ms doubling to a 30 s cap, WithBackoff)
//     until it succeeds. A Sink drops items only when Close's context ends
//     first, and says how many (ErrNotWritten); a Runner never, because what
//     it has not committed is still in Kafka.
//   - Nothing twice in the table: offsets are committed after the write, so
//     a crash redelivers written records; the writer's insert-ignore on the
//     table's unique key (usage_record.event_id for DPCS) drops them.
//   - Bounded memory: a Sink holds at most its buffer plus one batch; a
//     Runner at most one batch, and pauses fetching while it cannot write.
//   - Poison records are isolated: a Writer names bad items (*ItemError) or
//     flags a Permanent error, which is bisected down to the bad items; only
//     those are dead-lettered (Runner) or handed to WithReject (Sink), the
//     rest of the batch is written.
//
// Observability is through Hooks (OnFlush, OnError, OnRetry, OnReject,
// OnPause, OnResume, OnCommit) and an optional *slog.Logger.
//
// # SQLite driver
//
// The embedded default store (make run, no servers) is SQLite through
// modernc.org/sqlite: pure Go (a translation of the C library, no cgo, no
// WebAssembly runtime), a plain database/sql driver, the most widely used of
// the pure-Go options, measured at ≈ 53k rows/s with INSERT OR IGNORE on the
// 2-core development machine. github.com/ncruces/go-sqlite3, the alternative,
// runs SQLite compiled to WebAssembly on wazero, which is only fast where
// wazero has a compiler back end and adds a runtime to every binary. Plain
// `go mod tidy` handles its test-only dependencies (`make lint` runs
// `go mod tidy -diff`). Open it with a busy timeout and WAL, e.g.
// "file:dpcs.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)".
package writebehind
