-- family_note: a care agent's (or an admin's) notes on a family, newest
-- read first: what the family called about and what was done. Notes are
-- never edited or deleted (the audit log records each too).
CREATE TABLE IF NOT EXISTS family_note (
  id         BIGINT         NOT NULL AUTO_INCREMENT,
  family_id  BIGINT         NOT NULL,
  author_id  BIGINT         NOT NULL,
  body       VARCHAR(4000)  NOT NULL,
  created_at DATETIME(3)    NOT NULL,
  PRIMARY KEY (id),
  KEY idx_family_note_family (family_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
