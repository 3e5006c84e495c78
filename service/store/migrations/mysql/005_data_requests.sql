-- data_request: "ask for more". A member asks its family's owners for extra
-- data; an owner approves it (grant DAY or MONTH: an extra allowance
-- LIMIT:DATA:EXTRA:<period> in the member's policy; TOPUP: a top-up of the
-- family pool) or declines it, once. client_key is the requester's
-- idempotency key (NULL: none): one request per member and key.
CREATE TABLE IF NOT EXISTS data_request (
  id            BIGINT        NOT NULL AUTO_INCREMENT,
  family_id     BIGINT        NOT NULL,
  customer_id   BIGINT        NOT NULL,
  amount_bytes  BIGINT        NOT NULL,
  message       VARCHAR(800)  NOT NULL DEFAULT '',
  client_key    VARCHAR(128)  NULL,
  status        VARCHAR(16)   NOT NULL,
  grant_kind    VARCHAR(16)   NOT NULL DEFAULT '',
  granted_bytes BIGINT        NOT NULL DEFAULT 0,
  period        VARCHAR(8)    NOT NULL DEFAULT '',
  reason        VARCHAR(800)  NOT NULL DEFAULT '',
  answered_by   BIGINT        NULL,
  answered_at   DATETIME(3)   NULL,
  created_at    DATETIME(3)   NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uq_data_request_client_key (customer_id, client_key),
  KEY idx_data_request_family_status (family_id, status, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
