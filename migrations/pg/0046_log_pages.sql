-- Pages of the message log under a filter (GET /messages?status=…, ?direction=…, ?contact_id=…,
-- and a contact's export) read through indexes PostgreSQL's planner could pass over: it takes the
-- rows of a status, or of a contact, as spread evenly over the log and walks the primary key (seq)
-- backwards, filtering, expecting a page within a few rows. They are not spread evenly (the oldest
-- read, the newest queued; a customer's messages in the weeks they ordered): with 1,000,000
-- messages, status=read behind 400,000 newer ones took 50–80 ms a page, and a contact's page 6–53
-- ms (BENCHMARKS.md, session 37). Both indexes are made again ordered by -seq, an order only they
-- give, so those pages (src/modules/messages/store.ts) are read from them whatever the planner
-- thinks of the spread: a page's rows each (one range per direction or status, merged). A
-- contact's holds the workspace too, so the count of its messages (meta.total) reads the index
-- alone. They keep their names (SQLite's of the same names serve the same pages).
-- (Built while the migration runs: writes to messages wait for them, 3–4 s a million messages.)
DROP INDEX messages_log_direction_status;
CREATE INDEX messages_log_direction_status ON messages (workspace_id, direction, status, (-seq));
DROP INDEX messages_contact;
CREATE INDEX messages_contact ON messages (contact_id, workspace_id, (-seq)) WHERE contact_id IS NOT NULL;
