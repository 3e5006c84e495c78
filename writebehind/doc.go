// Package writebehind persists a stream of items in batches: the
// write-behind of the processor deployable (doc/deploy.md, "The binaries")
// that moves usage-persist records from Kafka into MySQL, and a generic
// batching sink for any consumer.
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
//     live in internal/sqldialect). NewUsageWriter and MigrateUsage are the
//     usage_record table of DPCS; DecodeUsageRecord the usage-persist
//     Decoder.
//
// # Use
//
//	db, _ := sql.Open("mysql", dsn)
//	_ = writebehind.MigrateUsage(ctx, db)
//	w, _ := writebehind.NewUsageWriter(db)
//	r, _ := writebehind.NewRunner(writebehind.DecodeUsageRecord, w,
//		[]kgo.Opt{kgo.SeedBrokers("127.0.0.1:9092")}, // usage-persist, batches of 100 or 5 s
//		writebehind.WithConsumer(consumer.WithGroup("usage-persist-writer")))
//	go r.Run(ctx)
//	…
//	r.Close(shutdownCtx) // writes and commits what it holds, leaves the group
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
//     unique key (usage_record.event_id) drops them.
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
