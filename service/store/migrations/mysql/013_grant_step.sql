-- grant_step: every judged grant step (a network's create, update or
-- release of a grant, quota.GrantOp), written by the write-behind from
-- usage-persist records with the member "grant" (store.NewUsageWriter),
-- beside the step's charge in usage_record (the same event id). Rows are
-- only inserted (INSERT IGNORE on step_id): a grant's steps form a chain
-- (previous_step, the step whose reservation this one returned), so its
-- latest reservation is the open row no other row names, whatever order
-- the records arrived in. A rebuild restores those of the accepted months
-- (store.ReadFamilies), and the answers of the steps written within the
-- dedupe window. step_time is the step's time: its reservation's day and
-- month. reclaim lists grant ids, comma-separated. category is the app
-- category the step was judged as ('' in rows of releases before it): its
-- charge counts for that category's daily budget on the step's day.
CREATE TABLE IF NOT EXISTS grant_step (
  id            BIGINT       NOT NULL AUTO_INCREMENT,
  step_id       VARCHAR(255) NOT NULL,
  family_id     BIGINT       NOT NULL,
  customer_id   BIGINT       NOT NULL,
  grant_id      VARCHAR(255) NOT NULL,
  previous_step VARCHAR(255) NOT NULL DEFAULT '',
  granted       BIGINT       NOT NULL,
  is_open       TINYINT      NOT NULL,
  is_final      TINYINT      NOT NULL DEFAULT 0,
  overage       BIGINT       NOT NULL DEFAULT 0,
  reserved      BIGINT       NOT NULL DEFAULT 0,
  valid_until   DATETIME(3)  NULL,
  reclaim       TEXT         NOT NULL,
  step_time     DATETIME(3)  NOT NULL,
  category      VARCHAR(32)  NOT NULL DEFAULT '',
  created_at    DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY uk_grant_step_step_id (step_id),
  KEY idx_grant_step_family_time (family_id, step_time)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
