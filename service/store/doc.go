// Package store is DPCS's SQL store (doc/store.md): families, members
// (MEMBER / OWNER, soft delete) and back-office admins, policy templates and
// per-member policy assignments with monotonic versions, top-ups, the audit
// log, the outbox rows each change writes in its transaction (published by
// service/outbox's relay), refresh tokens with rotation and reuse
// detection, the usage history usage_record with its reports, and the reads
// a rebuild of the quota engine's Redis state needs (ReadFamilies; the
// rebuild itself is service/recovery's). It runs on MySQL 8 / MariaDB 10.6+
// (github.com/go-sql-driver/mysql) and SQLite (modernc.org/sqlite); dialect
// differences live in internal/sqldialect. The store is the truth: it
// writes no Redis and produces to no Kafka.
//
// # Setup
//
//	if err := store.Migrate(ctx, db); err != nil { … } // idempotent; also creates usage_record
//	s, err := store.New(db, store.WithLocation(zone))  // zone: the quota engine's
//
// With SQLite, open the database with one connection (db.SetMaxOpenConns(1)),
// as service.Config.SQL does: every transaction goes through it.
//
// Migrate runs migrations/<dialect>/*.sql in name order, then adds the
// columns that tables created by earlier releases lack
// (migrations/<dialect>/columns/<table>.sql); see doc/store.md.
//
// # usage_record
//
// The usage history is the store's table like the others: its schema
// (migrations/<dialect>/000_usage_record.sql), its row UsageRecord, the
// write-behind's decoder of usage-persist records and its writer, which the
// generic writebehind runner runs:
//
//	if err := store.MigrateUsage(ctx, db); err != nil { … } // usage_record alone, for the processor
//	w, err := store.NewUsageWriter(db)                     // a writebehind.SQLWriter[store.UsageRecord]
//	r, err := writebehind.NewRunner(store.DecodeUsageRecord, w, kopts)
//
// Usage, JudgedSince and ReadFamilies read it; FormatCrossed and
// ParseCrossed are its crossed column.
//
// # Policy changes
//
// UpdatePolicy writes, in one transaction, the member's assignment with
// version + 1, an audit row with before and after, and an outbox row holding
// the POLICY_UPDATED envelope (service/outbox). The caller (service/family,
// which owns every family change's sequence) then applies the returned
// version to Redis at once, through the door to the quota state, so the
// next event is judged by the new policy even before the relay has
// published:
//
//	up, err := s.UpdatePolicy(ctx, store.PolicyChange{FamilyID: f, CustomerID: c,
//		Set: map[string]string{"LIMIT:DATA:MONTHLY": "524288000"}, By: actor})
//	if err != nil { … } // ErrNotFound, ErrStaleVersion, ErrInvalid …
//	enf, err := qs.Enforce(ctx, f, c, up.Policy.Version, up.Constraints) // qs: a *judge.State
//	relay.Wake()
//
// The outbox's relay (service/outbox) publishes the outbox in id order.
//
// # Rebuild
//
// ReadFamilies reads families' whole state for a restore of Redis (plan,
// thresholds, members, constraints and versions, the accepted months'
// top-ups, usage and threshold arms, the dedupe window's judged events);
// service/recovery restores them through the door to the quota state.
//
// AddTopUp and SetPlan refuse (*PoolLimitError) a change that would take a
// month's pool, plan + top-ups, over policy.MaxBytes — the engine would
// refuse it, now and at every rebuild. AddOwnTopUp also caps a month's
// top-ups by the family's own members (*TopUpLimitError).
//
// Logins (Authenticate) are a member id — a positive decimal without a
// leading 0 — or a phone, which starts with 0 or + (AddMember refuses other
// phones): the two never overlap, so an id cannot capture a phone's login.
//
// Errors wrap the sentinels ErrNotFound, ErrConflict, ErrStaleVersion,
// ErrInvalid, ErrBadCredentials, ErrTokenReused and ErrTokenExpired; map
// them to HTTP in one place (the service). Refusals a caller can act on are
// *FieldError values: Field names the argument and Msg is written to be
// shown to the caller; an error's Error() text (package prefixes, database
// messages) is for logs only.
package store
