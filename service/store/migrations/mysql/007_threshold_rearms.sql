-- threshold_rearms: the alert thresholds a pool change (a top-up, a larger
-- plan) re-armed, per family, month (YYYYMM) and threshold (percent), with
-- the arm after which it was re-armed (the highest recorded). A rebuild
-- restores such a threshold as armed even when the pool is below it again
-- (a plan cut since): usage_record alone cannot tell it from a fired one.
CREATE TABLE IF NOT EXISTS threshold_rearms (
  family_id BIGINT  NOT NULL,
  month     CHAR(6) NOT NULL,
  pct       INT     NOT NULL,
  arm       INT     NOT NULL,
  PRIMARY KEY (family_id, month, pct)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
