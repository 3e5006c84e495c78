-- family_note: a care agent's (or an admin's) notes on a family, newest
-- read first: what the family called about and what was done. Notes are
-- never edited or deleted (the audit log records each too).
CREATE TABLE IF NOT EXISTS family_note (
  id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  family_id INTEGER NOT NULL,
  author_id INTEGER NOT NULL,
  body TEXT NOT NULL,
  created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_family_note_family ON family_note (family_id, id);
