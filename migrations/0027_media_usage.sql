-- A workspace's kept media in bytes (the max_total_bytes check on each upload) read from the index
-- alone: its live records are a range of (workspace_id, expires_at), each with its size.
CREATE INDEX media_usage ON media (workspace_id, expires_at, size);
