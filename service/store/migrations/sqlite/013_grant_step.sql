-- grant_step for SQLite; see migrations/mysql/013_grant_step.sql.
CREATE TABLE IF NOT EXISTS grant_step (
  id            INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  step_id       TEXT    NOT NULL,
  family_id     INTEGER NOT NULL,
  customer_id   INTEGER NOT NULL,
  grant_id      TEXT    NOT NULL,
  previous_step TEXT    NOT NULL DEFAULT '',
  granted       INTEGER NOT NULL,
  is_open       INTEGER NOT NULL,
  is_final      INTEGER NOT NULL DEFAULT 0,
  overage       INTEGER NOT NULL DEFAULT 0,
  reserved      INTEGER NOT NULL DEFAULT 0,
  valid_until   TEXT    NULL,
  reclaim       TEXT    NOT NULL DEFAULT '',
  step_time     TEXT    NOT NULL,
  category      TEXT    NOT NULL DEFAULT '',
  created_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_grant_step_step_id ON grant_step (step_id);
CREATE INDEX IF NOT EXISTS idx_grant_step_family_time ON grant_step (family_id, step_time);
