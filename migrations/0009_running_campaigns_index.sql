-- The pacer's campaign lane asks for a number's running campaigns on every release. The partial
-- index campaigns_active (status IN scheduled/running/paused) did not serve that query (SQLite uses
-- a partial index only when the query states its condition), so every release scanned all
-- campaigns and sorted them. This one matches the query exactly and yields its order.
CREATE INDEX campaigns_running ON campaigns (connection_id, started_at, id) WHERE status = 'running' AND deleted_at IS NULL;
