-- redis_state: one row (id 1): the Redis state generation SQL knows (written
-- by the last rebuild; a Redis whose markers say otherwise is not trusted),
-- the rebuild lease (one rebuilder at a time) and the last rebuild's figures.
CREATE TABLE IF NOT EXISTS redis_state (
  id           INT          NOT NULL,
  generation   VARCHAR(64)  NOT NULL,
  owner        VARCHAR(128) NOT NULL,
  lease_until  DATETIME(3)  NOT NULL,
  lease_seq    BIGINT       NOT NULL,
  rebuilt_at   DATETIME(3)  NULL,
  reason       VARCHAR(512) NOT NULL DEFAULT '',
  families     BIGINT       NOT NULL DEFAULT 0,
  failed       BIGINT       NOT NULL DEFAULT 0,
  duration_ms  BIGINT       NOT NULL DEFAULT 0,
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

INSERT IGNORE INTO redis_state (id, generation, owner, lease_until, lease_seq)
VALUES (1, '', '', '1970-01-01 00:00:00.000', 0);
