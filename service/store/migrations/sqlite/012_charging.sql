-- member_imsi: the IMSI an operator set on a member, so a charging request
-- naming the subscriber as imsi-<digits> finds the member
-- (doc/wire-format.md, "Charging (Nchf)"). One IMSI per member and one
-- member per IMSI; removing the member deletes its row.
CREATE TABLE IF NOT EXISTS member_imsi (
  imsi TEXT NOT NULL PRIMARY KEY,
  member_id INTEGER NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_member_imsi_member ON member_imsi (member_id);

-- charging_session: one Nchf_ConvergedCharging charging data resource (a
-- PDU session's charging at the SMF): whose it is, where its notifications
-- go, the last invocation answered (a retry of it gets the same answer) and
-- the grants it holds per rating group (JSON). A session not updated by
-- expires_at is closed by the sweep, which releases its grants. create_key
-- names a create that carried a charging id, so its retry finds the session
-- it made; NULL otherwise (two creates, two sessions).
CREATE TABLE IF NOT EXISTS charging_session (
  ref TEXT NOT NULL PRIMARY KEY,
  create_key TEXT NULL,
  family_id INTEGER NOT NULL,
  member_id INTEGER NOT NULL,
  subscriber TEXT NOT NULL,
  consumer TEXT NOT NULL,
  notify_uri TEXT NULL,
  state TEXT NOT NULL,
  last_seq INTEGER NOT NULL,
  last_op TEXT NOT NULL,
  answer TEXT NULL,
  grants TEXT NOT NULL,
  expires_at TEXT NOT NULL,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_charging_session_create ON charging_session (create_key);
CREATE INDEX IF NOT EXISTS idx_charging_session_member ON charging_session (family_id, member_id, state);
CREATE INDEX IF NOT EXISTS idx_charging_session_expiry ON charging_session (state, expires_at);
