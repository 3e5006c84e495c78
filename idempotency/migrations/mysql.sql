-- Processed-events table of idempotency.SQLStore (MySQL 8 / MariaDB 10.6+).
-- idempotency_key is `{consumerGroup}:{eventId}` (one row per consumer group and event), unique.
-- done = 0: claimed by token until expires_at; done = 1: completed with
-- result, remembered until expires_at. Times are Unix milliseconds.
CREATE TABLE IF NOT EXISTS processed_events (
  idempotency_key VARCHAR(255) NOT NULL,
  token           VARCHAR(64)  NOT NULL,
  done            TINYINT      NOT NULL DEFAULT 0,
  result          BLOB         NULL,
  expires_at      BIGINT       NOT NULL,
  created_at      BIGINT       NOT NULL,
  PRIMARY KEY (idempotency_key),
  KEY idx_processed_events_expires (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
