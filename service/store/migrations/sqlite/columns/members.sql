-- Columns added to members after its first release. ever_owner: the member
-- is or was once an OWNER (set on promotion or when added as one, never
-- cleared): an owner resets the password only of a member who never was
-- (service/family, "who may reset whose password"); the store fills it for
-- rows written before it from their role and their member.role audit rows.
ALTER TABLE members ADD COLUMN ever_owner INTEGER NOT NULL DEFAULT 0;
-- minor: the member is under 19 (set by an owner or the back office): under
-- the carriers' gift rules a minor only receives gifts (DPCS_GIFT_MINORS_GIVE).
ALTER TABLE members ADD COLUMN minor INTEGER NOT NULL DEFAULT 0;
