-- The message log filtered by status or direction (GET /messages?status=…, ?direction=…) read a
-- page through an index PostgreSQL's planner could pass over: it takes the rows of a status as
-- spread evenly over time and walks the primary key (seq) backwards, filtering, expecting a page
-- within a few rows. Statuses are not spread evenly (the oldest read, the newest queued): with
-- 1,000,000 messages, status=read behind 400,000 newer ones took 50–80 ms a page (BENCHMARKS.md,
-- session 37). The index is made again ordering each (workspace, direction, status) by -seq, an
-- order only it gives, so the filtered pages (src/modules/messages/store.ts) are read from it
-- whatever the planner thinks of the spread: one range per direction and status, merged, a page's
-- rows each. It keeps its name (SQLite's of the same name serves the same pages).
-- (Built while the migration runs: writes to messages wait for it, about 2 s a million messages.)
DROP INDEX messages_log_direction_status;
CREATE INDEX messages_log_direction_status ON messages (workspace_id, direction, status, (-seq));
