-- Processed-events table of idempotency.SQLStore (SQLite). See mysql.sql.
CREATE TABLE IF NOT EXISTS processed_events (
  idempotency_key TEXT    NOT NULL PRIMARY KEY,
  token           TEXT    NOT NULL,
  done            INTEGER NOT NULL DEFAULT 0,
  result          BLOB    NULL,
  expires_at      INTEGER NOT NULL,
  created_at      INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_processed_events_expires ON processed_events (expires_at);
