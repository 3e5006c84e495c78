-- gifts: data one member gave another of its family ("데이터 선물하기"),
-- one row per gift, written in the transaction that moves the members'
-- LIMIT:DATA:GIFT:<month> keys. The carriers' rules (gifts given and
-- received a month, what one member receives a month, a share of the
-- giver's plan) are counted here, and the family's 충전/선물 history reads
-- it. month is YYYYMM in the service time zone. Gifts are never cancelled.
CREATE TABLE IF NOT EXISTS gifts (
  id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  family_id INTEGER NOT NULL,
  from_id INTEGER NOT NULL,
  to_id INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  month TEXT NOT NULL,
  created_by INTEGER NOT NULL,
  created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_gifts_family_month ON gifts (family_id, month, id);
CREATE INDEX IF NOT EXISTS idx_gifts_from_month ON gifts (from_id, month);
CREATE INDEX IF NOT EXISTS idx_gifts_to_month ON gifts (to_id, month);
