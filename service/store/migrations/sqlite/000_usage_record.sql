-- usage_record for SQLite; see migrations/mysql/000_usage_record.sql. Times
-- are UTC text 'YYYY-MM-DD HH:MM:SS.SSS', so text order is time order. A
-- table created before total_bytes … crossed existed gets them from
-- columns/usage_record.sql.
CREATE TABLE IF NOT EXISTS usage_record (
  id              INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  event_id        TEXT    NOT NULL,
  family_id       INTEGER NOT NULL,
  customer_id     INTEGER NOT NULL,
  app_id          TEXT    NOT NULL DEFAULT '',
  bytes_used      INTEGER NOT NULL,
  process_result  TEXT    NOT NULL,
  remaining_after INTEGER NOT NULL,
  rule            TEXT    NOT NULL DEFAULT '',
  event_time      TEXT    NOT NULL,
  created_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  total_bytes     INTEGER NOT NULL DEFAULT 0,
  daily_used      INTEGER NOT NULL DEFAULT 0,
  monthly_used    INTEGER NOT NULL DEFAULT 0,
  throttle_kbps   INTEGER NOT NULL DEFAULT 0,
  crossed         TEXT    NOT NULL DEFAULT '',
  grant_id        TEXT    NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_usage_record_event_id ON usage_record (event_id);
CREATE INDEX IF NOT EXISTS idx_usage_record_family_time ON usage_record (family_id, event_time);
