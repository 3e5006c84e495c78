// Package idempotency lets any Kafka consumer (or HTTP handler) process each
// event at most once at a time and remember what came of it, so that the
// redeliveries of an at-least-once pipeline are recognised.
//
// # Use
//
//	store, _ := idempotency.NewRedisStore(rdb) // *redis.Client or *redis.ClusterClient
//	guard, _ := idempotency.New(store)          // lease 30 s, results kept 24 h
//
//	key := idempotency.Key("notification-group", ev.EventID)
//	c, err := guard.Claim(ctx, key)
//	switch {
//	case err != nil: // the store failed: do not process, do not commit; retry later
//	case c.Outcome == idempotency.Done: // a duplicate: c.Result is what the first delivery stored
//	case c.Outcome == idempotency.InProgress: // another worker has it; retry after c.RetryAfter
//	case c.Outcome == idempotency.Acquired:
//		result, err := handle(ctx, ev)
//		if err != nil {
//			guard.Release(ctx, c) // let a retry (ours or another worker's) run it again
//			return err
//		}
//		guard.Complete(ctx, c, result) // duplicates from now on get result
//	}
//
// Guard.Do wraps exactly that.
//
// # Guarantees
//
//   - Of any number of concurrent claims of a key, exactly one is Acquired
//     (Redis: SET NX PX inside a script; SQL: the primary key of an
//     insert-ignore and a conditional UPDATE).
//   - A claim is a lease, never a lock for ever: a worker that dies while
//     holding a key loses it when the lease expires, and exactly one other
//     worker then takes the key over. The event is not lost.
//   - Complete and Release act only while the key still holds the caller's
//     claim (a random token per claim, compared and replaced or deleted in
//     one script / one conditional statement), so a worker whose lease ran
//     out never overwrites or deletes the claim of the worker that took over:
//     it gets ErrLeaseLost.
//   - A completed result is remembered for the TTL (24 h); afterwards the key
//     may be claimed again. Choose a TTL longer than any redelivery.
//
// The lease is what protects against concurrency; it cannot protect against a
// worker that is paused longer than its lease (GC, a stopped VM) and then
// writes. Work done under a claim must therefore itself be idempotent at its
// destination (a UNIQUE key, a conditional update): idempotency is the cheap
// first line, the destination's unique key the last.
//
// # Stores
//
// RedisStore keeps one string per key: fast, shared by all workers, and
// Cluster-safe since every operation is a single-key script; TaggedKey puts a
// key into the slot of related keys. It forgets keys when they expire or Redis
// is lost.
//
// SQLStore is the durable second line, for keys Redis has forgotten: a
// processed-events table whose primary key is `{consumerGroup}:{eventId}`,
// claimed with `INSERT IGNORE` (MySQL/MariaDB) or `INSERT OR IGNORE` (SQLite),
// with lease expiry stored as a timestamp. Migrate creates the table; Purge
// deletes expired rows. Dialect differences live in internal/sqldialect. The
// package imports no SQL driver: open the *sql.DB with the driver of your
// choice; the dialect is detected from its type or named with WithDialect.
//
// Both pass one shared test suite, and a property test claims one key from
// many goroutines at once through every store.
package idempotency
