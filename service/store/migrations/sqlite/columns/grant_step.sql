-- Columns added to grant_step after its first release; see
-- migrations/mysql/columns/grant_step.sql.
ALTER TABLE grant_step ADD COLUMN category TEXT NOT NULL DEFAULT '';
