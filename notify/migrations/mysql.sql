-- Inbox of notify.SQLInbox (MySQL 8 / MariaDB 10.6+).
-- One row per notification: event_id and dedupe_key are unique (a replay,
-- or a threshold alert re-sent for the same family/threshold/period, is
-- ignored). member_id is NULL for family-wide notifications, which every
-- member sees. delivered_at is set once the notifier handed the row to the
-- live hub and the channels. Read marks are per viewer (notification_read),
-- so one member reading a family-wide alert leaves it unread for the others.
CREATE TABLE IF NOT EXISTS notification (
  id           BIGINT       NOT NULL AUTO_INCREMENT,
  event_id     VARCHAR(255) NOT NULL,
  dedupe_key   VARCHAR(255) NOT NULL,
  family_id    BIGINT       NOT NULL,
  member_id    BIGINT       NULL,
  kind         VARCHAR(32)  NOT NULL,
  title        VARCHAR(255) NOT NULL,
  body         TEXT         NOT NULL,
  payload      TEXT         NOT NULL,
  created_at   DATETIME(3)  NOT NULL,
  delivered_at DATETIME(3)  NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uq_notification_event (event_id),
  UNIQUE KEY uq_notification_dedupe (dedupe_key),
  KEY idx_notification_family (family_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS notification_read (
  notification_id BIGINT      NOT NULL,
  member_id       BIGINT      NOT NULL,
  read_at         DATETIME(3) NOT NULL,
  PRIMARY KEY (notification_id, member_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
