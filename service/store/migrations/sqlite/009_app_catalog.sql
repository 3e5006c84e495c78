-- app_catalog: the apps people see by name and the engine judges category
-- blocks with (GET /catalog; the back office edits it). Seeded with
-- policy.DefaultApps when the store migrates (insert-ignore: an edit or a
-- removal is never undone); a removed app keeps its row with deleted = 1,
-- so a table with no rows at all (never seeded) means the defaults.
CREATE TABLE IF NOT EXISTS app_catalog (
  app_id TEXT NOT NULL PRIMARY KEY,
  category TEXT NOT NULL,
  name TEXT NOT NULL,
  name_en TEXT NOT NULL DEFAULT '',
  icon TEXT NOT NULL DEFAULT '',
  position INTEGER NOT NULL DEFAULT 0,
  deleted INTEGER NOT NULL DEFAULT 0,
  updated_at TEXT NOT NULL
);
