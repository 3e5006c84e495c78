-- Columns added to grant_step after its first release, for tables created
-- before them (013_grant_step.sql has them already). category: the app
-- category the step was judged as ('' in rows written before it), for the
-- daily budgets a rebuild restores.
ALTER TABLE grant_step ADD COLUMN category VARCHAR(32) NOT NULL DEFAULT '';
