-- deadletter_replay: the dead-letter records replayed to their origin topic
-- (one row each, keyed by the record's place in its DLT), so a record is
-- replayed at most once.
CREATE TABLE IF NOT EXISTS deadletter_replay (
  dlt_topic     VARCHAR(249) NOT NULL,
  dlt_partition INT          NOT NULL,
  dlt_offset    BIGINT       NOT NULL,
  origin_topic  VARCHAR(249) NOT NULL,
  replayed_by   BIGINT       NOT NULL,
  replayed_at   DATETIME(3)  NOT NULL,
  PRIMARY KEY (dlt_topic, dlt_partition, dlt_offset)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
