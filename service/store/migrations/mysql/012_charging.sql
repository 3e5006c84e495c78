-- member_imsi: the IMSI an operator set on a member, so a charging request
-- naming the subscriber as imsi-<digits> finds the member
-- (doc/wire-format.md, "Charging (Nchf)"). One IMSI per member and one
-- member per IMSI; removing the member deletes its row.
CREATE TABLE IF NOT EXISTS member_imsi (
  imsi       VARCHAR(15)  NOT NULL,
  member_id  BIGINT       NOT NULL,
  updated_at DATETIME(3)  NOT NULL,
  PRIMARY KEY (imsi),
  UNIQUE KEY uk_member_imsi_member (member_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- charging_session: one Nchf_ConvergedCharging charging data resource (a
-- PDU session's charging at the SMF): whose it is, where its notifications
-- go, the last invocation answered (a retry of it gets the same answer) and
-- the grants it holds per rating group (JSON). A session not updated by
-- expires_at is closed by the sweep, which releases its grants. create_key
-- names a create that carried a charging id, so its retry finds the session
-- it made; NULL otherwise (two creates, two sessions).
CREATE TABLE IF NOT EXISTS charging_session (
  ref          VARCHAR(64)    NOT NULL,
  create_key   VARCHAR(64)    NULL,
  family_id    BIGINT         NOT NULL,
  member_id    BIGINT         NOT NULL,
  subscriber   VARCHAR(80)    NOT NULL,
  consumer     VARCHAR(255)   NOT NULL,
  notify_uri   VARCHAR(2048)  NULL,
  state        VARCHAR(8)     NOT NULL,
  last_seq     BIGINT         NOT NULL,
  last_op      VARCHAR(8)     NOT NULL,
  answer       MEDIUMTEXT     NULL,
  grants       MEDIUMTEXT     NOT NULL,
  expires_at   DATETIME(3)    NOT NULL,
  created_at   DATETIME(3)    NOT NULL,
  updated_at   DATETIME(3)    NOT NULL,
  PRIMARY KEY (ref),
  UNIQUE KEY uk_charging_session_create (create_key),
  KEY idx_charging_session_member (family_id, member_id, state),
  KEY idx_charging_session_expiry (state, expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
