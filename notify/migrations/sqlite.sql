-- Inbox of notify.SQLInbox (SQLite). See mysql.sql. Times are UTC text in
-- sqldialect.SQLiteTimeLayout.
CREATE TABLE IF NOT EXISTS notification (
  id           INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  event_id     TEXT    NOT NULL UNIQUE,
  dedupe_key   TEXT    NOT NULL UNIQUE,
  family_id    INTEGER NOT NULL,
  member_id    INTEGER NULL,
  kind         TEXT    NOT NULL,
  title        TEXT    NOT NULL,
  body         TEXT    NOT NULL,
  payload      TEXT    NOT NULL,
  created_at   TEXT    NOT NULL,
  delivered_at TEXT    NULL
);
CREATE INDEX IF NOT EXISTS idx_notification_family ON notification (family_id, id);

CREATE TABLE IF NOT EXISTS notification_read (
  notification_id INTEGER NOT NULL,
  member_id       INTEGER NOT NULL,
  read_at         TEXT    NOT NULL,
  PRIMARY KEY (notification_id, member_id)
);
