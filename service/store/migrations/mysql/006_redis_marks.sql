-- redis_marks: how far each stream of marks the door writes for family
-- writes reached on each Redis node, per state generation (n: the highest
-- count recorded). Every judgement of that generation checks that the
-- node's marker is not below it: a node that lost a family write (a
-- rollback) has a lower count. A rebuild drops the other generations' rows.
CREATE TABLE IF NOT EXISTS redis_marks (
  generation VARCHAR(64)  NOT NULL,
  node       VARCHAR(191) NOT NULL,
  stream     VARCHAR(191) NOT NULL,
  n          BIGINT       NOT NULL,
  PRIMARY KEY (generation, node, stream)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
