-- The send path on PostgreSQL: a batch of sends inserts its messages (and new contacts) in one
-- statement (PgEngine's merged statements). Two costs per row went with that:
--
-- 1. The kept counts of new messages and contacts are added once per statement (a statement
--    trigger over the new rows) instead of a PL/pgSQL upsert of the same counts row per row. The
--    triggers keep their names and meaning; changes of status and deletions still count per row.
--
-- 2. Workspaces and numbers are never deleted (a workspace is deactivated, a removed number keeps
--    its row with deleted_at), and now both engines refuse such a deletion outright (the *_kept
--    triggers, as on SQLite: see migrations/0040_send_path.sql). So a message, a contact or a
--    usage row no longer re-checks the workspace and number it names on every insert: each check
--    took a KEY SHARE lock on the one workspace row (and the one number row) from every
--    transaction at once, which PostgreSQL keeps as a growing multixact. The contact a message
--    names is still checked (contacts are erased).

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

CREATE FUNCTION capstan_never_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION '% rows are never deleted (a workspace is deactivated, a number removed)', TG_TABLE_NAME;
END $$;
CREATE TRIGGER workspaces_kept BEFORE DELETE ON workspaces FOR EACH STATEMENT EXECUTE FUNCTION capstan_never_deleted();
CREATE TRIGGER connections_kept BEFORE DELETE ON connections FOR EACH STATEMENT EXECUTE FUNCTION capstan_never_deleted();

ALTER TABLE messages DROP CONSTRAINT messages_workspace_id_fkey, DROP CONSTRAINT messages_connection_id_fkey;
ALTER TABLE usage_monthly DROP CONSTRAINT usage_monthly_workspace_id_fkey;
ALTER TABLE contacts DROP CONSTRAINT contacts_workspace_id_fkey;
