-- Columns added to data_request after its first release: requests for
-- time as well as data. kind is DATA, TIME (more time in a downtime) or APP
-- (more time on a blocked app, app_id); minutes is how long was asked for,
-- granted_minutes what an approval granted, until_stamp the local time
-- YYYYMMDDHHMM the granted exception ends at.
ALTER TABLE data_request ADD COLUMN kind VARCHAR(8) NOT NULL DEFAULT 'DATA';
ALTER TABLE data_request ADD COLUMN app_id VARCHAR(200) NOT NULL DEFAULT '';
ALTER TABLE data_request ADD COLUMN minutes INT NOT NULL DEFAULT 0;
ALTER TABLE data_request ADD COLUMN granted_minutes INT NOT NULL DEFAULT 0;
ALTER TABLE data_request ADD COLUMN until_stamp VARCHAR(12) NOT NULL DEFAULT '';
