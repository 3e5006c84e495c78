-- redis_state: one row (id 1): the Redis state generation SQL knows (written
-- by the last rebuild; a Redis whose markers say otherwise is not trusted),
-- the rebuild lease (one rebuilder at a time) and the last rebuild's figures.
CREATE TABLE IF NOT EXISTS redis_state (
  id INTEGER NOT NULL PRIMARY KEY,
  generation TEXT NOT NULL,
  owner TEXT NOT NULL,
  lease_until TEXT NOT NULL,
  lease_seq INTEGER NOT NULL,
  rebuilt_at TEXT NULL,
  reason TEXT NOT NULL DEFAULT '',
  families INTEGER NOT NULL DEFAULT 0,
  failed INTEGER NOT NULL DEFAULT 0,
  duration_ms INTEGER NOT NULL DEFAULT 0
);

INSERT OR IGNORE INTO redis_state (id, generation, owner, lease_until, lease_seq)
VALUES (1, '', '', '1970-01-01 00:00:00.000', 0);
