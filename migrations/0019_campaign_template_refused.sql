-- A campaign also pauses when the network refuses its template as such (Meta: paused, disabled,
-- unknown, not matching): every further recipient would be refused the same way. paused_reason
-- gains 'template_refused'; SQLite cannot relax a CHECK in place, so the column is replaced (a
-- column of its own, not the table: the tables that reference campaigns are left alone).
ALTER TABLE campaigns ADD COLUMN paused_reason_next TEXT CHECK (paused_reason_next IN ('requested', 'allowance_exhausted', 'template_refused'));
UPDATE campaigns SET paused_reason_next = paused_reason;
ALTER TABLE campaigns DROP COLUMN paused_reason;
ALTER TABLE campaigns RENAME COLUMN paused_reason_next TO paused_reason;
