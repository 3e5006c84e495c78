-- Columns added to usage_record after its first release (v0.1.x), for
-- tables created before them (000_usage_record.sql has them already). The
-- store's migration runs each statement only when its column is missing:
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS. Adding a column with a default is an instant change in
-- MySQL 8 and MariaDB 10.3+, whatever the table's size.
ALTER TABLE usage_record ADD COLUMN total_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_record ADD COLUMN daily_used BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_record ADD COLUMN monthly_used BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_record ADD COLUMN throttle_kbps BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_record ADD COLUMN crossed VARCHAR(255) NOT NULL DEFAULT '';
ALTER TABLE usage_record ADD COLUMN grant_id VARCHAR(255) NOT NULL DEFAULT '';
