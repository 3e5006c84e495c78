-- DPCS store schema for SQLite 3.35+; the MySQL script
-- (migrations/mysql/001_store.sql) documents the tables. Idempotent.
-- usage_record is created by 000_usage_record.sql, run before this
-- script. Times are UTC text 'YYYY-MM-DD HH:MM:SS.SSS', so text order is
-- time order. No foreign keys.

CREATE TABLE IF NOT EXISTS families (
  id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  plan_bytes INTEGER NOT NULL DEFAULT 0,
  thresholds TEXT NULL,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_families_name ON families (name);

-- members: family members (role MEMBER / OWNER) and back-office admins
-- (role ADMIN, family_id NULL). phone is NULL when unknown or released by a
-- soft delete, so NULLs do not collide under the UNIQUE key.
CREATE TABLE IF NOT EXISTS members (
  id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  family_id INTEGER NULL,
  name TEXT NOT NULL,
  phone TEXT NULL,
  password_hash TEXT NULL,
  role TEXT NOT NULL,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  deleted_at TEXT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_members_phone ON members (phone);
CREATE INDEX IF NOT EXISTS idx_members_family ON members (family_id, deleted_at);

CREATE TABLE IF NOT EXISTS policy_template (
  id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  type TEXT NOT NULL,
  description TEXT NOT NULL,
  require_role TEXT NOT NULL,
  default_rules TEXT NOT NULL,
  active INTEGER NOT NULL DEFAULT 1,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_policy_template_name ON policy_template (name);

-- policy_assignment: one row per member, the member's whole constraint map
-- and its version (monotonic per member, the version Redis and the
-- policy-updated events carry).
CREATE TABLE IF NOT EXISTS policy_assignment (
  customer_id INTEGER NOT NULL,
  family_id INTEGER NOT NULL,
  template_id INTEGER NULL,
  rules TEXT NOT NULL,
  version INTEGER NOT NULL,
  updated_by INTEGER NOT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (customer_id)
);
CREATE INDEX IF NOT EXISTS idx_policy_assignment_family ON policy_assignment (family_id);

-- topups: month is YYYYMM in the service time zone, the pool month it
-- counts for.
CREATE TABLE IF NOT EXISTS topups (
  id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  family_id INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  month TEXT NOT NULL,
  created_by INTEGER NOT NULL,
  created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_topups_family_month ON topups (family_id, month);

CREATE TABLE IF NOT EXISTS audit_log (
  id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  family_id INTEGER NULL,
  actor_id INTEGER NOT NULL,
  actor_role TEXT NOT NULL,
  action TEXT NOT NULL,
  target TEXT NOT NULL,
  before_json TEXT NULL,
  after_json TEXT NULL,
  created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_audit_log_family ON audit_log (family_id, id);
CREATE INDEX IF NOT EXISTS idx_audit_log_actor ON audit_log (actor_id, id);
CREATE INDEX IF NOT EXISTS idx_audit_log_time ON audit_log (created_at);

-- outbox (doc/store.md, "Outbox relay"): append-only; id is the publication order.
CREATE TABLE IF NOT EXISTS outbox (
  id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  aggregate_key TEXT NOT NULL,
  topic TEXT NOT NULL,
  event_id TEXT NOT NULL,
  event_type TEXT NOT NULL,
  payload TEXT NOT NULL,
  created_at TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  next_retry_at TEXT NULL,
  last_error TEXT NULL,
  published_at TEXT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_outbox_event_id ON outbox (event_id);

-- outbox_cursor: one row (id 1): the last outbox id handled and the relay
-- lease (owner, lease_until; lease_seq makes every renewal change the row).
CREATE TABLE IF NOT EXISTS outbox_cursor (
  id INTEGER NOT NULL,
  last_id INTEGER NOT NULL,
  owner TEXT NOT NULL,
  lease_until TEXT NOT NULL,
  lease_seq INTEGER NOT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (id)
);


INSERT OR IGNORE INTO outbox_cursor (id, last_id, owner, lease_until, lease_seq, updated_at)
VALUES (1, 0, '', '1970-01-01 00:00:00.000', 0, '1970-01-01 00:00:00.000');

-- outbox_failed: rows that could not be published within the max age; kept
-- for operators, never retried automatically. id is the outbox id.
CREATE TABLE IF NOT EXISTS outbox_failed (
  id INTEGER NOT NULL,
  aggregate_key TEXT NOT NULL,
  topic TEXT NOT NULL,
  event_id TEXT NOT NULL,
  event_type TEXT NOT NULL,
  payload TEXT NOT NULL,
  created_at TEXT NOT NULL,
  attempts INTEGER NOT NULL,
  error_message TEXT NOT NULL,
  failed_at TEXT NOT NULL,
  PRIMARY KEY (id)
);


-- refresh_token (doc/security.md, "Authentication flows"): only the SHA-256 of a token is stored;
-- rotation_id groups the tokens of one login session for reuse detection.
CREATE TABLE IF NOT EXISTS refresh_token (
  id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  token_hash TEXT NOT NULL,
  customer_id INTEGER NOT NULL,
  rotation_id TEXT NOT NULL,
  created_at TEXT NOT NULL,
  expires_at TEXT NOT NULL,
  used_at TEXT NULL,
  revoked_at TEXT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_refresh_token_hash ON refresh_token (token_hash);
CREATE INDEX IF NOT EXISTS idx_refresh_token_rotation ON refresh_token (rotation_id);
CREATE INDEX IF NOT EXISTS idx_refresh_token_customer ON refresh_token (customer_id);
