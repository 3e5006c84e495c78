-- usage_record: the history of every judged usage event (doc/store.md),
-- written by the write-behind from usage-persist (store.NewUsageWriter).
-- event_id is the usage event's id (the persist payload's originEventId),
-- UNIQUE: a redelivered record is ignored. MySQL 8 / MariaDB 10.6+. Run
-- first by store.Migrate, and alone by store.MigrateUsage (the processor's).
--
-- total_bytes … crossed hold the rest of the engine's result (the persist
-- payload's totalBytes, dailyUsedBytes, monthlyUsedBytes, throttleKbps and
-- crossed as "50:1,30:2"), for rebuilding Redis from this table. A table
-- created before they existed (v0.1.x) gets them from
-- columns/usage_record.sql. grant_id is set on the row of a grant step's
-- charge (event_id the step's id, bytes_used what it charged: used
-- whatever process_result, the answer about the next units; the step
-- itself is in grant_step). Every report of the table reads it by family
-- (idx_usage_record_family_time): an index is a cost on every insert, and
-- the (customer_id, event_time) index of earlier releases is dropped by
-- the migration (store.retiredIndexes).
CREATE TABLE IF NOT EXISTS usage_record (
  id              BIGINT       NOT NULL AUTO_INCREMENT,
  event_id        VARCHAR(255) NOT NULL,
  family_id       BIGINT       NOT NULL,
  customer_id     BIGINT       NOT NULL,
  app_id          VARCHAR(255) NOT NULL DEFAULT '',
  bytes_used      BIGINT       NOT NULL,
  process_result  VARCHAR(64)  NOT NULL,
  remaining_after BIGINT       NOT NULL,
  rule            VARCHAR(255) NOT NULL DEFAULT '',
  event_time      DATETIME(3)  NOT NULL,
  created_at      DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  total_bytes     BIGINT       NOT NULL DEFAULT 0,
  daily_used      BIGINT       NOT NULL DEFAULT 0,
  monthly_used    BIGINT       NOT NULL DEFAULT 0,
  throttle_kbps   BIGINT       NOT NULL DEFAULT 0,
  crossed         VARCHAR(255) NOT NULL DEFAULT '',
  grant_id        VARCHAR(255) NOT NULL DEFAULT '',
  PRIMARY KEY (id),
  UNIQUE KEY uk_usage_record_event_id (event_id),
  KEY idx_usage_record_family_time (family_id, event_time)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
