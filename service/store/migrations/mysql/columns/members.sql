-- Columns added to members after its first release. ever_owner: the member
-- is or was once an OWNER (set on promotion or when added as one, never
-- cleared): an owner resets the password only of a member who never was
-- (service/family, "who may reset whose password"); the store fills it for
-- rows written before it from their role and their member.role audit rows.
ALTER TABLE members ADD COLUMN ever_owner TINYINT(1) NOT NULL DEFAULT 0;
