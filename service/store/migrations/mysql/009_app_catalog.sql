-- app_catalog: the apps people see by name and the engine judges category
-- blocks with (GET /catalog; the back office edits it). Seeded with
-- policy.DefaultApps when the store migrates (insert-ignore: an edit or a
-- removal is never undone); a removed app keeps its row with deleted = 1,
-- so a table with no rows at all (never seeded) means the defaults.
CREATE TABLE IF NOT EXISTS app_catalog (
  app_id     VARCHAR(190)  NOT NULL,
  category   VARCHAR(16)   NOT NULL,
  name       VARCHAR(200)  NOT NULL,
  name_en    VARCHAR(200)  NOT NULL DEFAULT '',
  icon       VARCHAR(32)   NOT NULL DEFAULT '',
  position   INT           NOT NULL DEFAULT 0,
  deleted    TINYINT       NOT NULL DEFAULT 0,
  updated_at DATETIME(3)   NOT NULL,
  PRIMARY KEY (app_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
