-- Columns added to usage_record after its first release; see
-- migrations/mysql/columns/usage_record.sql. SQLite has no ADD COLUMN IF NOT
-- EXISTS either: the store's migration runs each statement only when its
-- column is missing.
ALTER TABLE usage_record ADD COLUMN total_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_record ADD COLUMN daily_used INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_record ADD COLUMN monthly_used INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_record ADD COLUMN throttle_kbps INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_record ADD COLUMN crossed TEXT NOT NULL DEFAULT '';
ALTER TABLE usage_record ADD COLUMN grant_id TEXT NOT NULL DEFAULT '';
