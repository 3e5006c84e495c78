-- deadletter_replay: the dead-letter records replayed to their origin topic
-- (one row each, keyed by the record's place in its DLT), so a record is
-- replayed at most once.
CREATE TABLE IF NOT EXISTS deadletter_replay (
  dlt_topic TEXT NOT NULL,
  dlt_partition INTEGER NOT NULL,
  dlt_offset INTEGER NOT NULL,
  origin_topic TEXT NOT NULL,
  replayed_by INTEGER NOT NULL,
  replayed_at TEXT NOT NULL,
  PRIMARY KEY (dlt_topic, dlt_partition, dlt_offset)
);
