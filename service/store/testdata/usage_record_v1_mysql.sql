-- usage_record as first released (before total_bytes … crossed), for the
-- migration tests (usage_record_test.go): store.Migrate and
-- store.MigrateUsage must bring such a table up to date.
-- usage_record: the history of every judged usage event (doc/store.md),
-- written by the write-behind from usage-persist. event_id is the usage
-- event's id (the persist payload's originEventId), UNIQUE: a redelivered
-- record is ignored. MySQL 8 / MariaDB 10.6+.
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
  PRIMARY KEY (id),
  UNIQUE KEY uk_usage_record_event_id (event_id),
  KEY idx_usage_record_family_time (family_id, event_time),
  KEY idx_usage_record_customer_time (customer_id, event_time)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
