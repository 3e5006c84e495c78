-- data_request: "ask for more". A member asks its family's owners for extra
-- data; an owner approves it (grant DAY or MONTH: an extra allowance
-- LIMIT:DATA:EXTRA:<period> in the member's policy; TOPUP: a top-up of the
-- family pool) or declines it, once. client_key is the requester's
-- idempotency key (NULL: none): one request per member and key.
CREATE TABLE IF NOT EXISTS data_request (
  id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
  family_id INTEGER NOT NULL,
  customer_id INTEGER NOT NULL,
  amount_bytes INTEGER NOT NULL,
  message TEXT NOT NULL DEFAULT '',
  client_key TEXT NULL,
  status TEXT NOT NULL,
  grant_kind TEXT NOT NULL DEFAULT '',
  granted_bytes INTEGER NOT NULL DEFAULT 0,
  period TEXT NOT NULL DEFAULT '',
  reason TEXT NOT NULL DEFAULT '',
  answered_by INTEGER NULL,
  answered_at TEXT NULL,
  created_at TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS uq_data_request_client_key ON data_request (customer_id, client_key);
CREATE INDEX IF NOT EXISTS idx_data_request_family_status ON data_request (family_id, status, id);
