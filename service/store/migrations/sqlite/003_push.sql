-- push_subscriptions: the browsers' Web Push subscriptions (the Push API's
-- PushSubscription), one row per endpoint, owned by the member who
-- subscribed last from that browser. Removing a member deletes theirs.
CREATE TABLE IF NOT EXISTS push_subscriptions (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  member_id INTEGER NOT NULL,
  endpoint TEXT NOT NULL UNIQUE,
  p256dh TEXT NOT NULL,
  auth TEXT NOT NULL,
  created_at TEXT NOT NULL
);

CREATE INDEX IF NOT EXISTS push_subscriptions_member ON push_subscriptions (member_id);

-- vapid_keys: one row (id 1), the application server's VAPID key pair the
-- all-in-one generated when none was configured, kept so browsers'
-- subscriptions (made for its public key) survive a restart.
CREATE TABLE IF NOT EXISTS vapid_keys (
  id INTEGER NOT NULL PRIMARY KEY,
  public_key TEXT NOT NULL,
  private_key TEXT NOT NULL,
  created_at TEXT NOT NULL
);
