-- family_settle: families with a change whose step through the door to the
-- quota state is not confirmed yet (service/family): a row is written
-- before such a change and deleted once the door took it (token: the
-- writer's, so a later change's row is not deleted by an earlier one). A
-- row left behind (the door failed, the process died) is settled by the
-- settler, which applies the family's settings from SQL through the door
-- (doc/architecture.md, "One place for each family change").
CREATE TABLE IF NOT EXISTS family_settle (
  family_id BIGINT      NOT NULL,
  token     BIGINT      NOT NULL,
  since     DATETIME(3) NOT NULL,
  PRIMARY KEY (family_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
