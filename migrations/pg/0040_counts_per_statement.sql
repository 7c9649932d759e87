-- The kept counts of new messages and contacts, added once per statement: a batch of sends inserts
-- its messages (and new contacts) in one statement (PgEngine's merged statements), and a trigger
-- per row ran a PL/pgSQL upsert of the same counts row for each of them. The trigger keeps its
-- name and its meaning: each statement's new rows, grouped by what they are counted under, added
-- to this connection's shard. Changes of status and deletions still count per row.

CREATE FUNCTION message_counts_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO message_counts AS c (workspace_id, direction, status, shard, n)
    SELECT workspace_id, direction, status, capstan_shard(), COUNT(*) FROM added GROUP BY workspace_id, direction, status
    ON CONFLICT (workspace_id, direction, status, shard) DO UPDATE SET n = c.n + excluded.n;
  RETURN NULL;
END $$;
DROP TRIGGER message_counts_insert ON messages;
CREATE TRIGGER message_counts_insert AFTER INSERT ON messages REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION message_counts_added();

CREATE FUNCTION contact_counts_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO contact_counts AS c (workspace_id, shard, n)
    SELECT workspace_id, capstan_shard(), COUNT(*) FROM added GROUP BY workspace_id
    ON CONFLICT (workspace_id, shard) DO UPDATE SET n = c.n + excluded.n;
  RETURN NULL;
END $$;
DROP TRIGGER contact_counts_insert ON contacts;
CREATE TRIGGER contact_counts_insert AFTER INSERT ON contacts REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION contact_counts_added();
