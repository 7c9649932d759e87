-- The audit log names what an entry is about (a workspace, number or webhook endpoint id), beside
-- the API key it may be about. NULL for entries about a person (an erased or exported contact, a
-- suppressed number): the log says that it happened, not whom.
ALTER TABLE audit_log ADD COLUMN subject_id TEXT;
