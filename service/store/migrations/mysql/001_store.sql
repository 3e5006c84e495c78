-- DPCS store schema, MySQL 8 / MariaDB 10.6+. Idempotent: every statement
-- may run again. usage_record is created by 000_usage_record.sql, run
-- before this one.
-- Times are DATETIME(3) in UTC. No foreign keys: members are soft-deleted
-- and history rows (audit, outbox, usage) outlive what they name.

CREATE TABLE IF NOT EXISTS families (
  id         BIGINT       NOT NULL AUTO_INCREMENT,
  name       VARCHAR(100) NOT NULL,
  plan_bytes BIGINT       NOT NULL DEFAULT 0,
  thresholds VARCHAR(64)  NULL,
  created_at DATETIME(3)  NOT NULL,
  updated_at DATETIME(3)  NOT NULL,
  PRIMARY KEY (id),
  KEY idx_families_name (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- members: family members (role MEMBER / OWNER) and back-office admins
-- (role ADMIN, family_id NULL). phone is NULL when unknown or released by a
-- soft delete, so NULLs do not collide under the UNIQUE key.
CREATE TABLE IF NOT EXISTS members (
  id            BIGINT       NOT NULL AUTO_INCREMENT,
  family_id     BIGINT       NULL,
  name          VARCHAR(100) NOT NULL,
  phone         VARCHAR(32)  NULL,
  password_hash VARCHAR(100) NULL,
  role          VARCHAR(16)  NOT NULL,
  created_at    DATETIME(3)  NOT NULL,
  updated_at    DATETIME(3)  NOT NULL,
  deleted_at    DATETIME(3)  NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_members_phone (phone),
  KEY idx_members_family (family_id, deleted_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS policy_template (
  id            BIGINT       NOT NULL AUTO_INCREMENT,
  name          VARCHAR(100) NOT NULL,
  type          VARCHAR(50)  NOT NULL,
  description   TEXT         NOT NULL,
  require_role  VARCHAR(16)  NOT NULL,
  default_rules JSON         NOT NULL,
  active        TINYINT(1)   NOT NULL DEFAULT 1,
  created_at    DATETIME(3)  NOT NULL,
  updated_at    DATETIME(3)  NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_policy_template_name (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- policy_assignment: one row per member, the member's whole constraint map
-- and its version (monotonic per member, the version Redis and the
-- policy-updated events carry).
CREATE TABLE IF NOT EXISTS policy_assignment (
  customer_id BIGINT      NOT NULL,
  family_id   BIGINT      NOT NULL,
  template_id BIGINT      NULL,
  rules       JSON        NOT NULL,
  version     BIGINT      NOT NULL,
  updated_by  BIGINT      NOT NULL,
  updated_at  DATETIME(3) NOT NULL,
  PRIMARY KEY (customer_id),
  KEY idx_policy_assignment_family (family_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- topups: month is YYYYMM in the service time zone, the pool month it
-- counts for.
CREATE TABLE IF NOT EXISTS topups (
  id         BIGINT      NOT NULL AUTO_INCREMENT,
  family_id  BIGINT      NOT NULL,
  bytes      BIGINT      NOT NULL,
  month      CHAR(6)     NOT NULL,
  created_by BIGINT      NOT NULL,
  created_at DATETIME(3) NOT NULL,
  PRIMARY KEY (id),
  KEY idx_topups_family_month (family_id, month)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS audit_log (
  id          BIGINT       NOT NULL AUTO_INCREMENT,
  family_id   BIGINT       NULL,
  actor_id    BIGINT       NOT NULL,
  actor_role  VARCHAR(16)  NOT NULL,
  action      VARCHAR(64)  NOT NULL,
  target      VARCHAR(128) NOT NULL,
  before_json JSON         NULL,
  after_json  JSON         NULL,
  created_at  DATETIME(3)  NOT NULL,
  PRIMARY KEY (id),
  KEY idx_audit_log_family (family_id, id),
  KEY idx_audit_log_actor (actor_id, id),
  KEY idx_audit_log_time (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- outbox (doc/store.md, "Outbox relay"): append-only; id is the publication order.
CREATE TABLE IF NOT EXISTS outbox (
  id            BIGINT       NOT NULL AUTO_INCREMENT,
  aggregate_key VARCHAR(64)  NOT NULL,
  topic         VARCHAR(255) NOT NULL,
  event_id      VARCHAR(255) NOT NULL,
  event_type    VARCHAR(64)  NOT NULL,
  payload       JSON         NOT NULL,
  created_at    DATETIME(3)  NOT NULL,
  attempts      INT          NOT NULL DEFAULT 0,
  next_retry_at DATETIME(3)  NULL,
  last_error    TEXT         NULL,
  published_at  DATETIME(3)  NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_outbox_event_id (event_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- outbox_cursor: one row (id 1): the last outbox id handled and the relay
-- lease (owner, lease_until; lease_seq makes every renewal change the row).
CREATE TABLE IF NOT EXISTS outbox_cursor (
  id          INT          NOT NULL,
  last_id     BIGINT       NOT NULL,
  owner       VARCHAR(128) NOT NULL,
  lease_until DATETIME(3)  NOT NULL,
  lease_seq   BIGINT       NOT NULL,
  updated_at  DATETIME(3)  NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

INSERT IGNORE INTO outbox_cursor (id, last_id, owner, lease_until, lease_seq, updated_at)
VALUES (1, 0, '', '1970-01-01 00:00:00.000', 0, '1970-01-01 00:00:00.000');

-- outbox_failed: rows that could not be published within the max age; kept
-- for operators, never retried automatically. id is the outbox id.
CREATE TABLE IF NOT EXISTS outbox_failed (
  id            BIGINT       NOT NULL,
  aggregate_key VARCHAR(64)  NOT NULL,
  topic         VARCHAR(255) NOT NULL,
  event_id      VARCHAR(255) NOT NULL,
  event_type    VARCHAR(64)  NOT NULL,
  payload       JSON         NOT NULL,
  created_at    DATETIME(3)  NOT NULL,
  attempts      INT          NOT NULL,
  error_message TEXT         NOT NULL,
  failed_at     DATETIME(3)  NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- refresh_token (doc/security.md, "Authentication flows"): only the SHA-256 of a token is stored;
-- rotation_id groups the tokens of one login session for reuse detection.
CREATE TABLE IF NOT EXISTS refresh_token (
  id          BIGINT      NOT NULL AUTO_INCREMENT,
  token_hash  CHAR(64)    NOT NULL,
  customer_id BIGINT      NOT NULL,
  rotation_id CHAR(32)    NOT NULL,
  created_at  DATETIME(3) NOT NULL,
  expires_at  DATETIME(3) NOT NULL,
  used_at     DATETIME(3) NULL,
  revoked_at  DATETIME(3) NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_refresh_token_hash (token_hash),
  KEY idx_refresh_token_rotation (rotation_id),
  KEY idx_refresh_token_customer (customer_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
