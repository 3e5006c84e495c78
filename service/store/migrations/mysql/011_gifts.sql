-- gifts: data one member gave another of its family ("데이터 선물하기"),
-- one row per gift, written in the transaction that moves the members'
-- LIMIT:DATA:GIFT:<month> keys. The carriers' rules (gifts given and
-- received a month, what one member receives a month, a share of the
-- giver's plan) are counted here, and the family's 충전/선물 history reads
-- it. month is YYYYMM in the service time zone. Gifts are never cancelled.
CREATE TABLE IF NOT EXISTS gifts (
  id         BIGINT      NOT NULL AUTO_INCREMENT,
  family_id  BIGINT      NOT NULL,
  from_id    BIGINT      NOT NULL,
  to_id      BIGINT      NOT NULL,
  bytes      BIGINT      NOT NULL,
  month      CHAR(6)     NOT NULL,
  created_by BIGINT      NOT NULL,
  created_at DATETIME(3) NOT NULL,
  PRIMARY KEY (id),
  KEY idx_gifts_family_month (family_id, month, id),
  KEY idx_gifts_from_month (from_id, month),
  KEY idx_gifts_to_month (to_id, month)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
