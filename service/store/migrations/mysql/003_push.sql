-- push_subscriptions: the browsers' Web Push subscriptions (the Push API's
-- PushSubscription), one row per endpoint, owned by the member who
-- subscribed last from that browser. Removing a member deletes theirs.
-- Endpoints are ASCII URLs of at most 2048 bytes (checked by the store), so
-- the unique key fits InnoDB's 3072-byte limit.
CREATE TABLE IF NOT EXISTS push_subscriptions (
  id          BIGINT        NOT NULL AUTO_INCREMENT,
  member_id   BIGINT        NOT NULL,
  endpoint    VARCHAR(2048) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  p256dh      VARCHAR(128)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  auth        VARCHAR(64)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  created_at  DATETIME(3)   NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY push_subscriptions_endpoint (endpoint),
  KEY push_subscriptions_member (member_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- vapid_keys: one row (id 1), the application server's VAPID key pair the
-- all-in-one generated when none was configured, kept so browsers'
-- subscriptions (made for its public key) survive a restart.
CREATE TABLE IF NOT EXISTS vapid_keys (
  id           INT          NOT NULL,
  public_key   VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  private_key  VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  created_at   DATETIME(3)  NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
