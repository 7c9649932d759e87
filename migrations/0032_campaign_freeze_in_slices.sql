-- A campaign's audience is frozen in slices of contacts, with requests served between them (in
-- one statement, 1,000,000 contacts held the server ~7 s). freeze_after: the last phone frozen so
-- far ('' before the first slice); NULL once the whole audience is frozen — every campaign before
-- this migration. A start after a crash mid-way goes on from it. Contacts created after the
-- campaign's started_at are not part of its audience.
ALTER TABLE campaigns ADD COLUMN freeze_after TEXT;
