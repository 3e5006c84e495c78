-- threshold_rearms: the alert thresholds a pool change (a top-up, a larger
-- plan) re-armed, per family, month (YYYYMM) and threshold (percent), with
-- the arm after which it was re-armed (the highest recorded). A rebuild
-- restores such a threshold as armed even when the pool is below it again
-- (a plan cut since): usage_record alone cannot tell it from a fired one.
CREATE TABLE IF NOT EXISTS threshold_rearms (
  family_id INTEGER NOT NULL,
  month TEXT NOT NULL,
  pct INTEGER NOT NULL,
  arm INTEGER NOT NULL,
  PRIMARY KEY (family_id, month, pct)
);
